"""Checker behaviour that the first mutation run (scripts/mutation.py, seed 1) showed
no test pinned down; they kill three of its five survivors (safety.py:75,
progress.py:143, model.py:126).

- S1 reports a diverged step once, however many nodes disagree (safety.py: the
  ``reported`` set), so one bug is one violation in the summary.
- L3 calls a missed catch-up undecidable, not a violation, when the restarted node
  crashed again before J or when no single stable stretch covers the whole window
  (progress.py: a stretch open at the restart is not enough).
- A property's evidence is the violation's events; an undecided check adds its events
  only while nothing is violated (model.py ``Findings.unknown``).
"""

from __future__ import annotations

import msgspec

from swarmshake.reference_node.protocol.history import (
    HARNESS,
    Accept,
    Commit,
    DeclareDead,
    EventBase,
    Fault,
    History,
    RejoinDone,
    RunMark,
    Start,
)
from swarmshake.verify.checkers import Bounds, check_history
from swarmshake.verify.checkers.model import EventRef, Findings

NODES = ["n0", "n1", "n2"]
BOUNDS = Bounds(detection_s=1.0, recovery_s=5.0, rejoin_s=5.0)


def _start(node: str, t: float, incarnation: int = 0) -> Start:
    return Start(t_wall=t, t_mono=t, node=node, incarnation=incarnation, config={"voters": NODES})


def _steps(first: int, last: int, nodes: list[str]) -> list[EventBase]:
    """Steps ``first..last`` (step s commits at t = s + 0.5) on ``nodes``."""
    events: list[EventBase] = []
    for step in range(first, last + 1):
        t = step + 0.5
        for node in nodes:
            events.append(
                Accept(
                    t_wall=t - 0.1,
                    t_mono=t - 0.1,
                    node=node,
                    step=step,
                    ballot=[1, 0],
                    value_fp=f"a{step:04x}",
                    contributors=NODES,
                    holds_bytes=True,
                )
            )
        for node in nodes:
            events.append(_commit(node, step, t, f"f{step:04x}"))
    return events


def _commit(node: str, step: int, t: float, param: str) -> Commit:
    return Commit(
        t_wall=t,
        t_mono=t,
        node=node,
        step=step,
        value_fp=f"a{step:04x}",
        contributors=NODES,
        param_fp=param,
        voters=NODES,
    )


def _fault(op: str, target: list[str], t: float) -> Fault:
    return Fault(t_wall=t, t_mono=t, node=HARNESS, op=op, target=target, phase="inject")


def _check(events: list[EventBase]):
    return check_history(History.from_events(events), BOUNDS)


def test_s1_a_step_on_which_two_nodes_diverge_is_one_violation():
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 30, NODES)
    events.append(_commit("n1", 12, 12.6, "deadbeef"))
    events.append(_commit("n2", 12, 12.7, "cafef00d"))
    events.sort(key=lambda event: event.t_mono)
    result = _check(events).results["S1"]
    assert result.status == "invalid"
    assert "step 12" in result.message and "more" not in result.message


def _restart_without_catch_up(crash_again_at: float | None) -> list[EventBase]:
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 10, NODES)
    events.append(_fault("crash", ["n2"], 10.6))
    events += _steps(11, 30, ["n0", "n1"])
    events.append(_start("n2", 15.0, incarnation=1))
    if crash_again_at is not None:
        events.append(_fault("crash", ["n2"], crash_again_at))
    events.sort(key=lambda event: event.t_mono)
    return events


def test_l3_a_restart_that_crashed_again_before_j_is_unknown_not_invalid():
    # J = 5 s: n2 restarted at 15 s and crashed again at 17 s, before its deadline.
    assert _check(_restart_without_catch_up(None)).results["L3"].status == "invalid"
    assert _check(_restart_without_catch_up(17.0)).results["L3"].status == "unknown"


def test_l3_a_catch_up_through_rejoin_is_valid():
    events = _restart_without_catch_up(None)
    events.append(
        RejoinDone(t_wall=16, t_mono=16.0, node="n2", step=15, source="n0", param_fp="f000f")
    )
    events.sort(key=lambda event: event.t_mono)
    assert _check(events).results["L3"].status == "valid"


def _ref(index: int) -> EventRef:
    return EventRef(node="n0", index=index, t_mono=float(index), kind="commit")


def test_evidence_of_an_undecided_check_is_kept_only_while_nothing_is_violated():
    undecided = Findings("L3")
    undecided.unknown("cut by the run's end", _ref(1))
    assert undecided.result("ok").evidence == [_ref(1)]

    violated = Findings("L3")
    violated.invalid("did not catch up", _ref(2))
    violated.unknown("cut by the run's end", _ref(3))
    result = violated.result("ok")
    assert result.status == "invalid" and result.evidence == [_ref(2)]


def test_l3_a_fault_inside_the_rejoin_window_makes_a_miss_unknown():
    # n2 restarts at 15 s (J = 5 s) and never catches up, but n0 is cut off from 17 s to
    # 19 s: no stable stretch covers [15, 20], so the miss is undecidable, not a
    # violation, even though a stable stretch was open when n2 restarted.
    events = _restart_without_catch_up(None)
    events.append(_fault("partition", ["n0"], 17.0))
    events.append(
        Fault(t_wall=19.0, t_mono=19.0, node=HARNESS, op="partition", target=["n0"], phase="heal")
    )
    events.sort(key=lambda event: event.t_mono)
    assert _check(events).results["L3"].status == "unknown"


# --- the neutral checkers (a per-file mutation sample, session 5: 3 of 6 survived) ---------


def _neutral_world():
    from swarmshake.verify.history import MembershipChange, RunMark, StepCommitted

    def commit(node: str, step: int, t: float, members: list[str]) -> StepCommitted:
        return StepCommitted(
            t_wall=t, t_mono=t, node=node, step=step, participants=members,
            param_fp=f"fp{step}", quorum_id="q0",
        )  # fmt: skip

    def mark(name: str, t: float) -> RunMark:
        return RunMark(t_wall=t, t_mono=t, node=HARNESS, mark=name)

    return commit, mark, MembershipChange


def test_l1_late_group_cites_the_crash_and_the_group_that_left_the_node_out():
    """neutral.py:185 (1 -> 2 in the second evidence reference): the evidence of a
    late group is the crash and the first event that left the node out."""
    from swarmshake.verify.checkers import neutral

    commit, _, membership = _neutral_world()
    world = ["n1", "n2", "n3"]
    events = [commit(n, s, s / 2, world) for s in range(4) for n in world]
    events.append(Fault(t_wall=2.2, t_mono=2.2, node=HARNESS, op="crash", target=["n3"],
                        phase="inject"))  # fmt: skip
    events.append(membership(t_wall=5.0, t_mono=5.0, node="n1", members=["n1", "n2"],
                             quorum_id="q1"))  # fmt: skip
    events.append(Fault(t_wall=8.0, t_mono=8.0, node=HARNESS, op="crash", target=["n3"],
                        phase="heal"))  # fmt: skip
    history = History.from_events(events)
    result = neutral.check_l1(history, Bounds(detection_s=2.0))
    assert result.status == "invalid" and "formed after 2.80s" in result.message
    crash, late = result.evidence[:2]
    assert crash.kind == "fault" and crash.t_mono == 2.2
    assert late.kind == "membership" and late.t_mono == 5.0
    # The references point at those events in the history (a report links them).
    assert history.events[crash.index] is events[12] and history.events[late.index] is events[13]


def _assert_n3_alone_left_out_from_2_to_4_s(events: list) -> None:
    from swarmshake.verify.checkers import neutral

    stretches = neutral.premise_stretches(History.from_events(events))
    assert [(s.start, s.end, s.left_alone) for s in stretches] == [
        (0.0, 2.0, ("n1", "n2", "n3")),
        (2.0, 4.0, ("n1", "n2")),
        (4.0, 6.0, ("n1", "n2", "n3")),
    ]


def test_the_quiesce_heals_the_cuts_of_a_partition_left_open():
    """neutral.py:274 (the quiesce's ``cuts.clear()`` deleted): after the quiesce the
    harness leaves every node alone again, even if a partition was never healed."""

    commit, mark, _ = _neutral_world()
    world = ["n1", "n2", "n3"]
    cuts = [["n3", "n1"], ["n1", "n3"], ["n3", "n2"], ["n2", "n3"]]
    events = [
        mark("steady_state", 0.0),
        *(commit(n, 0, 0.5, world) for n in world),
        Fault(
            t_wall=2.0,
            t_mono=2.0,
            node=HARNESS,
            op="partition",
            target=["n3"],
            params={"grouping": "isolate", "cuts": cuts},
            phase="inject",
        ),  # fmt: skip
        mark("quiesce", 4.0),
        mark("run_end", 6.0),
    ]
    _assert_n3_alone_left_out_from_2_to_4_s(events)


# --- a fresh sample (scripts/mutation.py --per-file 6 --seed 11, session 11) ------------


def _crash_and_restart(nodes: list[str], down_s: float, resume_after_s: float):
    """n0..n2 commit steps 1..10; ``nodes`` crash at 10.6 s and restart ``down_s`` later;
    every node commits again from ``resume_after_s`` after the restart."""
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 10, NODES)
    events += [_fault("crash", nodes, 10.6)]
    back = 10.6 + down_s
    events += [_start(node, back, incarnation=1) for node in nodes]
    first = int(back + resume_after_s)  # step s commits at s + 0.5
    events += _steps(first, first + 10, NODES)
    events.sort(key=lambda event: event.t_mono)
    return events


def test_l2_judges_a_stall_across_a_minority_restart_as_one_stretch():
    """progress.py:61 (``stable and current_start is None`` -> ``or``: every stable
    boundary restarts the stretch): n2 crashing at 4 s and restarting at 6 s leaves a
    majority up throughout, so the stall from the last commit (2.5 s) to 10.5 s is
    8 s > R, however many liveness changes of a minority fall inside it."""
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 2, NODES)
    events += [_fault("crash", ["n2"], 4.0), _start("n2", 6.0, incarnation=1)]
    events += _steps(10, 20, NODES)
    events.sort(key=lambda event: event.t_mono)
    result = _check(events).results["L2"]
    assert result.status == "invalid" and "no new step committed for 8.0s" in result.message


def test_l2_does_not_hold_a_stall_against_the_cluster_while_a_majority_is_down():
    """A stretch needs a live majority and no envelope exit: two of three nodes down
    for 10 s with no network fault is no stable stretch; R (5 s) counts from their
    restart."""
    assert _check(_crash_and_restart(["n1", "n2"], 10.0, 1.0)).results["L2"].status == "valid"
    # The same crash, but the cluster takes 6 s > R after the restart: a violation.
    stalled = _check(_crash_and_restart(["n1", "n2"], 10.0, 6.0)).results["L2"]
    assert stalled.status == "invalid" and "no new step committed" in stalled.message


def test_l2_counts_a_configured_voter_that_never_started():
    """safety.py:43 (the first ``Start``'s voters dropped for the nodes that logged an
    event): four voters are configured and n3 never starts, so with n2 crashed only two
    of four are alive, not a majority, and the stall that follows is no L2 violation
    (a majority of the three nodes seen would have been)."""
    voters = [*NODES, "n3"]
    events: list[EventBase] = [
        Start(t_wall=0.0, t_mono=0.0, node=node, incarnation=0, config={"voters": voters})
        for node in NODES
    ]
    events += _steps(1, 10, NODES)
    events.append(_fault("crash", ["n2"], 10.6))
    events.append(RunMark(t_wall=30.0, t_mono=30.0, node=HARNESS, mark="run_end"))
    assert _check(events).results["L2"].status == "valid"


def test_l1_a_declaration_from_before_the_node_started_does_not_detect_its_crash():
    """detector.py:255 (``position >= 0`` -> ``>= 1``: the first process taken to start
    at -inf): n0 declared the late-starting n2 dead at 1 s, before n2 started at 2 s;
    n2 then crashes at 10.6 s and n0 never declares it dead again.  The old verdict
    is no detection of this crash: n0 missed it."""
    events: list[EventBase] = [_start("n0", 0.0), _start("n1", 0.0), _start("n2", 2.0)]
    events.append(DeclareDead(t_wall=1.0, t_mono=1.0, node="n0", peer="n2", peer_incarnation=0))
    events += _steps(3, 10, NODES)
    events.append(_fault("crash", ["n2"], 10.6))
    events.append(DeclareDead(t_wall=11.0, t_mono=11.0, node="n1", peer="n2", peer_incarnation=0))
    events += _steps(12, 20, ["n0", "n1"])
    events.sort(key=lambda event: event.t_mono)
    result = _check(events).results["L1"]
    assert result.status == "invalid"
    assert "n0 did not declare n2 dead" in result.message


def test_the_neutral_l1_with_no_crash_to_judge_is_unknown_not_valid():
    """neutral.py:141 (the count of judged crashes starting at 1): a run in which no
    node crashed gives L1 nothing to judge; the checker says so, it does not pass."""
    from swarmshake.verify.checkers import neutral

    commit, _, _ = _neutral_world()
    world = ["n1", "n2", "n3"]
    history = History.from_events([commit(n, s, s / 2, world) for s in range(6) for n in world])
    result = neutral.check_l1(history, Bounds(detection_s=2.0))
    assert result.status == "unknown" and result.checked == 0


def test_a_history_the_checkers_cannot_read_still_reports_its_torn_lines():
    """model.py:92 (``torn_lines`` defaulting to 1): when the ground truth cannot be
    built (here a latency fault whose delay is not a number), every property is
    unknown and the verdict still says how many torn lines the reader skipped."""
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 5, NODES)
    events.append(_op("latency", ["n1"], 6.0, delay_ms="slow"))
    for torn in (0, 2):
        verdict = check_history(History.from_events(events, torn_lines=torn), BOUNDS)
        assert verdict.status == "unknown" and verdict.torn_lines == torn
        assert all(r.status == "unknown" for r in verdict.results.values())
        assert "could not build the run's ground truth" in verdict.results["S1"].message


# --- a systematic one-in-eight sample (session 12): the neutral checkers' counts -------


def _neutral_crash(node: str, t: float, phase: str = "inject") -> Fault:
    return Fault(t_wall=t, t_mono=t, node=HARNESS, op="crash", target=[node], phase=phase)


def test_neutral_s1_says_how_many_steps_were_committed_again_after_a_rollback():
    """neutral.py:113-114 (the rollback count): a node that restarts from a checkpoint
    commits steps it already committed; S1 still holds and says so in its message."""
    from swarmshake.verify.checkers import neutral

    commit, _, _ = _neutral_world()
    world = ["n1", "n2"]
    events = [commit(n, s, s / 2, world) for s in range(5) for n in world]
    events += [commit("n1", s, 3 + s / 2, world) for s in (3, 4)]  # back from step 2
    result = neutral.check_s1(History.from_events(events))
    assert result.status == "valid"
    assert result.message.endswith("; 1 re-commits after a rollback to a checkpoint")


def test_neutral_l1_counts_each_crash_it_judged_on_either_rule():
    """neutral.py:178 and :191 (a judged crash not counted): n3's crash is followed by
    a group without it (judged, in time); n2's is followed by none for longer than D
    (judged, a violation).  Both count."""
    from swarmshake.verify.checkers import neutral

    commit, _, membership = _neutral_world()
    world = ["n1", "n2", "n3"]
    events = [commit(n, s, s / 2, world) for s in range(4) for n in world]
    events.append(_neutral_crash("n3", 2.2))
    events.append(membership(t_wall=3.0, t_mono=3.0, node="n1", members=["n1", "n2"],
                             quorum_id="q1"))  # fmt: skip
    events.append(_neutral_crash("n2", 4.0))
    events.append(commit("n1", 4, 9.0, ["n1", "n2"]))
    result = neutral.check_l1(History.from_events(events), Bounds(detection_s=2.0))
    assert result.status == "invalid" and result.checked == 2
    assert "n2 was down" in result.message


def _neutral_restart_history(caught_up: bool) -> list[EventBase]:
    commit, _, _ = _neutral_world()
    world = ["n1", "n2", "n3"]
    events: list[EventBase] = [commit(n, s, s / 2, world) for s in range(4) for n in world]
    events += [_neutral_crash("n3", 2.2), _neutral_crash("n3", 4.0, phase="heal")]
    late = world if caught_up else ["n1", "n2"]
    events += [commit(n, s, s / 2, late) for s in range(10, 14) for n in late]
    return events


def test_neutral_l3_judges_a_restart_and_is_unknown_without_one():
    """neutral.py:472 and :490 (the count of judged restarts): a restart that caught up
    is one judged restart; a run without a restart gives L3 nothing to judge, which
    is unknown, not valid."""
    from swarmshake.verify.checkers import neutral

    caught_up = neutral.check_l3(History.from_events(_neutral_restart_history(True)), BOUNDS)
    assert caught_up.status == "valid" and caught_up.checked == 1
    assert caught_up.message == "1 restart(s) caught up within J"
    commit, _, _ = _neutral_world()
    steady = [commit(n, s, s / 2, ["n1", "n2"]) for s in range(30) for n in ("n1", "n2")]
    none = neutral.check_l3(History.from_events(steady), BOUNDS)
    assert none.status == "unknown" and "no restart was observed" in none.message


def test_reference_l1_counts_every_observer_of_every_crash():
    """detector.py:285 (``len(delays) + len(misses)`` as a difference): one crash seen
    by two observers, one in time and one not, is two judgements."""
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 10, NODES)
    events.append(_fault("crash", ["n2"], 10.6))
    events.append(DeclareDead(t_wall=11.0, t_mono=11.0, node="n1", peer="n2", peer_incarnation=0))
    events += _steps(12, 20, ["n0", "n1"])
    events.sort(key=lambda event: event.t_mono)
    result = _check(events).results["L1"]
    assert result.status == "invalid" and result.checked == 2


def test_a_neutral_checker_that_raises_makes_its_property_unknown_not_missing():
    """__init__.py:84 (the raised checker's result dropped): a commit whose fingerprint
    is not a string makes S1 raise while it reports the divergence; the verdict still
    names S1, as unknown, and is not valid."""
    from swarmshake.verify.history import RunSystem

    commit, _, _ = _neutral_world()
    events = [commit(n, s, s / 2, ["n1", "n2"]) for s in range(4) for n in ("n1", "n2")]
    broken = msgspec.structs.replace(commit("n2", 3, 1.6, ["n1", "n2"]), param_fp=None)
    system = RunSystem("mine", frozenset({"step_committed"}))
    verdict = check_history(History.from_events([*events, broken]), BOUNDS, system)
    assert verdict.results["S1"].status == "unknown"
    assert verdict.results["S1"].message.startswith("checker raised TypeError")
    assert verdict.status != "valid"


def test_l2_progress_is_a_new_step_not_a_node_catching_up_on_old_ones():
    """progress.py:79 (the top step never raised: every commit counted as progress):
    from 10.5 s to 18.5 s nobody commits a new step; n2, back from a crash, commits
    old steps 5..9 meanwhile.  That is catch-up, not progress: 8 s > R."""
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 10, NODES)
    events += [_fault("crash", ["n2"], 3.0), _start("n2", 4.0, incarnation=1)]
    events = [e for e in events if not (e.node == "n2" and 3.0 < e.t_mono < 11.0)]
    events += [_commit("n2", step, 10.0 + step, f"f{step:04x}") for step in range(5, 10)]
    events += _steps(18, 25, NODES)
    events.sort(key=lambda event: event.t_mono)
    result = _check(events).results["L2"]
    assert result.status == "invalid" and "no new step committed for 8.0s" in result.message


def test_neutral_l1_lets_the_step_in_flight_at_a_crash_complete_without_the_dead_node():
    """neutral.py:156 (only steps after the one in flight count): n3 crashes at 2.2 s
    during step 4 (its last commit was step 3); n1 and n2 committing step 4 with n3
    among its participants is the data exchange finishing, not a dead participant.
    Step 5 with n3 among its participants is a violation."""
    from swarmshake.verify.checkers import neutral

    commit, _, membership = _neutral_world()
    world = ["n1", "n2", "n3"]
    events = [commit(n, s, s / 2, world) for s in range(4) for n in world]
    events.append(_neutral_crash("n3", 2.2))
    events += [commit(n, 4, 2.3, world) for n in ("n1", "n2")]
    events.append(membership(t_wall=3.0, t_mono=3.0, node="n1", members=["n1", "n2"],
                             quorum_id="q1"))  # fmt: skip
    in_flight = neutral.check_l1(History.from_events(events), Bounds(detection_s=2.0))
    assert in_flight.status == "valid", in_flight.message
    events.insert(-1, commit("n1", 5, 2.4, world))
    late = neutral.check_l1(History.from_events(events), Bounds(detection_s=2.0))
    assert late.status == "invalid" and "committed step 5 with n3 among" in late.message


def test_s2_counts_every_commit_it_checked():
    """safety.py:180 (a commit not counted): three nodes committing steps 1..10 are
    thirty commits checked."""
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 10, NODES)
    results = _check(events).results
    assert results["S2"].status == "valid" and results["S2"].checked == 30
    assert results["S1"].checked == 30  # safety.py:78


# --- the ground truth itself (timeline.py: 17 of 41 survived the one-in-eight sample) --


def _timeline(*faulted: EventBase, starts: tuple[EventBase, ...] = ()):
    from swarmshake.verify.checkers.timeline import build_timeline

    events = [*(starts or [_start(node, 0.0) for node in NODES]), *faulted]
    events.append(RunMark(t_wall=60.0, t_mono=60.0, node=HARNESS, mark="run_end"))
    return build_timeline(History.from_events(events), Bounds())


def _op(op: str, target: list[str], t: float, phase: str = "inject", **params) -> Fault:
    return Fault(t_wall=t, t_mono=t, node=HARNESS, op=op, target=target, phase=phase,
                 params=params)  # fmt: skip


def test_only_faults_beyond_the_declared_envelope_leave_it():
    """timeline.py:414 and :421: the default envelope is 75 ms one way and 1,000 ppm.
    60 ± 30 ms of latency leaves it (90 ms at worst); 40 ± 20 ms, a 500 ppm drift, a
    full CPU share and a full disk do not: a checker must still judge those runs."""
    inside = [
        _op("latency", ["n1"], 1.0, delay_ms=40.0, jitter_ms=20.0),
        _op("clock_skew", ["n1"], 1.0, drift_ppm=500.0),
        _op("cpu_throttle", ["n1"], 1.0, cpu_fraction=1.0),
        _op("disk_full", ["n1"], 1.0),
    ]
    for fault in inside:
        assert not _timeline(fault).out_of_envelope("n1", 0.0, 60.0), fault.op
    outside = [
        _op("latency", ["n1"], 1.0, delay_ms=60.0, jitter_ms=30.0),
        _op("clock_skew", ["n1"], 1.0, drift_ppm=2000.0),
        _op("clock_skew", ["n1"], 1.0, offset_ms=10.0),
        _op("cpu_throttle", ["n1"], 1.0, cpu_fraction=0.5),
    ]
    for fault in outside:
        timeline = _timeline(fault)
        assert timeline.out_of_envelope("n1", 2.0, 3.0), fault.op
        assert not timeline.out_of_envelope("n2", 2.0, 3.0), fault.op


def test_a_restart_without_a_crash_ends_the_old_process():
    """timeline.py:251-252: a node that starts again (a forced restart after it was
    declared dead: no crash fault) ended its previous process then, so it was not
    alive throughout a window across the restart."""
    starts = (
        _start("n0", 0.0), _start("n2", 0.0),
        _start("n1", 0.0), _start("n1", 5.0, incarnation=1), _start("n1", 9.0, incarnation=2),
    )  # fmt: skip
    n1 = _timeline(starts=starts).nodes["n1"]
    assert [(p.start, p.end) for p in n1.processes][:2] == [(0.0, 5.0), (5.0, 9.0)]
    assert not n1.alive_throughout(1.0, 6.0) and n1.alive_throughout(5.5, 8.5)


def test_pauses_and_crashes_of_every_node_and_their_heals():
    """timeline.py:365 (``*`` expanded to every node) and :385 (a heal ends the pause)."""
    timeline = _timeline(
        _op("pause", ["*"], 2.0), _op("pause", ["*"], 4.0, phase="heal"),
        _op("pause", ["n1"], 6.0), _op("pause", ["n1"], 8.0, phase="heal"),
    )  # fmt: skip
    for node in NODES:
        assert not timeline.nodes[node].alive_at(3.0) and timeline.nodes[node].alive_at(5.0)
    assert not timeline.nodes["n1"].alive_at(7.0) and timeline.nodes["n1"].alive_at(9.0)
    crashed = _timeline(_op("crash", ["*"], 2.0))
    assert [name for name, _, _ in crashed.crashes] == NODES


def test_black_holes_cut_the_links_they_name_in_the_directions_they_name():
    """timeline.py:342 and :351 (a black hole's pairs), :181 (a cut is found from either
    end), :146 (an exit never healed says so)."""
    both = _timeline(_op("blackhole", ["n0", "n1"], 1.0, src=["n0"], dst=["n1"]))
    one_way = _timeline(
        _op("blackhole", ["n0", "n1"], 1.0, src=["n0"], dst=["n1"], direction="one_way")
    )
    assert both.cuts[0][1] == {("n0", "n1"), ("n1", "n0")}
    assert one_way.cuts[0][1] == {("n0", "n1")}
    assert one_way.cut_between("n1", "n0", 2.0, 3.0) and not one_way.cut_between("n1", "n2", 2, 3)
    assert one_way.exits[0].describe() == "blackhole from t=1.000, never healed"


def test_a_partition_healed_by_name_ends_its_window_a_detection_bound_later():
    """timeline.py:228 (a heal naming exactly the inject's nodes ends its window)."""
    timeline = _timeline(
        _op("partition", ["n1"], 1.0, grouping="isolate"),
        _op("partition", ["n1"], 3.0, phase="heal"),
    )
    assert timeline.out_of_envelope("n1", 2.0, 2.5)
    assert not timeline.out_of_envelope("n1", 3.0 + Bounds().detection_s + 0.1, 60.0)


# --- a fresh one-in-eight sample (shard 5 of 8, session 12) -----------------------------


def test_a_healed_node_fault_leaves_the_node_alone_again():
    """neutral.py:256 (a heal that does not clear the node's fault): n3's disk is full
    from 2 s to 4 s; after the heal the harness leaves all three alone again, so L2
    judges the cluster with n3 in it."""

    commit, mark, _ = _neutral_world()
    world = ["n1", "n2", "n3"]
    events = [
        mark("steady_state", 0.0),
        *(commit(n, 0, 0.5, world) for n in world),
        _op("disk_full", ["n3"], 2.0),
        _op("disk_full", ["n3"], 4.0, phase="heal"),
        mark("run_end", 6.0),
    ]
    _assert_n3_alone_left_out_from_2_to_4_s(events)


def test_neutral_s1_reports_a_diverged_step_once_however_many_nodes_disagree():
    """neutral.py:121 (the step not remembered as reported)."""
    from swarmshake.verify.checkers import neutral

    commit, _, _ = _neutral_world()
    world = ["n1", "n2", "n3"]
    events = [commit(n, s, s / 2, world) for s in range(4) for n in world]
    bad = [msgspec.structs.replace(commit(n, 4, 2.0, world), param_fp=f"x{n}") for n in world]
    result = neutral.check_s1(History.from_events([*events, *bad]))
    assert result.status == "invalid" and "more" not in result.message


def test_healing_one_nodes_latency_ends_its_window_not_another_nodes():
    """timeline.py:240 (the healed window's interval taken from the enclosing scope,
    i.e. the window opened last): n1's and then n2's latency leave the envelope; the
    heal of n1's ends n1's window (a detection bound later) and leaves n2's open."""
    timeline = _timeline(
        _op("latency", ["n1"], 1.0, delay_ms=200.0),
        _op("latency", ["n2"], 2.0, delay_ms=200.0),
        _op("latency", ["n1"], 3.0, phase="heal"),
    )
    after = 3.0 + Bounds().detection_s + 0.1
    assert timeline.out_of_envelope("n1", 1.5, 2.5)
    assert not timeline.out_of_envelope("n1", after, 60.0)
    assert timeline.out_of_envelope("n2", after, 60.0)


def test_the_refute_window_is_a_notice_and_its_answer_in_the_envelope_plus_one_proc_delay():
    """detector.py:149 (three survivors: the window's arithmetic): 2 × 75 ms + 100 ms."""
    from swarmshake.verify.checkers.detector import refute_window_s

    assert refute_window_s(Bounds()) == 0.25
    assert refute_window_s(Bounds(latency_ms_max=10.0, proc_delay_ms=30.0)) == 0.05


def test_evidence_in_json_leaves_out_what_it_does_not_know():
    """model.py:59 (``omit_defaults``): a reference without a step or a note is written
    without them, so a report never shows a step -1."""
    ref = EventRef(node="n1", index=3, t_mono=1.5, kind="fault")
    assert msgspec.json.decode(msgspec.json.encode(ref)) == {
        "node": "n1",
        "index": 3,
        "t_mono": 1.5,
        "kind": "fault",
    }


def test_neutral_s1_judges_step_zero_too():
    """neutral.py:109 (``< 0`` -> ``<= 0``: step 0 skipped): two nodes that diverge on
    their first committed step are a violation."""
    from swarmshake.verify.checkers import neutral

    commit, _, _ = _neutral_world()
    first = [
        msgspec.structs.replace(commit(n, 0, 0.5, ["n1", "n2"]), param_fp=n) for n in ("n1", "n2")
    ]
    result = neutral.check_s1(History.from_events(first))
    assert result.status == "invalid" and "step 0" in result.message


def _neutral_stall(*faulted: EventBase, nodes: tuple[str, ...] = ("n1", "n2", "n3")) -> list:
    commit, mark, _ = _neutral_world()
    world = list(nodes)
    events: list[EventBase] = [mark("steady_state", 0.0)]
    events += [commit(n, s, s / 2, world) for s in range(4) for n in world]  # to 1.5 s
    events += list(faulted)
    events += [commit(n, s, 14.0 + s / 2, world) for s in range(4, 8) for n in world]
    events.append(mark("run_end", 18.0))
    return sorted(events, key=lambda e: e.t_mono)


def test_neutral_l2_reports_a_stall_with_no_fault_before_it():
    """neutral.py:455 (the latest-fault search started unset): a stall of 14.5 s with
    the harness doing nothing is a violation whose message names no fault."""
    from swarmshake.verify.checkers import neutral

    result = neutral.check_l2(History.from_events(_neutral_stall()), Bounds(recovery_s=10.0))
    assert result.status == "invalid" and "14.50s" in result.message
    assert "after" not in result.message


def test_neutral_l2_does_not_judge_a_split_into_halves():
    """neutral.py:294 (``>`` -> ``>=``: half the nodes taken for a majority): four
    nodes cut 2-2 for 11 s leave no majority connected, so the stall is not judged."""
    from swarmshake.verify.checkers import neutral

    nodes = ("n1", "n2", "n3", "n4")
    halves = [[a, b] for a in ("n1", "n2") for b in ("n3", "n4")]
    cut = [*halves, *([b, a] for a, b in halves)]
    inject = _op("partition", ["*"], 2.0, grouping="random_halves", cuts=cut)
    heal = _op("partition", ["*"], 13.0, phase="heal")
    history = History.from_events(_neutral_stall(inject, heal, nodes=nodes))
    assert neutral.check_l2(history, Bounds(recovery_s=10.0)).status != "invalid"


def test_a_reference_checker_that_raises_makes_its_property_unknown_not_missing():
    """__init__.py:140 (the raised checker's result dropped, reference path): a commit
    whose fingerprint is not a string makes S1 raise; S1 is unknown, the verdict is
    not valid."""
    events: list[EventBase] = [_start(node, 0.0) for node in NODES] + _steps(1, 5, NODES)
    events.append(msgspec.structs.replace(_commit("n2", 5, 5.6, "x"), param_fp=None))
    verdict = _check(sorted(events, key=lambda e: e.t_mono))
    assert verdict.results["S1"].status == "unknown"
    assert verdict.results["S1"].message.startswith("checker raised TypeError")
    assert verdict.status != "valid"
