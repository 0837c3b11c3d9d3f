"""Ground truth of a run from the harness's ``fault`` events and the nodes' ``start``s.

The checkers never trust a node about itself: whether a node was up, paused or cut
off comes from what the harness did (DESIGN: fault events ``{op, target, params,
phase}``) and from ``start`` events (a process exists from its ``start`` on).

- A node is *up* from a ``start`` until a ``crash``/``restart`` inject or a ``stop``.
- A node is *paused* from a ``pause`` inject until its heal (or a ``resume`` inject).
- *Alive* (S4's word) = up, not paused, and handling events: a node's own
  ``loop_stall`` report longer than Δ_proc marks it stalled for that long.  A node
  that logged its own ``declare_dead`` (peer = itself: it accepted a verdict and
  stops to rejoin) has left until its next ``start``.
- *Out of envelope* windows: partitions, black holes, bandwidth limits, latency above
  the declared envelope, CPU throttling, clock drift beyond the bound or an offset
  jump: while a node is in one (and for D after it ends, since the detector reacts to
  silence that began inside it), a detector decision about it is not held against S4
  and a missed deadline in L1/L2/L3 makes the verdict ``unknown``.
- Each exit window also records *which links* it hit where the fault event says
  (a partition's ``cuts``, a link fault's ``src``/``dst``): S4 judges one declaration
  by the declarer's own link to the peer, so a partition elsewhere in the cluster
  does not make it undecidable (``Timeline.link_exit``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from swarmshake.reference_node.protocol.history import (
    HARNESS,
    DeclareDead,
    Fault,
    History,
    LoopStall,
    Start,
    Stop,
)
from swarmshake.verify.checkers.model import Bounds

# Ops that take a node down (its process dies) and the ops that pause it.
DOWN_OPS = frozenset({"crash", "restart"})
PAUSE_OPS = frozenset({"pause"})
# Network ops whose window always leaves the envelope; latency/clock/cpu are judged by params.
NETWORK_OPS = frozenset(
    {
        "partition",
        "blackhole",
        "bandwidth",
        "reset_peer",
        "slicer",
        "limit_data",
        "slow_close",
        "netem",
    }
)
ALL_NODES = "*"
# Faults that cut links outright: across such a cut, silence is all a node can see.
CUT_OPS = frozenset({"partition", "blackhole"})
# Ops that act on a whole node, not on links: every link of the node is affected.
NODE_WIDE_OPS = frozenset({"cpu_throttle", "clock_skew"})


@dataclass
class Interval:
    start: float
    end: float = math.inf
    start_index: int = -1

    def covers(self, t: float) -> bool:
        return self.start <= t < self.end

    def overlaps(self, low: float, high: float) -> bool:
        return self.start <= high and low < self.end


@dataclass
class NodeTimeline:
    """One node's ground truth: process lifetimes and pauses, each a sorted interval list."""

    processes: list[Interval] = field(default_factory=list)  # up: start .. crash/stop
    process_incarnations: list[int] = field(default_factory=list)
    pauses: list[Interval] = field(default_factory=list)
    # The node's own ``loop_stall`` reports longer than Δ_proc: DESIGN counts a node
    # alive only while it handles events at least every Δ_proc.
    stalls: list[Interval] = field(default_factory=list)
    # (t, history index) of the node's own ``declare_dead`` of itself: it accepted a
    # peer's verdict and stops to rejoin with a new incarnation (a forced restart).
    self_declared: list[tuple[float, int]] = field(default_factory=list)

    def left_during(self, low: float, high: float) -> float | None:
        """When the node declared itself dead in ``[low, high)``, if it did: from then
        to its next start it takes no part (S4: not alive)."""
        for t, _index in self.self_declared:
            if low <= t < high:
                return t
        return None

    def stalled_during(self, low: float, high: float) -> bool:
        return any(s.overlaps(low, high) for s in self.stalls)

    def up_at(self, t: float) -> Interval | None:
        starts = [p.start for p in self.processes]
        position = bisect.bisect_right(starts, t) - 1
        if position >= 0 and self.processes[position].covers(t):
            return self.processes[position]
        return None

    def process_at(self, t: float) -> tuple[Interval, int] | None:
        starts = [p.start for p in self.processes]
        position = bisect.bisect_right(starts, t) - 1
        if position >= 0 and self.processes[position].covers(t):
            return self.processes[position], self.process_incarnations[position]
        return None

    def paused_during(self, low: float, high: float) -> bool:
        return any(p.overlaps(low, high) for p in self.pauses)

    def alive_at(self, t: float) -> bool:
        return self.up_at(t) is not None and not any(p.covers(t) for p in self.pauses)

    def alive_throughout(self, low: float, high: float) -> bool:
        process = self.up_at(low)
        return (
            process is not None
            and process.end >= high
            and not self.paused_during(low, high + 1e-12)
        )


@dataclass
class ExitWindow:
    """One envelope exit: its window (shared with ``Timeline.envelope_exits``, so it
    runs to D after the heal), the fault op, the nodes it names (None: every node) and
    the links it hit, undirected for the lookup (None: not recorded, so every link of
    its nodes counts as hit)."""

    interval: Interval
    op: str
    nodes: frozenset[str] | None
    links: frozenset[tuple[str, str]] | None

    def describe(self) -> str:
        if math.isinf(self.interval.end):
            return f"{self.op} from t={self.interval.start:.3f}, never healed"
        return f"{self.op} from t={self.interval.start:.3f} to D after its heal"


@dataclass
class Timeline:
    nodes: dict[str, NodeTimeline]
    envelope_exits: list[tuple[Interval, frozenset[str] | None]]  # None: every node
    crashes: list[tuple[str, float, int]]  # (node, t, history index) of each process death
    end_t: float
    # Partitions' cut links: (window, directed (src, dst) pairs); a window runs from the
    # inject to D after the heal, like the envelope exits.
    cuts: list[tuple[Interval, frozenset[tuple[str, str]]]] = field(default_factory=list)
    exits: list[ExitWindow] = field(default_factory=list)

    def link_exit(self, a: str, b: str, low: float, high: float) -> ExitWindow | None:
        """The first envelope exit during ``[low, high]`` that touched the link between
        ``a`` and ``b`` or either node as a whole, None if the link stayed inside the
        envelope.  A cut (partition, black hole) with recorded links touches only the
        links it cut, and those are :meth:`cut_between`'s to judge."""
        for window in self.exits:
            if not window.interval.overlaps(low, high):
                continue
            if window.links is not None:
                if window.op not in CUT_OPS and ((a, b) in window.links or (b, a) in window.links):
                    return window
                continue
            if window.nodes is None or a in window.nodes or b in window.nodes:
                return window
        return None

    def cut_between(self, a: str, b: str, low: float, high: float) -> bool:
        """Whether the link between ``a`` and ``b`` (either direction) was cut by a
        partition at some time in ``[low, high]``."""
        return any(
            interval.overlaps(low, high) and ((a, b) in pairs or (b, a) in pairs)
            for interval, pairs in self.cuts
        )

    def out_of_envelope(self, node: str | None, low: float, high: float) -> bool:
        """Whether ``node`` (or any node when None) was outside the declared envelope
        during ``[low, high]``."""
        for interval, affected in self.envelope_exits:
            if interval.overlaps(low, high) and (
                affected is None or node is None or node in affected
            ):
                return True
        return False

    def any_fault_during(self, low: float, high: float) -> bool:
        return self.out_of_envelope(None, low, high)


def build_timeline(history: History, bounds: Bounds) -> Timeline:
    nodes: dict[str, NodeTimeline] = {name: NodeTimeline() for name in history.nodes()}
    # op -> open windows: (interval, affected nodes or None for all, the inject's
    # target as logged: the key its heal names again)
    open_windows: dict[str, list[tuple[Interval, frozenset[str] | None, frozenset[str]]]] = {}
    exits: list[tuple[Interval, frozenset[str] | None]] = []
    cuts: list[tuple[Interval, frozenset[tuple[str, str]]]] = []
    exit_windows: list[ExitWindow] = []
    crashes: list[tuple[str, float, int]] = []
    end_t = history.events[-1].t_mono if history.events else 0.0
    grace = bounds.detection_s

    def close(
        op: str,
        t: float,
        healed: frozenset[str] | None = None,
        target: frozenset[str] = frozenset(),
    ) -> None:
        # A heal names the nodes of the links it heals: it ends the window of the
        # inject with the same target (the oldest such: windows with equal targets
        # are interchangeable), or every window within its nodes, not the op's
        # windows everywhere (explore: healing one black hole ended the window of
        # another still active, and L2/S4 judged its links as healthy; healing n1's
        # latency to every node, target "n1, *", ended n3's too, and a declaration
        # resting on n3's delayed heartbeats was judged inside the envelope).
        windows = open_windows.get(op, [])
        within = [w for w in windows if healed is not None and w[1] is not None and w[1] <= healed]
        if op == "partition" or not target - {ALL_NODES}:
            # The harness heals partitions all at once (scope "partition"), naming
            # every node of every cut: each window within those nodes ends.  A heal
            # naming no node ("*", or none at all) ends every window of the op.
            ending = list(windows) if healed is None else within
        else:
            # The heal of an inject that left no window (it stayed inside the
            # envelope: n1's 36 ms latency to every node) ends nobody else's.
            ending = [w for w in windows if w[2] == target][:1] or within
        for window in ending:
            windows.remove(window)
            interval, affected, _ = window
            interval.end = t + grace
            exits.append((interval, affected))
        if not windows:
            open_windows.pop(op, None)

    # Only these kinds shape the timeline: the history's index by class hands them
    # over in history order (a simulated history is mostly agg_send and votes).
    for index, event in history.indexed(Start, Stop, LoopStall, DeclareDead, Fault):
        if isinstance(event, Start):
            timeline = nodes.setdefault(event.node, NodeTimeline())
            if timeline.processes and timeline.processes[-1].end == math.inf:
                timeline.processes[-1].end = event.t_mono  # a start implies the old one died
            timeline.processes.append(Interval(event.t_mono, start_index=index))
            timeline.process_incarnations.append(event.incarnation)
        elif isinstance(event, Stop):
            _end_process(nodes.get(event.node), event.t_mono)
        elif isinstance(event, LoopStall) and event.stalled_ms > bounds.proc_delay_ms:
            stalled_until = event.since_mono + event.stalled_ms / 1000
            nodes.setdefault(event.node, NodeTimeline()).stalls.append(
                Interval(event.since_mono, stalled_until, start_index=index)
            )
        elif isinstance(event, DeclareDead) and event.peer == event.node:
            nodes.setdefault(event.node, NodeTimeline()).self_declared.append((event.t_mono, index))
        elif isinstance(event, Fault):
            opened = _apply_fault(event, index, nodes, open_windows, close, crashes, bounds)
            if opened is not None:
                # The cut and the exit share the window's interval: the heal that ends
                # this inject's window ends its cut too, not every cut of the op
                # (healing one black hole left another's links judged as healthy).
                interval, affected = opened
                links = _fault_links(event, sorted(nodes))
                exit_windows.append(ExitWindow(interval, event.op, affected, links))
                if event.op in CUT_OPS:
                    cuts.append((interval, _cut_pairs(event, sorted(nodes))))
    for op in list(open_windows):
        close(op, math.inf)
    # A node that logged events but no start (a history cut at the front) is up from its
    # first event: absent evidence of a start is not evidence of death.
    first_seen = _first_seen(history, {n for n, tl in nodes.items() if not tl.processes})
    for name, timeline in nodes.items():
        if not timeline.processes and name in first_seen:
            timeline.processes.append(Interval(first_seen[name]))
            timeline.process_incarnations.append(0)
    return Timeline(
        nodes=nodes,
        envelope_exits=exits,
        crashes=crashes,
        end_t=end_t,
        cuts=cuts,
        exits=exit_windows,
    )


def _first_seen(history: History, names: set[str]) -> dict[str, float]:
    """The ``t_mono`` of the first event of each of ``names`` (the harness has none)."""
    names.discard(HARNESS)
    first: dict[str, float] = {}
    if not names:
        return first
    for event in history.events:
        node = event.node
        if node in names and node not in first:
            first[node] = event.t_mono
            if len(first) == len(names):
                break
    return first


def _fault_links(event: Fault, nodes: list[str]) -> frozenset[tuple[str, str]] | None:
    """The links an envelope exit hit, where its event records them: a partition's
    ``cuts``, a link fault's ``src`` and ``dst`` (``*`` = every node).  None when not
    recorded (the simulator names only the target nodes of a link fault) or for a
    node-wide op: then every link of the named nodes counts as hit, the cautious
    reading (more declarations come out ``unknown``, none ``valid``)."""
    params = event.params
    if event.op in NODE_WIDE_OPS:
        return None
    if event.op == "partition":
        return _cut_pairs(event, nodes) if isinstance(params.get("cuts"), list) else None
    src, dst = params.get("src"), params.get("dst")
    if not (isinstance(src, list) and isinstance(dst, list)):
        return None
    sources = nodes if ALL_NODES in src else [n for n in src if isinstance(n, str)]
    sinks = nodes if ALL_NODES in dst else [n for n in dst if isinstance(n, str)]
    return frozenset((a, b) for a in sources for b in sinks if a != b)


def _cut_pairs(event: Fault, nodes: list[str]) -> frozenset[tuple[str, str]]:
    """The directed links a partition or black hole cut: a partition's ``cuts`` param
    (the harness and the simulator record them), a black hole's ``src``/``dst``
    (``*`` = every node; both directions unless ``one_way``).  Malformed entries are
    ignored, not trusted: fewer cuts only makes S4 stricter."""
    pairs: set[tuple[str, str]] = set()
    params = event.params
    for entry in params.get("cuts", ()) or ():
        if isinstance(entry, (list, tuple)) and len(entry) == 2:
            src, dst = entry
            if isinstance(src, str) and isinstance(dst, str):
                pairs.add((src, dst))

    def expand(names: object) -> list[str]:
        if not isinstance(names, list):
            return []
        return nodes if ALL_NODES in names else [n for n in names if isinstance(n, str)]

    if event.op == "blackhole":
        for src in expand(params.get("src")):
            for dst in expand(params.get("dst")):
                if src != dst:
                    pairs.add((src, dst))
                    if params.get("direction") != "one_way":
                        pairs.add((dst, src))
    return frozenset(pairs)


def _end_process(timeline: NodeTimeline | None, t: float) -> bool:
    if timeline and timeline.processes and timeline.processes[-1].end == math.inf:
        timeline.processes[-1].end = t
        return True
    return False


def _targets(event: Fault, nodes: dict[str, NodeTimeline]) -> list[str]:
    if ALL_NODES in event.target:
        return sorted(nodes)
    return list(event.target)


def is_clean_leave(event: Fault) -> bool:
    """Churn's clean leave (``restart`` with ``leave: true``): no crash.  The process
    runs on, voting, until its removal commits and it logs ``stop`` (which ends it
    here), or its leave times out and it stops all the same; nobody must declare it
    dead meanwhile.  A leave the harness could not send is logged as a crash too."""
    return event.op == "restart" and event.params.get("leave") is True


def _apply_fault(  # noqa: ANN001 - the build loop's own locals
    event, index, nodes, open_windows, close, crashes, bounds
) -> tuple[Interval, frozenset[str] | None] | None:
    """Apply one fault event to the ground truth; returns the envelope-exit window it
    opened (``(interval, affected nodes)``), or None."""
    op, t = event.op, event.t_mono
    if op in DOWN_OPS and event.phase == "inject" and not is_clean_leave(event):
        for name in _targets(event, nodes):
            if _end_process(nodes.setdefault(name, NodeTimeline()), t):
                crashes.append((name, t, index))
        return None
    if op in PAUSE_OPS or op == "resume":
        healing = event.phase == "heal" or op == "resume"
        for name in _targets(event, nodes):
            pauses = nodes.setdefault(name, NodeTimeline()).pauses
            if healing:
                if pauses and pauses[-1].end == math.inf:
                    pauses[-1].end = t
            elif not pauses or pauses[-1].end != math.inf:
                pauses.append(Interval(t, start_index=index))
        return None
    affected: frozenset[str] | None = (
        None if ALL_NODES in event.target or not event.target else frozenset(event.target)
    )
    if event.phase == "heal":
        if op == "heal":  # a heal of everything network-related
            for key in list(open_windows):
                close(key, t)
        else:
            close(op, t, affected, frozenset(event.target))
        return None
    if _leaves_envelope(event, bounds):
        interval = Interval(t, start_index=index)
        open_windows.setdefault(op, []).append((interval, affected, frozenset(event.target)))
        return interval, affected
    if op == "clock_skew":
        close(op, t)  # a zero skew ends an earlier one
    return None


def _leaves_envelope(event: Fault, bounds: Bounds) -> bool:
    op, params = event.op, event.params
    if op in NETWORK_OPS:
        return True
    if op == "latency":
        worst = float(params.get("delay_ms", 0.0)) + float(params.get("jitter_ms", 0.0))
        return worst > bounds.latency_ms_max
    if op == "cpu_throttle":
        return float(params.get("cpu_fraction", 1.0)) < 1.0
    if op == "clock_skew":
        drift = abs(float(params.get("drift_ppm", 0.0)))
        return drift > bounds.drift_ppm_max or float(params.get("offset_ms", 0.0)) != 0.0
    return False
