"""S4 detector accuracy and L1 completeness, judged against the harness's ground truth.

- S4 (DESIGN): every declaration is judged on its own evidence, never by another's.
  A ``declare_dead`` by node *A* of peer *P* at *t* is

  * correct when *P*'s process was down, the declaration names an earlier process of
    *P* (``peer_incarnation`` below the incarnation the running process started
    with), *P* was paused or stalled past Δ_proc within the refutation window before
    *t* (two envelope delays plus Δ_proc: a wrongly suspected node that wakes has that
    long to refute), *P* had already declared itself dead (it stops to rejoin), or
    *A*'s own link to *P* was cut by a partition or black hole within ``D`` before
    *t* (cut windows last until ``D`` after the heal): across a cut, silence is all
    *A* can see, and only the nodes on the other side may declare *P* dead;
  * ``unknown`` when *A*'s link to *P*, or *A* or *P* as a whole, was outside the
    declared envelope within ``D`` before *t* (measured: latency above the envelope,
    bandwidth or loss faults, CPU throttling, clock skew, and the windows of faults
    whose links the history does not record), or *A* itself was paused or stalled
    within the refutation window (its verdict rests on silence it could not observe);
  * a **false positive** otherwise: *A* could hear a live *P* inside the envelope and
    declared it dead anyway, whatever verdict it relays ("confirmed by n1": a verdict
    formed across a cut dies with the cut).

  A *forced restart* (a node's own ``declare_dead`` of itself, reason "declared dead
  by X") is evidence too: the verdict that caused it, X's latest declaration of the
  node at that incarnation, is judged like any other and may not plead that it named
  an earlier incarnation (the node accepted it as current).  When X's declaration is
  missing from the history, the restart itself is judged as X's verdict at that time.
- L1: after each crash of a member, every member alive and inside the envelope for
  the whole ``[crash, crash + D]`` logs ``declare_dead`` of the crashed node within
  ``D``, unless the crashed node came back inside that window.  Members are the
  voters and learners of the configuration in force at the crash (the newest one
  some node had logged by then; without configuration changes, every node): a node
  outside it watches no one and no one watches it.  A miss during an envelope exit, or
  a window cut by the end of the run, is ``unknown``.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from swarmshake.reference_node.protocol.history import ConfigChange, DeclareDead, History
from swarmshake.verify.checkers.model import Bounds, EventRef, Findings, PropertyResult
from swarmshake.verify.checkers.safety import Membership
from swarmshake.verify.checkers.timeline import Timeline

# "declared dead by n3" (runtime) or "declared dead by n3: rejoining" (simulator).
_DECLARED_BY = re.compile(r"declared dead by\s+([\w.-]+)")
_JUST_AFTER_S = 1e-12  # closes a window at the event itself: [t - w, t] inclusive
# "Within D" is inclusive, and times are sums of float delays taken along different
# paths: a declaration 1 s of start-up grace plus a 1 s suspicion timeout after the
# crash (D = 2 s) came out 4e-15 s late and was judged a miss (test-long's explore,
# 3 nodes, seed 7).  A nanosecond is far below any clock the nodes or the simulator use.
_BOUND_SLACK_S = 1e-9

JudgementStatus = Literal["ok", "invalid", "unknown"]


@dataclass(frozen=True)
class Judgement:
    """One S4 judgement: a declaration (or a forced restart whose verdict is missing
    from the history) at history ``index``, with the forced restarts it caused."""

    index: int
    status: JudgementStatus
    explanation: str
    forced_restarts: tuple[int, ...] = ()  # history indexes of the restarts it caused


def declared_by(reason: str) -> str | None:
    """Who declared a node dead, as its own ``declare_dead`` of itself names it."""
    match = _DECLARED_BY.search(reason or "")
    return match.group(1) if match else None


def judge_declarations(history: History, timeline: Timeline, bounds: Bounds) -> list[Judgement]:
    """Every declaration of a peer and every forced restart, each judged on its own
    evidence (see the module doc), in history order."""
    declarations: list[tuple[int, DeclareDead]] = []  # of a peer
    restarts: list[tuple[int, DeclareDead]] = []  # a node's own, peer == node
    by_pair: dict[tuple[str, str], list[tuple[int, DeclareDead]]] = defaultdict(list)
    for index, event in history.indexed(DeclareDead):
        if event.peer == event.node:
            restarts.append((index, event))
        else:
            declarations.append((index, event))
            by_pair[(event.node, event.peer)].append((index, event))
    # A forced restart points at the verdict that caused it: the declarer's latest
    # declaration of the node at the incarnation the restart names.
    caused: dict[int, list[int]] = defaultdict(list)
    orphans: list[tuple[int, DeclareDead, str | None]] = []
    for index, event in restarts:
        origin = declared_by(event.reason)
        verdicts = [
            j
            for j, verdict in by_pair.get((origin or "", event.node), [])
            if j < index and verdict.peer_incarnation == event.peer_incarnation
        ]
        if verdicts:
            caused[verdicts[-1]].append(index)
        else:
            orphans.append((index, event, origin))
    judgements: list[Judgement] = []
    for index, event in declarations:
        forced = tuple(caused.get(index, ()))
        relayed = f", relaying {event.reason!r}" if event.reason else ""
        status, explanation = _judge(
            event.node, event.peer, event.peer_incarnation, event.t_mono,
            timeline, bounds, forced=bool(forced), context=relayed,
        )  # fmt: skip
        if forced and status != "ok":
            explanation += "; it forced " + ", ".join(
                f"{history.events[k].node}'s restart at t={history.events[k].t_mono:.3f}"
                for k in forced
            )
        judgements.append(Judgement(index, status, explanation, forced))
    for index, event, origin in orphans:
        if origin is None:
            explanation = (
                f"{event.node} restarted as declared dead at t={event.t_mono:.3f}, but its "
                f"reason {event.reason!r} names no declarer to judge"
            )
            judgements.append(Judgement(index, "unknown", explanation, (index,)))
            continue
        status, explanation = _judge(
            origin, event.node, event.peer_incarnation, event.t_mono, timeline, bounds,
            forced=True,
            context=f" (a forced restart of {event.node}; {origin}'s declaration is not in "
            "the history, so it is judged at the restart)",
        )  # fmt: skip
        judgements.append(Judgement(index, status, explanation, (index,)))
    return sorted(judgements, key=lambda j: j.index)


def false_positive_refs(
    history: History, timeline: Timeline, bounds: Bounds
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(false_positives, undecidable)`` as ``(history index, explanation)`` lists: the
    S4 judgement (:func:`judge_declarations`) that reports count false positives by."""
    judgements = judge_declarations(history, timeline, bounds)
    return (
        [(j.index, j.explanation) for j in judgements if j.status == "invalid"],
        [(j.index, j.explanation) for j in judgements if j.status == "unknown"],
    )


def refute_window_s(bounds: Bounds) -> float:
    """How long after waking a wrongly suspected node needs to refute: a notice and
    its answer in the envelope, plus one Δ_proc to handle it."""
    return 2 * bounds.latency_ms_max / 1000 + bounds.proc_delay_ms / 1000


def _judge(  # noqa: PLR0911 - one return per rule of the module doc, in its order
    declarer: str,
    peer_name: str,
    incarnation: int,
    t: float,
    timeline: Timeline,
    bounds: Bounds,
    *,
    forced: bool,
    context: str = "",
) -> tuple[JudgementStatus, str]:
    """One verdict by ``declarer`` on ``peer_name`` at ``t``; ``forced``: it made the
    peer restart, so naming an earlier incarnation excuses nothing; ``context`` is
    added to the explanation (the verdict relayed)."""
    what = f"{declarer} declared {peer_name} (incarnation {incarnation}) dead at t={t:.3f}"
    peer = timeline.nodes.get(peer_name)
    if peer is None:
        return "unknown", f"{what}: the history holds no event of {peer_name}"
    current = peer.process_at(t)
    if current is None:
        return "ok", ""  # the peer's process is down: a correct declaration
    process, start_incarnation = current
    if incarnation < start_incarnation and not forced:
        return "ok", ""  # names an earlier, dead process of the peer
    refute_low = t - refute_window_s(bounds)
    if peer.paused_during(refute_low, t + _JUST_AFTER_S):
        return "ok", ""  # paused, or woke too recently to have refuted
    if peer.stalled_during(refute_low, t + _JUST_AFTER_S):
        return "ok", ""  # handled no events for over Δ_proc: not alive (DESIGN)
    if peer.left_during(process.start, t) is not None:
        return "ok", ""  # it had declared itself dead and stopped to rejoin
    low = t - bounds.detection_s
    if timeline.cut_between(declarer, peer_name, low, t):
        return "ok", ""  # the declarer is on the other side of a cut: silence is all it had
    explanation = (
        f"{what}{context}, while {peer_name} was alive (up since t={process.start:.3f}) "
        f"and its link to {declarer} was not cut"
    )
    exit_window = timeline.link_exit(declarer, peer_name, low, t)
    if exit_window is not None:
        return "unknown", f"{explanation} (outside the declared envelope: {exit_window.describe()})"
    judge = timeline.nodes.get(declarer)
    if judge is None:
        return "unknown", f"{explanation} (the history holds no event of {declarer})"
    if judge.paused_during(refute_low, t + _JUST_AFTER_S) or judge.stalled_during(
        refute_low, t + _JUST_AFTER_S
    ):
        # A judge that was frozen missed Δ_proc itself: its verdicts rest on silence it
        # could not observe; DESIGN's envelope assumes every node handles events.
        return "unknown", f"{explanation} ({declarer} was paused or stalled)"
    return "invalid", explanation


def check_s4(history: History, timeline: Timeline, bounds: Bounds) -> PropertyResult:
    findings = Findings("S4")
    judgements = judge_declarations(history, timeline, bounds)
    findings.checked = len(judgements)
    for judgement in judgements:
        event = history.events[judgement.index]
        ref = EventRef.of(judgement.index, event)
        if judgement.status == "invalid":
            own = judgement.index not in judgement.forced_restarts
            refs = [
                EventRef.of(judgement.index, event, "false positive" if own else "forced restart")
            ]
            refs += [
                EventRef.of(k, history.events[k], "forced restart")
                for k in judgement.forced_restarts
                if k != judgement.index
            ]
            findings.invalid(judgement.explanation, *refs)
        elif judgement.status == "unknown":
            findings.unknown(judgement.explanation, ref)
    declarations = sum(1 for j in judgements if j.index not in j.forced_restarts)
    restarts = sum(1 for e in history.of_kind(DeclareDead) if e.peer == e.node)
    return findings.result(
        f"{declarations} declarations and {restarts} forced restarts, none of a live node"
    )


def detection_delays_s(
    history: History, timeline: Timeline, bounds: Bounds
) -> tuple[list[float], list[tuple[str, str, float, int, str]]]:
    """Per (crash, observer): seconds until the observer declared the crashed node dead.

    Returns ``(delays, misses)``; a miss is ``(observer, crashed, t_crash, crash index,
    "late"|"unknown"|"removed")``.  Observers are the nodes alive for the whole
    ``[crash, crash + D]``; crashes whose node came back within ``D`` are skipped.

    ``"removed"`` is no violation: the observer applied, within ``D`` of the crash and
    before any verdict of its own, a committed configuration without the crashed node
    (a leaver that crashed while its removal was being committed).  From then on the
    node is no member there: nobody watches it, and the committed step says more than
    a verdict would (the neutral checker's L1 counts such a configuration as the
    group that leaves the dead node out).  Its evidence is the observer's own
    ``config_change`` event; not a detection delay.
    """
    declared: dict[tuple[str, str], list[float]] = defaultdict(list)
    for event in history.of_kind(DeclareDead):
        declared[(event.node, event.peer)].append(event.t_mono)
    # (observer, peer) -> when the observer applied a configuration without peer.
    removed_at: dict[tuple[str, str], list[float]] = defaultdict(list)
    for event in history.of_kind(ConfigChange):
        if event.change == "remove":
            removed_at[(event.node, event.peer)].append(event.t_mono)
    # Detection is among members: a node outside the configuration in force (removed
    # by a committed step, or not yet added) watches no one and no one watches it.
    # Without configuration changes every node is a member, as before.
    membership = Membership(history) if history.of_kind(ConfigChange) else None
    bound = bounds.detection_s
    delays: list[float] = []
    misses: list[tuple[str, str, float, int, str]] = []
    for crashed, t_crash, crash_index in timeline.crashes:
        crashed_timeline = timeline.nodes[crashed]
        # The process that died: the last one whose start precedes the crash in the
        # history.  By history order, not time: a restart of a running node kills it and
        # starts the next process at the same instant (explore found a false L1 miss
        # when the new process was taken for the one that died).
        starts = [p.start for p in crashed_timeline.processes]
        position = sum(1 for p in crashed_timeline.processes if p.start_index < crash_index) - 1
        process_start = starts[position] if position >= 0 else float("-inf")
        came_back = position + 1 < len(starts) and starts[position + 1] <= t_crash + bound
        if came_back:
            continue
        run_cut = t_crash + bound > timeline.end_t
        members = membership.members_at_time(t_crash) if membership is not None else None
        if members is not None and crashed not in members:
            continue  # a removed node's crash is nobody's to detect
        for observer, observer_timeline in timeline.nodes.items():
            if observer == crashed or (members is not None and observer not in members):
                continue
            end = min(t_crash + bound, timeline.end_t)
            if not observer_timeline.alive_throughout(t_crash, end):
                continue
            times = declared.get((observer, crashed), [])
            first = bisect.bisect_left(times, process_start)
            if first < len(times) and times[first] <= t_crash + bound + _BOUND_SLACK_S:
                delays.append(max(times[first] - t_crash, 0.0))
                continue
            if any(
                process_start <= at <= t_crash + bound + _BOUND_SLACK_S
                for at in removed_at.get((observer, crashed), ())
            ):
                misses.append((observer, crashed, t_crash, crash_index, "removed"))
                continue
            undecidable = (
                run_cut
                or timeline.out_of_envelope(observer, t_crash, end)
                or (timeline.out_of_envelope(crashed, process_start, t_crash))
            )
            misses.append(
                (observer, crashed, t_crash, crash_index, "unknown" if undecidable else "late")
            )
    return delays, misses


def check_l1(history: History, timeline: Timeline, bounds: Bounds) -> PropertyResult:
    findings = Findings("L1")
    delays, misses = detection_delays_s(history, timeline, bounds)
    findings.checked = len(delays) + len(misses)
    removed = sum(1 for miss in misses if miss[4] == "removed")
    for observer, crashed, t_crash, crash_index, kind in misses:
        if kind == "removed":
            continue  # settled by a committed removal (detection_delays_s)
        message = (
            f"{observer} did not declare {crashed} dead within D={bounds.detection_s}s of its "
            f"crash at t={t_crash:.3f}"
        )
        ref = EventRef.of(crash_index, history.events[crash_index], f"crash of {crashed}")
        if kind == "late":
            findings.invalid(message, ref)
        else:
            findings.unknown(message + " (run ended or envelope left)", ref)
    worst = max(delays, default=0.0)
    summary = f"{len(delays)} detections of {len(timeline.crashes)} crashes, slowest {worst * 1000:.0f} ms"
    if removed:
        summary += f"; {removed} settled by a committed removal of the crashed node within D"
    return findings.result(summary)
