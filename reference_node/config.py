"""A node's configuration: one TOML file (``--config node.toml``) read with tomllib and
validated into msgspec structs; a bad file fails with the file, the field and the fix.

Minimal file::

    [node]
    id = "n1"
    members = ["n1", "n2", "n3", "n4"]
    run_dir = "runs/r1"           # events/<id>.jsonl, checkpoints/<id>/, nodes/<id>/

    [network]
    control_port = 7101
    bulk_port = 7102
    http_port = 7103
    run_key_hex = "00112233..."   # >= 16 bytes; or run_key_file = "run.key"

    [peers.n2]                    # where this node dials n2 (the harness's book)
    host = "127.0.0.1"
    control_port = 7201
    bulk_port = 7202

Optional tables: ``[mqtt]`` (MqttSettings; absent: no broker; the harness gives
``username`` and ``password_file``, a 0600 file beside the config), ``[training]``
(TrainingConfig), ``[detector]`` (DetectorConfig), ``[links]`` (LinkTimeouts),
``[clock]`` (offset_s, drift_ppm), ``[worker]`` (nice), ``[step]`` (step timing).
Command-line flags override single fields (``__main__.py``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from swarmshake.reference_node.protocol import node_core
from swarmshake.reference_node.protocol.bugs import BugSet, UnknownBugError
from swarmshake.reference_node.protocol.detector import DetectorConfig
from swarmshake.reference_node.protocol.sharding import uses_sharding
from swarmshake.reference_node.runtime.frames import NODE_ID_PATTERN
from swarmshake.reference_node.runtime.links import LinkTimeouts, PeerAddress
from swarmshake.reference_node.runtime.mqtt import MqttSettings
from swarmshake.reference_node.training.config import TrainingConfig, TrainingConfigError


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the file, field and fix."""


class NodeSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    id: str
    members: list[str]
    run_dir: str
    seed: int = 0
    # Where incarnation, acceptor state and checkpoints of this node live across
    # restarts (default: <run_dir>/nodes/<id>).
    data_dir: str = ""
    # Known protocol bugs switched on in every core (``--bug NAME``; bugs.py).
    bugs: list[str] = []
    # Start outside the configured membership and ask to be added (DESIGN: a joining
    # node is a non-voting learner until it has caught up, then promoted; both changes
    # go through committed steps).  ``members`` then lists the cluster to ask, this
    # node included.  A node whose persisted configuration (``membership.json`` in its
    # data dir) no longer holds it -- it left cleanly -- joins again the same way.
    join: bool = False
    # How long a joiner keeps asking, and how long a clean leave (the harness's
    # ``leave`` command) waits for its removal to commit: the node core's defaults,
    # with their reasons (node_core.JOIN_TIMEOUT_S, LEAVE_TIMEOUT_S).
    join_timeout_s: float = node_core.JOIN_TIMEOUT_S
    leave_timeout_s: float = node_core.LEAVE_TIMEOUT_S


class NetworkSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    listen_host: str = "127.0.0.1"
    advertise_host: str = ""  # announced on MQTT (default: listen_host)
    control_port: int = 0
    bulk_port: int = 0
    http_port: int = 0
    run_key_hex: str = ""
    run_key_file: str = ""


class ClockSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    offset_s: float = 0.0
    drift_ppm: float = 0.0


class WorkerSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    # DESIGN: the worker runs at lower priority so heartbeats win the CPU.
    nice: int = 10
    # The control process's own niceness.  0 keeps the host's default; a negative
    # value (needs CAP_SYS_NICE, else a warning) protects heartbeats on a machine
    # that other jobs saturate, where nicing the worker alone is not enough.
    control_nice: int = 0
    # How the worker process starts: "exec" runs a fresh interpreter (which imports
    # torch, seconds of CPU); "fork" forks this process before its event loop starts
    # (cheap where torch is already imported, e.g. under the harness's zygote);
    # "auto" forks exactly when torch is already imported here, else execs.
    start: Literal["auto", "fork", "exec"] = "auto"


_CHECKPOINTS = node_core.CHECKPOINT_DEFAULTS


class StepSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    # The node core's decision knobs (protocol/node_core.NodeConfig): who proposes a
    # step and when, fetch retries, acceptor records kept, join/leave/rejoin retries.
    # Defined there once; the simulator runs the same ones.
    node: node_core.NodeConfig = node_core.NODE_DEFAULTS
    # Stop after this many committed steps (0 = run until stopped).
    max_steps: int = 0
    # When to checkpoint: the node core's ``CheckpointConfig`` (protocol/node_core.py,
    # its defaults and reasons), under these names in node.toml.  "fixed" every
    # ``checkpoint_every`` committed steps (0 = only when asked), or "young-daly":
    # sqrt(2 C M) from the measured write cost C and the failures this node observed,
    # clamped to [checkpoint_min_interval_s, checkpoint_max_interval_s].
    checkpoint_policy: Literal["fixed", "young-daly"] = _CHECKPOINTS.policy  # type: ignore[assignment]
    checkpoint_every: int = _CHECKPOINTS.every_steps
    checkpoint_prior_mtbf_s: float = _CHECKPOINTS.prior_mtbf_s
    checkpoint_window_s: float = _CHECKPOINTS.window_s
    checkpoint_min_interval_s: float = _CHECKPOINTS.min_interval_s
    checkpoint_max_interval_s: float = _CHECKPOINTS.max_interval_s
    # Each checkpoint is copied to this many peers (DESIGN S2: a committed step
    # survives while fewer than a majority crash).  -1 = automatic: (voters - 1) // 2,
    # i.e. f = the most crashes a majority quorum tolerates, so the node plus its f
    # replicas are f + 1 copies and some copy outlives any f crashes (1 for 3-4 nodes,
    # 2 for 5-6).  0 disables replication.
    checkpoint_replicas: int = -1

    def decisions(self, training: TrainingConfig) -> node_core.NodeConfig:
        """The node core's knobs: ``node``, its ``min_contributors`` raised to what
        ``training``'s aggregation rule needs (a value from node.toml may only ask
        for more) and ``sharded_contributions`` set when ``training``'s
        contributions travel sharded."""
        node = self.node
        minimum = max(node.min_contributors, training.min_contributors())
        sharded = node.sharded_contributions or uses_sharding(
            training.aggregation_path, training.aggregation
        )
        if (minimum, sharded) == (node.min_contributors, node.sharded_contributions):
            return node
        return msgspec.structs.replace(
            node, min_contributors=minimum, sharded_contributions=sharded
        )

    def checkpointing(self) -> node_core.CheckpointConfig:
        """The node core's checkpoint configuration these settings name."""
        return node_core.CheckpointConfig(
            policy=self.checkpoint_policy,
            every_steps=self.checkpoint_every,
            prior_mtbf_s=self.checkpoint_prior_mtbf_s,
            window_s=self.checkpoint_window_s,
            min_interval_s=self.checkpoint_min_interval_s,
            max_interval_s=self.checkpoint_max_interval_s,
        )


class NodeConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    node: NodeSection
    network: NetworkSection = NetworkSection()
    peers: dict[str, PeerAddress] = {}
    mqtt: MqttSettings | None = None
    training: TrainingConfig = TrainingConfig()
    detector: DetectorConfig = DetectorConfig()
    links: dict[str, float] = {}
    clock: ClockSection = ClockSection()
    worker: WorkerSection = WorkerSection()
    step: StepSection = StepSection()

    # -- derived --------------------------------------------------------------------------

    def decisions(self) -> node_core.NodeConfig:
        """The node core's knobs (``StepSection.decisions``)."""
        return self.step.decisions(self.training)

    @property
    def node_id(self) -> str:
        return self.node.id

    @property
    def bug_set(self) -> BugSet:
        return BugSet.parse(self.node.bugs)

    @property
    def run_dir(self) -> Path:
        return Path(self.node.run_dir)

    @property
    def data_dir(self) -> Path:
        return (
            Path(self.node.data_dir)
            if self.node.data_dir
            else self.run_dir / "nodes" / self.node.id
        )

    @property
    def events_path(self) -> Path:
        return self.run_dir / "events" / f"{self.node.id}.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints" / self.node.id

    def link_timeouts(self) -> LinkTimeouts:
        return LinkTimeouts(**self.links)

    def run_key(self, base: Path | None = None) -> bytes:
        network = self.network
        if network.run_key_file:
            path = Path(network.run_key_file)
            if base is not None and not path.is_absolute():
                path = base / path
            text = path.read_text().strip()
        else:
            text = network.run_key_hex
        return bytes.fromhex(text)


def _fail(path: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {problem}")


def validate(config: NodeConfig, path: str = "<config>") -> NodeConfig:
    node = config.node
    for name in (node.id, *node.members, *config.peers):
        if not NODE_ID_PATTERN.match(name):
            raise _fail(path, f"node name {name!r} must be 1-16 characters of [A-Za-z0-9_-]")
    if node.id not in node.members:
        raise _fail(path, f"[node] id {node.id!r} must be listed in members {node.members}")
    if len(set(node.members)) != len(node.members):
        raise _fail(path, f"[node] members has duplicates: {node.members}")
    missing = sorted(set(node.members) - set(config.peers) - {node.id})
    if missing and config.mqtt is None:
        raise _fail(
            path,
            f"no address for peers {missing}: add [peers.<name>] tables or an [mqtt] "
            "section for discovery",
        )
    for name in ("control_port", "bulk_port", "http_port"):
        port = getattr(config.network, name)
        if not 0 <= port <= 65535:
            raise _fail(path, f"[network] {name}={port} is not a TCP port (0..65535)")
    try:
        BugSet.parse(node.bugs)
    except UnknownBugError as error:
        raise _fail(path, f"[node] bugs: {error}") from None
    if config.mqtt is not None and config.mqtt.password and config.mqtt.password_file:
        raise _fail(path, "[mqtt] give password or password_file, not both")
    if not config.network.run_key_hex and not config.network.run_key_file:
        raise _fail(path, "[network] needs run_key_hex or run_key_file (the harness issues it)")
    if config.network.run_key_hex:
        try:
            key = bytes.fromhex(config.network.run_key_hex)
        except ValueError:
            raise _fail(path, "[network] run_key_hex is not hexadecimal") from None
        if len(key) < 16:
            raise _fail(path, "[network] run_key_hex must hold at least 16 bytes (32 hex digits)")
    try:
        LinkTimeouts(**config.links)
    except TypeError as error:
        raise _fail(
            path, f"[links]: {error}; known: {sorted(LinkTimeouts.__dataclass_fields__)}"
        ) from None
    if not -20 <= config.worker.nice <= 19:
        raise _fail(path, f"[worker] nice={config.worker.nice} must be in -20..19")
    if not -20 <= config.worker.control_nice <= 19:
        raise _fail(path, f"[worker] control_nice={config.worker.control_nice} must be in -20..19")
    if abs(config.clock.drift_ppm) > 500_000:
        raise _fail(path, "[clock] drift_ppm must be within +-500000")
    _validate_membership_and_checkpoints(config, path)
    try:
        config.training.check_cluster(len(node.members))
    except TrainingConfigError as error:
        raise _fail(path, str(error)) from None
    return config


def _validate_membership_and_checkpoints(config: NodeConfig, path: str) -> None:
    node, step = config.node, config.step
    if node.join and len(node.members) < 2:
        raise _fail(
            path, "[node] join = true needs the cluster to ask: list its members besides this node"
        )
    for name in ("join_timeout_s", "leave_timeout_s"):
        value = getattr(node, name)
        if not 0 < value <= 3600:
            raise _fail(path, f"[node] {name}={value} must be in (0, 3600] seconds")
    if step.checkpoint_every < 0:
        raise _fail(path, f"[step] checkpoint_every={step.checkpoint_every} must be >= 0")
    if step.checkpoint_replicas < -1 or step.checkpoint_replicas >= len(node.members):
        raise _fail(
            path,
            f"[step] checkpoint_replicas={step.checkpoint_replicas} must be -1 (automatic), "
            f"0 (off) or at most the number of peers ({len(node.members) - 1})",
        )
    for name in (
        "checkpoint_prior_mtbf_s",
        "checkpoint_window_s",
        "checkpoint_min_interval_s",
        "checkpoint_max_interval_s",
    ):
        value = getattr(step, name)
        if not 0 < value < float("inf"):
            raise _fail(path, f"[step] {name}={value} must be a positive number of seconds")
    if step.checkpoint_min_interval_s > step.checkpoint_max_interval_s:
        raise _fail(
            path, "[step] checkpoint_min_interval_s must not exceed checkpoint_max_interval_s"
        )


def load(path: str | Path, overrides: dict[str, Any] | None = None) -> NodeConfig:
    """Read, override (``{"network.control_port": 7001, ...}``) and validate a config."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    for dotted, value in (overrides or {}).items():
        section, _, field = dotted.partition(".")
        raw.setdefault(section, {})[field] = value
    return _read_mqtt_password(from_dict(raw, str(path)), path)


def _read_mqtt_password(config: NodeConfig, path: Path) -> NodeConfig:
    """``[mqtt] password_file`` (relative to the config's folder) read into ``password``."""
    mqtt = config.mqtt
    if mqtt is None or not mqtt.password_file:
        return config
    secret = Path(mqtt.password_file)
    if not secret.is_absolute():
        secret = path.parent / secret
    try:
        password = secret.read_text().strip()
    except OSError as error:
        raise _fail(str(path), f"[mqtt] password_file {secret}: {error.strerror}") from None
    if not password:
        raise _fail(str(path), f"[mqtt] password_file {secret} is empty")
    return msgspec.structs.replace(config, mqtt=msgspec.structs.replace(mqtt, password=password))


def from_dict(raw: dict[str, Any], path: str = "<config>") -> NodeConfig:
    try:
        config = msgspec.convert(raw, NodeConfig)
    except msgspec.ValidationError as error:
        raise ConfigError(f"{path}: {error}") from None
    return validate(config, path)


def to_toml(raw: dict[str, Any]) -> str:
    """Write a config dict as TOML (the launcher and tests write configs; tomllib only
    reads).  Supports the shapes a node config uses: tables of scalars and lists,
    and one level of nested tables."""

    def scalar(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return repr(value)
        if isinstance(value, str):
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(value, list):
            return "[" + ", ".join(scalar(item) for item in value) + "]"
        raise ConfigError(f"cannot write {type(value).__name__} to TOML")

    lines: list[str] = []
    for section, body in raw.items():
        if body is None:
            continue
        flat = {k: v for k, v in body.items() if not isinstance(v, dict)}
        nested = {k: v for k, v in body.items() if isinstance(v, dict)}
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {scalar(value)}" for key, value in flat.items() if value is not None)
        for name, table in nested.items():
            lines.append(f"[{section}.{name}]")
            lines.extend(
                f"{key} = {scalar(value)}" for key, value in table.items() if value is not None
            )
        lines.append("")
    return "\n".join(lines)
