"""Writes each node's ``node.toml``: identity, listeners, the harness's address book.

The address book (DESIGN.md, "The network") tells node A to dial, for every peer B,
the listeners of the proxies of link A→B (one per channel), and to reach the broker
through its own broker proxy.  The file is validated with the node's own config
loader before the node starts, so a bad scenario fails in the harness with the
field named, not in eight node logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmshake.chaos.backends.base import BackendError, ClusterSpec
from swarmshake.reference_node import config as node_config_module


@dataclass(frozen=True)
class Endpoint:
    host: str
    control_port: int
    bulk_port: int


def build(
    spec: ClusterSpec,
    name: str,
    *,
    listen_host: str,
    control_port: int,
    bulk_port: int,
    http_port: int,
    peers: dict[str, Endpoint],
    broker_host: str,
    broker_port: int,
    run_dir: str,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "node": {"id": name, "members": list(spec.nodes), "run_dir": run_dir, "seed": spec.seed},
        "network": {
            "listen_host": listen_host,
            "control_port": control_port,
            "bulk_port": bulk_port,
            "http_port": http_port,
            "run_key_hex": spec.run_key_hex,
        },
        "peers": {
            peer: {"host": e.host, "control_port": e.control_port, "bulk_port": e.bulk_port}
            for peer, e in peers.items()
        },
        "mqtt": {"host": broker_host, "port": broker_port, "topic_prefix": spec.topic_prefix},
    }
    for section, values in spec.node_config.items():
        if section in ("node", "network", "peers", "mqtt"):
            raise BackendError(f"node_config may not override the harness-owned [{section}]")
        raw[section] = dict(values)
    training = raw.setdefault("training", {})
    training.setdefault("seed", spec.seed)
    return raw


def write(raw: dict[str, Any], path: Path) -> Path:
    """Validate with the node's loader, then write ``path`` (TOML)."""
    try:
        node_config_module.from_dict(raw, str(path))
    except node_config_module.ConfigError as error:
        raise BackendError(f"node config invalid: {error}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(node_config_module.to_toml(raw))
    return path
