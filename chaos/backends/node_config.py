"""Writes each node's ``node.toml``: identity, listeners, the harness's address book.

The address book (DESIGN.md, "The network") tells node A to dial, for every peer B,
the listeners of the proxies of link A→B (one per channel), and to reach the broker
through its own broker proxy.  The file is validated with the node's own config
loader before the node starts, so a bad scenario fails in the harness with the
field named, not in eight node logs.

Secrets stay out of ``node.toml`` and off command lines: ``write`` moves the run key
and the node's broker password (``chaos/mosquitto.py``: derived from the run's
broker secret, which nodes never get) into ``run.key`` and ``mqtt.password`` beside
it, mode 0600, and the config names those files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmshake.chaos.backends.base import BackendError, ClusterSpec
from swarmshake.chaos.mosquitto import node_password, write_secret
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
        "mqtt": {
            "host": broker_host,
            "port": broker_port,
            "topic_prefix": spec.topic_prefix,
            # The broker user is the node id (the ACL's %u); write() moves the
            # password into a 0600 file.
            "username": name,
            "password": node_password(spec.broker_secret_hex, name),
        },
    }
    for section, values in spec.node_config.items():
        if section in ("node", "network", "peers", "mqtt"):
            raise BackendError(f"node_config may not override the harness-owned [{section}]")
        raw[section] = dict(values)
    training = raw.setdefault("training", {})
    training.setdefault("seed", spec.seed)
    return raw


def write(raw: dict[str, Any], path: Path) -> Path:
    """Validate with the node's loader, then write ``path`` (TOML), its secrets into
    0600 files beside it (absolute paths: the worker resolves them too, and Docker
    mounts the run directory at the same path)."""
    try:
        node_config_module.from_dict(raw, str(path))
    except node_config_module.ConfigError as error:
        raise BackendError(f"node config invalid: {error}") from None
    folder = path.parent.resolve()
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    network = raw["network"]
    if network.get("run_key_hex"):
        key_file = write_secret(folder / "run.key", network.pop("run_key_hex") + "\n")
        network["run_key_file"] = str(key_file)
    mqtt = raw.get("mqtt")
    if mqtt and mqtt.get("password"):
        password_file = write_secret(folder / "mqtt.password", mqtt.pop("password") + "\n")
        mqtt["password_file"] = str(password_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(node_config_module.to_toml(raw))
    return path
