"""The reference node's safety checkers (S1, S2, S3) at their edges.

Written against the survivors of the first full mutation run of ``verify/checkers/``
(session 13, safety.py 171/231 killed): step 0, a value chosen by exactly a majority,
a value lost in rolling restarts, one that comes back, and what the messages and
evidence say.  Histories are built event by event as a node logs them.
"""

from __future__ import annotations

from swarmshake.reference_node.protocol.history import (
    HARNESS,
    Accept,
    Commit,
    ConfigChange,
    EventBase,
    Fault,
    History,
    Start,
)
from swarmshake.verify.checkers import Bounds, PropertyResult, check_history
from swarmshake.verify.checkers.safety import Membership

VOTERS = ["n0", "n1", "n2"]
BOUNDS = Bounds(detection_s=1.0, recovery_s=5.0, rejoin_s=5.0)


class Log:
    """One run's events, in the order appended (times strictly increase)."""

    def __init__(self) -> None:
        self.events: list[EventBase] = []
        self.t = 0.0

    def _now(self) -> float:
        self.t += 0.1
        return round(self.t, 1)

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

    def restart(self, node: str, incarnation: int = 1) -> Log:
        return self.start(node, incarnation)

    def index_of(self, event: EventBase) -> int:
        return History.from_events(self.events).events.index(event)

    def check(self, name: str) -> PropertyResult:
        return check_history(History.from_events(self.events), BOUNDS).results[name]


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
