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
- L2 progress: once every fault is healed, steps commit again within ``R``.
- L3 rejoin: a restarted node commits a step with the same fingerprint as another
  node's commit of that step (same quorum) within ``J`` of its restart.

Each names the kinds it ``NEEDS``; the caller answers ``unknown`` with the reason
when the run's system does not write them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from swarmshake.verify.checkers.model import Bounds, EventRef, Findings, PropertyResult
from swarmshake.verify.history import (
    HARNESS,
    Fault,
    History,
    RunMark,
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


def last_heal(history: History) -> tuple[float, int] | None:
    """When the last fault was healed (the quiesce), with its history index."""
    found: tuple[float, int] | None = None
    for index, event in enumerate(history.events):
        if isinstance(event, Fault) and event.phase == "heal":
            found = (event.t_mono, index)
        elif isinstance(event, RunMark) and event.mark == "quiesce":
            found = (event.t_mono, index)
    return found


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


def check_l2(history: History, bounds: Bounds) -> PropertyResult:
    findings = Findings("L2")
    healed = last_heal(history)
    commits = list(step_commits(history))
    if not commits:
        findings.unknown("no step was committed at all")
        return findings.result("")
    since = healed[0] if healed else commits[0].t_mono
    after = [v for v in commits if v.t_mono >= since]
    findings.checked = len(after)
    if after:
        delay = after[0].t_mono - since
        if delay > bounds.recovery_s:
            findings.invalid(
                f"steps committed again {delay:.2f}s after the last heal (> R = {bounds.recovery_s}s)",
                EventRef.of(after[0].index, after[0].event, f"{delay:.3f}s after the heal"),
            )
        return findings.result(f"steps committed again {delay:.2f}s after the last heal")
    observed = end_time(history) - since
    if observed > bounds.recovery_s:
        ref = [EventRef.of(healed[1], history.events[healed[1]], "last heal")] if healed else []
        findings.invalid(
            f"no step committed in the {observed:.2f}s after the last heal (R = {bounds.recovery_s}s)",
            *ref,
        )
    else:
        findings.unknown(f"the run ended {observed:.2f}s after the last heal, before R elapsed")
    return findings.result("")


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
