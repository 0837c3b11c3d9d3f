"""L2 progress and L3 rejoin.

- L2: in every *stable* stretch — a majority of the voters in force alive (the newest
  configuration some node had logged by then: joins and leaves move it) and no
  node outside the envelope (no partition, black hole, … active or within D of its
  heal) — the highest committed step rises at least every ``R`` seconds.  Judging
  starts at the harness's ``steady_state`` mark, else at the run's first commit:
  L2 is about steps committing *again*; cluster start-up (imports, model set-up)
  is not a stall.  A stall
  that ends with the run is judged too; a stretch shorter than ``R`` decides nothing.
- L3: a restarted node (a second or later ``start``) logs ``rejoin_done`` or
  ``commit`` whose ``param_fp`` equals the majority's fingerprint of that step within
  ``J`` of its start.  If the window was not stable (the node died or paused again,
  the majority was gone, the envelope was left, the run ended) a miss is ``unknown``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from swarmshake.reference_node.protocol.history import (
    Commit,
    History,
    RejoinDone,
    RunMark,
    Start,
)
from swarmshake.verify.checkers.model import (
    Bounds,
    EventRef,
    Findings,
    PropertyResult,
    tail_undecided,
)
from swarmshake.verify.checkers.safety import Membership, majority
from swarmshake.verify.checkers.timeline import Timeline


def stable_stretches(
    timeline: Timeline, membership: Membership, history: History
) -> list[tuple[float, float]]:
    """Maximal ``[start, end)`` stretches where a majority of the voters in force (the
    configuration some node had committed by then: joins and leaves move it) is alive
    and no envelope exit is active."""
    # Boundaries: every change of liveness, of the envelope or of the configuration.
    points = {0.0, timeline.end_t}
    points.update(t for t, _ in membership.by_time)
    everyone = {name for _, voters in membership.by_time for name in voters}
    for name in sorted(everyone | set(membership.initial)):
        node = timeline.nodes.get(name)
        if node is None:
            continue
        for interval in node.processes + node.pauses:
            points.update(t for t in (interval.start, interval.end) if math.isfinite(t))
    for interval, _ in timeline.envelope_exits:
        points.update(t for t in (interval.start, interval.end) if math.isfinite(t))
    ordered = sorted(t for t in points if 0.0 <= t <= timeline.end_t)
    stretches: list[tuple[float, float]] = []
    current_start: float | None = None
    for low, high in zip(ordered, ordered[1:], strict=False):
        probe = (low + high) / 2
        voters = membership.voters_at_time(probe)
        needed = majority(len(voters))
        alive = sum(
            1 for name in voters if name in timeline.nodes and timeline.nodes[name].alive_at(probe)
        )
        stable = alive >= needed and not timeline.any_fault_during(probe, probe)
        if stable and current_start is None:
            current_start = low
        elif not stable and current_start is not None:
            stretches.append((current_start, low))
            current_start = None
    if current_start is not None:
        stretches.append((current_start, timeline.end_t))
    return stretches


def check_l2(
    history: History, timeline: Timeline, membership: Membership, bounds: Bounds
) -> PropertyResult:
    findings = Findings("L2")
    rises: list[tuple[float, int]] = []  # (t, history index) whenever the top step rises
    top = -1
    for index, event in history.indexed(Commit):
        if event.step > top:
            top = event.step
            rises.append((event.t_mono, index))
    bound = bounds.recovery_s
    judged_from = judging_start(history, rises)
    stretches = stable_stretches(timeline, membership, history)
    longest = 0.0  # the longest gap between new steps in a judged stretch, tails aside
    last: tuple[list[float], float] = ([], 0.0)  # the last stretch's new steps and end
    for stretch_start, end in stretches:
        start = max(stretch_start, judged_from)
        inside = [t for t, _ in rises if start < t <= end]
        longest = max([longest, *(b - a for a, b in zip(inside, inside[1:], strict=False))])
        last = (inside, end)
        if end - start < bound:
            continue
        findings.checked += 1
        previous = start
        for t in [*inside, end]:
            if t - previous > bound:
                findings.invalid(
                    f"no new step committed for {t - previous:.1f}s (R={bound}s) from "
                    f"t={previous:.3f} while a majority was alive and connected"
                )
                break
            previous = t
    inside, end = last  # the last stable stretch runs to the end of the history
    if inside and tail_undecided(end - inside[-1], longest, bound):
        findings.unknown(
            f"the history ends {end - inside[-1]:.1f}s after the last new step "
            f"(t={inside[-1]:.3f}) with a majority alive and connected: longer than any gap "
            f"before it ({longest:.2f}s), shorter than R={bound}s, so a stall is not "
            "decided (a quiesce of at least R decides it)"
        )
    return findings.result(f"{findings.checked} stable stretches, each committing within R")


def judging_start(history: History, rises: list[tuple[float, int]]) -> float:
    """Where L2 starts to judge (``t_mono``, the timeline's clock): the harness's
    ``steady_state`` mark, else the first commit; a run without either is judged
    from its start (a cluster that never commits while a majority is up is a stall)."""
    for event in history.of_kind(RunMark):
        if event.mark == "steady_state":
            return event.t_mono
    return rises[0][0] if rises else 0.0


def check_l3(
    history: History, timeline: Timeline, membership: Membership, bounds: Bounds
) -> PropertyResult:
    findings = Findings("L3")
    # The majority's fingerprint per step: the most common param_fp among commits.
    by_step: dict[int, Counter[str]] = defaultdict(Counter)
    for event in history.of_kind(Commit):
        by_step[event.step][event.param_fp] += 1
    reference = {step: counts.most_common(1)[0][0] for step, counts in by_step.items()}
    claims: dict[str, list[tuple[float, int, str]]] = defaultdict(list)  # node -> (t, step, fp)
    for event in history.of_kind(Commit, RejoinDone):
        claims[event.node].append((event.t_mono, event.step, event.param_fp))
    stretches = stable_stretches(timeline, membership, history)
    seen_start: set[str] = set()
    for index, event in history.indexed(Start):
        if event.node not in seen_start:
            seen_start.add(event.node)
            continue
        findings.checked += 1
        deadline = event.t_mono + bounds.rejoin_s
        caught_up = any(
            event.t_mono <= t <= deadline and reference.get(step) == fp
            for t, step, fp in claims.get(event.node, [])
        )
        if caught_up:
            continue
        node = timeline.nodes[event.node]
        stable = (
            deadline <= timeline.end_t
            and node.alive_throughout(event.t_mono, deadline)
            and any(low <= event.t_mono and deadline <= high for low, high in stretches)
        )
        message = (
            f"{event.node} restarted at t={event.t_mono:.3f} and did not reach the majority's "
            f"fingerprint within J={bounds.rejoin_s}s"
        )
        if stable:
            findings.invalid(message, EventRef.of(index, event, "restart"))
        else:
            findings.unknown(message + " (window not stable or cut by the run's end)")
    return findings.result(f"{findings.checked} restarts, each caught up within J")
