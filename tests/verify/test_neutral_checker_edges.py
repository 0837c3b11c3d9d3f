"""The neutral checkers (S1, L1, L2, L3 for any system) at their edges.

Written against the survivors of the first full mutation run of ``verify/checkers/``
(session 13: ``scripts/mutation.py --all --shard K/8`` for K = 1..8, 1,389 mutants,
78.8 % killed; neutral.py 316/417).  Each test states a rule a user of the verdict
relies on: the in-flight step at a crash, a bound met exactly is met, a commit at the
judging window's edge is judged, a fault that overlaps another ends only its own
window, and what a message or an evidence reference says.
"""

from __future__ import annotations

import dataclasses

import pytest

from swarmshake.reference_node.protocol.history import HARNESS, Fault, RunMark
from swarmshake.verify.checkers import neutral
from swarmshake.verify.checkers.model import Bounds
from swarmshake.verify.history import History, MembershipChange, NodeError, StepCommitted

WORLD = ["n1", "n2", "n3"]
PAIR = ["n1", "n2"]


def _commit(node: str, step: int, t: float, participants=WORLD, fp: str = "", quorum="q0"):
    return StepCommitted(
        t_wall=t, t_mono=t, node=node, step=step, participants=list(participants),
        param_fp=fp or f"fp{step}", quorum_id=quorum,
    )  # fmt: skip


def _steps(nodes, steps, t_of, participants=WORLD) -> list:
    return [_commit(n, s, t_of(s), participants) for s in steps for n in nodes]


def _fault(op: str, target: list[str], t: float, phase: str = "inject", **params) -> Fault:
    return Fault(t_wall=t, t_mono=t, node=HARNESS, op=op, target=target, phase=phase,
                 params=params)  # fmt: skip


def _mark(name: str, t: float) -> RunMark:
    return RunMark(t_wall=t, t_mono=t, node=HARNESS, mark=name)


def _group(node: str, t: float, members: list[str]) -> MembershipChange:
    return MembershipChange(t_wall=t, t_mono=t, node=node, members=members, quorum_id="q1")


def _history(events: list) -> History:
    return History.from_events(events)


# --- S1 ------------------------------------------------------------------------------------


def test_s1_names_the_quorum_and_twelve_characters_of_each_fingerprint():
    events = [
        _commit("n1", 3, 1.0, fp="0123456789abcdefAAAA", quorum="q7"),
        _commit("n2", 3, 1.1, fp="fedcba9876543210BBBB", quorum="q7"),
    ]
    result = neutral.check_s1(_history(events))
    assert result.status == "invalid"
    assert result.message == (
        "step 3 (quorum q7): n1 holds param_fp 0123456789ab but n2 holds fedcba987654"
    )
    assert result.checked == 2


def test_s1_counts_every_commit_it_compared():
    events = _steps(WORLD, range(4), lambda s: s + 0.5)
    result = neutral.check_s1(_history(events))
    assert result.status == "valid" and result.checked == 12


def test_s1_without_any_commit_is_unknown():
    result = neutral.check_s1(_history([_mark("steady_state", 1.0), _mark("run_end", 9.0)]))
    assert result.status == "unknown" and "no step was committed" in result.message


# --- L1 (D = 1 s) --------------------------------------------------------------------------

D1 = Bounds(detection_s=1.0)


def _before_crash_of_n3(n3_last_step: int) -> list:
    """Steps 0..3 every 0.5 s; n3 committed only up to ``n3_last_step``."""
    events = _steps(PAIR, range(4), lambda s: s * 0.5)
    events += _steps(["n3"], range(n3_last_step + 1), lambda s: s * 0.5)
    return events


def test_l1_a_step_two_past_the_crashed_nodes_last_commit_may_not_count_it():
    # n3 lagged: its last commit was step 2, the others' step 3.  Step 4 with n3 among
    # its participants after n3's crash is not the step in flight at the crash (that is
    # n3's step 3): a violation, whatever the others had committed.
    events = _before_crash_of_n3(2) + [_fault("crash", ["n3"], 1.6)]
    events += _steps(PAIR, [4], lambda s: 1.8)
    events += _steps(PAIR, [5], lambda s: 2.0, participants=PAIR)
    result = neutral.check_l1(_history(events), D1)
    assert result.status == "invalid"
    assert result.message.startswith("n1 committed step 4 with n3 among its participants")
    assert "(0.20s after its crash)" in result.message


def test_l1_the_step_in_flight_at_the_crash_may_still_count_the_dead_node():
    # n3 committed step 3 at the very moment it was killed: step 4 was in flight.
    events = _before_crash_of_n3(2) + [_commit("n3", 3, 1.6), _fault("crash", ["n3"], 1.6)]
    events += _steps(PAIR, [4], lambda s: 1.8)
    events += _steps(PAIR, [5], lambda s: 2.0, participants=PAIR)
    result = neutral.check_l1(_history(events), D1)
    assert result.status == "valid", result.message
    assert result.message.startswith("1 crash(es)")


def test_l1_a_node_killed_before_its_first_commit_may_be_counted_in_step_0_only():
    start = [_fault("crash", ["n3"], 0.1)]
    in_flight = start + _steps(PAIR, [0], lambda s: 0.3) + _steps(PAIR, [1], lambda s: 0.6, PAIR)
    assert neutral.check_l1(_history(in_flight), D1).status == "valid"
    late = start + _steps(PAIR, [1], lambda s: 0.6) + _steps(PAIR, [2], lambda s: 0.9, PAIR)
    assert neutral.check_l1(_history(late), D1).status == "invalid"


def test_l1_a_step_committed_as_the_dead_node_restarts_may_count_it():
    events = _before_crash_of_n3(3) + [_fault("crash", ["n3"], 1.6)]
    events += _steps(PAIR, [4], lambda s: 1.8, participants=PAIR)
    events += [_fault("restart", ["n3"], 3.0)] + _steps(PAIR, [5], lambda s: 3.0)
    assert neutral.check_l1(_history(events), D1).status == "valid"


def test_l1_a_group_formed_at_the_crash_instant_is_no_detection():
    # A group "without n3" logged at the instant of the kill was formed before anyone
    # could notice; nothing else leaves n3 out before its restart 2.4 s later.
    for left_out in (_group("n1", 1.6, PAIR), _commit("n1", 4, 1.6, participants=PAIR)):
        events = _before_crash_of_n3(3) + [_fault("crash", ["n3"], 1.6), left_out]
        events += [_fault("restart", ["n3"], 4.0), _mark("run_end", 6.0)]
        result = neutral.check_l1(_history(events), D1)
        assert result.status == "invalid", type(left_out).__name__
        assert "no live node formed a group without it" in result.message


def test_l1_detection_exactly_at_d_meets_d():
    events = _before_crash_of_n3(3) + [_fault("crash", ["n3"], 2.0)]
    events += _steps(PAIR, [4], lambda s: 3.0, participants=PAIR)
    result = neutral.check_l1(_history(events), D1)
    assert result.status == "valid" and result.checked == 1


def test_l1_a_group_formed_as_the_node_restarts_is_judged_as_late():
    events = _before_crash_of_n3(3) + [_fault("crash", ["n3"], 2.0)]
    events += [_fault("restart", ["n3"], 3.5), _group("n1", 3.5, PAIR)]
    result = neutral.check_l1(_history(events), D1)
    assert result.status == "invalid" and "formed after 1.50s" in result.message


@pytest.mark.parametrize("crash_at", [5.0, 5.5])
def test_l1_a_crash_the_run_ends_within_d_of_decides_nothing(crash_at):
    events = _steps(WORLD, range(11), lambda s: s * 0.5) + [_fault("crash", ["n3"], crash_at)]
    events.append(_mark("run_end", 6.0))
    result = neutral.check_l1(_history(events), D1)
    assert result.status == "unknown" and result.checked == 0


# --- L2 (R = 5 s) --------------------------------------------------------------------------

R5 = Bounds(recovery_s=5.0)


def test_l2_without_any_commit_is_unknown_however_long_the_run():
    events = [_mark("steady_state", 0.0), _group("n1", 0.5, WORLD), _group("n2", 0.5, WORLD)]
    events += [_group("n3", 0.5, WORLD), _mark("run_end", 60.0)]
    result = neutral.check_l2(_history(events), R5)
    assert result.status == "unknown" and result.message == "no step was committed at all"


def test_l2_a_gap_names_the_nodes_left_alone_through_it_and_the_fault_before():
    # n3 is crashed at 5 s; commits stop from 4 s to 12 s (8 s > R).  Later stretches
    # (n3 back at 14 s, n2 crashed at 16 s) do not overlap the gap: n1 and n2 were the
    # nodes left alone through it.
    events = [_mark("steady_state", 0.0)]
    events += _steps(WORLD, range(5), lambda s: float(s))
    events += [_fault("crash", ["n3"], 5.0)]
    events += _steps(PAIR, [5], lambda s: 12.0, participants=PAIR)
    events += [_fault("restart", ["n3"], 14.0)]
    events += _steps(WORLD, [6, 7], lambda s: 8.5 + s)
    events += [_fault("crash", ["n2"], 16.0)]
    events += _steps(["n1", "n3"], [8, 9, 10], lambda s: 9.0 + s, participants=["n1", "n3"])
    events += [_mark("run_end", 20.0)]
    result = neutral.check_l2(_history(events), R5)
    assert result.status == "invalid"
    assert result.message == (
        "no step committed for 8.00s (> R = 5.0s) while n1, n2 were left alone by the "
        "harness; after crash n3 at t_mono 5.00"
    )


def test_l2_gaps_of_exactly_r_meet_r_and_the_window_edges_are_judged():
    # Commits at the window's first and last instants, 5 s apart, and a tail of 5 s.
    events = [_mark("steady_state", 1.0), _commit("n1", 0, 1.0), _commit("n1", 1, 6.0)]
    events += [_commit("n1", 2, 11.0), _mark("run_end", 16.0), _commit("n2", 3, 16.0)]
    events += [_group("n3", 0.5, WORLD)]
    result = neutral.check_l2(_history(events), R5)
    assert result.status == "valid", result.message
    assert result.checked == 4
    assert result.message.startswith("steps committed at most 5.00s apart over 15.0s")


@pytest.mark.parametrize(
    ("end_at", "status"), [(10.2, "valid"), (13.0, "unknown"), (15.5, "invalid")]
)
def test_l2_a_history_that_ends_in_a_stall_shorter_than_r_is_undecided(end_at, status):
    # A commit a second until 9 s; the run ends 1.2, 4 or 6.5 s later (R = 5 s).
    events = [_mark("steady_state", 0.0), *_steps(WORLD, range(10), float)]
    events += [_mark("run_end", end_at)]
    result = neutral.check_l2(_history(events), R5)
    assert result.status == status, result.message
    if status == "unknown":
        assert result.message.startswith("the history ends 4.00s after the last commit")
        assert [ref.index for ref in result.evidence] == [len(events) - 2]


def test_l2_a_gap_cites_the_last_commit_before_it_first():
    # The commit before the gap is the history's first event (index 0).
    events = [_commit("n1", 0, 0.0), _commit("n1", 1, 9.0), _group("n2", 9.5, WORLD)]
    events += [_group("n3", 9.6, WORLD), _mark("run_end", 10.0)]
    history = _history(events)
    result = neutral.check_l2(history, R5)
    assert result.status == "invalid"
    assert [ref.index for ref in result.evidence] == [0, 1]
    assert result.evidence[0].note == "last before the gap"


def test_l2_a_silent_tail_cites_the_last_commit_even_at_index_0():
    events = [_commit("n1", 0, 0.0), _group("n2", 0.1, WORLD), _group("n3", 0.2, WORLD)]
    events += [_mark("run_end", 9.0)]
    result = neutral.check_l2(_history(events), R5)
    assert result.status == "invalid" and "in the last 9.00s" in result.message
    assert [ref.index for ref in result.evidence] == [0]


def test_l2_a_node_that_errors_while_the_harness_has_it_crashed_is_not_judged():
    events = [_mark("steady_state", 0.0)] + _steps(WORLD, [0], lambda s: 0.5)
    events += [_fault("crash", ["n3"], 1.0)]
    events += [NodeError(t_wall=1.5, t_mono=1.5, node="n3", error="killed: SIGKILL")]
    events += _steps(PAIR, range(1, 9), lambda s: float(s), participants=PAIR)
    events += [_mark("run_end", 9.0)]
    assert neutral.check_l2(_history(events), R5).status == "valid"


def test_l2_a_self_death_cites_at_most_200_characters_of_its_error():
    events = [_mark("steady_state", 0.0)] + _steps(WORLD, range(9), lambda s: float(s))
    events += [NodeError(t_wall=4.5, t_mono=4.5, node="n2", error="E" * 300)]
    events += [_mark("run_end", 9.0)]
    result = neutral.check_l2(_history(events), R5)
    assert result.status == "invalid" and "died on its own" in result.message
    assert result.evidence[-1].note == "E" * 200


# --- L2's premise: what the harness left alone ----------------------------------------------


def _stretches(events: list) -> list[tuple[float, float, tuple[str, ...]]]:
    return [(s.start, s.end, s.left_alone) for s in neutral.premise_stretches(_history(events))]


def _isolate_n3(t: float) -> Fault:
    cuts = [["n3", "n1"], ["n1", "n3"], ["n3", "n2"], ["n2", "n3"]]
    return _fault("partition", ["n3"], t, grouping="isolate", cuts=cuts)


def _world_events(end: float = 10.0) -> list:
    return [_mark("steady_state", 0.0), *_steps(WORLD, [0], lambda s: 0.0), _mark("run_end", end)]


@pytest.mark.parametrize(
    "heal",
    [_fault("heal", [], 4.0), _fault("partition", ["n3"], 4.0, phase="heal")],
    ids=["heal-all", "partition-heal"],
)
def test_a_heal_restores_every_cut_of_a_partition(heal):
    # Both backends log a partition's heal without its cuts (the harness heals every
    # partition at once, scope "partition").
    events = _world_events() + [_isolate_n3(2.0), heal]
    assert _stretches(events) == [(0.0, 2.0, tuple(WORLD)), (2.0, 4.0, tuple(PAIR)),
                                  (4.0, 10.0, tuple(WORLD))]  # fmt: skip


@pytest.mark.parametrize(
    "heal",
    [_fault("heal", [], 4.0), _fault("partition", ["n3"], 4.0, phase="heal")],
    ids=["heal-all", "partition-heal"],
)
def test_a_partition_without_its_cuts_leaves_its_stretch_unjudged(heal):
    events = _world_events() + [_fault("partition", ["n3"], 2.0), heal]
    assert _stretches(events) == [(0.0, 2.0, tuple(WORLD)), (4.0, 10.0, tuple(WORLD))]


def test_one_of_two_overlapping_link_faults_healed_leaves_the_other_unjudged():
    events = _world_events() + [_fault("latency", ["n1"], 2.0), _fault("latency", ["n2"], 3.0)]
    events += [_fault("latency", ["n1"], 5.0, phase="heal"), _fault("latency", ["n2"], 7.0,
                                                                    phase="heal")]  # fmt: skip
    assert _stretches(events) == [(0.0, 2.0, tuple(WORLD)), (7.0, 10.0, tuple(WORLD))]


def test_the_quiesce_ends_link_faults_left_open():
    events = _world_events() + [_fault("latency", ["n1"], 2.0), _mark("quiesce", 4.0)]
    assert _stretches(events) == [(0.0, 2.0, tuple(WORLD)), (4.0, 10.0, tuple(WORLD))]


def test_the_judging_window_ends_at_the_run_end_mark():
    events = _world_events(end=8.0) + [_commit("n1", 1, 9.0), _fault("crash", WORLD, 9.5)]
    assert _stretches(events) == [(0.0, 8.0, tuple(WORLD))]


def test_a_stretch_says_which_harness_event_opened_it():
    # The crash falls exactly on the steady-state mark: it opens the first judged stretch.
    events = [_mark("steady_state", 2.0), _fault("crash", ["n3"], 2.0)]
    events += _steps(WORLD, [0], lambda s: 1.0) + [_mark("run_end", 6.0)]
    history = _history(events)
    crash_index = next(i for i, e in enumerate(history.events) if isinstance(e, Fault))
    assert [(s.start, s.opened_by) for s in neutral.premise_stretches(history)] == [
        (2.0, crash_index)
    ]
    later = _world_events() + [_fault("crash", ["n3"], 4.0)]
    assert [s.opened_by for s in neutral.premise_stretches(_history(later))][0] == -1


def test_touching_stretches_join_into_one_span_and_a_gap_starts_another():
    events = _world_events() + [_fault("latency", ["n1"], 2.0)]
    events += [_fault("latency", ["n1"], 4.0, phase="heal"), _fault("crash", ["n3"], 6.0)]
    history = _history(events)
    heal_index = [i for i, e in enumerate(history.events) if isinstance(e, Fault)][1]
    assert neutral._joined(neutral.premise_stretches(history)) == [
        (0.0, 2.0, -1),
        (4.0, 10.0, heal_index),
    ]


def test_the_checkers_value_types_are_immutable():
    down = neutral.Down("n3", 1.0, 2.0, 0)
    stretch = neutral.Stretch(0.0, 1.0, ("n1", "n2"), -1)
    death = neutral.SelfDeath("n2", 1.0, 3, "found not running at the quiesce")
    for value in (down, stretch, death):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.node = "x" if hasattr(value, "node") else value.start  # type: ignore[misc]
        assert hash(value) == hash(dataclasses.replace(value))


# --- who crashed, and who died on its own ----------------------------------------------------


def test_a_crash_window_ends_only_at_that_nodes_restart():
    events = [_fault("crash", ["n3"], 2.0), _isolate_n3(3.0)]
    events += [_fault("partition", ["n3"], 3.5, phase="heal"), _fault("pause", ["n3"], 4.0)]
    events += [_fault("restart", ["n3"], 6.0)]
    history = _history(events)
    assert neutral.crash_windows(history) == [neutral.Down("n3", 2.0, 6.0, 0)]


def _quiesce_restart(node: str, t: float) -> Fault:
    return _fault("crash", [node], t, phase="heal", quiesce=True)


def test_a_node_error_and_the_quiesce_restart_after_it_are_one_death():
    events = [_commit("n2", 0, 0.5), NodeError(t_wall=1, t_mono=1.0, node="n2", error="boom")]
    events += [_quiesce_restart("n2", 5.0)]
    assert [(d.node, d.how) for d in neutral.self_deaths(_history(events))] == [("n2", "boom")]


def test_a_node_that_errors_restarts_and_dies_silently_died_twice():
    from swarmshake.reference_node.protocol.history import Start

    events = [_commit("n2", 0, 0.5), NodeError(t_wall=1, t_mono=1.0, node="n2", error="boom")]
    events += [_fault("restart", ["n2"], 2.0), Start(t_wall=2.1, t_mono=2.1, node="n2")]
    events += [_commit("n2", 1, 2.5), _quiesce_restart("n2", 5.0)]
    deaths = neutral.self_deaths(_history(events))
    assert [(d.node, d.t, d.how) for d in deaths] == [
        ("n2", 1.0, "boom"),
        ("n2", 2.5, "found not running at the quiesce"),
    ]


def test_a_node_crashed_and_restarted_by_the_harness_can_still_die_on_its_own():
    events = [_commit("n2", 0, 0.5), _fault("crash", ["n2"], 1.0)]
    events += [_fault("crash", ["n2"], 2.0, phase="heal"), _commit("n2", 1, 3.0)]
    events += [_quiesce_restart("n2", 5.0)]
    deaths = neutral.self_deaths(_history(events))
    assert [(d.node, d.t) for d in deaths] == [("n2", 3.0)]


# --- L3 (J = 5 s) --------------------------------------------------------------------------

J5 = Bounds(rejoin_s=5.0)


def _n3_restarted_at(t: float, n3_commits: list) -> list:
    events = _steps(WORLD, range(3), lambda s: float(s)) + [_fault("crash", ["n3"], 2.5)]
    events += [_fault("restart", ["n3"], t)]
    events += _steps(PAIR, range(3, 12), lambda s: float(s))
    return events + n3_commits


def test_l3_a_restarted_node_that_never_commits_has_not_rejoined():
    result = neutral.check_l3(_history(_n3_restarted_at(4.0, [])), J5)
    assert result.status == "invalid" and result.checked == 1
    assert "(7.00s observed, J = 5.0s)" in result.message


def test_l3_a_restarted_node_whose_commits_match_no_peer_has_not_rejoined():
    alone = [_commit("n3", s, s + 0.2, fp=f"diverged{s}") for s in range(5, 11)]
    result = neutral.check_l3(_history(_n3_restarted_at(4.0, alone)), J5)
    assert result.status == "invalid" and "never committed a step its peers agree on" in (
        result.message
    )


def test_l3_a_late_match_is_a_violation_and_one_exactly_at_j_is_not():
    late = neutral.check_l3(_history(_n3_restarted_at(4.0, [_commit("n3", 10, 10.0)])), J5)
    assert late.status == "invalid" and "6.00s after its restart" in late.message
    on_time = neutral.check_l3(_history(_n3_restarted_at(4.0, [_commit("n3", 9, 9.0)])), J5)
    assert on_time.status == "valid"


def test_l3_a_commit_at_the_restart_instant_counts():
    result = neutral.check_l3(
        _history(_n3_restarted_at(4.0, [_commit("n3", 4, 4.0), _commit("n3", 5, 5.0)])),
        Bounds(rejoin_s=0.5),
    )
    assert result.status == "valid"


@pytest.mark.parametrize("restart_at", [6.0, 7.0])
def test_l3_a_restart_the_run_ends_within_j_of_decides_nothing(restart_at):
    events = _n3_restarted_at(restart_at, []) + [_mark("run_end", 11.0)]
    assert neutral.check_l3(_history(events), J5).status == "unknown"


def test_l2_judges_a_stall_after_a_healed_partition_and_a_minority_crash():
    # n3 is isolated from 2 s to 4 s; n1 crashes at 6 s; n2 and n3 (a connected
    # majority once the partition healed) commit nothing for 14 s.  Before the fix the
    # partition's heal (logged without its cuts) left n2-n3 "cut" for ever: no majority
    # was left alone after 6 s and the stall went unjudged (L2 valid).
    events = [_mark("steady_state", 0.0)] + _steps(WORLD, range(6), lambda s: float(s))
    events += [_isolate_n3(2.0), _fault("partition", ["n3"], 4.0, phase="heal")]
    events += [_fault("crash", ["n1"], 6.0), _mark("run_end", 20.0)]
    result = neutral.check_l2(_history(events), R5)
    assert result.status == "invalid"
    assert "in the last 15.00s" in result.message and "n2, n3 were left alone" in result.message


def test_other_faults_on_a_crashed_node_do_not_make_its_quiesce_restart_a_death():
    # The harness crashed n2; a partition touched it (inject and heal) while it was down;
    # the quiesce restarted it.  n2 did not die on its own.
    events = [_commit("n2", 0, 0.5), _fault("crash", ["n2"], 1.0), _isolate_n3(1.5)]
    events += [_fault("partition", ["n2", "n3"], 2.0, phase="heal"), _quiesce_restart("n2", 5.0)]
    assert neutral.self_deaths(_history(events)) == []


def test_a_node_error_and_the_events_logged_on_the_way_out_are_one_death():
    from swarmshake.reference_node.protocol.history import Stop

    events = [_commit("n2", 0, 0.5), NodeError(t_wall=1, t_mono=1.0, node="n2", error="boom")]
    events += [Stop(t_wall=1.1, t_mono=1.1, node="n2", reason="error"), _quiesce_restart("n2", 5.0)]
    assert [(d.node, d.how) for d in neutral.self_deaths(_history(events))] == [("n2", "boom")]


def test_l2_a_silent_tail_of_exactly_r_meets_r():
    events = [_mark("steady_state", 1.0), _commit("n1", 0, 1.0), _commit("n1", 1, 6.0)]
    events += [_group("n2", 0.5, WORLD), _group("n3", 0.5, WORLD), _mark("run_end", 11.0)]
    assert neutral.check_l2(_history(events), R5).status == "valid"


def test_l1_a_step_committed_at_the_crash_instant_may_count_the_node():
    # n3 lagged two steps; the others' step 3, counting n3, is logged at the instant of
    # the kill: it was formed before it, so it is no violation.
    events = _before_crash_of_n3(1) + [_fault("crash", ["n3"], 1.6)]
    events += _steps(PAIR, [4], lambda s: 1.6) + _steps(PAIR, [5], lambda s: 2.0, PAIR)
    assert neutral.check_l1(_history(events), D1).status == "valid"
