"""The one interface every cluster backend offers, and what a cluster is made of.

A backend owns the processes or containers of one run: the nodes, the MQTT broker
and the Toxiproxy server with one proxy per directed link and channel plus one per
node's broker connection.  The nemesis (``chaos/nemesis/``) injects faults only
through this interface, so a fault op works on every backend that implements the
handle methods it needs; a backend that cannot do one raises
:class:`UnsupportedFault` naming the op and the backend.
"""

from __future__ import annotations

import abc
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmshake.chaos.backends.events import EventTail
from swarmshake.chaos.links import Link
from swarmshake.reference_node.runtime.mqtt_messages import Command

NODE_MODULE = "swarmshake.reference_node"  # what `python -m` runs for a node
MAX_NODES = 64  # 64 * 63 * 2 proxies is ~8,000; beyond that one Toxiproxy is the bottleneck


class BackendError(RuntimeError):
    """A backend could not do what was asked; the message says what and why."""


class UnsupportedFault(BackendError):
    """A fault op this backend cannot inject (e.g. ``netem`` on the local backend)."""


@dataclass(frozen=True)
class ClusterSpec:
    """Everything a backend needs to start one cluster.

    ``node_config`` holds extra node-config sections (``training``, ``detector``,
    ``step``, …) copied into every node's ``node.toml``; ``node_program`` is a module
    name run as ``python -m`` (the reference node) or a path to a script (a test's
    stand-in program speaking the same config).
    """

    run_id: str
    run_dir: Path
    nodes: tuple[str, ...]
    seed: int = 0
    node_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    bugs: tuple[str, ...] = ()
    node_program: str = NODE_MODULE
    run_key_hex: str = field(default_factory=lambda: secrets.token_hex(32))
    # The broker passwords are derived from this (chaos/mosquitto.py); only the
    # harness holds it, a node gets its own password only.
    broker_secret_hex: str = field(default_factory=lambda: secrets.token_hex(32))
    # Nodes dial each other's listeners directly, without a proxy per link: no link
    # faults, but no proxy hop either (what a cluster costs without the harness, for
    # ``bench overhead``).  The local backend only.
    direct_links: bool = False
    # The system under test (``chaos/systems/``): what a node is and how it starts.
    # None means the reference node, built on first use (``Backend.system``).
    system: Any = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.nodes) <= MAX_NODES:
            raise BackendError(f"a cluster needs 1..{MAX_NODES} nodes, got {len(self.nodes)}")
        if len(set(self.nodes)) != len(self.nodes):
            raise BackendError(f"node names repeat: {list(self.nodes)}")

    @property
    def topic_prefix(self) -> str:
        return f"swarmshake/{self.run_id}"

    def events_dir(self) -> Path:
        return self.run_dir / "events"

    def checkpoint_dir(self, node: str) -> Path:
        return self.run_dir / "checkpoints" / node


class NodeHandle(abc.ABC):
    """One node of a running cluster: the process group or container behind it."""

    name: str

    @abc.abstractmethod
    async def crash(self) -> None:
        """SIGKILL the node (control and worker); its volatile state is lost."""

    @abc.abstractmethod
    async def restart(self) -> None:
        """Start the node again (killing it first if it runs): a new incarnation."""

    @abc.abstractmethod
    async def pause(self) -> None:
        """Freeze every process of the node (SIGSTOP / docker pause)."""

    @abc.abstractmethod
    async def resume(self) -> None: ...

    @abc.abstractmethod
    def is_running(self) -> bool:
        """The node's processes exist and are not stopped for good (paused counts)."""

    @abc.abstractmethod
    async def set_cpu_fraction(self, fraction: float) -> None:
        """Give the node ``fraction`` of one CPU's time (1.0 lifts the limit)."""

    @abc.abstractmethod
    async def set_disk_full(self, full: bool) -> None:
        """Make checkpoint writes fail with ENOSPC (or stop doing so)."""

    async def stop(self) -> None:
        """Shut down at the end of a run (SIGTERM, then SIGKILL after a grace)."""
        await self.crash()


class BrokerHandle(abc.ABC):
    @abc.abstractmethod
    async def lose(self) -> None:
        """Stop the broker (broker-loss fault)."""

    @abc.abstractmethod
    async def restore(self) -> None:
        """Start the broker again on the same address."""

    @property
    @abc.abstractmethod
    def lost(self) -> bool: ...


class NoBroker(BrokerHandle):
    """The broker of a cluster whose system talks to none: never lost, cannot be lost."""

    async def lose(self) -> None:
        raise UnsupportedFault("broker_loss: this cluster's system uses no MQTT broker")

    async def restore(self) -> None:
        return None

    @property
    def lost(self) -> bool:
        return False


class Backend(abc.ABC):
    """``await backend.up()`` … ``backend.node("n1")``, ``backend.link("n1", "n2")`` …
    ``await backend.down()``.  ``down`` is idempotent and safe after a failed ``up``."""

    name: str = "abstract"
    #: the fault ops this backend can inject (names from ``chaos.faults``)
    supported_ops: frozenset[str] = frozenset()

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.events = EventTail(spec.events_dir(), spec.nodes)
        if spec.system is None:
            from swarmshake.chaos.systems.reference import ReferenceSystem

            self.system: Any = ReferenceSystem()
        else:
            self.system = spec.system
        # Filled by ``up``; the lookups below are the same on every backend.
        self.toxiproxy: Any = None  # the backend's Toxiproxy (process or container)
        # Per-node network namespaces (chaos.netns) for a system whose link faults are
        # ``netns``: NetnsNetwork locally, HolderNamespaces on Docker; None otherwise.
        self.netns: Any = None
        self._nodes: dict[str, Any] = {}
        self._links: dict[tuple[str, str], Link] = {}
        self._broker: Any = None

    @abc.abstractmethod
    async def up(self) -> None: ...

    @abc.abstractmethod
    async def down(self) -> None: ...

    def node(self, name: str) -> NodeHandle:
        try:
            return self._nodes[name]
        except KeyError:
            raise BackendError(f"no node {name!r}; the cluster has {list(self._nodes)}") from None

    def record_system(self) -> None:
        """``RUN_DIR/system.json``: which system ran and what it writes (the verifier reads it)."""
        import json

        self.spec.run_dir.mkdir(parents=True, exist_ok=True)
        (self.spec.run_dir / "system.json").write_text(
            json.dumps(self.system.describe(), indent=1, default=str)
        )

    def ops(self) -> frozenset[str]:
        """The fault ops this cluster can take: the backend's and its system's."""
        return self.supported_ops & self.system.supported_ops()

    def unsupported_reason(self, op: str) -> str:
        """Why ``op`` cannot be injected here (the backend or the system lacks it)."""
        if op not in self.supported_ops:
            return (
                f"fault op {op!r} is unsupported on the {self.name} backend "
                f"(supported: {', '.join(sorted(self.supported_ops))})"
            )
        return self.system.unsupported_reason(op)

    def link(self, src: str, dst: str) -> Link:
        """The directed link ``src → dst`` (both of its channels)."""
        if self.spec.direct_links:
            raise UnsupportedFault(
                f"link {src}→{dst}: this cluster's nodes dial each other directly (links: "
                "direct), so no proxy can act on the link; use links: proxied for link faults"
            )
        try:
            return self._links[(src, dst)]
        except KeyError:
            raise BackendError(f"no link {src}→{dst} in this cluster") from None

    @property
    def broker(self) -> BrokerHandle:
        if self._broker is None:
            if not self.system.needs_broker:
                return NoBroker()
            raise BackendError("the cluster is not up")
        return self._broker

    @abc.abstractmethod
    def broker_address(self) -> tuple[str, int]:
        """Where the harness itself reaches the broker (host, port)."""

    async def send_command(self, node: str, command: Command) -> None:
        """Publish a harness command to one node over MQTT (clock skew, Byzantine …)."""
        if self.broker.lost:
            raise BackendError(f"cannot command {node}: the broker is down (broker_loss)")
        await self.harness_mqtt().command(node, command)

    def broker_auth(self) -> Any:
        """The run's broker users and ACL (``chaos.mosquitto.BrokerAuth``)."""
        from swarmshake.chaos.mosquitto import BrokerAuth

        spec = self.spec
        return BrokerAuth.create(spec.topic_prefix, spec.nodes, spec.broker_secret_hex)

    def harness_mqtt(self) -> Any:
        """The harness's signed publisher (``mqtt_commands.HarnessMqtt``) for this run."""
        from swarmshake.chaos.backends.mqtt_commands import HarnessMqtt, HarnessSequence
        from swarmshake.chaos.mosquitto import HARNESS_USER

        host, port = self.broker_address()
        spec = self.spec
        return HarnessMqtt(
            host=host,
            port=port,
            username=HARNESS_USER,
            password=self.broker_auth().harness_password,
            topic_prefix=spec.topic_prefix,
            run_key=bytes.fromhex(spec.run_key_hex),
            sequence=HarnessSequence(spec.run_dir / "harness" / "mqtt.seq"),
        )

    async def reset_links(self) -> None:
        """Heal every network fault: the namespaces' rules removed where the links are
        namespace links, else every proxy enabled and every toxic removed."""
        if self.netns is not None:
            await self.netns.reset()
            for link in self._links.values():
                link.forget()  # type: ignore[attr-defined]
            return
        if self.toxiproxy is not None:
            await self.toxiproxy.reset()
        for link in self._links.values():
            link.cut_now = False
            link.toxics.clear()

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Addresses and pids/containers, for ``swarmshake status`` and the run record."""

    def node_endpoint(self, name: str, port_name: str) -> tuple[str, int] | None:
        """Where the harness reaches node ``name``'s port ``port_name`` (one of its
        system's ``ports``), or None where this backend cannot say."""
        return None

    def links(self) -> list[Link]:
        nodes = self.spec.nodes
        return [self.link(a, b) for a in nodes for b in nodes if a != b]

    async def __aenter__(self) -> Backend:
        try:
            await self.up()
        except BaseException:
            await self.down()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.down()
