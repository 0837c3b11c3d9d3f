"""The neutral history: any system's events decode, and the neutral checkers judge them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarmshake.reference_node.protocol.history import Commit, History, decode_event, known_kinds
from swarmshake.verify.checkers import Bounds, check_history, neutral
from swarmshake.verify.history import (
    HARNESS,
    REFERENCE_KINDS,
    EventBase,
    Fault,
    MembershipChange,
    RunMark,
    RunSystem,
    StepCommitted,
    encode_event,
    load_history,
    missing_kinds,
    register_kind,
    step_commits,
    write_history,
)

WORLD = ["n1", "n2", "n3"]
TE = RunSystem("torchelastic", frozenset({"start", "step_committed", "membership", "fault"}))
TE_TORCHFT = RunSystem(
    "torchft", frozenset({"start", "step_committed", "membership", "node_error", "fault"})
)


def commit(
    node: str, step: int, t: float, fp: str = "aa", members=WORLD, quorum="q0"
) -> StepCommitted:
    return StepCommitted(
        t_wall=t, t_mono=t, node=node, step=step, participants=list(members), param_fp=fp,
        quorum_id=quorum,
    )  # fmt: skip


def fault(op: str, phase: str, node: str, t: float) -> Fault:
    return Fault(t_wall=t, t_mono=t, node=HARNESS, op=op, target=[node], phase=phase)  # type: ignore[arg-type]


def steady(t0: float, t1: float, members=WORLD, quorum="q0", fp=lambda s: f"fp{s}") -> list:
    events = []
    for step, t in enumerate(x / 2 for x in range(int(t0 * 2), int(t1 * 2))):
        for node in members:
            events.append(commit(node, step + int(t0 * 10), t, fp(step), members, quorum))
    return events


def test_neutral_kinds_decode_through_the_reference_readers():
    event = commit("n1", 3, 1.0)
    assert decode_event(encode_event(event)) == event
    assert "step_committed" in known_kinds() and "membership" in known_kinds()


def test_a_system_registers_its_own_kind_and_a_clash_is_refused():
    @register_kind
    class QuorumTick(EventBase, tag="test_quorum_tick", kw_only=True, frozen=True):
        quorum_id: str

    line = encode_event(QuorumTick(t_wall=1.0, t_mono=1.0, node="n1", quorum_id="7"))
    assert decode_event(line).quorum_id == "7"

    class Clash(EventBase, tag="commit", kw_only=True, frozen=True):
        pass

    with pytest.raises(ValueError, match="exists already"):
        register_kind(Clash)


def test_reference_commits_map_onto_step_committed():
    history = History.from_events([
        Commit(t_wall=1, t_mono=1, node="n1", step=4, value_fp="v", contributors=["n1", "n2"],
               param_fp="p"),
    ])  # fmt: skip
    (view,) = step_commits(history)
    assert (view.step, view.participants, view.param_fp) == (4, ("n1", "n2"), "p")
    assert missing_kinds({"step_committed"}, {"commit"}) == []


def test_s1_finds_two_fingerprints_for_one_step_of_one_quorum():
    events = steady(0, 3)
    events.append(commit("n3", 100, 3.5, fp="x"))
    events.append(commit("n1", 100, 3.5, fp="y"))
    verdict = check_history(History.from_events(events), Bounds(), TE)
    assert verdict.results["S1"].status == "invalid"
    assert "step 100" in verdict.results["S1"].message


def test_a_rollback_to_a_checkpoint_is_a_new_quorum_not_a_violation():
    events = steady(0, 3, quorum="q0", fp=lambda s: f"a{s}")
    events += steady(0, 3, quorum="q1", fp=lambda s: f"b{s}")  # same steps, new group
    result = neutral.check_s1(History.from_events(events))
    assert result.status == "valid"


def test_l1_valid_when_the_next_group_leaves_the_dead_node_out_within_d():
    events = steady(0, 2) + [fault("crash", "inject", "n3", 2.2)]
    events.append(MembershipChange(t_wall=3, t_mono=3.0, node="n1", members=["n1", "n2"],
                                   quorum_id="q1"))  # fmt: skip
    events += steady(3.2, 5, members=["n1", "n2"], quorum="q1")
    events.append(fault("crash", "heal", "n3", 6.0))
    verdict = check_history(History.from_events(events), Bounds(detection_s=2.0), TE)
    assert verdict.results["L1"].status == "valid", verdict.results["L1"].message


def test_l1_invalid_when_a_step_commits_with_the_dead_node_as_participant():
    events = steady(0, 2) + [fault("crash", "inject", "n3", 2.2)]
    events += [commit(n, 50, 3.0) for n in ("n1", "n2")]  # claims n3 took part
    events.append(fault("crash", "heal", "n3", 3.5))
    result = neutral.check_l1(History.from_events(events), Bounds(detection_s=2.0))
    assert result.status == "invalid" and "among its participants" in result.message


def test_l1_invalid_when_no_group_forms_within_d():
    events = steady(0, 2) + [fault("crash", "inject", "n3", 2.2)]
    events.append(fault("crash", "heal", "n3", 8.0))
    result = neutral.check_l1(History.from_events(events), Bounds(detection_s=2.0))
    assert result.status == "invalid" and "no live node formed a group" in result.message


def test_l2_and_l3_after_a_restart():
    events = steady(0, 2) + [fault("crash", "inject", "n3", 2.2), fault("crash", "heal", "n3", 3.0)]
    events += steady(4, 6, quorum="q1")
    events.append(RunMark(t_wall=6, t_mono=6.0, node=HARNESS, mark="run_end"))
    history = History.from_events(events)
    assert neutral.check_l2(history, Bounds(recovery_s=5)).status == "valid"
    assert neutral.check_l3(history, Bounds(rejoin_s=5)).status == "valid"
    assert neutral.check_l2(history, Bounds(recovery_s=0.5)).status == "invalid"
    stuck = History.from_events(steady(0, 2) + [
        fault("crash", "inject", "n3", 2.2), fault("crash", "heal", "n3", 3.0),
        RunMark(t_wall=20, t_mono=20.0, node=HARNESS, mark="run_end"),
    ])  # fmt: skip
    assert neutral.check_l3(stuck, Bounds(rejoin_s=5)).status == "invalid"


def test_properties_a_system_cannot_record_are_unknown_with_the_reason():
    only_steps = RunSystem("mine", frozenset({"step_committed"}))
    verdict = check_history(History.from_events(steady(0, 2)), Bounds(), only_steps)
    assert verdict.results["S4"].status == "unknown"
    assert "suspect/declare_dead" in verdict.results["S4"].message
    assert verdict.results["L1"].status == "unknown"
    assert "does not write fault" in verdict.results["L1"].message
    assert verdict.results["S1"].status == "valid"
    assert verdict.status == "unknown"


def test_run_system_is_read_from_run_json_and_old_runs_are_reference(tmp_path):
    assert RunSystem.of(tmp_path).produces is None
    (tmp_path / "run.json").write_text(
        json.dumps({"system": "torchelastic", "produces": ["step_committed"]})
    )
    system = RunSystem.of(tmp_path)
    assert system.name == "torchelastic" and system.produces == {"step_committed"}
    # Judged by what a system writes, not by its name: a fork of the reference node
    # writing its whole vocabulary gets the reference checkers, and a "reference"
    # that writes less the neutral ones.
    everything = sorted(REFERENCE_KINDS)
    (tmp_path / "run.json").write_text(json.dumps({"system": "my-fork", "produces": everything}))
    assert RunSystem.of(tmp_path).produces is None
    (tmp_path / "run.json").write_text(
        json.dumps({"system": "reference", "produces": ["step_committed", "fault"]})
    )
    assert RunSystem.of(tmp_path).produces == {"step_committed", "fault"}
    (tmp_path / "run.json").write_text(json.dumps({"system": "reference"}))  # an old record
    assert RunSystem.of(tmp_path).produces is None
    write_history(tmp_path / "events" / "n1.jsonl", steady(0, 1))
    assert len(load_history(tmp_path).events) == 2 * len(WORLD)


def mark(name: str, t: float) -> RunMark:
    return RunMark(t_wall=t, t_mono=t, node=HARNESS, mark=name)


def test_l2_a_stall_of_the_survivors_while_one_node_is_down_is_invalid():
    """n3 is killed: n1 and n2 (a majority the harness left alone) must go on within R."""
    events = [mark("steady_state", 0.0), *steady(0, 3)]
    events += [fault("crash", "inject", "n3", 3.2), fault("crash", "heal", "n3", 13.2)]
    events += steady(64, 70, members=["n1", "n2"], quorum="q1")  # one 60 s timeout later
    events.append(mark("run_end", 70.0))
    result = neutral.check_l2(History.from_events(events), Bounds(recovery_s=30))
    assert result.status == "invalid", result.message
    assert "no step committed for 61.50s" in result.message and "n1, n2" in result.message
    assert "after crash n3" in result.message
    assert [ref.kind for ref in result.evidence] == ["step_committed", "step_committed"]
    # The same history with the survivors back after 5 s holds.
    quick = [e for e in events if e.t_mono < 60.0 or e.node == HARNESS]
    quick += steady(8, 70, members=["n1", "n2"], quorum="q1")
    assert neutral.check_l2(History.from_events(quick), Bounds(recovery_s=30)).status == "valid"


def test_l2_judges_a_partition_by_its_connected_majority_and_skips_other_link_faults():
    isolate = Fault(t_wall=3, t_mono=3.0, node=HARNESS, op="partition", target=WORLD,
                    params={"cuts": [["n1", "n3"], ["n2", "n3"]]}, phase="inject")  # fmt: skip
    heal = Fault(t_wall=50, t_mono=50.0, node=HARNESS, op="partition", target=WORLD,
                 phase="heal")  # fmt: skip
    events = [mark("steady_state", 0.0), *steady(0, 3), isolate, heal, *steady(50, 55)]
    events.append(mark("run_end", 55.0))
    result = neutral.check_l2(History.from_events(events), Bounds(recovery_s=30))
    assert result.status == "invalid" and "n1, n2 were left alone" in result.message
    # A black hole is not judged: whether the others count as connected is not known.
    hole = [
        msgspec_replace(e, op="blackhole", params={}) if isinstance(e, Fault) else e for e in events
    ]
    result = neutral.check_l2(History.from_events(hole), Bounds(recovery_s=30))
    assert result.status == "valid", result.message
    # Cutting a majority apart (every pair) leaves no majority: not judged either.
    split = Fault(t_wall=3, t_mono=3.0, node=HARNESS, op="partition", target=WORLD,
                  params={"cuts": [["n1", "n2"], ["n1", "n3"], ["n2", "n3"]]}, phase="inject")  # fmt: skip
    alone = [split if e is isolate else e for e in events]
    assert neutral.check_l2(History.from_events(alone), Bounds(recovery_s=30)).status == "valid"


def msgspec_replace(event, **changes):
    import msgspec

    return msgspec.structs.replace(event, **changes)


def test_l2_a_survivor_that_dies_on_its_own_is_invalid():
    from swarmshake.verify.history import NodeError

    events = [mark("steady_state", 0.0), *steady(0, 3), fault("crash", "inject", "n3", 3.2)]
    events.append(NodeError(t_wall=3.3, t_mono=3.3, node="n1", step=6, error="AssertionError",
                            where="torchft/ddp.py:76"))  # fmt: skip
    events += [fault("crash", "heal", "n3", 13.2), *steady(14, 20, members=["n2", "n3"])]
    events.append(mark("run_end", 20.0))
    result = neutral.check_l2(History.from_events(events), Bounds(recovery_s=30))
    assert result.status == "invalid"
    assert "n1 died on its own (AssertionError)" in result.message
    assert result.evidence[0].kind == "node_error"


def test_l2_a_death_only_the_quiesce_restart_shows_is_invalid_a_crashed_node_is_not():
    quiesce_restart = Fault(t_wall=40, t_mono=40.0, node=HARNESS, op="crash", target=["n2"],
                            params={"quiesce": True}, phase="heal")  # fmt: skip
    events = [mark("steady_state", 0.0), *steady(0, 3), fault("crash", "inject", "n3", 3.2)]
    events += steady(4, 10, members=["n1", "n2"], quorum="q1")
    events = [e for e in events if not (e.node == "n2" and e.t_mono > 6)]  # n2 goes silent
    events += [fault("crash", "heal", "n3", 13.2), *steady(14, 40, members=["n1", "n3"])]
    events += [quiesce_restart, mark("quiesce", 40.0), *steady(41, 45), mark("run_end", 45.0)]
    result = neutral.check_l2(History.from_events(events), Bounds(recovery_s=30))
    assert result.status == "invalid"
    assert "n2 died on its own (found not running at the quiesce)" in result.message
    assert result.evidence[0].node == "n2" and result.evidence[0].t_mono <= 6.0
    # The harness's own crash of n2, restarted at the quiesce, is no death of its own.
    crashed = [*events, fault("crash", "inject", "n2", 6.1)]
    result = neutral.check_l2(History.from_events(crashed), Bounds(recovery_s=30))
    assert result.status == "valid", result.message


def test_l2_says_unknown_when_the_harness_never_left_a_majority_alone():
    events = [mark("steady_state", 0.0), *steady(0, 3)]
    events += [fault("pause", "inject", n, 3.0) for n in ("n1", "n2")]
    events += [mark("quiesce", 30.0)]
    events += [mark("run_end", 30.0)]
    result = neutral.check_l2(History.from_events(events), Bounds(recovery_s=5))
    assert result.status == "valid" and "over 3.0s" in result.message  # until the pause
    only_faulted = [mark("steady_state", 3.0), *events[1:]]
    result = neutral.check_l2(History.from_events(only_faulted), Bounds(recovery_s=5))
    assert result.status == "unknown" and "no stretch" in result.message


# Real torchft 0.2.0 histories (3 replica groups, gloo, local backend; session 5),
# trimmed: every harness event and every node event but ``collective``, every commit
# within 1 s of a fault or bounding a gap of more than 1 s, every 10th commit else.
REAL = Path(__file__).parent / "data" / "torchft"


def real(name: str) -> History:
    return History.from_events(
        decode_event(line) for line in (REAL / name).read_bytes().splitlines() if line.strip()
    )


def test_real_torchft_survivors_stalled_after_a_kill_inside_the_allreduce():
    """n3 killed as it logged step 15's all-reduce (Manager.allreduce): both survivors
    got gloo's "Connection reset by peer" inside the all-reduce, n2 asked for a new
    quorum at once, n1's next should_commit came 12.5 s later, and neither committed
    until n3, restarted by the harness after 10 s, had rejoined (12.9 s gap)."""
    history = real("allreduce-kill-stall-12s.jsonl")
    stalled = neutral.check_l2(history, Bounds(recovery_s=10))
    assert stalled.status == "invalid", stalled.message
    assert "no step committed for 12.91s" in stalled.message
    assert "n1, n2 were left alone" in stalled.message and "after crash n3" in stalled.message
    assert neutral.check_l2(history, Bounds(recovery_s=30)).status == "valid"


def test_real_torchft_fault_free_stretch_is_valid():
    history = real("fault-free-47s.jsonl")
    verdict = check_history(history, Bounds(recovery_s=10, detection_s=20), TE_TORCHFT)
    assert verdict.results["L2"].status == "valid", verdict.results["L2"].message
    assert verdict.results["S1"].status == "valid"
    assert "at most 2.31s apart" in verdict.results["L2"].message


def test_l2_premise_follows_restart_resume_heal_all_and_the_quiesce():
    events = [mark("steady_state", 0.0), *steady(0, 2)]
    events += [fault("crash", "inject", "n1", 2.0), fault("pause", "inject", "n2", 2.0)]
    events += [fault("restart", "inject", "n1", 4.0), fault("resume", "inject", "n2", 6.0)]
    events += [fault("latency", "inject", "n3", 8.0), fault("latency", "heal", "n3", 10.0)]
    events += [fault("blackhole", "inject", "n3", 12.0)]
    events += [Fault(t_wall=14, t_mono=14.0, node=HARNESS, op="heal", target=WORLD,
                     params={"scope": "all"}, phase="heal")]  # fmt: skip
    events += [fault("cpu_throttle", "inject", "n3", 16.0), mark("quiesce", 18.0)]
    events.append(mark("run_end", 20.0))
    stretches = neutral.premise_stretches(History.from_events(events))
    assert [(s.start, s.end, s.left_alone) for s in stretches] == [
        (0.0, 2.0, ("n1", "n2", "n3")),  # both faulted at 2: no majority until n1 is back
        (4.0, 6.0, ("n1", "n3")),
        (6.0, 8.0, ("n1", "n2", "n3")),  # latency 8-10 and the black hole 12-14: not judged
        (10.0, 12.0, ("n1", "n2", "n3")),
        (14.0, 16.0, ("n1", "n2", "n3")),
        (16.0, 18.0, ("n1", "n2")),  # a throttled node is faulted; the quiesce heals it
        (18.0, 20.0, ("n1", "n2", "n3")),
    ]
    assert [s.opened_by >= 0 for s in stretches] == [False] + [True] * 6


def test_l2_no_commit_in_the_last_part_of_a_stretch_is_invalid():
    events = [mark("steady_state", 0.0), *steady(0, 3), fault("crash", "inject", "n3", 3.0)]
    events.append(mark("run_end", 40.0))
    result = neutral.check_l2(History.from_events(events), Bounds(recovery_s=30))
    assert result.status == "invalid"
    assert "no step committed in the last 37.50s" in result.message
    assert "n1, n2 were left alone" in result.message
    assert result.evidence[0].kind == "step_committed" and result.evidence[0].t_mono == 2.5
    # Ended 27.5 s after the last commit (R = 30 s): no violation yet, but commits
    # were 0.5 s apart before, so a stall may have begun: undecided, not valid.
    short = [e for e in events if e.t_mono < 40.0] + [mark("run_end", 30.0)]
    result = neutral.check_l2(History.from_events(short), Bounds(recovery_s=30))
    assert result.status == "unknown" and "ends 27.50s after the last commit" in result.message
    shorter = [e for e in events if e.t_mono < 40.0] + [mark("run_end", 5.0)]
    assert neutral.check_l2(History.from_events(shorter), Bounds(recovery_s=30)).status == "valid"
