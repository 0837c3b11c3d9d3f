"""The history checkers on hand-built histories: a valid run and each way to break it."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from swarmshake.chaos.commands import verify as verify_command
from swarmshake.reference_node.protocol.history import (
    HARNESS,
    Accept,
    Commit,
    ConfigChange,
    DeclareDead,
    EventBase,
    Fault,
    History,
    LoopStall,
    RejoinDone,
    RunMark,
    Start,
    write_history,
)
from swarmshake.verify.checkers import PROPERTIES, Bounds, PropertyResult, Verdict, check_history
from swarmshake.verify.checkers.model import MAX_EVIDENCE, EventRef, Findings

NODES = ["n0", "n1", "n2"]
_HISTORIES = Path(__file__).parents[1] / "reports" / "histories.py"


@pytest.fixture(scope="module")
def demo_histories():
    """tests/reports/histories.py, which holds the demo run's history (test folders are
    not packages, so it is loaded by path as tests/reports/conftest.py does)."""
    spec = importlib.util.spec_from_file_location("swarmshake_verify_test_histories", _HISTORIES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


BOUNDS = Bounds(detection_s=1.0, recovery_s=5.0, rejoin_s=5.0)


@dataclass
class Run:
    """A hand-built history: three voters committing one step a second."""

    events: list[EventBase] = field(default_factory=list)

    def start(self, node: str, t: float, incarnation: int = 0) -> None:
        self.events.append(
            Start(t_wall=t, t_mono=t, node=node, incarnation=incarnation, config={"voters": NODES})
        )

    def fault(self, op: str, target: list[str], t: float, phase: str = "inject", **params) -> None:
        self.events.append(
            Fault(
                t_wall=t, t_mono=t, node=HARNESS, op=op, target=target, params=params, phase=phase
            )
        )

    def accept(self, node: str, step: int, t: float, value: str, holds_bytes: bool = True) -> None:
        self.events.append(
            Accept(
                t_wall=t,
                t_mono=t,
                node=node,
                step=step,
                ballot=[1, 0],
                value_fp=value,
                contributors=NODES,
                holds_bytes=holds_bytes,
            )
        )

    def commit(
        self, node: str, step: int, t: float, value: str | None = None, param: str | None = None
    ) -> None:
        self.events.append(
            Commit(
                t_wall=t,
                t_mono=t,
                node=node,
                step=step,
                value_fp=value or f"a{step:04x}",
                contributors=NODES,
                param_fp=param or f"f{step:04x}",
                voters=NODES,
            )
        )

    def declare(
        self, node: str, peer: str, t: float, incarnation: int = 0, reason: str = ""
    ) -> None:
        """``node`` declares ``peer`` dead; ``peer == node`` is a forced restart, its
        reason naming the declarer as the node logs it ("declared dead by n0")."""
        self.events.append(
            DeclareDead(
                t_wall=t,
                t_mono=t,
                node=node,
                peer=peer,
                peer_incarnation=incarnation,
                reason=reason,
            )  # fmt: skip
        )

    def steps(self, first: int, last: int, nodes: list[str] = NODES, skew: float = 0.0) -> None:
        """Steps ``first..last`` (step s commits at t = s + 0.5) on ``nodes``."""
        for step in range(first, last + 1):
            t = step + 0.5 + skew
            for node in nodes:
                self.accept(node, step, t - 0.1, f"a{step:04x}")
            for node in nodes:
                self.commit(node, step, t)

    def check(self) -> Verdict:
        return check_history(History.from_events(self.events), BOUNDS)


def healthy(last_step: int = 30) -> Run:
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(1, last_step)
    return run


def statuses(verdict: Verdict) -> dict[str, str]:
    return {name: result.status for name, result in verdict.results.items()}


def test_healthy_run_is_valid_for_every_property():
    verdict = healthy().check()
    assert statuses(verdict) == {p: "valid" for p in PROPERTIES}
    assert verdict.status == "valid"


def test_s1_two_fingerprints_for_one_step_is_invalid_with_both_commits_as_evidence():
    run = healthy()
    run.commit("n2", 12, 12.6, param="deadbeef")
    verdict = run.check()
    assert verdict.results["S1"].status == "invalid"
    kinds = {(ref.node, ref.kind, ref.step) for ref in verdict.results["S1"].evidence}
    assert ("n2", "commit", 12) in kinds and len(kinds) == 2


@pytest.mark.parametrize("step", [7, 0])
def test_s2_a_step_committed_twice_with_different_values_is_invalid(step):
    """Step 0 too (mutation testing: the checker once skipped commits of step 0)."""
    run = healthy()
    if step == 0:
        run.commit("n0", 0, 0.5, value="a0000")
    run.commit("n1", step, step + 0.7, value="b0b0")
    result = run.check().results["S2"]
    assert result.status == "invalid"
    assert f"step {step} committed twice" in result.message


def _five_steps() -> Run:
    """Every node started, steps 1-5 committed by all."""
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(1, 5)
    return run


def test_s2_a_commit_that_no_surviving_node_holds_is_invalid():
    run = _five_steps()
    # step 6: n1 and n2 vote without holding the bytes; only n0 applies, then n0 crashes
    for node in ("n1", "n2"):
        run.accept(node, 6, 6.4, "a0006", holds_bytes=False)
    run.accept("n0", 6, 6.4, "a0006")
    run.commit("n0", 6, 6.5)
    run.fault("crash", ["n0"], 6.6)
    verdict = run.check()
    assert verdict.results["S2"].status == "invalid"
    assert "held by no node" in verdict.results["S2"].message


def _chosen_after_its_holder_crashed(holds_bytes: bool) -> Run:
    """Step 6: n0 proposes and accepts its own value with the bytes, then crashes; the
    AcceptRequests already sent reach n1 and n2, whose votes make the value chosen
    after the crash (ack-before-apply on a loaded machine: the crash came 6 ms
    before the deciding vote, and S2 judged only the moments of crashes)."""
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(1, 5)
    run.accept("n0", 6, 6.4, "a0006")
    run.fault("crash", ["n0"], 6.45)
    for node in ("n1", "n2"):
        run.accept(node, 6, 6.5, "a0006", holds_bytes=holds_bytes)
    return run


def test_s2_a_value_chosen_after_every_holder_of_its_bytes_crashed_is_invalid():
    result = _chosen_after_its_holder_crashed(holds_bytes=False).check().results["S2"]
    assert result.status == "invalid"
    assert "held by no node that is up after it was chosen while n0 down" in result.message


def test_s2_a_value_chosen_after_a_crash_by_voters_holding_its_bytes_is_fine():
    result = _chosen_after_its_holder_crashed(holds_bytes=True).check().results["S2"]
    assert result.status == "valid", result.message


def _left_on_disk_only() -> Run:
    """Step 6 accepted with its bytes by n1 and n2 (n0, at step 5, did not vote) and
    committed by n1; n1 restarts (its memory gone) and n2 crashes: one voter down,
    and only n1's acceptor record of the value, on disk, holds it."""
    run = _five_steps()
    for node in ("n1", "n2"):
        run.accept(node, 6, 6.4, "a0006")
    run.commit("n1", 6, 6.5)
    run.fault("crash", ["n1"], 6.6)
    run.start("n1", 6.7, incarnation=1)
    run.fault("crash", ["n2"], 6.8)
    return run


def test_s2_a_value_left_only_on_an_acceptors_disk_is_unknown_until_it_returns():
    run = _left_on_disk_only()
    result = run.check().results["S2"]
    assert result.status == "unknown"
    assert "acceptor records of n1" in result.message and "return was not seen" in result.message
    run.start("n2", 7.0, incarnation=1)
    run.commit("n1", 6, 7.5)
    run.commit("n2", 6, 7.5)
    assert run.check().results["S2"].status == "valid"


def test_s2_a_value_left_only_on_disk_is_lost_when_the_cluster_commits_past_it():
    run = _left_on_disk_only()
    run.start("n2", 7.0, incarnation=1)
    run.commit("n1", 7, 7.5)
    result = run.check().results["S2"]
    assert result.status == "invalid"
    assert "committed step 7 without step 6 being committed again" in result.message


def test_s2_a_value_lost_while_a_majority_was_down_stays_excused_after_a_restart():
    """Step 6 is held only in n1's memory (n0 did not commit it, no bytes on disk);
    n2 crashes, then n1: two of three voters down at once, which S2 does not promise
    to survive.  n2's restart (empty) leaves one voter down and the value held by no
    one, but that is not a new loss: S2 judges the moments a holder crashes or a value
    is chosen, not every event after.  (Mutation testing: ``chosen_now`` forced on at
    every event judged the restart as a moment and called the run invalid.)"""
    run = _five_steps()
    for node in ("n0", "n1"):
        run.accept(node, 6, 6.4, "a0006", holds_bytes=False)
    run.commit("n1", 6, 6.5)
    run.fault("crash", ["n2"], 6.6)
    run.fault("crash", ["n1"], 6.7)
    run.start("n2", 6.8, incarnation=1)
    result = run.check().results["S2"]
    assert result.status == "valid", result.message


def test_s2_a_crash_of_one_holder_out_of_three_is_fine():
    run = healthy(10)
    run.fault("crash", ["n0"], 10.6)
    assert run.check().results["S2"].status == "valid"


def test_s3_a_commit_accepted_by_a_minority_of_configured_voters_is_invalid():
    run = healthy(10)
    run.accept("n0", 11, 11.4, "a000b")
    run.commit("n0", 11, 11.5)
    verdict = run.check()
    assert verdict.results["S3"].status == "invalid"
    assert "1 accepts of 3" in verdict.results["S3"].message


def test_s4_declaring_a_live_node_dead_is_invalid():
    run = healthy()
    run.declare("n0", "n2", 15.0)
    verdict = run.check()
    assert verdict.results["S4"].status == "invalid"
    assert verdict.results["S4"].evidence[0].kind == "declare_dead"


def test_s4_outside_the_latency_envelope_is_unknown_not_invalid():
    run = healthy()
    run.fault("latency", ["n2"], 14.0, delay_ms=400.0, jitter_ms=100.0)
    run.declare("n0", "n2", 15.0)
    run.fault("latency", ["n2"], 16.0, phase="heal")
    assert run.check().results["S4"].status == "unknown"


def test_s4_declaring_a_paused_or_crashed_node_dead_is_fine():
    run = healthy(10)
    run.fault("pause", ["n2"], 10.6)
    run.declare("n0", "n2", 11.0)
    run.declare("n1", "n2", 11.0)
    run.fault("pause", ["n2"], 20.0, phase="heal")
    assert run.check().results["S4"].status == "valid"


def stall(run: Run, node: str, since: float, stalled_ms: float) -> None:
    t = since + stalled_ms / 1000
    run.events.append(
        LoopStall(t_wall=t, t_mono=t, node=node, stalled_ms=stalled_ms, since_mono=since)
    )


def test_s4_a_peer_whose_loop_stalled_past_proc_delay_is_not_alive():
    """DESIGN: alive means handling events at least every Δ_proc (100 ms here)."""
    run = healthy()
    stall(run, "n2", 14.8, 180.0)
    run.declare("n0", "n2", 15.0)
    assert run.check().results["S4"].status == "valid"


def test_s4_a_short_stall_does_not_excuse_a_false_declaration():
    run = healthy()
    stall(run, "n2", 14.8, 60.0)  # under Δ_proc: the node was alive
    run.declare("n0", "n2", 15.0)
    assert run.check().results["S4"].status == "invalid"


def test_s4_a_judge_that_stalled_makes_its_declaration_undecidable():
    run = healthy()
    stall(run, "n0", 14.8, 180.0)
    run.declare("n0", "n2", 15.0)
    assert run.check().results["S4"].status == "unknown"


def test_s4_declarations_across_a_partition_cut_are_correct():
    run = healthy()
    cuts = [["n2", "n0"], ["n2", "n1"], ["n0", "n2"], ["n1", "n2"]]
    run.fault("partition", NODES, 14.0, grouping="isolate", nodes=["n2"], cuts=cuts)
    run.declare("n0", "n2", 14.5)
    run.declare("n2", "n1", 14.5)
    run.fault("partition", NODES, 16.0, phase="heal")
    assert run.check().results["S4"].status == "valid"


def test_s4_an_earlier_incarnation_declared_dead_after_a_restart_is_fine():
    run = healthy(10)
    run.fault("crash", ["n2"], 10.6)
    run.start("n2", 10.8, incarnation=1)
    run.declare("n0", "n2", 12.0, incarnation=0)
    assert run.check().results["S4"].status == "valid"


def s4(run: Run) -> PropertyResult:
    return run.check().results["S4"]


def cut_n0_from_n2(run: Run, at: float, heal_at: float) -> None:
    """A partition that cuts only the link n0–n2: n2 stays connected to n1 (a majority
    of three with itself)."""
    cuts = [["n0", "n2"], ["n2", "n0"]]
    run.fault("partition", ["n0", "n2"], at, grouping="bridge", cuts=cuts)
    run.fault("partition", ["n0", "n2"], heal_at, phase="heal")


def test_s4_a_relayed_verdict_from_across_a_cut_is_a_false_positive_of_its_relay():
    """DESIGN: a node that stays alive and connected to a majority is never declared
    dead by a node it is connected to, whatever verdict that node relays.  n0's
    declaration (across its cut) is correct; n1's relay of it is judged on n1's own
    link to n2 and does not inherit n0's judgement."""
    run = healthy()
    cut_n0_from_n2(run, 14.0, 16.0)
    run.declare("n0", "n2", 14.5, reason="1 suspicions: n0")
    assert s4(run).status == "valid"
    run.declare("n1", "n2", 14.6, reason="confirmed by n0")
    result = s4(run)
    assert result.status == "invalid"
    assert [(ref.node, ref.note) for ref in result.evidence] == [("n1", "false positive")]
    assert "n1 declared n2 (incarnation 0) dead" in result.message
    assert "confirmed by n0" in result.message


def test_s4_a_relay_after_the_heal_is_judged_by_the_relay_not_by_the_cut_it_came_from():
    run = healthy()
    cut_n0_from_n2(run, 14.0, 16.0)
    run.declare("n0", "n2", 14.5)
    run.declare("n1", "n2", 19.0, reason="confirmed by n0")  # long after the heal (D = 1 s)
    assert s4(run).status == "invalid"


def test_s4_nodes_on_the_other_side_of_a_cut_may_relay_each_others_verdicts():
    run = healthy()
    cuts = [["n2", "n0"], ["n2", "n1"], ["n0", "n2"], ["n1", "n2"]]
    run.fault("partition", NODES, 14.0, grouping="isolate", nodes=["n2"], cuts=cuts)
    run.declare("n0", "n2", 14.5, reason="2 suspicions: n0,n1")
    run.declare("n1", "n2", 14.6, reason="confirmed by n0")
    run.fault("partition", NODES, 16.0, phase="heal")
    assert s4(run).status == "valid"


def test_s4_a_forced_restart_makes_its_verdict_count_even_when_it_names_an_old_incarnation():
    """A verdict naming an earlier incarnation is normally about a dead process; when
    the running process took it and restarted, it killed a live node."""
    run = healthy(10)
    run.fault("crash", ["n2"], 10.6)
    run.start("n2", 10.8, incarnation=1)
    run.declare("n0", "n2", 12.0, incarnation=0)
    assert s4(run).status == "valid"
    run.declare("n2", "n2", 12.05, incarnation=0, reason="declared dead by n0")
    result = s4(run)
    assert result.status == "invalid"
    assert [(ref.node, ref.note) for ref in result.evidence] == [
        ("n0", "false positive"),
        ("n2", "forced restart"),
    ]


def test_s4_a_forced_restart_whose_verdict_is_missing_is_judged_at_the_restart():
    run = healthy()
    run.declare("n2", "n2", 15.0, reason="declared dead by n0: rejoining")
    result = s4(run)
    assert result.status == "invalid"
    assert result.evidence[0].node == "n2" and result.evidence[0].note == "forced restart"
    assert "not in the history" in result.message
    excused = healthy()
    cut_n0_from_n2(excused, 14.0, 16.0)
    excused.declare("n2", "n2", 15.0, reason="declared dead by n0")
    assert s4(excused).status == "valid"


def test_s4_a_forced_restart_naming_no_declarer_is_unknown():
    run = healthy()
    run.declare("n2", "n2", 15.0, reason="rejoining")
    assert s4(run).status == "unknown"


def test_s4_a_node_that_declared_itself_dead_may_be_declared_dead_until_it_restarts():
    """A node that accepted a (correct) verdict stops and rejoins: a peer that times
    out its silence meanwhile is right."""
    run = healthy(10)
    run.fault("pause", ["n2"], 10.6)
    run.declare("n0", "n2", 11.0)
    run.fault("pause", ["n2"], 12.0, phase="heal")
    run.declare("n2", "n2", 12.1, reason="declared dead by n0")
    run.declare("n1", "n2", 12.6)
    run.start("n2", 13.0, incarnation=1)
    result = s4(run)
    assert result.status == "valid", result.message
    assert result.message == "2 declarations and 1 forced restarts, none of a live node"


def test_s4_latency_past_the_envelope_on_the_declarers_own_link_is_unknown():
    run = healthy()
    run.fault("latency", ["n0", "n2"], 14.0, src=["n0"], dst=["n2"], delay_ms=400.0)
    run.declare("n0", "n2", 15.0)
    run.fault("latency", ["n0", "n2"], 16.0, phase="heal")
    result = s4(run)
    assert result.status == "unknown"
    assert "outside the declared envelope: latency from t=14.000" in result.message


def test_s4_the_heal_of_another_nodes_latency_leaves_this_ones_window_open():
    """Explore (sim, 5 nodes, seed 7, budget 2000): n3's 179 ms latency to every node
    (outside the envelope) from 0.71 s to 7.59 s, and n1's 36 ms (inside) healed at
    2.44 s.  The second heal ended the first window (both targets hold "*"), and a
    declaration resting on n3's delayed heartbeats was judged a false positive."""
    run = healthy()
    run.fault("latency", ["*", "n2"], 10.0, src=["n2"], dst=["*"], delay_ms=179.0, jitter_ms=72.0)
    run.fault("latency", ["*", "n1"], 10.5, src=["n1"], dst=["*"], delay_ms=36.0)
    run.fault("latency", ["*", "n1"], 12.0, phase="heal")
    run.declare("n0", "n2", 15.0)
    run.fault("latency", ["*", "n2"], 16.0, phase="heal")
    result = s4(run)
    assert result.status == "unknown", result.message
    assert "latency from t=10.000" in result.message


def test_s4_latency_past_the_envelope_on_another_link_excuses_nothing():
    run = healthy()
    run.fault("latency", ["n1", "n2"], 14.0, src=["n1"], dst=["n2"], delay_ms=400.0)
    run.declare("n0", "n2", 15.0, reason="confirmed by n1")
    run.fault("latency", ["n1", "n2"], 16.0, phase="heal")
    assert s4(run).status == "invalid"


def test_s4_a_cut_elsewhere_in_the_cluster_does_not_make_a_declaration_undecidable():
    """The real harness names every node a partition touches as its target; only the
    cut links leave the envelope."""
    run = healthy()
    cut_n0_from_n2(run, 14.0, 16.0)
    run.declare("n1", "n0", 14.5, reason="confirmed by n2")
    assert s4(run).status == "invalid"


def test_s4_a_partition_without_recorded_cuts_leaves_its_nodes_undecidable():
    run = healthy()
    run.fault("partition", ["n0", "n2"], 14.0, grouping="bridge")
    run.declare("n1", "n0", 14.5)
    run.fault("partition", ["n0", "n2"], 16.0, phase="heal")
    assert s4(run).status == "unknown"


def test_s4_the_demo_run_with_the_old_protocol_is_invalid(demo_histories):
    """`make demo` (smoke suite, seed 1): after n1's isolation healed, n3 and n2 relayed
    n1's verdict on n4, which was never cut from them and was committing; n4 restarted.
    The old checker called it valid (the first declaration of (n4, 2), n1's across the
    cut, was judged and the relays inherited it)."""
    history = History.from_events(demo_histories.demo_heal_events(old_protocol=True))
    result = check_history(history, Bounds()).results["S4"]
    assert result.status == "invalid"
    cited = {(ref.node, ref.note, round(ref.t_mono - demo_histories.DEMO_ORIGIN_MONO, 2))
             for ref in result.evidence}  # fmt: skip
    assert cited == {
        ("n3", "false positive", demo_histories.DEMO_RELAY_S["n3"]),
        ("n2", "false positive", demo_histories.DEMO_RELAY_S["n2"]),
        ("n4", "forced restart", demo_histories.DEMO_N4_KILLED_S),
    }
    assert "relaying 'confirmed by n1'" in result.message
    # n1 was rightly declared dead across its cut and rightly restarted: not cited.
    assert all(ref.node != "n1" for ref in result.evidence)


def test_s4_the_demo_schedule_without_the_relays_is_valid(demo_histories):
    history = History.from_events(demo_histories.demo_heal_events(old_protocol=False))
    verdict = check_history(history, Bounds())
    assert statuses(verdict) == dict.fromkeys(PROPERTIES, "valid")
    assert verdict.results["S4"].message == (
        "9 declarations and 1 forced restarts, none of a live node"
    )


def crash_run(declarers: list[str], at: float = 10.6) -> Run:
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(1, 10)
    run.fault("crash", ["n2"], at)
    for node in declarers:
        run.declare(node, "n2", at + 0.3)
    run.steps(11, 30, nodes=["n0", "n1"])
    return run


def test_l1_every_live_node_declaring_the_crashed_one_within_d_is_valid():
    verdict = crash_run(["n0", "n1"]).check()
    assert verdict.results["L1"].status == "valid"
    assert "slowest 300 ms" in verdict.results["L1"].message


def test_l1_a_live_node_that_never_declares_the_crash_is_invalid():
    verdict = crash_run(["n0"]).check()
    assert verdict.results["L1"].status == "invalid"
    assert "n1 did not declare n2" in verdict.results["L1"].message


def test_l1_a_miss_cut_by_the_end_of_the_run_is_unknown():
    run = healthy(10)
    run.fault("crash", ["n2"], run.events[-1].t_mono + 0.1)
    assert run.check().results["L1"].status == "unknown"


def test_l2_a_stall_with_a_live_connected_majority_is_invalid():
    run = healthy(10)
    run.fault("crash", ["n2"], 10.6)
    run.declare("n0", "n2", 10.8)
    run.declare("n1", "n2", 10.8)
    run.steps(30, 31, nodes=["n0", "n1"])  # 20 s without a commit, R = 5 s
    verdict = run.check()
    assert verdict.results["L2"].status == "invalid"


@pytest.mark.parametrize(
    ("end_at", "status"), [(11.0, "valid"), (14.0, "unknown"), (16.0, "invalid")]
)
def test_l2_a_history_that_ends_in_a_stall_shorter_than_r_is_undecided(end_at, status):
    """Steps a second apart until 10.5 s, then none until the history ends: 0.5 s is a
    step's time (valid); 3.5 s is longer than every gap before it and R / 4 but not R
    (R = 5 s): a stall may have begun, the run is too short to say (unknown); 5.5 s
    is a stall (invalid).  Session 26's sharded cluster was dead for the last 9 s of
    a run called valid."""
    run = healthy(10)
    run.events.append(RunMark(t_wall=end_at, t_mono=end_at, node=HARNESS, mark="run_end"))
    result = run.check().results["L2"]
    assert result.status == status, result.message
    if status == "unknown":
        assert "ends 3.5s after the last new step" in result.message


def test_l2_a_stall_during_a_partition_is_not_held_against_progress():
    run = healthy(10)
    run.fault("partition", ["*"], 10.6, grouping="halves")
    run.fault("partition", ["*"], 25.0, phase="heal")
    run.steps(26, 40)
    assert run.check().results["L2"].status == "valid"


def test_l2_does_not_count_cluster_start_up_as_a_stall():
    """Nodes that take 20 s (R = 5 s) to import torch and commit their first step
    have not stalled: L2 judges from the first commit (or the steady_state mark)."""
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(20, 40)
    assert run.check().results["L2"].status == "valid"


@pytest.mark.parametrize(
    ("mark_at", "resume_step", "status"),
    [
        (3.0, 20, "invalid"),  # 17 s without a commit after steady state, R = 5 s
        # Two commits while warming up, then none until the mark: judged from the mark,
        # not from the first commit, this is no stall.
        (15.0, 15, "valid"),
    ],
)
def test_l2_judges_from_the_harness_steady_state_mark(mark_at, resume_step, status):
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(1, 2)
    run.events.append(RunMark(t_wall=mark_at, t_mono=mark_at, node=HARNESS, mark="steady_state"))
    run.steps(resume_step, 30)
    assert run.check().results["L2"].status == status


def restart_run(rejoin_fp: str | None) -> Run:
    run = crash_run(["n0", "n1"])
    run.start("n2", 15.0, incarnation=1)
    if rejoin_fp is not None:
        run.events.append(
            RejoinDone(t_wall=16, t_mono=16.0, node="n2", step=15, source="n0", param_fp=rejoin_fp)
        )
    return run


def test_l3_a_restarted_node_reaching_the_majority_fingerprint_is_valid():
    verdict = restart_run("f000f").check()
    assert statuses(verdict) == {p: "valid" for p in PROPERTIES}


def test_l3_a_restarted_node_that_never_catches_up_is_invalid():
    assert restart_run(None).check().results["L3"].status == "invalid"


def test_l3_a_rejoin_with_a_stale_fingerprint_breaks_l3_and_s1():
    verdict = restart_run("0000stale").check()
    assert verdict.results["L3"].status == "invalid"
    assert verdict.results["S1"].status == "invalid"


def test_a_malformed_history_gives_unknown_never_valid():
    history = History(events=[None])  # type: ignore[list-item]  # not an event at all
    verdict = check_history(history, BOUNDS)
    assert verdict.status == "unknown"
    assert all(result.status == "unknown" for result in verdict.results.values())


def test_an_empty_history_is_unknown():
    assert check_history(History(events=[]), BOUNDS).status == "unknown"


def test_bounds_reject_non_positive_values():
    import msgspec

    with pytest.raises(msgspec.ValidationError, match="detection_s"):
        msgspec.convert({"detection_s": 0}, Bounds)


def write_run(tmp_path, run: Run):
    by_node: dict[str, list[EventBase]] = {}
    for event in run.events:
        by_node.setdefault(event.node, []).append(event)
    for node, events in by_node.items():
        write_history(tmp_path / "events" / f"{node}.jsonl", events)
    return tmp_path


def test_verify_command_exit_codes_and_verdict_json(tmp_path, capsys):
    valid_dir = write_run(tmp_path / "ok", healthy())
    assert verify_command.main([str(valid_dir), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "valid" and set(document["results"]) == set(PROPERTIES)
    assert json.loads((valid_dir / "verdict.json").read_text())["status"] == "valid"

    broken = healthy()
    broken.declare("n0", "n2", 15.0)
    assert verify_command.main([str(write_run(tmp_path / "bad", broken))]) == 1

    cut = healthy(10)
    cut.fault("crash", ["n2"], cut.events[-1].t_mono + 0.1)
    assert verify_command.main([str(write_run(tmp_path / "cut", cut))]) == 2


def test_verify_command_bad_input_is_a_usage_error(tmp_path):
    from swarmshake.chaos.commands._args import UsageError

    with pytest.raises(UsageError, match="not a directory"):
        verify_command.main([str(tmp_path / "missing")])
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "n0.jsonl").write_text('{"kind": "nope"}\n{"kind": "start"}\n')
    with pytest.raises(UsageError, match="n0.jsonl:1"):
        verify_command.main([str(tmp_path)])


def test_a_history_with_no_node_event_is_unknown_not_vacuously_valid():
    """Nodes that never ran (a config they refused) leave only the harness's events:
    every property would hold vacuously, so each must say unknown with the reason."""
    events = [
        RunMark(t_wall=1.0, t_mono=1.0, node=HARNESS, mark="steady_state"),
        Fault(
            t_wall=2.0, t_mono=2.0, node=HARNESS, op="crash", target="n1", params={}, phase="inject"
        ),
    ]
    verdict = check_history(History.from_events(events))
    assert verdict.status == "unknown"
    assert set(statuses(verdict).values()) == {"unknown"}
    assert all("no node wrote an event" in r.message for r in verdict.results.values())


# --- what a reader of verdict.json relies on (session 10's mutation sample found these
# unchecked: the survivors in verify/checkers/model.py, progress.py, safety.py,
# detector.py and timeline.py) ---------------------------------------------------------


def test_violated_lists_exactly_the_invalid_properties():
    run = healthy()
    run.commit("n2", 12, 12.6, param="deadbeef")  # S1
    run.fault("latency", ["n2"], 14.0, delay_ms=400.0, jitter_ms=100.0)
    run.declare("n0", "n2", 15.0)  # S4 unknown: not violated
    verdict = run.check()
    assert verdict.violated() == ["S1"]
    assert healthy().check().violated() == []


def test_evidence_is_capped_per_property():
    findings = Findings("S1")
    event = Commit(
        t_wall=1.0, t_mono=1.0, node="n0", step=3, value_fp="a", contributors=[], param_fp="f"
    )
    for index in range(MAX_EVIDENCE + 5):
        findings.invalid(f"violation {index}", EventRef.of(index, event))
    result = findings.result("fine")
    assert len(result.evidence) == MAX_EVIDENCE
    assert result.message == f"violation 0 (and {MAX_EVIDENCE + 4} more)"


def test_evidence_json_leaves_out_a_missing_step_and_keeps_step_0():
    """verdict.json's documented shape: ``step`` only for events of a step (-1 means
    none), so step 0 must be written."""
    import msgspec

    start = Start(t_wall=0.0, t_mono=0.0, node="n0", config={})
    first = Commit(
        t_wall=1.0, t_mono=1.0, node="n0", step=0, value_fp="a", contributors=[], param_fp="f"
    )
    assert "step" not in msgspec.json.decode(msgspec.json.encode(EventRef.of(0, start)))
    assert msgspec.json.decode(msgspec.json.encode(EventRef.of(1, first)))["step"] == 0


def test_checked_counts_the_items_each_property_examined():
    verdict = healthy(30).check()
    assert verdict.results["S3"].checked == 30  # one committed value a step
    assert "30 committed values" in verdict.results["S3"].message


def test_l1_an_observer_that_crashes_within_d_of_the_crash_owes_no_declaration():
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(1, 10)
    run.fault("crash", ["n2"], 10.6)
    run.declare("n0", "n2", 10.9)
    run.fault("crash", ["n1"], 11.0)  # D = 1 s: n1 was not up for the whole of it
    run.declare("n0", "n1", 11.3)  # (n1's own crash is detected)
    run.steps(11, 12, nodes=["n0"])
    result = run.check().results["L1"]
    assert result.status == "valid", result.message


def test_s3_a_config_change_committed_at_a_step_governs_only_the_steps_after_it():
    """n3 joins as a voter by a change committed at step 5: step 5 itself still needs
    a majority of the three old voters (2), step 6 one of the four new ones (3)."""
    run = Run()
    for node in NODES:
        run.start(node, 0.0)
    run.steps(1, 4)
    run.events.append(
        ConfigChange(
            t_wall=5.4,
            t_mono=5.4,
            node="n0",
            step=5,
            change="add",
            peer="n3",
            voters=[*NODES, "n3"],
        )  # fmt: skip
    )
    for node in ("n0", "n1"):
        run.accept(node, 5, 5.4, "a0005")
    run.commit("n0", 5, 5.5)
    assert run.check().results["S3"].status == "valid"
    for node in ("n0", "n1"):
        run.accept(node, 6, 6.4, "a0006")
    run.commit("n0", 6, 6.5)
    assert run.check().results["S3"].status == "invalid"


def test_a_node_whose_history_has_no_start_is_up_from_its_first_event():
    """A history cut at the front: n2 logged commits but no start.  Absent evidence of
    a start is no evidence of death, so declaring it dead while it commits is a
    false positive."""
    run = Run()
    for node in ("n0", "n1"):
        run.start(node, 0.0)
    run.steps(1, 20)
    run.declare("n0", "n2", 15.0)
    result = run.check().results["S4"]
    assert result.status == "invalid", result.message


def test_s4_after_the_heal_of_a_latency_past_the_envelope_a_declaration_is_judged_again():
    """The envelope-exit window of a latency fault closes at its heal (plus the grace
    for what was in flight): a declaration well after it is judged on its own."""
    run = healthy()
    run.fault("latency", ["n2"], 14.0, delay_ms=400.0, jitter_ms=100.0)
    run.fault("latency", ["n2"], 16.0, phase="heal")
    run.declare("n0", "n2", 25.0)
    assert run.check().results["S4"].status == "invalid"


def test_l1_a_declaration_exactly_d_after_the_crash_is_in_time():
    """D is inclusive, and a nanosecond of slack covers float sums of one instant that
    differ in the last bit (1 s of grace + 1 s of timeout came out 4e-15 s past D in
    explore); a checker without it, or with it the wrong way, calls this a miss."""
    run = healthy(10)
    run.fault("crash", ["n2"], 10.3)
    for node in ("n0", "n1"):
        run.declare(node, "n2", 10.3 + BOUNDS.detection_s)
    run.steps(11, 30, nodes=["n0", "n1"])
    result = run.check().results["L1"]
    assert result.status == "valid", result.message


def _crash_then_removal(removed_after_s: float) -> Run:
    """n2 crashes at 10.6 while its removal is being committed; n0 declares it dead,
    n1 applies the committed step that removes it ``removed_after_s`` later."""
    run = crash_run(["n0"])
    at = 10.6 + removed_after_s
    run.events.append(
        ConfigChange(
            t_wall=at,
            t_mono=at,
            node="n1",
            step=11,
            change="remove",
            peer="n2",
            voters=["n0", "n1"],
        )  # fmt: skip
    )
    run.events.sort(key=lambda event: event.t_mono)
    return run


def test_l1_an_observer_that_applied_the_crashed_nodes_removal_within_d_owes_no_verdict():
    """A leaver that crashes while its removal commits (explore --leaves, 6 nodes, seed
    3): the members that applied the removal within D stop watching it, and the
    committed step settles it; one that applied it only after D still missed it."""
    result = _crash_then_removal(0.2).check().results["L1"]
    assert result.status == "valid", result.message
    assert "1 settled by a committed removal" in result.message
    late = _crash_then_removal(BOUNDS.detection_s + 0.5).check().results["L1"]
    assert late.status == "invalid" and "n1 did not declare n2" in late.message
