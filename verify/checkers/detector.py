"""S4 detector accuracy and L1 completeness, judged against the harness's ground truth.

- S4: a ``declare_dead`` of peer *P* is a false positive when *P*'s process that the
  declaration names (``peer_incarnation`` ≥ the incarnation it started with) was alive
  — up and not paused — for the whole refutation window before it (two envelope
  delays plus Δ_proc: a wrongly suspected node that wakes has that long to refute).
  If *P*, the declaring node or a node whose suspicion the ``reason`` cites was outside
  the latency/clock/CPU envelope within ``D`` (or within ``D`` after such a fault
  healed), the verdict is ``unknown`` (DESIGN: leaving the envelope makes S4
  undecidable, not false); likewise when a judging node was itself paused or
  restarting within the refutation window (every node handling events every Δ_proc
  is part of the envelope).  A node's own ``loop_stall`` events longer than Δ_proc
  count the same way: a stalled peer is not alive, a stalled judge is undecidable.  A declaration made only by nodes that a partition cut
  from *P* (within ``D`` of the cut) is correct: across a cut, silence is all there is.
- L1: after each crash, every node alive and inside the envelope for the whole
  ``[crash, crash + D]`` logs ``declare_dead`` of the crashed node within ``D``, unless
  the crashed node came back inside that window.  A miss during an envelope exit, or
  a window cut by the end of the run, is ``unknown``.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict

from swarmshake.reference_node.protocol.history import DeclareDead, History
from swarmshake.verify.checkers.model import Bounds, EventRef, Findings, PropertyResult
from swarmshake.verify.checkers.timeline import NodeTimeline, Timeline

_NODE_LIST = re.compile(r"(?:confirmed by|suspicions:)\s*([\w.:,-]+)")


def _origins(reason: str) -> list[str]:
    """Nodes whose suspicions a declaration rests on, as the detector's ``reason``
    names them (``"2 suspicions: n1,n4"``, ``"confirmed by n3"``)."""
    match = _NODE_LIST.search(reason or "")
    return [name for name in match.group(1).split(",") if name] if match else []


def false_positive_refs(
    history: History, timeline: Timeline, bounds: Bounds
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(false_positives, undecidable)`` as ``(history index, explanation)`` lists.

    The first declaration of a (peer, incarnation) is judged; later declarations of
    the same pair inherit its judgement (a node rightly declared dead must come back
    with a new incarnation, and gossip spreads a verdict, right or wrong)."""
    envelope_window = bounds.detection_s
    refute_window = refute_window_s(bounds)
    false_positives: list[tuple[int, str]] = []
    undecidable: list[tuple[int, str]] = []
    judged: dict[tuple[str, int], str] = {}  # (peer, incarnation) -> ok|unknown|invalid
    for index, event in enumerate(history.events):
        if not isinstance(event, DeclareDead) or event.peer == event.node:
            continue  # a node's own "declared dead: rejoining" is not a judgement of others
        peer = timeline.nodes.get(event.peer)
        if peer is None:
            continue
        key = (event.peer, event.peer_incarnation)
        verdict, explanation = judged.get(key, ""), ""
        t = event.t_mono
        if not verdict:
            verdict, explanation = _judge(event, peer, timeline, envelope_window, refute_window)
            judged[key] = verdict
        else:
            explanation = f"{event.node} repeated a declaration of {event.peer} judged {verdict}"
        if verdict == "invalid":
            false_positives.append(
                (index, explanation or f"{event.node} declared {event.peer} dead at t={t:.3f}")
            )
        elif verdict == "unknown":
            undecidable.append((index, explanation))
    return false_positives, undecidable


def refute_window_s(bounds: Bounds) -> float:
    """How long after waking a wrongly suspected node needs to refute: a notice and
    its answer in the envelope, plus one Δ_proc to handle it."""
    return 2 * bounds.latency_ms_max / 1000 + bounds.proc_delay_ms / 1000


def _judge(
    event: DeclareDead,
    peer: NodeTimeline,
    timeline: Timeline,
    envelope_window: float,
    refute_window: float,
) -> tuple[str, str]:
    t = event.t_mono
    current = peer.process_at(t)
    if current is None:
        return "ok", ""  # the peer's process is down: a correct declaration
    process, start_incarnation = current
    if event.peer_incarnation < start_incarnation:
        return "ok", ""  # names an earlier, dead process of the peer
    if peer.paused_during(t - refute_window, t + 1e-12):
        return "ok", ""  # paused, or woke too recently to have refuted
    if peer.stalled_during(t - refute_window, t + 1e-12):
        return "ok", ""  # handled no events for over Δ_proc: not alive (DESIGN)
    explanation = (
        f"{event.node} declared {event.peer} (incarnation {event.peer_incarnation}) dead at "
        f"t={t:.3f} while it was alive since t={max(process.start, t - envelope_window):.3f}"
    )
    judges = [event.node, *_origins(event.reason)]
    low = t - envelope_window
    if all(timeline.cut_between(judge, event.peer, low, t) for judge in judges):
        # Every node the declaration rests on was partitioned from the peer: a node
        # behind a cut is indistinguishable from a dead one, and DESIGN requires the
        # peer to rejoin with a new incarnation after the heal.  Expected, not false.
        return "ok", ""
    if timeline.out_of_envelope(event.peer, low, t) or any(
        timeline.out_of_envelope(judge, low, t) for judge in judges
    ):
        return "unknown", explanation + " (outside the declared envelope)"
    if any(
        judge in timeline.nodes
        and (
            timeline.nodes[judge].paused_during(t - refute_window, t + 1e-12)
            or timeline.nodes[judge].stalled_during(t - refute_window, t + 1e-12)
        )
        for judge in judges
    ):
        # A judge that was frozen missed Δ_proc itself: its verdicts rest on silence it
        # could not observe; DESIGN's envelope assumes every node handles events.
        return "unknown", explanation + " (a judging node was paused or stalled)"
    return "invalid", explanation


def check_s4(history: History, timeline: Timeline, bounds: Bounds) -> PropertyResult:
    findings = Findings("S4")
    findings.checked = sum(1 for _ in history.of_kind(DeclareDead))
    false_positives, undecidable = false_positive_refs(history, timeline, bounds)
    for index, explanation in false_positives:
        findings.invalid(explanation, EventRef.of(index, history.events[index], "false positive"))
    for index, explanation in undecidable:
        findings.unknown(explanation, EventRef.of(index, history.events[index]))
    return findings.result(f"{findings.checked} declarations, none of a live node")


def detection_delays_s(
    history: History, timeline: Timeline, bounds: Bounds
) -> tuple[list[float], list[tuple[str, str, float, int, str]]]:
    """Per (crash, observer): seconds until the observer declared the crashed node dead.

    Returns ``(delays, misses)``; a miss is ``(observer, crashed, t_crash, crash index,
    "late"|"unknown")``.  Observers are the nodes alive for the whole ``[crash, crash +
    D]``; crashes whose node came back within ``D`` are skipped.
    """
    declared: dict[tuple[str, str], list[float]] = defaultdict(list)
    for event in history.of_kind(DeclareDead):
        declared[(event.node, event.peer)].append(event.t_mono)
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
        for observer, observer_timeline in timeline.nodes.items():
            if observer == crashed:
                continue
            end = min(t_crash + bound, timeline.end_t)
            if not observer_timeline.alive_throughout(t_crash, end):
                continue
            times = declared.get((observer, crashed), [])
            first = bisect.bisect_left(times, process_start)
            if first < len(times) and times[first] <= t_crash + bound:
                delays.append(max(times[first] - t_crash, 0.0))
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
    for observer, crashed, t_crash, crash_index, kind in misses:
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
    return findings.result(
        f"{len(delays)} detections of {len(timeline.crashes)} crashes, slowest {worst * 1000:.0f} ms"
    )
