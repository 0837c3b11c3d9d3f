"""The system under test: how to check, configure, start, stop and probe one node of it.

Jepsen's ``db``: a small replaceable part (DESIGN.md, "Systems under test").  A
backend owns processes, addresses and the network; a :class:`System` says what one
node *is*: the command that starts node *i* (argv, environment, working folder and
the ports it listens on), the config files written before it starts, the services
a cluster needs besides its nodes (a rendezvous store, a Lighthouse), which fault
ops it can take, and how link faults reach it:

- ``proxy``: the node dials addresses the harness configures, so every directed
  link goes through a Toxiproxy proxy per channel (``proxied_ports`` says which of
  the node's ports peers dial through them; the reference node's control and bulk);
- ``netns``: the node dials addresses it learns at run time (gloo, NCCL, gRPC), so
  each node runs in its own network namespace and link faults are iptables / ``tc``
  rules there (``chaos/netns.py``);
- ``none``: no link faults; a scenario that asks for one is refused before it runs.

What a backend starts follows from these declarations, never from a system's name:
``link_faults``, ``ports`` / ``proxied_ports``, ``needs_broker`` (an MQTT broker,
reached through a proxy of its own under ``proxy``), ``services``, ``extra_ops``
(fault ops delivered some other way, e.g. the reference node's MQTT commands) and
``Launch.mounts`` (host files a containerised node must see).  The reference node
is one system among the others and takes no private path.

The *workload* is the training loop the node runs; it records the run's history in
the neutral schema of ``verify/history.py`` (``events/<node>.jsonl``), which is how
the harness probes steady state and how the checkers judge.  A system names the
event kinds its workload writes (``produces``), so a checker that needs a kind the
system never writes says ``unknown`` with that reason instead of guessing.

Systems are found by name through the entry-point group ``swarmshake.systems``
(``chaos/systems/__init__.py``), or as ``pkg.module:Class``.
"""

from __future__ import annotations

import abc
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from swarmshake.chaos.backends.base import ClusterSpec
    from swarmshake.chaos.backends.events import EventTail

LinkFaults = Literal["proxy", "netns", "none"]
# The channels of a proxied link (chaos/links.py CHANNELS; not imported: chaos.links
# imports the Toxiproxy client, which a System need not load).
PROXY_CHANNELS = ("control", "bulk")

# Fault ops that act on a node's processes; every backend delivers them the same way
# (signals or ``docker kill/pause``), whatever the system.
PROCESS_OPS = frozenset({"crash", "restart", "pause", "resume", "cpu_throttle", "churn"})
# Ops that act on links (through a proxy or a namespace).
LINK_OPS = frozenset(
    {"partition", "heal", "latency", "bandwidth", "blackhole", "reset_peer", "slicer",
     "limit_data", "slow_close", "netem"}
)  # fmt: skip
# Link ops a namespace can do with iptables and ``tc`` (latency needs sch_netem, which
# the netns layer checks at run time and refuses, recorded, where the kernel lacks it).
NETNS_LINK_OPS = frozenset({"partition", "heal", "blackhole", "reset_peer", "bandwidth", "latency"})


class SystemConfigError(RuntimeError):
    """A system cannot be found, installed or configured; the message says the fix."""


@dataclass(frozen=True)
class NodeContext:
    """What the backend tells a system about node ``name`` before it starts.

    ``address`` is where the node listens (loopback, or its namespace's address);
    ``ports`` the ports the system asked for (``System.ports``), on that address;
    ``peers[p][port_name]`` is the ``(host, port)`` this node must *dial* to reach
    peer ``p``'s ``port_name`` (a proxy's listener under ``proxy`` link faults, the
    peer's own address otherwise); ``services[s]`` the ``(host, port)`` of a
    cluster service (``System.services``); ``python`` the interpreter nodes run with
    (the harness's own locally, the image's in a container).
    """

    spec: ClusterSpec
    name: str
    index: int  # 0-based position of the node in the cluster
    address: str
    ports: Mapping[str, int]
    peers: Mapping[str, Mapping[str, tuple[str, int]]]
    addresses: Mapping[str, str]  # every node's own address
    services: Mapping[str, tuple[str, int]]
    run_dir: Path  # the run directory as the node sees it
    python: str
    broker: tuple[str, int] | None = None

    @property
    def node_dir(self) -> Path:
        return self.run_dir / "nodes" / self.name

    @property
    def events_path(self) -> Path:
        return self.run_dir / "events" / f"{self.name}.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints" / self.name


@dataclass(frozen=True)
class Launch:
    """One process to start: ``argv`` (``argv[0]`` an executable), env additions, cwd.

    ``mounts`` are host files or folders the process reads besides the run directory
    (a script beside a suite, a test's program): a container backend mounts each
    read-only at the same absolute path, so ``argv`` names them as on the host; a
    local process sees the host anyway.

    ``python_module`` marks the fast path: the process is ``python -m python_module``
    with ``argv`` as its arguments, so a backend that keeps a torch-preloaded parent
    (the local backend's zygote) may fork it instead of executing ``argv``.  Both
    paths run the same program.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    python_module: str | None = None
    module_argv: tuple[str, ...] = ()
    mounts: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0]:
            raise SystemConfigError("a launch needs a non-empty argv")
        for mount in self.mounts:
            if not isinstance(mount, Path) or not mount.is_absolute():
                raise SystemConfigError(
                    f"launch mount {mount!r}: give an absolute pathlib.Path (it is mounted "
                    "at the same path in a container)"
                )
        for key, value in self.env.items():
            if not isinstance(key, str) or not isinstance(value, str) or "=" in key:
                raise SystemConfigError(
                    f"launch env {key!r}={value!r}: names and values are strings"
                )


@dataclass(frozen=True)
class ServiceSpec:
    """A cluster service the nodes need besides each other (rendezvous store, Lighthouse).

    The backend starts it before the nodes, on an address every node can reach and
    outside every node's namespace, so node faults never hit it; ``port`` names the
    port it listens on (reserved by the backend, passed to ``launch``)."""

    name: str
    launch: Any  # Callable[[str, int], Launch]: (host, port) -> what to start


class System(abc.ABC):
    """One system under test; an instance holds a scenario's ``system_options``."""

    #: the name scenarios use (``system: <name>``)
    name: ClassVar[str] = "abstract"
    description: ClassVar[str] = ""
    link_faults: ClassVar[LinkFaults] = "none"
    #: names of the ports one node listens on (the backend reserves them)
    ports: ClassVar[tuple[str, ...]] = ()
    #: under ``proxy`` link faults, link channel -> the port (of ``ports``) that peers
    #: dial through that channel's proxy (``control``, ``bulk``: the bulk proxies run
    #: on a Toxiproxy server of their own); a port not named here is dialled directly
    #: (no link faults reach it).  Empty: the first port, on ``control``.
    proxied_ports: ClassVar[Mapping[str, str]] = {}
    #: whether nodes talk to the harness's MQTT broker (commands, telemetry)
    needs_broker: ClassVar[bool] = False
    #: a ``Launch.python_module`` may be forked from a torch-preloaded zygote (local)
    uses_zygote: ClassVar[bool] = False
    #: fault ops the system can take besides the process and link ops
    extra_ops: ClassVar[frozenset[str]] = frozenset()
    #: history kinds the workload writes (``verify/history.py``); checkers read this
    produces: ClassVar[frozenset[str]] = frozenset()
    #: option names ``system_options`` may hold, with their defaults
    option_defaults: ClassVar[Mapping[str, Any]] = {}
    #: checker bounds (``Bounds`` fields: detection_s, recovery_s, rejoin_s) that fit the
    #: system's own timeouts; ``swarmshake explore`` judges its generated runs by them
    #: (a scenario file states its own).  Empty: the reference node's defaults.
    bounds: ClassVar[Mapping[str, float]] = {}
    # What the harness offers a system is chosen by what the system declares below,
    # never by its name: a user's system that declares them gets the same paths.
    #: the deterministic simulator runs this system's node core (explore and bench
    #: recovery on ``--backend sim``): only a system built on the node core can be
    simulated: ClassVar[bool] = False
    #: the planted-bug switches (``cluster.bugs``, ``--bug``) its nodes understand
    planted_bugs: ClassVar[frozenset[str]] = frozenset()
    #: its nodes serve the HTTP inference API a scenario's ``load:`` section drives
    serves_load: ClassVar[bool] = False
    #: it trains with the reference training code (``TrainingConfig``), so convergence
    #: against a fault-free baseline and bit-exact replay can re-run its steps
    replays_training: ClassVar[bool] = False
    #: history kinds whose logging may fire a crash or pause that real-backend explore
    #: draws (a kill at the workload's all-reduce start); None: every kind it produces
    fault_triggers: ClassVar[frozenset[str] | None] = None
    #: how long a cluster that explore builds may take to reach steady state
    steady_timeout_s: ClassVar[float] = 60.0
    #: (port name, HTTP path) of a node's own status page, which the harness saves
    #: for every node when a run aborts (a cluster that never reached steady state
    #: leaves only its history otherwise, which shows what was sent, not why nobody
    #: acted on it); None: the system serves none
    status_endpoint: ClassVar[tuple[str, str] | None] = None
    #: after a fault heals, how long the system may take to train again (rejoin, or
    #: a restart from a checkpoint); a recovery bench quiesces the longest of these
    settle_s: ClassVar[float] = 8.0

    def __init__(self, options: Mapping[str, Any] | None = None):
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.option_defaults))
        if unknown:
            allowed = ", ".join(sorted(self.option_defaults)) or "none"
            raise SystemConfigError(
                f"system {self.name}: unknown option(s) {unknown}; allowed: {allowed}"
            )
        self.options: dict[str, Any] = {**self.option_defaults, **options}
        if self.link_faults == "proxy":
            self.link_channels()  # a class that cannot be proxied fails here, named
        self.validate_options()

    def link_channels(self) -> dict[str, str]:
        """Under ``proxy`` link faults: channel -> proxied port name, in channel order
        (``proxied_ports``, or the first port on ``control``); empty otherwise."""
        if self.link_faults != "proxy":
            return {}
        wanted = dict(self.proxied_ports) or ({"control": self.ports[0]} if self.ports else {})
        if not wanted:
            raise SystemConfigError(
                f"system {self.name}: link_faults = 'proxy' needs a port its peers dial "
                "(ports = ('rpc',) on the class)"
            )
        for channel, port in wanted.items():
            if channel not in PROXY_CHANNELS or port not in self.ports:
                raise SystemConfigError(
                    f"system {self.name}: proxied_ports {dict(self.proxied_ports)}: map a "
                    f"channel ({', '.join(PROXY_CHANNELS)}) to one of ports {list(self.ports)}"
                )
        if len(set(wanted.values())) != len(wanted):
            raise SystemConfigError(
                f"system {self.name}: proxied_ports {dict(self.proxied_ports)}: a port can be "
                "dialled through one channel only"
            )
        return {channel: wanted[channel] for channel in PROXY_CHANNELS if channel in wanted}

    def validate_options(self) -> None:
        """Raise :class:`SystemConfigError` naming the option and the fix."""
        return None

    # --- install / check ------------------------------------------------------------------

    def check(self) -> list[str]:
        """What stops this system from running here (empty: ready); each line says the fix."""
        return []

    # --- fault support --------------------------------------------------------------------

    def supported_ops(self) -> frozenset[str]:
        """The fault ops this system can take (a backend may support fewer)."""
        if self.link_faults == "proxy":
            links = LINK_OPS
        elif self.link_faults == "netns":
            from swarmshake.chaos.netns import netns_unsupported

            # What this kernel lacks (sch_netem here) is refused before a run starts.
            links = frozenset(op for op in NETNS_LINK_OPS if netns_unsupported(op) is None)
        else:
            links = frozenset()
        return PROCESS_OPS | links | self.extra_ops

    def unsupported_reason(self, op: str) -> str:
        if op in LINK_OPS and self.link_faults == "none":
            return f"system {self.name} takes no link faults (its nodes cannot be put behind a proxy or in a namespace)"
        if op in NETNS_LINK_OPS and self.link_faults == "netns":
            from swarmshake.chaos.netns import netns_unsupported

            why = netns_unsupported(op)
            if why:
                return f"system {self.name}: {op}: {why}"
        if op in LINK_OPS and self.link_faults == "netns":
            return (
                f"system {self.name} gets link faults in a network namespace per node, where "
                f"{op!r} has no iptables/tc form (supported: {', '.join(sorted(NETNS_LINK_OPS))})"
            )
        return f"system {self.name} cannot take fault op {op!r} (its nodes have no such control)"

    # --- configure / start ----------------------------------------------------------------

    def services(self, spec: ClusterSpec) -> list[ServiceSpec]:
        """Cluster services started before the nodes (none by default)."""
        return []

    def configure(self, ctx: NodeContext) -> None:
        """Write node ``ctx.name``'s config files (before its first start)."""
        return None

    @abc.abstractmethod
    def launch(self, ctx: NodeContext) -> Launch:
        """The command that starts (and restarts) node ``ctx.name``."""

    # --- probe ----------------------------------------------------------------------------

    def steady(self, tail: EventTail, min_step: int) -> bool:
        """Steady state: every node committed a step ≥ ``min_step`` (from its history)."""
        return tail.steady(min_step)

    def trigger_kinds(self) -> list[str]:
        """The kinds that may fire explore's drawn crashes and pauses (sorted)."""
        return sorted(self.produces if self.fault_triggers is None else self.fault_triggers)

    def describe(self) -> dict[str, Any]:
        return {
            "system": self.name,
            "link_faults": self.link_faults,
            "needs_broker": self.needs_broker,
            "produces": sorted(self.produces),
            "options": self.options,
        }


def which(program: str) -> str | None:
    """``program``'s path on PATH or next to the running interpreter (a venv's scripts)."""
    import sys

    found = shutil.which(program)
    if found:
        return found
    candidate = Path(sys.executable).parent / program
    return str(candidate) if candidate.exists() else None
