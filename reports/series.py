"""What the report draws, derived from a run's history: node lanes, fault windows,
the loss curve and the commit rate.

Pure functions of a :class:`History`; the plots and the HTML only format what these
return, so the numbers a reader sees can be tested without a browser.

A lane's state at a moment, in priority order (the first that holds wins):

- ``down``: the node's process is not running (ground truth: the harness's ``crash``
  / ``restart`` injects and the node's ``start``/``stop``, as the checkers read them);
- ``paused``: the harness paused it (a gray failure: up, but handling nothing);
- ``rejoining``: a restarted process between its ``start`` and its first
  ``rejoin_done`` or ``commit``;
- ``declared dead``: up, but at least one peer's detector declared it dead;
- ``suspected``: at least one peer suspects it;
- ``alive``: none of the above.

Suspicions and declarations count only as a peer's verdict on the node's current
process: a node's own ``declare_dead`` of itself (it accepted a verdict and restarts)
is not one, a verdict naming an incarnation older than the one the process started
with is about a process that is gone, and a new ``start`` begins with a clean lane.
A verdict lasts while its declarer's process does: the declarer's crash, stop or
restart takes it off every lane.

Drawn over the lanes: a node's ``loop_stall`` events (its control loop handled no
events for ``stalled_ms``: the machine was overloaded, or the node was), each a
:class:`Stall` from the stall's start to the moment the loop woke.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from swarmshake.reference_node.protocol.history import (
    HARNESS,
    Commit,
    DeclareAlive,
    DeclareDead,
    Fault,
    History,
    LoopStall,
    Refute,
    RejoinBegin,
    RejoinDone,
    Start,
    Stop,
    Suspect,
    TrainStep,
)

LANE_STATES: tuple[str, ...] = (
    "alive",
    "suspected",
    "declared dead",
    "rejoining",
    "paused",
    "down",
)
DOWN_OPS = frozenset({"crash", "restart"})  # ops whose inject kills the target's process
NETWORK_OPS = frozenset(
    {
        "partition",
        "latency",
        "bandwidth",
        "blackhole",
        "reset_peer",
        "slicer",
        "limit_data",
        "slow_close",
        "netem",
    }
)
ALL_NODES = "*"
MAX_COMMIT_RATE_BINS = 200  # a plot wider than this many bars reads as noise


@dataclass(frozen=True)
class Segment:
    start: float  # seconds since the run's first event
    end: float
    state: str


@dataclass(frozen=True)
class FaultWindow:
    op: str
    targets: tuple[str, ...]
    start: float  # seconds since the run's first event
    end: float  # the heal, or the run's end when never healed
    healed: bool
    inject_index: int  # the inject event's index in History.events (its table anchor)
    params: dict

    @property
    def label(self) -> str:
        """``crash n4``, ``latency n2→n3``, ``partition isolate n1``, ``partition n1,n2|n3,n4``:
        the real harness names every node a link or partition fault touches as its
        target, so the parameters say more than the targets do."""
        src, dst = self.params.get("src"), self.params.get("dst")
        if isinstance(src, list) and isinstance(dst, list) and src and dst:
            return f"{self.op} {','.join(map(str, src))}→{','.join(map(str, dst))}"
        groups = self.params.get("groups")
        if self.op == "partition" and isinstance(groups, list) and groups:
            sides = [",".join(map(str, g)) for g in groups if isinstance(g, list)]
            return f"partition {'|'.join(sides)}"
        grouping, nodes = self.params.get("grouping"), self.params.get("nodes")
        if self.op == "partition" and isinstance(grouping, str):
            named = ",".join(map(str, nodes)) if isinstance(nodes, list) else ""
            return f"partition {grouping} {named}".rstrip()
        return f"{self.op} {','.join(self.targets)}" if self.targets else self.op


def run_origin(history: History) -> float:
    """The ``t_mono`` every report time is measured from (the run's first event)."""
    return history.events[0].t_mono if history.events else 0.0


def run_duration_s(history: History) -> float:
    if not history.events:
        return 0.0
    return history.events[-1].t_mono - history.events[0].t_mono


def _targets(event: Fault, nodes: list[str]) -> list[str]:
    return list(nodes) if ALL_NODES in event.target else list(event.target)


def fault_windows(history: History) -> list[FaultWindow]:
    """Each inject paired with its heal: the same ``op`` with ``phase="heal"`` on an
    overlapping target (or no target), a ``resume`` for a ``pause``, or a ``heal`` op for
    any network fault."""
    origin = run_origin(history)
    end = run_duration_s(history)
    nodes = history.nodes()
    open_windows: list[tuple[Fault, int]] = []
    windows: list[FaultWindow] = []

    def close(position: int, t: float) -> None:
        event, index = open_windows.pop(position)
        windows.append(
            FaultWindow(
                op=event.op,
                targets=tuple(event.target),
                start=event.t_mono - origin,
                end=t - origin,
                healed=True,
                inject_index=index,
                params=dict(event.params),
            )
        )

    for index, event in enumerate(history.events):
        if isinstance(event, Start):
            # A restart's window ends when the restarted process is up again.
            for position in range(len(open_windows) - 1, -1, -1):
                opened = open_windows[position][0]
                if opened.op == "restart" and event.node in _targets(opened, nodes):
                    close(position, event.t_mono)
            continue
        if not isinstance(event, Fault):
            continue
        heals_all_network = event.op == "heal"
        if event.phase == "inject" and not heals_all_network and event.op != "resume":
            open_windows.append((event, index))
            continue
        healed_targets = set(_targets(event, nodes))
        for position in range(len(open_windows) - 1, -1, -1):
            opened = open_windows[position][0]
            if heals_all_network:
                matches = opened.op in NETWORK_OPS
            elif event.op == "resume":
                matches = opened.op == "pause"
            else:
                matches = opened.op == event.op
            opened_targets = set(_targets(opened, nodes))
            overlap = not healed_targets or not opened_targets or healed_targets & opened_targets
            if matches and overlap:
                close(position, event.t_mono)
    for event, index in open_windows:
        windows.append(
            FaultWindow(
                op=event.op,
                targets=tuple(event.target),
                start=event.t_mono - origin,
                end=end,
                healed=False,
                inject_index=index,
                params=dict(event.params),
            )
        )
    return sorted(windows, key=lambda w: (w.start, w.op))


@dataclass(frozen=True)
class Stall:
    node: str
    start: float  # seconds since the run's first event: when the loop stopped handling events
    end: float  # when it woke (the loop_stall event's own time)
    stalled_ms: float
    index: int  # the loop_stall event's index in History.events (its table anchor)

    @property
    def description(self) -> str:
        return f"{self.node}: control loop stalled {self.stalled_ms:.0f} ms at {self.start:.2f} s"


def loop_stalls(history: History) -> list[Stall]:
    """Every ``loop_stall`` event as a span on its node's lane, in time order."""
    origin = run_origin(history)
    stalls = []
    for index, event in enumerate(history.events):
        if isinstance(event, LoopStall):
            end = event.t_mono - origin
            start = max(0.0, min(end, event.since_mono - origin))
            stalls.append(Stall(event.node, start, end, event.stalled_ms, index))
    return stalls


# A paused node's loop stalls from the SIGSTOP to a little after the SIGCONT (its first
# event after waking is the stall report): this much slack on each side of the window.
PAUSE_STALL_SLACK_S = 0.5


def stall_in_own_pause(stall: Stall, windows: list[FaultWindow]) -> bool:
    """Whether ``stall`` is its node's own pause fault (the harness froze the process),
    not an overloaded machine."""
    return any(
        window.op == "pause"
        and stall.node in window.targets
        and window.start - PAUSE_STALL_SLACK_S <= stall.start
        and stall.end <= window.end + PAUSE_STALL_SLACK_S
        for window in windows
    )


class _LaneState:
    """One node's flags during the sweep; ``state()`` applies the priority order."""

    def __init__(self) -> None:
        self.up = False
        self.paused = False
        self.rejoining = False
        self.starts = 0
        self.incarnation = 0  # the running process's incarnation at its start
        self.suspected_by: set[str] = set()
        self.dead_by: set[str] = set()

    def state(self) -> str:
        if not self.up:
            return "down"
        if self.paused:
            return "paused"
        if self.rejoining:
            return "rejoining"
        if self.dead_by:
            return "declared dead"
        if self.suspected_by:
            return "suspected"
        return "alive"


def node_lanes(history: History) -> dict[str, list[Segment]]:
    """Per node, the run cut into segments of one lane state each (see the module doc)."""
    origin = run_origin(history)
    end = run_duration_s(history)
    nodes = history.nodes()
    states = {node: _LaneState() for node in nodes}
    lanes: dict[str, list[Segment]] = {node: [] for node in nodes}
    current: dict[str, tuple[float, str]] = {}
    # A node that logs without a start (a history cut at the front) is up from its
    # first event, as the checkers assume: absent evidence of a start is not a death.
    first_seen: dict[str, float] = {}
    for event in history.events:
        if event.node != HARNESS:
            first_seen.setdefault(event.node, event.t_mono - origin)

    def settle(node: str, t: float) -> None:
        state = states[node].state()
        started, previous = current.get(node, (t, state))
        if node not in current:
            current[node] = (t, state)
        elif previous != state:
            if t > started:
                lanes[node].append(Segment(started, t, previous))
            current[node] = (t, state)

    for node in nodes:
        has_start = any(isinstance(e, Start) and e.node == node for e in history.events)
        if not has_start:
            states[node].up = True
            current[node] = (first_seen.get(node, 0.0), "alive")

    for event in history.events:
        t = event.t_mono - origin
        touched: list[str] = []
        if isinstance(event, Start) and event.node in states:
            lane = states[event.node]
            lane.up, lane.paused = True, False
            lane.starts += 1
            lane.rejoining = lane.starts > 1
            # A new process: the verdicts on the old one died with it.
            lane.incarnation = event.incarnation
            lane.suspected_by.clear()
            lane.dead_by.clear()
            touched.append(event.node)
            touched += _forget_verdicts_of(event.node, states)
        elif isinstance(event, Stop) and event.node in states:
            states[event.node].up = False
            touched.append(event.node)
            touched += _forget_verdicts_of(event.node, states)
        elif isinstance(event, RejoinBegin) and event.node in states:
            states[event.node].rejoining = True
            touched.append(event.node)
        elif isinstance(event, RejoinDone | Commit) and event.node in states:
            states[event.node].rejoining = False
            touched.append(event.node)
        elif isinstance(event, Refute) and event.node in states:
            states[event.node].suspected_by.clear()
            touched.append(event.node)
        elif isinstance(event, Suspect) and _verdict_on_current(event, states):
            states[event.peer].suspected_by.add(event.node)
            touched.append(event.peer)
        elif isinstance(event, DeclareDead) and _verdict_on_current(event, states):
            states[event.peer].dead_by.add(event.node)
            states[event.peer].suspected_by.discard(event.node)
            touched.append(event.peer)
        elif isinstance(event, DeclareAlive) and event.peer in states:
            states[event.peer].dead_by.discard(event.node)
            states[event.peer].suspected_by.discard(event.node)
            touched.append(event.peer)
        elif isinstance(event, Fault):
            for node in _targets(event, nodes):
                if node not in states:
                    continue
                if event.op in DOWN_OPS and event.phase == "inject":
                    states[node].up = False
                    touched += _forget_verdicts_of(node, states)
                elif event.op == "pause":
                    states[node].paused = event.phase == "inject"
                elif event.op == "resume":
                    states[node].paused = False
                else:
                    continue
                touched.append(node)
        for node in touched:
            settle(node, t)
    for node, (started, state) in current.items():
        if end > started:
            lanes[node].append(Segment(started, end, state))
    return lanes


def _forget_verdicts_of(node: str, states: dict[str, _LaneState]) -> list[str]:
    """A process that ends takes its detector's verdicts with it: ``node``'s suspicions
    and declarations leave every lane.  Returns the lanes that changed."""
    changed = []
    for peer, lane in states.items():
        if node in lane.suspected_by or node in lane.dead_by:
            lane.suspected_by.discard(node)
            lane.dead_by.discard(node)
            changed.append(peer)
    return changed


def _verdict_on_current(event: Suspect | DeclareDead, states: dict[str, _LaneState]) -> bool:
    """Whether a suspicion or declaration is a peer's verdict on the process now
    running: not the node's own (its "declared dead by n3" before it restarts), not
    one naming an incarnation older than the process started with."""
    lane = states.get(event.peer)
    return (
        lane is not None and event.node != event.peer and event.peer_incarnation >= lane.incarnation
    )


@dataclass(frozen=True)
class LossPoint:
    step: int
    loss: float  # mean over the nodes that logged a finite loss for the step
    t: float  # seconds since the run's first event: the step's first train_step


def loss_curve(history: History) -> list[LossPoint]:
    """Mean training loss per step (non-finite losses, a Byzantine node's, are skipped)."""
    origin = run_origin(history)
    sums: dict[int, tuple[float, int, float]] = {}
    for event in history.of_kind(TrainStep):
        if event.step < 0 or event.loss is None or not math.isfinite(event.loss):
            continue
        total, count, first_t = sums.get(event.step, (0.0, 0, event.t_mono - origin))
        sums[event.step] = (total + event.loss, count + 1, first_t)
    return [
        LossPoint(step=step, loss=total / count, t=first_t)
        for step, (total, count, first_t) in sorted(sums.items())
    ]


def step_at(history: History, t: float) -> int:
    """The highest step any node committed up to ``t`` (seconds since the origin)."""
    origin = run_origin(history)
    top = -1
    for event in history.of_kind(Commit):
        if event.t_mono - origin > t:
            break
        top = max(top, event.step)
    return top


def commit_times(history: History) -> list[float]:
    """Seconds since the origin at which the run's highest committed step rose."""
    origin = run_origin(history)
    top = -1
    times: list[float] = []
    for event in history.of_kind(Commit):
        if event.step > top:
            top = event.step
            times.append(event.t_mono - origin)
    return times


def commit_rate(history: History, bin_s: float | None = None) -> tuple[float, list[float]]:
    """``(bin width in s, new committed steps per second in each bin)`` over the run."""
    duration = run_duration_s(history)
    if bin_s is None:
        bin_s = max(0.5, duration / MAX_COMMIT_RATE_BINS)
    bins = [0] * max(1, math.ceil(duration / bin_s))
    for t in commit_times(history):
        bins[min(int(t / bin_s), len(bins) - 1)] += 1
    return bin_s, [count / bin_s for count in bins]
