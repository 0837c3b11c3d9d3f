"""S1, L1, L2, L3 on the neutral history: the checkers for any system under test.

They read only neutral kinds (``verify/history.py``): ``step_committed`` (or the
reference node's ``commit``), ``membership``, and the harness's ``fault`` and
``run_mark`` events, so they judge torchft, TorchElastic or a user's trainer alike.

- S1 agreement: the nodes that committed step *s* in one quorum (group) hold one
  parameter fingerprint.  Steps are keyed by ``(quorum_id, step)``: a system that
  rolls back to a checkpoint re-commits a step number in a new group, and that
  re-commit is a different step of the history (the rollback itself is counted and
  reported, not judged: losing work to a checkpoint restart is those systems' design).
- L1 detection: after node *X* crashes, the next group that a live node trains in
  leaves *X* out, within ``D``: the first ``membership`` excluding *X* or the first
  ``step_committed`` whose participants exclude *X*.  A step committed with *X* among
  its participants while *X* was down is a violation whatever the delay (except the
  one step in flight at the crash).  A crash
  healed before ``D`` with no group formed decides nothing.
- L2 progress: while a majority of the nodes is left alone by the harness (not
  crashed, paused or otherwise faulted itself, and connected to each other: a
  partition leaves a connected majority side), steps commit with gaps of at most
  ``R`` (:func:`premise_stretches`), and none of those nodes dies on its own.
  That is DESIGN's "once a majority is alive and connected, steps commit again
  within R", with "alive" read as *left alone by the harness*: a survivor that
  stalls for the length of torchft's collective timeout after one replica group's
  kill, or that exits with an error (``node_error``; or the harness found it not
  running at the quiesce without having crashed it), breaks L2.  A survivor's death
  is judged here rather than as a property of its own because it is how a system
  loses the majority L2's premise counts on: the premise is about what the harness
  did, so a system cannot make L2 vacuous by killing its own nodes.  Stretches with
  link faults other than a partition (latency, black holes, …) are not judged.
- L3 rejoin: a restarted node commits a step with the same fingerprint as another
  node's commit of that step (same quorum) within ``J`` of its restart.

Each names the kinds it ``NEEDS``; the caller answers ``unknown`` with the reason
when the run's system does not write them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from swarmshake.verify.checkers.model import (
    Bounds,
    EventRef,
    Findings,
    PropertyResult,
    tail_undecided,
)
from swarmshake.verify.history import (
    HARNESS,
    Fault,
    History,
    NodeError,
    RunMark,
    Start,
    membership_changes,
    step_commits,
)

NEEDS: dict[str, frozenset[str]] = {
    "S1": frozenset({"step_committed"}),
    "L1": frozenset({"step_committed", "fault"}),
    "L2": frozenset({"step_committed", "fault"}),
    "L3": frozenset({"step_committed", "fault"}),
}


@dataclass(frozen=True)
class Down:
    """Node ``node`` crashed at ``start`` (history index ``index``) and ran again at ``end``."""

    node: str
    start: float
    end: float  # inf: never restarted
    index: int


def crash_windows(history: History) -> list[Down]:
    opened: dict[str, tuple[float, int]] = {}
    windows: list[Down] = []
    for index, event in enumerate(history.events):
        if not isinstance(event, Fault) or event.node != HARNESS:
            continue
        for node in event.target:
            if event.op == "crash" and event.phase == "inject":
                opened.setdefault(node, (event.t_mono, index))
            elif (event.op == "crash" and event.phase == "heal") or (
                event.op == "restart" and event.phase == "inject"
            ):
                if node in opened:
                    start, at = opened.pop(node)
                    windows.append(Down(node, start, event.t_mono, at))
    for node, (start, at) in opened.items():
        windows.append(Down(node, start, float("inf"), at))
    return sorted(windows, key=lambda d: d.start)


def restarts(history: History) -> list[tuple[str, float, int]]:
    """(node, time, index) of every restart the harness made."""
    return [(d.node, d.end, d.index) for d in crash_windows(history) if d.end != float("inf")]


def end_time(history: History) -> float:
    return history.events[-1].t_mono if history.events else 0.0


def check_s1(history: History) -> PropertyResult:
    findings = Findings("S1")
    first: dict[tuple[str, int], tuple[int, str]] = {}
    reported: set[tuple[str, int]] = set()
    best_step: dict[str, int] = {}
    rollbacks = 0
    for view in step_commits(history):
        if view.step < 0:
            continue
        findings.checked += 1
        if view.step < best_step.get(view.node, -1):
            rollbacks += 1
        best_step[view.node] = max(best_step.get(view.node, -1), view.step)
        key = (view.quorum_id, view.step)
        if key not in first:
            first[key] = (view.index, view.param_fp)
            continue
        index, fingerprint = first[key]
        if view.param_fp != fingerprint and key not in reported:
            reported.add(key)
            other = history.events[index]
            findings.invalid(
                f"step {view.step} (quorum {view.quorum_id or '-'}): {other.node} holds "
                f"param_fp {fingerprint[:12]} but {view.node} holds {view.param_fp[:12]}",
                EventRef.of(index, other, f"param_fp {fingerprint}"),
                EventRef.of(view.index, view.event, f"param_fp {view.param_fp}"),
            )
    if not first:
        findings.unknown("no step was committed: nothing to compare")
    note = f"; {rollbacks} re-commits after a rollback to a checkpoint" if rollbacks else ""
    return findings.result(
        f"{len(first)} committed (quorum, step) pairs, one fingerprint each{note}"
    )


def check_l1(history: History, bounds: Bounds) -> PropertyResult:
    findings = Findings("L1")
    commits = list(step_commits(history))
    changes = list(membership_changes(history))
    judged = 0
    for down in crash_windows(history):
        crashed = history.events[down.index]
        # A step committed with the dead node among its participants (by another node).
        # The step in flight at the crash may still complete at the others (its data
        # exchange may have finished before the kill), so only later steps count.
        last_own = max(
            (v.step for v in commits if v.node == down.node and v.t_mono <= down.start),
            default=-1,
        )
        for view in commits:
            if (
                view.node != down.node
                and down.start < view.t_mono < down.end
                and down.node in view.participants
                and view.step > last_own + 1
            ):
                findings.invalid(
                    f"{view.node} committed step {view.step} with {down.node} among its "
                    f"participants {down.node} was down ({view.t_mono - down.start:.2f}s after "
                    "its crash)",
                    EventRef.of(down.index, crashed, f"crash {down.node}"),
                    EventRef.of(view.index, view.event, f"participants {list(view.participants)}"),
                )
                break
        left_out = [
            (m.t_mono, m.index, m.event)
            for m in changes
            if m.node != down.node and m.t_mono > down.start and down.node not in m.members
        ] + [
            (v.t_mono, v.index, v.event)
            for v in commits
            if v.node != down.node and v.t_mono > down.start and down.node not in v.participants
        ]
        first = min(left_out, key=lambda item: item[0], default=None)
        if first is not None and first[0] <= down.end:
            judged += 1
            findings.checked += 1
            delay = first[0] - down.start
            if delay > bounds.detection_s:
                findings.invalid(
                    f"{down.node} crashed and the next group without it formed after "
                    f"{delay:.2f}s > D = {bounds.detection_s}s",
                    EventRef.of(down.index, crashed, f"crash {down.node}"),
                    EventRef.of(first[1], first[2], f"{delay:.3f}s after the crash"),
                )
            continue
        window = min(down.end, end_time(history)) - down.start
        if window > bounds.detection_s:
            judged += 1
            findings.checked += 1
            findings.invalid(
                f"{down.node} was down {window:.2f}s (> D = {bounds.detection_s}s) and no live "
                "node formed a group without it",
                EventRef.of(down.index, crashed, f"crash {down.node}"),
            )
    if judged == 0:
        findings.unknown("no crash lasted long enough (D) or was followed by a new group")
    return findings.result(f"{judged} crash(es): the next group left the dead node out within D")


# Harness ops that fault the nodes they target and nothing else (a minority of them
# leaves the others a majority); ``restart`` and ``resume`` only end such a fault.
# Any op not named here or as a partition (a link fault, broker loss, churn) makes the
# stretch it is active in unjudged: whether the others are "connected" is not known.
NODE_FAULT_OPS = frozenset(
    {"crash", "pause", "cpu_throttle", "disk_full", "checkpoint_corrupt", "clock_skew",
     "byzantine", "hold_bulk"}
)  # fmt: skip
ENDS_NODE_FAULT = {"restart": "crash", "resume": "pause"}


@dataclass(frozen=True)
class Stretch:
    """``[start, end)`` of the judging window in which the nodes ``left_alone`` (a
    connected majority) were untouched by the harness; ``opened_by``: the history
    index of the harness event that began it (-1: the judging window's start)."""

    start: float
    end: float
    left_alone: tuple[str, ...]
    opened_by: int


@dataclass(frozen=True)
class SelfDeath:
    """``node`` died without the harness crashing it, at ``t`` (history index
    ``index``: its ``node_error``, or its last event before the harness found it not
    running); ``how`` says which."""

    node: str
    t: float
    index: int
    how: str


class _HarnessState:
    """What the harness has done to each node, replayed from its ``fault`` events."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.faulted: dict[str, set[str]] = {n: set() for n in nodes}
        self.cuts: set[frozenset[str]] = set()
        self.other: dict[str, int] = defaultdict(int)  # unjudged ops still active

    def apply(self, event: Fault) -> None:
        if event.op == "heal":  # the nemesis's heal-all: links restored, every cut gone
            self.cuts.clear()
            self.other.clear()
        elif event.op in NODE_FAULT_OPS:
            for node in event.target:
                marks = self.faulted.setdefault(node, set())
                if event.phase == "inject":
                    marks.add(event.op)
                else:
                    marks.discard(event.op)
        elif event.op in ENDS_NODE_FAULT:
            for node in event.target:
                self.faulted.setdefault(node, set()).discard(ENDS_NODE_FAULT[event.op])
        elif event.op == "partition" and event.phase == "heal":
            # The harness heals every partition at once (scope "partition"), and both
            # backends log that heal without the cuts: every cut link is restored, and
            # a partition whose cuts were not logged (unjudged meanwhile) ends too.
            self.cuts.clear()
            self.other.pop("partition", None)
        elif event.op == "partition" and isinstance(event.params.get("cuts"), list):
            self.cuts |= {frozenset(pair) for pair in event.params["cuts"]}
        elif event.phase == "inject":
            self.other[event.op] += 1
        else:
            self.other[event.op] = max(0, self.other[event.op] - 1)

    def quiesce(self) -> None:
        """The nemesis healed everything and restarted every node that was not running."""
        for marks in self.faulted.values():
            marks.clear()
        self.cuts.clear()
        self.other.clear()

    def left_alone_majority(self) -> tuple[str, ...] | None:
        """The largest connected group of nodes the harness left alone, if a majority."""
        if any(self.other.values()):
            return None
        unseen = {n for n in self.nodes if not self.faulted.get(n)}
        best: list[str] = []
        while unseen:  # connected components over the links no partition cut
            frontier = [min(unseen)]
            unseen.discard(frontier[0])
            group: list[str] = []
            while frontier:
                node = frontier.pop()
                group.append(node)
                linked = {o for o in unseen if frozenset((node, o)) not in self.cuts}
                unseen -= linked
                frontier.extend(sorted(linked))
            best = max(best, sorted(group), key=len)
        return tuple(best) if 2 * len(best) > len(self.nodes) else None


def _judging_window(history: History) -> tuple[float, float]:
    """From steady state (else the first commit) to the run's end mark (else its last
    event): before steady state the system is still starting, after ``run_end`` the
    harness takes the cluster down."""
    start = end = None
    for event in history.events:
        if isinstance(event, RunMark) and event.node == HARNESS:
            if event.mark == "steady_state" and start is None:
                start = event.t_mono
            elif event.mark == "run_end":
                end = event.t_mono
    if start is None:
        start = next((v.t_mono for v in step_commits(history)), 0.0)
    return start, end if end is not None else end_time(history)


def premise_stretches(history: History) -> list[Stretch]:
    """The pieces of the judging window in which L2's premise held, one per group."""
    state = _HarnessState(history.nodes())
    start, end = _judging_window(history)
    pieces: list[tuple[float, float, tuple[str, ...] | None, int]] = []
    since, group, opened_by = float("-inf"), state.left_alone_majority(), -1
    for index, event in enumerate(history.events):
        if event.node != HARNESS:
            continue
        if isinstance(event, Fault):
            state.apply(event)
        elif isinstance(event, RunMark) and event.mark == "quiesce":
            state.quiesce()
        else:
            continue
        pieces.append((since, event.t_mono, group, opened_by))
        since, group, opened_by = event.t_mono, state.left_alone_majority(), index
    pieces.append((since, float("inf"), group, opened_by))
    return [
        Stretch(max(a, start), min(b, end), g, at if a >= start else -1)
        for a, b, g, at in pieces
        if g is not None and min(b, end) > max(a, start)
    ]


def _joined(stretches: list[Stretch]) -> list[tuple[float, float, int]]:
    """Stretches that touch joined into ``(start, end, opened_by)`` spans: a minority
    crashed while the premise held starts no new span (its recovery counts)."""
    spans: list[tuple[float, float, int]] = []
    for s in stretches:
        if spans and spans[-1][1] >= s.start:
            spans[-1] = (spans[-1][0], s.end, spans[-1][2])
        else:
            spans.append((s.start, s.end, s.opened_by))
    return spans


def self_deaths(history: History) -> list[SelfDeath]:
    """Nodes that died without the harness crashing them.

    Evidence: the node's ``node_error`` event, or a quiesce restart (a ``crash``
    heal with ``quiesce``) of a node whose crash the harness never injected, in which
    case the node died after its last event before that restart."""
    deaths: list[SelfDeath] = []
    crashed: set[str] = set()
    last_seen: dict[str, int] = {}  # node -> history index of its latest event
    reported: set[str] = set()  # nodes whose death since their last start is recorded
    for index, event in enumerate(history.events):
        if event.node != HARNESS:
            last_seen[event.node] = index
            if isinstance(event, NodeError):
                deaths.append(SelfDeath(event.node, event.t_mono, index, event.error))
                reported.add(event.node)
            elif isinstance(event, Start):
                reported.discard(event.node)
            continue
        if not isinstance(event, Fault):
            continue
        for node in event.target:
            if event.op == "crash" and event.phase == "inject":
                crashed.add(node)
            elif (event.op == "crash" and event.phase == "heal") or event.op == "restart":
                harness_crashed = node in crashed
                crashed.discard(node)
                if (
                    event.params.get("quiesce")
                    and not harness_crashed
                    and node not in reported
                    and node in last_seen
                ):
                    at = last_seen[node]
                    how = "found not running at the quiesce"
                    deaths.append(SelfDeath(node, history.events[at].t_mono, at, how))
    return deaths


def check_l2(history: History, bounds: Bounds) -> PropertyResult:
    findings = Findings("L2")
    commits = sorted(step_commits(history), key=lambda v: v.t_mono)
    if not commits:
        findings.unknown("no step was committed at all")
        return findings.result("")
    stretches = premise_stretches(history)
    if not stretches:
        findings.unknown("no stretch after steady state with a majority left alone by the harness")
        return findings.result("")

    def alone_during(a: float, b: float) -> str:
        """The nodes left alone through all of ``[a, b]`` (a fault's survivors)."""
        groups = [set(s.left_alone) for s in stretches if s.start < b and s.end > a]
        return ", ".join(sorted(set.intersection(*groups))) if groups else "a majority"

    longest = 0.0
    joined = _joined(stretches)
    for span, (start, end, opened_by) in enumerate(joined):
        inside = [v for v in commits if start <= v.t_mono <= end]
        findings.checked += len(inside)
        before_t, before_index = start, opened_by
        worst: tuple[float, float, int, int] | None = None  # gap, its start, before, after
        for position, view in enumerate(inside):
            gap = view.t_mono - before_t
            if worst is None or gap > worst[0]:
                worst = (gap, before_t, before_index, position)
            before_t, before_index = view.t_mono, view.index
        tail = end - before_t
        gaps_before = longest = max(longest, worst[0] if worst else 0.0)
        longest = max(longest, tail)
        if worst is not None and worst[0] > bounds.recovery_s:
            gap, since, before, position = worst
            after = inside[position]
            refs = [EventRef.of(after.index, after.event, f"{gap:.3f}s after the one before")]
            if before >= 0:
                refs.insert(0, EventRef.of(before, history.events[before], "last before the gap"))
            findings.invalid(
                f"no step committed for {gap:.2f}s (> R = {bounds.recovery_s}s) while "
                f"{alone_during(since, after.t_mono)} were left alone by the harness"
                f"{_fault_before(history, after.t_mono)}",
                *refs,
            )
        elif tail > bounds.recovery_s:
            refs = [EventRef.of(before_index, history.events[before_index], "last commit")]
            findings.invalid(
                f"no step committed in the last {tail:.2f}s (> R = {bounds.recovery_s}s) of a "
                f"stretch in which {alone_during(before_t, end)} were left alone by the harness"
                f"{_fault_before(history, end)}",
                *(refs if before_index >= 0 else []),
            )
        elif (
            span == len(joined) - 1
            and inside
            and tail_undecided(tail, gaps_before, bounds.recovery_s)
        ):
            findings.unknown(
                f"the history ends {tail:.2f}s after the last commit with "
                f"{alone_during(before_t, end)} left alone by the harness: longer than any "
                f"gap before it ({gaps_before:.2f}s), shorter than R = {bounds.recovery_s}s, "
                "so a stall is not decided (a quiesce of at least R decides it)",
                EventRef.of(before_index, history.events[before_index], "last commit"),
            )
    for death in self_deaths(history):
        if not any(s.start <= death.t <= s.end and death.node in s.left_alone for s in stretches):
            continue  # it was faulted itself, or outside every judged stretch
        findings.invalid(
            f"{death.node} died on its own ({death.how}) while the harness had left it alone"
            f"{_fault_before(history, death.t)}",
            EventRef.of(death.index, history.events[death.index], death.how[:200]),
        )
    judged_s = sum(s.end - s.start for s in stretches)
    return findings.result(
        f"steps committed at most {longest:.2f}s apart over {judged_s:.1f}s in which a "
        "majority was left alone by the harness; no node died on its own"
    )


def _fault_before(history: History, t: float) -> str:
    """``; after crash n3 at t_mono …``: the harness's latest inject before ``t``."""
    last = None
    for event in history.events:
        if event.t_mono > t:
            break
        if isinstance(event, Fault) and event.node == HARNESS and event.phase == "inject":
            last = event
    if last is None:
        return ""
    return f"; after {last.op} {','.join(last.target)} at t_mono {last.t_mono:.2f}"


def check_l3(history: History, bounds: Bounds) -> PropertyResult:
    findings = Findings("L3")
    by_step: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    commits = list(step_commits(history))
    for view in commits:
        by_step[(view.quorum_id, view.step)][view.node] = view.param_fp
    judged = 0
    end = end_time(history)
    for node, restarted, index in restarts(history):
        matched = next(
            (
                v
                for v in commits
                if v.node == node
                and v.t_mono >= restarted
                and any(
                    other != node and fp == v.param_fp
                    for other, fp in by_step[(v.quorum_id, v.step)].items()
                )
            ),
            None,
        )
        event = history.events[index]
        if matched is not None:
            judged += 1
            findings.checked += 1
            delay = matched.t_mono - restarted
            if delay > bounds.rejoin_s:
                findings.invalid(
                    f"{node} reached its peers' fingerprint {delay:.2f}s after its restart "
                    f"(> J = {bounds.rejoin_s}s)",
                    EventRef.of(index, event, f"restart {node}"),
                    EventRef.of(matched.index, matched.event, f"{delay:.3f}s after the restart"),
                )
        elif end - restarted > bounds.rejoin_s:
            judged += 1
            findings.checked += 1
            findings.invalid(
                f"{node} restarted and never committed a step its peers agree on "
                f"({end - restarted:.2f}s observed, J = {bounds.rejoin_s}s)",
                EventRef.of(index, event, f"restart {node}"),
            )
    if judged == 0:
        findings.unknown("no restart was observed for J or longer")
    return findings.result(f"{judged} restart(s) caught up within J")
