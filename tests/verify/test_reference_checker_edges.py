"""The reference node's checkers (S1-S3, L2, L3) and the verdict's model at their edges.

Written against the survivors of the first full mutation run of ``verify/checkers/``
(session 13: safety.py 171/231, progress.py 87/116, model.py 52/68 killed): step 0, a
value chosen by exactly a majority, a value lost in rolling restarts and one that
comes back, bounds met exactly, the judging window's edges, the majority's
fingerprint, and what the messages, the evidence and verdict.json say.  Histories are
built event by event as a node logs them.
"""

from __future__ import annotations

import msgspec
import pytest

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
    RunMark,
    Start,
    Stop,
)
from swarmshake.verify.checkers import Bounds, PropertyResult, Verdict, check_history, detector
from swarmshake.verify.checkers.model import EventRef, Findings
from swarmshake.verify.checkers.progress import stable_stretches
from swarmshake.verify.checkers.safety import Membership
from swarmshake.verify.checkers.timeline import build_timeline

VOTERS = ["n0", "n1", "n2"]
BOUNDS = Bounds(detection_s=1.0, recovery_s=5.0, rejoin_s=5.0)


class Log:
    """One run's events, in the order appended (times strictly increase)."""

    def __init__(self) -> None:
        self.events: list[EventBase] = []
        self.t = 0.0
        self.pinned: float | None = None

    def at(self, t: float) -> Log:
        """The next event happens at ``t``; later ones 0.1 s apart again."""
        self.pinned = t
        return self

    def _now(self) -> float:
        self.t = self.pinned if self.pinned is not None else round(self.t + 0.1, 1)
        self.pinned = None
        return self.t

    def start(self, node: str, incarnation: int = 0, voters=VOTERS) -> Log:
        t = self._now()
        self.events.append(Start(t_wall=t, t_mono=t, node=node, incarnation=incarnation,
                                 config={"voters": voters}))  # fmt: skip
        return self

    def accept(self, node: str, step: int, value: str, holds_bytes: bool = False) -> Log:
        t = self._now()
        self.events.append(Accept(t_wall=t, t_mono=t, node=node, step=step, ballot=[1, 0],
                                  value_fp=value, contributors=VOTERS,
                                  holds_bytes=holds_bytes))  # fmt: skip
        return self

    def commit(self, node: str, step: int, value: str, param: str = "") -> Log:
        t = self._now()
        self.events.append(Commit(t_wall=t, t_mono=t, node=node, step=step, value_fp=value,
                                  contributors=VOTERS, param_fp=param or f"p-{value}",
                                  voters=VOTERS))  # fmt: skip
        return self

    def crash(self, node: str) -> Log:
        t = self._now()
        self.events.append(Fault(t_wall=t, t_mono=t, node=HARNESS, op="crash", target=[node],
                                 phase="inject"))  # fmt: skip
        return self

    def fault(self, op: str, target: list[str], phase: str = "inject", **params) -> Log:
        t = self._now()
        self.events.append(Fault(t_wall=t, t_mono=t, node=HARNESS, op=op, target=target,
                                 phase=phase, params=params))  # fmt: skip
        return self

    def declare(self, node: str, peer: str, incarnation: int = 0, reason: str = "") -> Log:
        """``node`` declares ``peer`` dead; ``peer == node``: a forced restart."""
        t = self._now()
        self.events.append(DeclareDead(t_wall=t, t_mono=t, node=node, peer=peer,
                                       peer_incarnation=incarnation, reason=reason))  # fmt: skip
        return self

    def stop(self, node: str) -> Log:
        """``node`` stops cleanly (a leave)."""
        t = self._now()
        self.events.append(Stop(t_wall=t, t_mono=t, node=node))
        return self

    def config(self, step: int, voters: list[str], change: str, peer: str) -> Log:
        """n0 logs the configuration committed at ``step``."""
        t = self._now()
        self.events.append(ConfigChange(t_wall=t, t_mono=t, node="n0", step=step, change=change,
                                        peer=peer, voters=voters))  # fmt: skip
        return self

    def restart(self, node: str, incarnation: int = 1) -> Log:
        return self.start(node, incarnation)

    def mark(self, name: str) -> Log:
        t = self._now()
        self.events.append(RunMark(t_wall=t, t_mono=t, node=HARNESS, mark=name))
        return self

    def all_commit(self, step: int, fp: str = "") -> Log:
        for node in VOTERS:
            self.commit(node, step, f"v{step}", param=fp)
        return self

    def index_of(self, event: EventBase) -> int:
        return History.from_events(self.events).events.index(event)

    def check_verdict(self) -> Verdict:
        return check_history(History.from_events(self.events), BOUNDS)

    def check(self, name: str) -> PropertyResult:
        return self.check_verdict().results[name]


# --- the configured voters ---------------------------------------------------------------


def test_a_start_without_a_list_of_voters_leaves_the_voters_to_the_nodes_seen():
    for voters in ([], "n0,n1,n2", None):
        log = Log().start("n0", voters=voters).start("n1", voters=voters)
        assert Membership(History.from_events(log.events)).voters_at(3) == ["n0", "n1"]


def test_config_changes_govern_the_steps_after_them_in_step_order():
    # Logged out of step order (a node that installed a newer state logs it first).
    log = Log().start("n0")
    later = ConfigChange(t_wall=1, t_mono=1.0, node="n0", step=10, change="remove", peer="n3",
                         voters=["n0", "n1"])  # fmt: skip
    earlier = ConfigChange(t_wall=2, t_mono=2.0, node="n1", step=5, change="add", peer="n3",
                           voters=["n0", "n1", "n2", "n3"])  # fmt: skip
    membership = Membership(History.from_events([*log.events, later, earlier]))
    assert membership.voters_at(5) == VOTERS
    assert membership.voters_at(7) == ["n0", "n1", "n2", "n3"]
    assert membership.voters_at(11) == ["n0", "n1"]


# --- S1 and S3 ---------------------------------------------------------------------------


def test_s1_a_divergence_at_step_0_is_a_violation_with_twelve_characters_of_each_side():
    log = Log().start("n0").start("n1")
    log.commit("n0", 0, "v0", param="0123456789abcdefXXXX")
    log.commit("n1", 0, "v0", param="fedcba9876543210YYYY")
    result = log.check("S1")
    assert result.status == "invalid"
    assert result.message == "step 0: n0 holds param_fp 0123456789ab but n1 holds fedcba987654"


def test_s3_a_commit_without_a_majority_cites_the_accepts_it_had():
    log = Log().start("n0").start("n1").start("n2").accept("n0", 4, "v4").commit("n0", 4, "v4")
    result = log.check("S3")
    assert result.status == "invalid" and "with 1 accepts of 3 configured voters" in result.message
    assert [(ref.kind, ref.node) for ref in result.evidence] == [("commit", "n0"), ("accept", "n0")]


# --- S2: a committed value must outlive any minority of crashes ----------------------------


def test_s2_reports_a_step_committed_with_three_values_once_with_both_fingerprints():
    log = Log().start("n0").start("n1").start("n2")
    log.commit("n0", 2, "0123456789abcdefAAAA").commit("n1", 2, "fedcba9876543210BBBB")
    log.commit("n2", 2, "00000000000000000000")
    result = log.check("S2")
    assert result.status == "invalid"
    assert result.message == (
        "step 2 committed twice with different values: 0123456789ab then fedcba987654 "
        "(the first was lost)"
    )
    assert [ref.note for ref in result.evidence] == ["first commit", "overwriting commit"]
    assert [ref.index for ref in result.evidence] == [3, 4]  # three starts, then the commits


def _step_0_in_memory_of_n0_and_n1() -> Log:
    """n2 never runs; n0 and n1 accept step 0 (without its bytes on disk) and commit it."""
    log = Log().start("n0").start("n1")
    log.accept("n0", 0, "v0").accept("n1", 0, "v0").commit("n0", 0, "v0").commit("n1", 0, "v0")
    return log


def test_s2_step_0_lost_in_rolling_restarts_is_a_violation_named_at_its_first_loss():
    # n0 restarts (its memory gone, no rejoin), then n1 crashes: nobody up holds step 0
    # with one voter of three down.  n0 crashes again later: still the first loss is named.
    log = _step_0_in_memory_of_n0_and_n1().crash("n0").restart("n0").crash("n1")
    log.restart("n1").crash("n0")
    result = log.check("S2")
    assert result.status == "invalid"
    assert result.message == (
        "committed step 0 is held by no node that is up after n1 crashed, "
        "with only 1 of 3 voters down"
    )
    assert result.evidence[0].note == "committed here" and result.evidence[0].step == 0


def test_s2_a_restart_without_a_logged_crash_also_loses_the_processs_memory():
    # n0 restarts on its own (a forced restart: no crash fault), then n1 crashes.
    log = _step_0_in_memory_of_n0_and_n1().restart("n0").crash("n1")
    result = log.check("S2")
    assert result.status == "invalid" and "after n1 crashed" in result.message


def test_s2_a_lost_value_committed_again_right_after_the_crash_was_not_lost():
    log = _step_0_in_memory_of_n0_and_n1().crash("n0").restart("n0").crash("n1")
    log.commit("n0", 0, "v0")
    assert log.check("S2").status == "valid"
    other = _step_0_in_memory_of_n0_and_n1().crash("n0").restart("n0").crash("n1")
    other.commit("n0", 1, "v0")  # the same bytes at another step bring nothing back
    assert other.check("S2").status == "invalid"


def test_s2_judges_commits_that_no_accept_was_logged_for():
    # A history of commits alone: step 5 committed by n0 and then n1, each process
    # restarted or crashed before anyone else applied it.
    log = Log().start("n0").start("n1").start("n2")
    for step in range(5):
        for node in VOTERS:
            log.commit(node, step, f"v{step}")
    log.commit("n0", 5, "v5")
    first = log.events[-1]
    log.commit("n1", 5, "v5").crash("n1").restart("n1").crash("n0")
    result = log.check("S2")
    assert result.status == "invalid" and "committed step 5 is held by no node" in result.message
    assert result.evidence[0].index == log.index_of(first)


def _chosen_by_two_then_left_on_disk() -> Log:
    """n0 and n1 accept step 3 with its bytes (a majority: chosen) and nobody commits
    it; n0 restarts, then n1 crashes: only n0's acceptor record, on disk, holds it."""
    log = Log().start("n0").start("n1").start("n2")
    for step in range(3):
        for node in VOTERS:
            log.accept(node, step, f"v{step}", holds_bytes=True)
        for node in VOTERS:
            log.commit(node, step, f"v{step}")
    log.accept("n0", 3, "v3", holds_bytes=True).accept("n1", 3, "v3", holds_bytes=True)
    return log.crash("n0").restart("n0").crash("n1")


def test_s2_a_value_chosen_by_exactly_a_majority_is_owed_durability():
    result = _chosen_by_two_then_left_on_disk().check("S2")
    assert result.status == "unknown"
    assert "committed step 3 was held after n1 crashed only by the acceptor records of n0" in (
        result.message
    )


def test_s2_committing_past_a_value_left_on_disk_loses_it_and_cites_the_commit():
    log = _chosen_by_two_then_left_on_disk().commit("n2", 4, "v4")
    past = log.events[-1]
    result = log.check("S2")
    assert result.status == "invalid"
    assert "n2 committed step 4 without step 3 being committed again" in result.message
    assert result.evidence[-1].index == log.index_of(past)
    assert result.evidence[-1].note == "committed past it"


def test_s2_neither_an_accept_nor_another_value_of_the_step_brings_it_back():
    log = _chosen_by_two_then_left_on_disk()
    log.accept("n2", 3, "v3").commit("n2", 3, "other").commit("n2", 4, "v4")
    result = log.check("S2")
    assert result.status == "invalid"
    assert "n2 committed step 4 without step 3 being committed again" in result.message


def test_s2_the_value_committed_again_from_disk_is_back():
    log = _chosen_by_two_then_left_on_disk().commit("n0", 3, "v3").commit("n2", 4, "v4")
    assert log.check("S2").status == "valid"


# --- L2 (R = 5 s): steps commit again within R while a majority is up ----------------------


def _three_started() -> Log:
    return Log().start("n0").start("n1").start("n2")


def test_l2_the_same_step_committed_late_by_laggards_is_no_progress():
    log = _three_started().at(1.0).commit("n0", 1, "v1").at(5.0).commit("n1", 1, "v1")
    log.at(9.0).commit("n2", 1, "v1").at(13.0).all_commit(2)
    result = log.check("L2")
    assert result.status == "invalid" and "no new step committed for 12.0s" in result.message


def test_l2_without_a_steady_state_mark_judges_from_the_first_commit():
    # A cluster that takes 40 s to start and then commits every second is fine ...
    slow_start = _three_started()
    for step in range(10):
        slow_start.at(40.0 + step).all_commit(step)
    assert slow_start.check("L2").status == "valid"
    # ... and one that commits step 0 and then stalls 19 s is not, step 0 included.
    stall = _three_started().at(1.0).all_commit(0).at(20.0).all_commit(1)
    assert stall.check("L2").status == "invalid"


def test_l2_gaps_of_exactly_r_meet_r():
    log = _three_started().at(1.0).mark("steady_state")
    for step in range(4):
        log.at(1.0 + 5 * step).all_commit(step)
    result = log.check("L2")
    assert result.status == "valid", result.message
    assert result.checked == 1


@pytest.mark.parametrize(("end", "judged"), [(6.0, 1), (4.0, 0)])
def test_l2_judges_a_stretch_at_least_r_long_and_no_shorter_one(end, judged):
    log = _three_started().at(1.0).mark("steady_state").at(1.0).all_commit(0)
    log.at(end).commit("n0", 1, "v1")  # the run's last event: the stretch ends here
    result = log.check("L2")
    assert result.status == "valid" and result.checked == judged
    assert result.message == f"{judged} stable stretches, each committing within R"


def test_l2_a_majority_down_splits_the_stable_stretches():
    # Two of three up from n1's start (0.2 s) until the second crash (10.1 s), and again
    # from n0's restart (15.0 s; n2 stayed up) to the run's last event (25.2 s).
    log = _three_started().at(1.0).all_commit(0).at(10.0).crash("n0").crash("n1")
    log.at(15.0).restart("n0").restart("n1").at(25.0).all_commit(1)
    history = History.from_events(log.events)
    timeline = build_timeline(history, BOUNDS)
    assert stable_stretches(timeline, Membership(history), history) == [
        (0.2, 10.1),
        (15.0, 25.2),
    ]


# --- L3 (J = 5 s): a restarted node reaches the majority's fingerprint within J ------------


def _n2_restarted_at_10() -> Log:
    log = _three_started()
    for step in range(5):
        log.at(1.0 + step).all_commit(step)
    return log.at(8.0).crash("n2").at(10.0).restart("n2")


def test_l3_the_majoritys_fingerprint_is_the_most_common_one_not_the_first():
    # Step 6: n1 (diverged) commits first; n0 and the restarted n2 agree.
    log = _n2_restarted_at_10().at(11.0).commit("n1", 6, "v6", param="odd")
    log.commit("n0", 6, "v6", param="good").commit("n2", 6, "v6", param="good")
    for step in range(7, 12):  # after n2's deadline (15 s): step 6 alone is its catch-up
        log.at(9.0 + step).all_commit(step)
    result = log.check("L3")
    assert result.status == "valid", result.message
    assert result.checked == 1  # three first starts and one restart


def test_l3_a_catch_up_exactly_at_j_counts():
    log = _n2_restarted_at_10().at(11.0).commit("n0", 6, "v6").commit("n1", 6, "v6")
    log.at(15.0).commit("n2", 6, "v6").at(20.0).all_commit(7)
    assert log.check("L3").status == "valid"


def test_l3_a_miss_whose_window_ends_with_the_run_is_judged():
    log = _n2_restarted_at_10().at(12.0).commit("n0", 6, "v6").at(15.0).commit("n1", 7, "v7")
    result = log.check("L3")
    assert result.status == "invalid"
    assert "n2 restarted at t=10.000 and did not reach" in result.message


def test_l3_a_miss_cut_by_the_runs_end_is_unknown_and_says_why():
    log = _n2_restarted_at_10().at(12.0).commit("n0", 6, "v6").at(14.9).commit("n1", 7, "v7")
    result = log.check("L3")
    assert result.status == "unknown"
    assert result.message.endswith("(window not stable or cut by the run's end)")


# --- the verdict's model -------------------------------------------------------------------


def test_evidence_is_capped_at_twenty_references():
    findings = Findings("S1")
    refs = [EventRef(node="n0", index=i, t_mono=float(i), kind="commit") for i in range(25)]
    findings.invalid("diverged", *refs)
    assert findings.result("").evidence == refs[:20]


def test_verdict_json_is_indented_round_trips_and_reads_older_files_with_zero_counts():
    verdict = _three_started().at(1.0).all_commit(0).check_verdict()
    data = verdict.to_json()
    assert data.startswith(b'{\n  "status": ')
    assert msgspec.json.decode(data, type=Verdict) == verdict
    older = {"status": "valid", "bounds": {}, "results": {"S1": {"property": "S1",
                                                                  "status": "valid"}}}  # fmt: skip
    decoded = msgspec.convert(older, Verdict)
    assert (decoded.events, decoded.torn_lines, decoded.results["S1"].checked) == (0, 0, 0)
    with pytest.raises(msgspec.ValidationError, match="status"):
        msgspec.convert({**older, "status": "green"}, Verdict)


def test_bounds_refuse_unknown_fields_positional_values_edits_and_values_out_of_range():
    with pytest.raises(msgspec.ValidationError, match="recovery"):
        msgspec.convert({"detection_s": 1.0, "recovery": 5.0}, Bounds)
    with pytest.raises(TypeError):
        Bounds(1.0)  # type: ignore[misc]
    with pytest.raises(ValueError, match="detection_s"):
        Bounds(detection_s=1e9)
    bounds = Bounds()
    with pytest.raises(AttributeError):
        bounds.detection_s = 3.0  # type: ignore[misc]
    assert hash(bounds) == hash(Bounds())


def test_an_evidence_reference_is_named_and_immutable():
    with pytest.raises(TypeError):
        EventRef("n0", 1, 1.0, "commit")  # type: ignore[misc]
    ref = EventRef(node="n0", index=1, t_mono=1.0, kind="commit")
    with pytest.raises(AttributeError):
        ref.index = 2  # type: ignore[misc]
    assert len({ref, EventRef(node="n0", index=1, t_mono=1.0, kind="commit")}) == 1


# --- S4: every declaration judged on its own evidence ---------------------------------------

ISOLATE_N2 = [["n2", "n0"], ["n0", "n2"], ["n2", "n1"], ["n1", "n2"]]


def _judgements(log: Log) -> list[detector.Judgement]:
    history = History.from_events(log.events)
    return detector.judge_declarations(history, build_timeline(history, BOUNDS), BOUNDS)


def test_s4_a_forced_restart_is_laid_at_the_latest_verdict_on_that_incarnation():
    # n1 declares the live n2 (incarnation 0) dead twice, then n2 restarts because of it;
    # a later relay of the same incarnation caused nothing (and is right: n2 had left).
    log = _three_started().at(5.0).declare("n1", "n2").at(5.2).declare("n1", "n2")
    log.at(5.3).declare("n2", "n2", reason="declared dead by n1").at(6.0).declare("n1", "n2")
    first, second, stale = _judgements(log)  # the restart is judged as its verdict
    restart_index = 5  # three starts, two declarations, then the restart
    assert History.from_events(log.events).events[restart_index].peer == "n2"
    assert [j.status for j in (first, second, stale)] == ["invalid", "invalid", "ok"]
    assert (first.forced_restarts, second.forced_restarts, stale.forced_restarts) == (
        (), (restart_index,), ()
    )  # fmt: skip
    assert second.explanation.endswith("; it forced n2's restart at t=5.300")
    assert "forced" not in first.explanation and stale.explanation == ""
    result = log.check("S4")
    assert result.checked == 3 and result.status == "invalid"
    assert result.message.endswith("(and 1 more)")


def test_s4_a_correct_declaration_has_no_explanation():
    log = _three_started().at(5.0).crash("n2").at(5.5).declare("n1", "n2")
    (judgement,) = _judgements(log)
    assert (judgement.status, judgement.explanation) == ("ok", "")
    assert log.check("S4").status == "valid"


def test_s4_a_forced_restart_naming_no_declarer_is_unknown():
    log = _three_started().at(5.0).declare("n2", "n2", reason="suspected by everyone")
    result = log.check("S4")
    assert result.status == "unknown"
    assert result.message == (
        "n2 restarted as declared dead at t=5.000, but its reason 'suspected by everyone' "
        "names no declarer to judge"
    )


def test_s4_a_forced_restart_is_judged_whatever_incarnation_its_missing_verdict_named():
    # n2 runs as incarnation 1; a verdict on incarnation 0 (not in the history: n1's
    # log was lost) forced it to restart while it was alive and connected.
    log = _three_started().at(3.0).crash("n2").at(3.5).restart("n2", incarnation=1)
    log.at(6.0).declare("n2", "n2", incarnation=0, reason="declared dead by n1")
    result = log.check("S4")
    assert result.status == "invalid" and "n1's declaration is not in the history" in (
        result.message
    )


def test_s4_judges_verdicts_naming_nodes_the_history_never_saw_as_unknown():
    of_unknown_peer = _three_started().at(5.0).declare("n1", "n9")
    result = of_unknown_peer.check("S4")
    assert result.status == "unknown"
    assert result.message.endswith(": the history holds no event of n9")
    by_unknown_declarer = _three_started().at(5.0).declare("n2", "n2", reason="declared dead by n9")
    result = by_unknown_declarer.check("S4")
    assert result.status == "unknown"
    assert result.message.endswith("(the history holds no event of n9)")


def test_s4_a_pause_that_begins_at_the_declaration_counts_for_both_sides():
    peer_paused = _three_started().at(5.0).fault("pause", ["n2"]).at(5.0).declare("n1", "n2")
    assert peer_paused.check("S4").status == "valid"
    judge_paused = _three_started().at(5.0).fault("pause", ["n1"]).at(5.0).declare("n1", "n2")
    result = judge_paused.check("S4")
    assert result.status == "unknown" and result.message.endswith("(n1 was paused or stalled)")


def test_s4_a_loop_stall_that_begins_at_the_declaration_counts_for_both_sides():
    def stall(node: str) -> LoopStall:
        return LoopStall(t_wall=5.3, t_mono=5.3, node=node, stalled_ms=300.0, since_mono=5.0)

    peer_stalled = _three_started().at(5.0).declare("n1", "n2")
    peer_stalled.events.append(stall("n2"))
    assert peer_stalled.check("S4").status == "valid"
    judge_stalled = _three_started().at(5.0).declare("n1", "n2")
    judge_stalled.events.append(stall("n1"))
    result = judge_stalled.check("S4")
    assert result.status == "unknown" and result.message.endswith("(n1 was paused or stalled)")


def test_s4_a_cut_within_d_before_the_declaration_excuses_it():
    log = _three_started().at(5.0).fault("partition", ["n2"], cuts=ISOLATE_N2)
    log.at(6.0).fault("partition", ["n2"], phase="heal").at(6.5).declare("n1", "n2")
    assert log.check("S4").status == "valid"


def test_false_positive_refs_lists_the_invalid_and_the_undecided_judgements():
    log = _three_started().at(5.0).declare("n1", "n2").at(6.0).declare("n1", "n9")
    history = History.from_events(log.events)
    false_positives, undecidable = detector.false_positive_refs(
        history, build_timeline(history, BOUNDS), BOUNDS
    )
    assert [index for index, _ in false_positives] == [3]
    assert [index for index, _ in undecidable] == [4]
    assert false_positives[0][1].startswith("n1 declared n2 (incarnation 0) dead at t=5.000")


# --- L1 (D = 1 s): every live node declares a crashed one dead within D --------------------


def test_l1_reports_the_slowest_detection_in_milliseconds():
    log = _three_started().at(5.0).crash("n2").at(5.25).declare("n0", "n2")
    log.at(5.9).declare("n1", "n2").at(9.0).all_commit(0)
    result = log.check("L1")
    assert result.status == "valid" and result.checked == 2
    assert result.message == "2 detections of 1 crashes, slowest 900 ms"


def test_l1_judges_a_second_crash_of_a_node_that_came_back_from_its_first():
    # n2 crashes at 3 s and is back at 3.5 s (within D: not judged); it crashes again
    # at 5 s and is back only at 8 s: that crash is judged, and nobody declared it.
    log = _three_started().at(3.0).crash("n2").at(3.5).restart("n2").at(5.0).crash("n2")
    log.at(8.0).restart("n2", incarnation=2).at(9.0).all_commit(0)
    result = log.check("L1")
    assert result.status == "invalid" and result.checked == 2
    assert "crash at t=5.000" in result.message


@pytest.mark.parametrize(("back_at", "judged"), [(5.9, 0), (6.0, 0), (6.1, 2)])
def test_l1_a_node_back_within_d_is_not_judged(back_at, judged):
    log = _three_started().at(5.0).crash("n2").at(back_at).restart("n2").at(9.0).all_commit(0)
    result = log.check("L1")
    assert result.checked == judged
    assert result.status == ("valid" if judged == 0 else "invalid")


def test_l1_a_miss_d_before_the_runs_end_is_late_and_one_cut_by_the_end_is_unknown():
    late = _three_started().at(5.0).crash("n2").at(6.0).commit("n0", 0, "v0")  # ends at 6.0
    assert late.check("L1").status == "invalid"
    cut = _three_started().at(5.0).crash("n2").at(5.5).all_commit(0)
    result = cut.check("L1")
    assert result.status == "unknown"
    assert result.message.endswith("(run ended or envelope left) (and 1 more)")


# --- L2 under joins and leaves: the majority of the configuration in force ------------------


FIVE = ["n0", "n1", "n2", "n3", "n4"]


def _five_started() -> Log:
    log = Log()
    for node in FIVE:
        log.start(node, voters=FIVE)
    return log


def test_l2_counts_the_majority_of_the_voters_that_joined():
    # n3 and n4 join (five voters from 5 s); n0 and n1 crash at 10 s: three of five are
    # up, a majority, and nothing commits for 20 s.  Counting the three initial voters
    # (one of three up) left that stall unjudged.
    log = _three_started().start("n3").start("n4").at(1.0).all_commit(0).at(3.0).all_commit(1)
    log.at(4.0).config(1, [*VOTERS, "n3"], "add", "n3")
    log.at(5.0).config(2, FIVE, "add", "n4")
    log.at(7.0).all_commit(2).at(9.0).all_commit(3)
    log.at(10.0).crash("n0").crash("n1").at(30.0).mark("run_end")
    result = log.check("L2")
    assert result.status == "invalid", result.message
    assert "no new step committed for 21.0s" in result.message


def test_l2_counts_the_majority_of_the_voters_left_after_leaves():
    # Five voters; n3 and n4 leave cleanly (three voters from 5 s); n2 crashes at 10 s:
    # two of three are up, and nothing commits for 20 s.
    log = _five_started().at(1.0).commit("n0", 0, "v0").at(3.0).commit("n0", 1, "v1")
    log.at(4.0).config(1, ["n0", "n1", "n2", "n3"], "remove", "n4")
    log.at(4.1).stop("n4")
    log.at(5.0).config(2, VOTERS, "remove", "n3")
    log.at(5.1).stop("n3")
    log.at(7.0).commit("n0", 3, "v3").at(9.0).commit("n0", 4, "v4")
    log.at(10.0).crash("n2").at(30.0).mark("run_end")
    result = log.check("L2")
    assert result.status == "invalid", result.message
    assert "no new step committed for 21.0s" in result.message


def test_a_configuration_is_in_force_from_the_moment_it_was_first_logged():
    # Five voters, n3 and n4 down from 3 s (three of five up: stable).  At 6 s the
    # cluster removes n2, which stops at 6.5 s: from 6 s two of the four voters left
    # are up, no majority, whatever n2 still does.
    log = _five_started().at(1.0).commit("n0", 0, "v0").at(2.0).crash("n3").at(3.0).crash("n4")
    log.at(6.0).config(1, ["n0", "n1", "n3", "n4"], "remove", "n2")
    log.at(6.5).stop("n2")
    log.at(9.0).commit("n0", 1, "v1")
    history = History.from_events(log.events)
    membership = Membership(history)
    assert membership.voters_at_time(5.9) == FIVE
    assert membership.voters_at_time(6.0) == ["n0", "n1", "n3", "n4"]
    stretches = stable_stretches(build_timeline(history, BOUNDS), membership, history)
    assert stretches == [(0.3, 6.0)]


def test_l3_judges_a_restart_that_brings_the_majority_back():
    # n1 and n2 crash at 5 s: no majority.  n1's restart at 10 s restores it (the stable
    # stretch begins with that restart), so n1's failure to catch up by 15 s is a
    # violation, not undecidable.
    log = _three_started()
    for step in range(4):
        log.at(1.0 + step).all_commit(step)
    log.at(5.0).crash("n1").crash("n2").at(10.0).restart("n1")
    for step in range(4, 14):
        log.at(7.0 + step).commit("n0", step, f"v{step}")
    result = log.check("L3")
    assert result.status == "invalid", result.message
    assert "n1 restarted at t=10.000" in result.message


def test_results_are_built_from_named_fields_only():
    # A positional PropertyResult("S1", "valid") would silently swap fields on a reorder.
    with pytest.raises(TypeError):
        PropertyResult("S1", "valid")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Verdict("valid", {}, Bounds())  # type: ignore[misc]


def test_l1_asks_detection_of_members_by_members_only():
    # n2 leaves (removed at step 1, logged at 2 s) and crashes at 4 s: nobody watches a
    # node outside the configuration, so no one has to declare it dead.
    log = _three_started().at(1.0).all_commit(0).at(2.0).config(1, ["n0", "n1"], "remove", "n2")
    log.at(4.0).crash("n2").at(10.0).commit("n0", 2, "v2")
    result = log.check("L1")
    assert result.status == "valid" and result.checked == 0, result.message
    # The same crash of a member (no removal): a miss.
    log = _three_started().at(1.0).all_commit(0).at(4.0).crash("n2").at(10.0).commit("n0", 2, "v2")
    assert log.check("L1").status == "invalid"


def test_l1_does_not_ask_a_removed_observer_to_detect():
    # n2 was removed at 2 s and runs on (a leaver that missed its removal watches no
    # one); n1 crashes at 4 s: n0, a member, must declare it; n2 need not.
    log = _three_started().at(1.0).all_commit(0).at(2.0).config(1, ["n0", "n1"], "remove", "n2")
    log.at(4.0).crash("n1").at(4.5).declare("n0", "n1").at(10.0).commit("n0", 2, "v2")
    result = log.check("L1")
    assert result.status == "valid" and result.checked == 1, result.message
    # Before that removal n2 was a member: a crash then is n2's to detect too.
    log = _three_started().at(1.0).all_commit(0).at(1.5).crash("n1").at(1.8).declare("n0", "n1")
    log.at(2.0).config(1, ["n0", "n2"], "remove", "n1").at(10.0).commit("n0", 2, "v2")
    assert log.check("L1").status == "invalid"
