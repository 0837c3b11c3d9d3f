"""The fault catalog (DESIGN.md, "Fault catalog") as typed ops, and fault schedules.

Data only: every fault is a frozen msgspec struct in one tagged union on the field
``op``, validated as it is built or decoded, so a scenario file with a typo fails at
load time with the entry and field named, never half-way through a run.  The
simulator (``chaos/sim/``) and the real backends each interpret the subset they can
inject; ``SIM_SUPPORTED`` names the simulator's subset.

Every op knows its heal: ``op.heal()`` returns the op that undoes it (``crash`` →
``restart``, ``pause`` → ``resume``, a partition or link fault → ``heal`` of the same
scope, a clock skew → zero skew …) or ``None`` where nothing needs undoing.  In a run
history an inject is a ``fault`` event with ``phase="inject"`` and its heal the same
``op`` name with ``phase="heal"``, so a checker pairs them without knowing the catalog.

A schedule is a list of entries, each firing at a virtual/real time (``at_s``) or on
an event trigger (``when``: "when n2 logs its first agg_send with step >= 10"), with an
optional ``heal_after_s``.  Load one with :func:`load_schedule` (YAML or JSON).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Literal

import msgspec

from swarmshake.chaos import yaml_input
from swarmshake.reference_node.protocol.history import known_kinds

# Importing the neutral history registers its kinds (``collective``, ``step_committed``,
# ...), so a trigger can name what any system's workload writes, not only the reference
# node's kinds.
from swarmshake.verify import history as _neutral_history  # noqa: F401

MAX_SCHEDULE_ENTRIES = 10_000  # a schedule is written or drawn, not streamed; bounds memory
MAX_SCHEDULE_BYTES = 4 * 1024 * 1024  # 10,000 entries of ~200 bytes, with room
MAX_NODES_PER_OP = 10_000  # the simulator's largest cluster is a few thousand nodes
MAX_DELAY_MS = 600_000.0  # ten minutes: beyond that a link is a black hole, say so
ALL = "*"  # in a node list: every node of the cluster

NodeList = list[str]


class FaultSpecError(ValueError):
    """A fault schedule that does not validate; the message names the entry and field."""


def _check_nodes(field: str, nodes: list[str], *, allow_empty: bool = False) -> None:
    if not nodes and not allow_empty:
        raise ValueError(f"{field}: name at least one node (or '*' for all)")
    if len(nodes) > MAX_NODES_PER_OP:
        raise ValueError(f"{field}: {len(nodes)} nodes is more than {MAX_NODES_PER_OP}")
    for name in nodes:
        if not name or len(name) > 64:
            raise ValueError(f"{field}: node name {name!r} must be 1..64 characters")
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"{field}: {nodes} names a node twice")


def _check_range(field: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{field} = {value} must lie in [{low}, {high}]")


class FaultOp(
    msgspec.Struct,
    kw_only=True,
    frozen=True,
    tag_field="op",
    forbid_unknown_fields=True,
    omit_defaults=True,
):
    """Base of every fault op.  ``heal()`` returns the op that undoes this one."""

    def heal(self) -> FaultOp | None:
        return None

    @property
    def name(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]

    def targets(self) -> list[str]:
        """The node names this op names (for the ``target`` field of a fault event)."""
        return []


class NodeOp(FaultOp, kw_only=True, frozen=True):
    nodes: NodeList

    def __post_init__(self) -> None:
        _check_nodes("nodes", self.nodes)

    def targets(self) -> list[str]:
        return list(self.nodes)


class LinkOp(FaultOp, kw_only=True, frozen=True):
    """A fault on the directed links from every node of ``src`` to every node of ``dst``.

    ``direction="both"`` also hits ``dst → src``; ``"one_way"`` is the asymmetric case
    (DESIGN: "asymmetric link faults"): only ``src → dst``.
    """

    src: NodeList = msgspec.field(default_factory=lambda: [ALL])
    dst: NodeList = msgspec.field(default_factory=lambda: [ALL])
    direction: Literal["both", "one_way"] = "both"

    def __post_init__(self) -> None:
        _check_nodes("src", self.src)
        _check_nodes("dst", self.dst)

    def targets(self) -> list[str]:
        return sorted(set(self.src) | set(self.dst))

    def heal(self) -> FaultOp | None:
        return Heal(scope=self.name, src=self.src, dst=self.dst, direction=self.direction)

    def directed_links(self, cluster: list[str]) -> set[tuple[str, str]]:
        """The directed (sender, receiver) pairs this op hits in ``cluster``."""
        sources = _expand(self.src, cluster)
        destinations = _expand(self.dst, cluster)
        links = {(a, b) for a in sources for b in destinations if a != b}
        if self.direction == "both":
            links |= {(b, a) for a, b in links}
        return links


def _expand(nodes: list[str], cluster: list[str]) -> list[str]:
    if ALL in nodes:
        return list(cluster)
    unknown = sorted(set(nodes) - set(cluster))
    if unknown:
        raise FaultSpecError(
            f"unknown node(s) {', '.join(unknown)}; the cluster has {cluster[:8]}…"
        )
    return list(nodes)


# --- node faults -----------------------------------------------------------------------------


class Crash(NodeOp, tag="crash", kw_only=True, frozen=True):
    """SIGKILL / ``docker kill``: the process dies, its volatile state is lost.

    ``permanent``: the machine is gone for good: nothing restarts it, not even the
    quiesce (which otherwise brings every node back).  S2's "fewer than a majority
    crash" includes such failures; only a permanent one can show that a committed
    step lived on one node's disk alone."""

    permanent: bool = False

    def heal(self) -> FaultOp | None:
        return None if self.permanent else Restart(nodes=self.nodes)


class Restart(NodeOp, tag="restart", kw_only=True, frozen=True):
    """Start a crashed node again (a running node is killed first), new incarnation."""


class Pause(NodeOp, tag="pause", kw_only=True, frozen=True):
    """SIGSTOP / ``docker pause``: a gray failure; the node is not alive while paused."""

    def heal(self) -> FaultOp | None:
        return Resume(nodes=self.nodes)


class Resume(NodeOp, tag="resume", kw_only=True, frozen=True):
    """SIGCONT / ``docker unpause``."""


class CpuThrottle(NodeOp, tag="cpu_throttle", kw_only=True, frozen=True):
    """A straggler: the node gets ``cpu_fraction`` of its CPU (1.0 = unthrottled)."""

    cpu_fraction: float

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("cpu_fraction", self.cpu_fraction, 0.01, 1.0)

    def heal(self) -> FaultOp | None:
        return CpuThrottle(nodes=self.nodes, cpu_fraction=1.0) if self.cpu_fraction < 1.0 else None


class DiskFull(NodeOp, tag="disk_full", kw_only=True, frozen=True):
    """Checkpoint writes fail with ENOSPC (``full=False`` frees the space again); the
    node logs each failed write (``checkpoint_fail``) and trains on."""

    full: bool = True

    def heal(self) -> FaultOp | None:
        return DiskFull(nodes=self.nodes, full=False) if self.full else None


class CheckpointCorrupt(NodeOp, tag="checkpoint_corrupt", kw_only=True, frozen=True):
    """Damage the newest local checkpoint: truncate it or flip bytes in it."""

    mode: Literal["truncate", "flip_bytes", "delete"] = "flip_bytes"


class ClockSkew(NodeOp, tag="clock_skew", kw_only=True, frozen=True):
    """Shift the node's injected clock by ``offset_ms`` and let it drift ``drift_ppm``."""

    offset_ms: float = 0.0
    drift_ppm: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("offset_ms", self.offset_ms, -3_600_000.0, 3_600_000.0)
        _check_range("drift_ppm", self.drift_ppm, -100_000.0, 100_000.0)  # 10 %: a broken clock

    def heal(self) -> FaultOp | None:
        if self.offset_ms == 0.0 and self.drift_ppm == 0.0:
            return None
        return ClockSkew(nodes=self.nodes)


class Byzantine(NodeOp, tag="byzantine", kw_only=True, frozen=True):
    """Switch a node's gradient content to a Byzantine mode (``honest`` switches it off)."""

    mode: Literal["sign_flip", "noise", "scaled", "stale", "random_bits", "honest"]
    scale: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("scale", self.scale, -1e6, 1e6)

    def heal(self) -> FaultOp | None:
        return None if self.mode == "honest" else Byzantine(nodes=self.nodes, mode="honest")


class HoldBulk(NodeOp, tag="hold_bulk", kw_only=True, frozen=True):
    """The nodes send no bulk frame (gradients, aggregates, state) to the nodes of
    ``to`` (``*``: every peer); ``release`` lifts every hold.  Held at the sending node
    by a harness command, not in a proxy: a proxy has already read the bytes a node
    wrote, and may still deliver them after the node dies (e.g. Toxiproxy's bandwidth
    toxic flushes its chunk when another toxic is added).  The hold is gone when the
    node restarts."""

    to: NodeList = msgspec.field(default_factory=lambda: [ALL])
    release: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_nodes("to", self.to)

    def heal(self) -> FaultOp | None:
        return None if self.release else HoldBulk(nodes=self.nodes, to=self.to, release=True)


# --- cluster-wide faults --------------------------------------------------------------------


class Churn(FaultOp, tag="churn", kw_only=True, frozen=True):
    """Random leave/crash and join/restart of nodes at ``events_per_min``, seeded.

    Never takes the cluster below ``min_alive`` live nodes (a fraction of the cluster
    when < 1, else a count), so churn alone cannot remove a majority unless asked to.
    ``crash_fraction`` of the departures are crashes, the rest clean leaves (removed
    through a committed step, then stopped); a departed node comes back after
    ``down_s``, a leaver as a joiner.
    """

    events_per_min: float
    min_alive: float = 0.51
    down_s: float = 5.0
    crash_fraction: float = 1.0
    nodes: NodeList = msgspec.field(default_factory=lambda: [ALL])

    def __post_init__(self) -> None:
        _check_nodes("nodes", self.nodes)
        _check_range("events_per_min", self.events_per_min, 0.0, 60_000.0)
        _check_range("min_alive", self.min_alive, 0.0, 100_000.0)
        _check_range("down_s", self.down_s, 0.0, 86_400.0)
        _check_range("crash_fraction", self.crash_fraction, 0.0, 1.0)

    def targets(self) -> list[str]:
        return list(self.nodes)

    def heal(self) -> FaultOp | None:
        return Heal(scope="churn")


class BrokerLoss(FaultOp, tag="broker_loss", kw_only=True, frozen=True):
    """Stop the MQTT broker (``lost=False`` starts it again)."""

    lost: bool = True

    def heal(self) -> FaultOp | None:
        return BrokerLoss(lost=False) if self.lost else None


# --- network faults -------------------------------------------------------------------------

Grouping = Literal["halves", "random_halves", "isolate", "majority_ring", "bridge", "groups"]


class Partition(FaultOp, tag="partition", kw_only=True, frozen=True):
    """Cut links between groups of nodes (Jepsen's nemesis groupings).

    - ``halves``: first half of the sorted cluster vs the rest (majority on the first side
      when odd);  ``random_halves``: the same on a seeded shuffle;
    - ``isolate``: ``nodes`` cut off from everyone else;
    - ``majority_ring``: every node sees a majority, but no two see the same majority;
    - ``bridge``: two halves joined only through one bridge node;
    - ``groups``: explicit ``groups`` (nodes in no group form one more group).
    ``direction="one_way"`` cuts only the links leaving the first group (asymmetric).
    """

    grouping: Grouping = "halves"
    nodes: NodeList = []
    groups: list[NodeList] = []
    direction: Literal["both", "one_way"] = "both"

    def __post_init__(self) -> None:
        _check_nodes("nodes", self.nodes, allow_empty=True)
        if self.grouping == "isolate" and not self.nodes:
            raise ValueError("grouping 'isolate' needs nodes: the nodes to cut off")
        if self.grouping == "groups":
            if len(self.groups) < 1:
                raise ValueError("grouping 'groups' needs groups: a list of node lists")
            seen: list[str] = [n for group in self.groups for n in group]
            _check_nodes("groups", seen)
        elif self.groups:
            raise ValueError(f"groups is only read with grouping 'groups', not {self.grouping!r}")
        if self.direction == "one_way" and self.grouping in ("majority_ring", "bridge"):
            raise ValueError(f"direction 'one_way' is not defined for grouping {self.grouping!r}")

    def targets(self) -> list[str]:
        return sorted(set(self.nodes) | {n for g in self.groups for n in g})

    def heal(self) -> FaultOp | None:
        return Heal(scope="partition")

    def cut_links(self, cluster: list[str], rng: random.Random) -> set[tuple[str, str]]:
        """The directed (sender, receiver) pairs this partition cuts in ``cluster``."""
        ordered = sorted(cluster)
        size = len(ordered)
        if self.grouping == "majority_ring":
            return _majority_ring_cuts(ordered)
        if self.grouping == "bridge":
            return _bridge_cuts(ordered)
        if self.grouping == "halves":
            groups = [ordered[: (size + 1) // 2], ordered[(size + 1) // 2 :]]
        elif self.grouping == "random_halves":
            shuffled = list(ordered)
            rng.shuffle(shuffled)
            groups = [shuffled[: (size + 1) // 2], shuffled[(size + 1) // 2 :]]
        elif self.grouping == "isolate":
            isolated = _expand(self.nodes, ordered)
            groups = [isolated, [n for n in ordered if n not in set(isolated)]]
        else:
            named = [_expand(group, ordered) for group in self.groups]
            rest = sorted(set(ordered) - {n for g in named for n in g})
            groups = named + ([rest] if rest else [])
        return _group_cuts(groups, one_way=self.direction == "one_way")


def _group_cuts(groups: list[list[str]], *, one_way: bool) -> set[tuple[str, str]]:
    cuts: set[tuple[str, str]] = set()
    for index, group in enumerate(groups):
        if one_way and index > 0:
            break
        others = [n for j, g in enumerate(groups) if j != index for n in g]
        cuts.update((a, b) for a in group for b in others)
    return cuts


def _majority_ring_cuts(ordered: list[str]) -> set[tuple[str, str]]:
    # Node i sees the majority of nodes nearest to it on a ring (Jepsen's majorities-ring).
    size = len(ordered)
    reach = size // 2  # neighbours on each side, together with self a majority
    cuts: set[tuple[str, str]] = set()
    for i, a in enumerate(ordered):
        for j, b in enumerate(ordered):
            distance = min((i - j) % size, (j - i) % size)
            if i != j and distance > reach // 2 + reach % 2:
                cuts.add((a, b))
    return cuts


def _bridge_cuts(ordered: list[str]) -> set[tuple[str, str]]:
    # The middle node (ordered[size // 2]) is in neither cut group: it links both sides.
    size = len(ordered)
    left = ordered[: size // 2]
    right = ordered[size // 2 + 1 :]
    return _group_cuts([left, right], one_way=False) if left and right else set()


class Heal(FaultOp, tag="heal", kw_only=True, frozen=True):
    """Undo network faults: ``scope="all"`` every network fault, ``"partition"`` the
    partitions, or one link-fault kind (e.g. ``"latency"``) on the given links."""

    scope: str = "all"
    src: NodeList = msgspec.field(default_factory=lambda: [ALL])
    dst: NodeList = msgspec.field(default_factory=lambda: [ALL])
    direction: Literal["both", "one_way"] = "both"

    def __post_init__(self) -> None:
        allowed = {"all", "partition", "churn", *_LINK_OP_NAMES}
        if self.scope not in allowed:
            raise ValueError(f"scope {self.scope!r} is not one of {sorted(allowed)}")


class Latency(LinkOp, tag="latency", kw_only=True, frozen=True):
    """Add ``delay_ms`` ± ``jitter_ms`` (uniform) to every message on the links."""

    delay_ms: float
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("delay_ms", self.delay_ms, 0.0, MAX_DELAY_MS)
        _check_range("jitter_ms", self.jitter_ms, 0.0, self.delay_ms + 1e-9)


class Bandwidth(LinkOp, tag="bandwidth", kw_only=True, frozen=True):
    """Limit the links to ``rate_kbps`` kilobytes per second."""

    rate_kbps: float

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("rate_kbps", self.rate_kbps, 0.001, 1e9)


class Blackhole(LinkOp, tag="blackhole", kw_only=True, frozen=True):
    """Toxiproxy ``timeout``: data is swallowed; after ``timeout_ms`` (> 0) the
    connection is closed, with 0 it stays open and silent."""

    timeout_ms: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("timeout_ms", self.timeout_ms, 0.0, MAX_DELAY_MS)


class ResetPeer(LinkOp, tag="reset_peer", kw_only=True, frozen=True):
    """Toxiproxy ``reset_peer``: connections are reset (RST) after ``timeout_ms``."""

    timeout_ms: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("timeout_ms", self.timeout_ms, 0.0, MAX_DELAY_MS)


class Slicer(LinkOp, tag="slicer", kw_only=True, frozen=True):
    """Toxiproxy ``slicer``: data is cut into small packets with delays between them."""

    average_size: int = 64
    size_variation: int = 32
    delay_us: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("average_size", self.average_size, 1, 1 << 20)
        _check_range("size_variation", self.size_variation, 0, self.average_size)
        _check_range("delay_us", self.delay_us, 0, 10_000_000)


class LimitData(LinkOp, tag="limit_data", kw_only=True, frozen=True):
    """Toxiproxy ``limit_data``: close the connection after ``limit_bytes``."""

    limit_bytes: int

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("limit_bytes", self.limit_bytes, 1, 1 << 40)


class SlowClose(LinkOp, tag="slow_close", kw_only=True, frozen=True):
    """Toxiproxy ``slow_close``: delay the close of a connection by ``delay_ms``."""

    delay_ms: float

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range("delay_ms", self.delay_ms, 0.0, MAX_DELAY_MS)


class Netem(LinkOp, tag="netem", kw_only=True, frozen=True):
    """``tc netem`` in a container's namespace (Docker backend only): packet loss,
    duplication, reordering and corruption — what a TCP proxy cannot do."""

    loss_pct: float = 0.0
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0
    corrupt_pct: float = 0.0
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("loss_pct", "duplicate_pct", "reorder_pct", "corrupt_pct"):
            _check_range(field, getattr(self, field), 0.0, 100.0)
        _check_range("delay_ms", self.delay_ms, 0.0, MAX_DELAY_MS)
        if self.reorder_pct and not self.delay_ms:
            raise ValueError("reorder_pct needs delay_ms > 0 (netem reorders delayed packets)")


_LINK_OP_NAMES = (
    "latency",
    "bandwidth",
    "blackhole",
    "reset_peer",
    "slicer",
    "limit_data",
    "slow_close",
    "netem",
)

AnyFault = (
    Crash
    | Restart
    | Pause
    | Resume
    | CpuThrottle
    | DiskFull
    | CheckpointCorrupt
    | ClockSkew
    | Byzantine
    | HoldBulk
    | Churn
    | BrokerLoss
    | Partition
    | Heal
    | Latency
    | Bandwidth
    | Blackhole
    | ResetPeer
    | Slicer
    | LimitData
    | SlowClose
    | Netem
)

FAULT_OPS: tuple[str, ...] = tuple(cls.__struct_config__.tag for cls in AnyFault.__args__)  # type: ignore[attr-defined]

SIM_SUPPORTED: frozenset[str] = frozenset(
    {
        "crash",
        "restart",
        "pause",
        "resume",
        "partition",
        "heal",
        "latency",
        "blackhole",
        "clock_skew",
        "cpu_throttle",
        "churn",
        "bandwidth",
        "disk_full",
    }
)


# --- schedules ------------------------------------------------------------------------------


class OnEvent(
    msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, omit_defaults=True
):
    """Trigger: when ``node`` logs its ``count``-th event of ``kind`` with step ≥ ``step_at_least``."""

    node: str
    kind: str
    step_at_least: int = -1
    count: int = 1
    # 0: between the logged event and the action it announces (a crash loses the
    # action); > 0: that many seconds later (e.g. just after a vote was sent).
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in known_kinds():
            raise ValueError(
                f"kind {self.kind!r} is not an event kind; known: {', '.join(known_kinds())}"
            )
        _check_range("count", self.count, 1, 1_000_000)
        _check_range("delay_s", self.delay_s, 0.0, 86_400.0)


class ScheduleEntry(
    msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, omit_defaults=True
):
    """One fault: fires at ``at_s`` seconds after the run start, or ``when`` a trigger matches; healed
    ``heal_after_s`` seconds after it fired when given."""

    op: AnyFault
    at_s: float | None = None
    when: OnEvent | None = None  # not ``on``: YAML 1.1 reads a bare ``on`` key as true
    heal_after_s: float | None = None

    def __post_init__(self) -> None:
        if (self.at_s is None) == (self.when is None):
            raise ValueError("give exactly one of at_s (a time) or when (an event trigger)")
        if self.at_s is not None:
            _check_range("at_s", self.at_s, 0.0, 30 * 86_400.0)
        if self.heal_after_s is not None:
            _check_range("heal_after_s", self.heal_after_s, 0.0, 30 * 86_400.0)
            if self.op.heal() is None:
                raise ValueError(f"heal_after_s given, but op {self.op.name!r} has nothing to heal")


class FaultSchedule(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A timed list of fault entries (what a scenario's ``faults:`` holds)."""

    entries: list[ScheduleEntry] = []
    seed: int | None = None  # for seeded groupings/churn; the run's seed when absent

    def __post_init__(self) -> None:
        if len(self.entries) > MAX_SCHEDULE_ENTRIES:
            raise ValueError(f"{len(self.entries)} entries is more than {MAX_SCHEDULE_ENTRIES}")

    def size(self) -> int:
        """Entries plus timed heals: the size a shrunk schedule is measured by."""
        return len(self.entries) + sum(e.heal_after_s is not None for e in self.entries)


def decode_schedule(data: bytes | str, *, source: str = "<schedule>") -> FaultSchedule:
    """Decode a schedule from YAML or JSON text (JSON is YAML); a bare list is read as
    ``entries``.  Raises :class:`FaultSpecError` naming the source, the line, the field
    path and the fix."""
    try:  # the same reader as scenarios: YAML 1.2 numbers, bounded, no duplicate keys
        text = yaml_input.decode_text(data, source, MAX_SCHEDULE_BYTES)
        root = yaml_input.compose(text, source)
        raw = None if root is None else yaml_input.construct(root, source)
    except yaml_input.YamlInputError as error:
        raise FaultSpecError(str(error)) from None
    prefix = "$"  # where ``entries`` sits in the file, for error lines
    if isinstance(raw, list):
        raw, prefix = {"entries": raw}, "$[]"
    if not isinstance(raw, dict):
        raise FaultSpecError(
            f"{source}:1: expected a list of entries (or a mapping with 'entries'); fix: "
            "write entries like `- {at_s: 1, op: {op: crash, nodes: [n1]}}` (docs/faults.md)"
        )
    if "faults" in raw and "entries" not in raw:  # a scenario file's faults: section
        raw = {"entries": raw["faults"], **({"seed": raw["seed"]} if "seed" in raw else {})}
        prefix = "$.faults[]"
    try:
        return msgspec.convert(raw, FaultSchedule)
    except msgspec.ValidationError as error:
        message = str(error)
        match = re.search(r" - at `(\$[^`]*)`", message)
        path = match.group(1) if match else "$"
        problem = message[: match.start()] if match else message
        in_file = path  # $.entries[3].op is $[3].op in a bare list, $.faults[3].op in a scenario
        if prefix.endswith("[]"):
            in_file = re.sub(r"^\$\.entries\[", prefix[:-1], path)
        line = yaml_input.node_at(root, in_file).start_mark.line + 1 if root is not None else 1
        shown = in_file if prefix == "$.faults[]" else path
        where = shown.removeprefix("$").lstrip(".") or "(top level)"
        raise FaultSpecError(
            yaml_input.one_line(
                f"{source}:{line}: {where}: {problem}; fix: see the op's fields in docs/faults.md"
            )
        ) from None


def load_schedule(path: str | Path) -> FaultSchedule:
    """Load a schedule file (``.yaml``/``.yml``/``.json``)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise FaultSpecError(f"{path}: cannot read: {error.strerror}") from None
    return decode_schedule(data, source=str(path))


def schedule_to_yaml(schedule: FaultSchedule) -> str:
    """The schedule as a scenario's ``faults:`` YAML (what ``explore`` prints)."""
    return yaml_input.dump({"faults": msgspec.to_builtins(schedule)["entries"]})


def check_simulable(schedule: FaultSchedule) -> None:
    """Raise :class:`FaultSpecError` for an op outside ``SIM_SUPPORTED``."""
    check_supported(schedule, SIM_SUPPORTED, "simulator")


def check_supported(schedule: FaultSchedule, supported: frozenset[str], backend: str) -> None:
    """Raise :class:`FaultSpecError` naming each op the backend cannot inject."""
    for index, entry in enumerate(schedule.entries):
        if entry.op.name not in supported:
            raise FaultSpecError(
                f"entry {index}: op {entry.op.name!r} is unsupported in the {backend} "
                f"(supported: {', '.join(sorted(supported))})"
            )
        heal = entry.op.heal()
        if isinstance(heal, Heal) and heal.scope not in ("all", "partition", "churn"):
            if heal.scope not in supported:
                raise FaultSpecError(
                    f"entry {index}: heal of {heal.scope!r} unsupported in the {backend}"
                )
