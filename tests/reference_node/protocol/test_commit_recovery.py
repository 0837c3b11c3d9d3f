"""Step commit, recovery timing: who leads when the coordinator is gone, and how soon.

What the recovery benchmark relies on: a coordinator declared dead is replaced by one
proposer at the moment of the view change (no backoff timer in between), a heal
restarts the backoff instead of leaving a proposer asleep for seconds, and a retry
never abandons a round before its replies can possibly arrive.
"""

from __future__ import annotations

import pytest
from protocol_harness import CommitNet, drain, step_value

from swarmshake.reference_node.protocol import commit as C
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import AcceptedReply, Prepare

NAMES = ("a", "b", "c")
FIVE = ("a", "b", "c", "d", "e")


def prepares(actions: list) -> list[Prepare]:
    return [a.message for a in actions if isinstance(a, C.Send) and isinstance(a.message, Prepare)]


@pytest.mark.parametrize(
    ("step", "alive", "acting"),
    [
        (0, FIVE, "a"),  # the coordinator itself while it is alive
        (0, ("b", "c", "d", "e"), "b"),  # the next voter in rotation order
        (3, ("a", "b", "c"), "a"),  # d and e gone: rotation wraps around
        (4, ("b", "c"), "b"),
        (1, (), "b"),  # a view without voters leads nowhere new: the coordinator
    ],
)
def test_the_acting_coordinator_is_the_first_live_voter_in_rotation_order(step, alive, acting):
    core = C.StepCommit(node="c", voters=FIVE)
    core.handle(C.ViewUpdated(alive=alive), 0.0)
    assert core.acting_coordinator(step) == acting
    assert core.coordinator(step) == FIVE[step % 5]


def test_after_the_coordinator_is_declared_dead_the_next_voter_proposes_at_once():
    net = CommitNet(NAMES)
    net.now = 1.0
    # b and c hold an aggregate; a (step 0's coordinator) crashed before proposing.
    for node, index in (("b", 1), ("c", 2)):
        net.feed(node, C.ProposeValue(step=0, value=step_value(index, NAMES)))
    assert not [m for _, m in net.in_flight if isinstance(m, Prepare)]  # a is still in view
    net.crash("a")
    net.now = 1.25  # the detector declares a dead
    actions = net.feed("b", C.ViewUpdated(alive=("b", "c")))
    [prepare] = prepares(actions)
    assert prepare.sender == "b" and prepare.step == 0
    net.feed("c", C.ViewUpdated(alive=("b", "c")))  # c is not the acting one: it waits
    drain(net, drop_to={"a"})
    committed = {node: value for node, _, value in net.committed}
    assert committed == {"b": step_value(1, NAMES), "c": step_value(1, NAMES)}
    assert net.now == 1.25  # no backoff timer was waited out


def test_an_acting_coordinator_proposes_with_phase_1_without_waiting_for_a_timer():
    core = C.StepCommit(node="b", voters=NAMES)
    core.handle(C.ViewUpdated(alive=("b", "c")), 0.0)
    actions = core.handle(C.ProposeValue(step=0, value=step_value(1, NAMES)), 0.5)
    [prepare] = prepares(actions)
    assert prepare.ballot[1] == 1 and prepare.ballot[0] >= 1  # never round 0: that is a's
    # Anyone else keeps to its backoff: one proposer per step on the fast path.
    other = C.StepCommit(node="c", voters=NAMES)
    other.handle(C.ViewUpdated(alive=("b", "c")), 0.0)
    assert prepares(other.handle(C.ProposeValue(step=0, value=step_value(2, NAMES)), 0.5)) == []
    assert other.next_deadline() is not None


def _stuck_in_a_minority(node: str) -> tuple[C.StepCommit, float]:
    """``node`` proposes step 0 cut off from a majority of five and retries until its
    backoff has doubled to the cap (a partition lasting a few seconds); returns the
    core and the moment of the heal, just after its last retry."""
    core = C.StepCommit(node=node, voters=FIVE)
    core.handle(C.ViewUpdated(alive=("a", "b")), 0.0)
    core.handle(C.ProposeValue(step=0, value=step_value(0, FIVE)), 0.0)
    now = 0.0
    for _ in range(6):
        now = core.next_deadline()
        core.handle(C.Tick(), now)
    assert core.next_deadline() - now >= core.config.retry_max_s  # asleep for the cap
    return core, now + 0.01


def test_a_heal_wakes_the_acting_coordinator_at_once():
    core, heal_at = _stuck_in_a_minority("a")
    actions = core.handle(C.ViewUpdated(alive=FIVE), heal_at)
    [prepare] = prepares(actions)
    assert prepare.sender == "a"
    assert core.next_deadline() <= heal_at + 2 * core.config.retry_base_s  # backoff restarted


def test_a_heal_brings_the_other_proposers_retry_down_to_the_first_backoff():
    core, heal_at = _stuck_in_a_minority("b")  # step 0's coordinator is a: b is not acting
    asleep_until = core.next_deadline()
    assert prepares(core.handle(C.ViewUpdated(alive=FIVE), heal_at)) == []
    assert core.next_deadline() <= heal_at + 2 * core.config.retry_base_s < asleep_until


def test_backoff_is_capped_so_an_unannounced_heal_costs_at_most_twice_the_cap():
    """A heal no view change announces (each side of a split without a majority holds
    the other dead for seconds) is noticed by the next retry."""
    core, heal_at = _stuck_in_a_minority("a")
    assert core.next_deadline() - heal_at <= 2 * core.config.retry_max_s <= 2.0


def test_a_view_change_without_a_new_leader_or_a_returning_voter_changes_nothing():
    core = C.StepCommit(node="a", voters=FIVE)
    core.handle(C.ProposeValue(step=0, value=step_value(0, FIVE)), 0.0)  # round 0
    deadline = core.next_deadline()
    snapshot = core.snapshot()
    assert core.handle(C.ViewUpdated(alive=("a", "b", "c", "d")), 0.1) == []
    assert (
        core.next_deadline() == deadline and core.snapshot()[5:-2] == snapshot[5:-2]
    )  # all but view, when it changed, and clock


def test_a_retry_waits_for_replies_that_come_slowly():
    """A 250 ms latency spike: replies take 0.5 s, longer than the first backoff."""
    core = C.StepCommit(node="a", voters=NAMES)
    value = step_value(0, NAMES)
    core.handle(C.ProposeValue(step=0, value=value), 0.0)
    first_retry = core.next_deadline()
    assert first_retry < 0.5
    core.handle(C.Tick(), first_retry)  # round 0 given up: phase 1 of round 1
    # Round 0's accepts arrive now: the round trip takes 0.5 s here.
    for voter in ("b", "c"):
        reply = AcceptedReply(sender=voter, step=0, ballot=(0, 0), value_fp=value.agg_fp)
        core.handle(C.MessageReceived(message=reply), 0.5)
    assert core.reply_latency_s == pytest.approx(0.5)
    # Round 1 (sent at first_retry) is given at least two round trips.
    assert core.next_deadline() >= first_retry + 2 * 0.5


def test_rounds_slower_than_the_backoff_cap_are_not_abandoned():
    """100M parameters: an acceptor fetches the 400 MB aggregate before it accepts, so
    a round takes ~2.5 s; retries capped at retry_max_s (1 s) abandoned every round
    (session 20: 7 proposals for one step)."""
    core = C.StepCommit(node="a", voters=NAMES)
    value = step_value(0, NAMES)
    core.handle(C.ProposeValue(step=0, value=value), 0.0)
    core.handle(C.Tick(), core.next_deadline())  # round 0 given up: round 1
    round_1_at = core._proposer.sent_at[("prepare", core._proposer.ballot)]
    for voter in ("b", "c"):
        reply = AcceptedReply(sender=voter, step=0, ballot=(0, 0), value_fp=value.agg_fp)
        core.handle(C.MessageReceived(message=reply), 2.5)
    assert core.reply_latency_s == pytest.approx(2.5)
    # Round 1 is given two such round trips, past the cap that fits small models.
    assert core.next_deadline() >= round_1_at + 2 * 2.5 > round_1_at + 2 * core.config.retry_max_s
    # Bounded: one reply delayed by a long stall does not park the proposer for as long.
    core.reply_latency_s = 600.0
    assert core._retry_cap_s() == core.config.retry_observed_max_s


def test_a_reply_that_straddled_a_view_change_measures_the_outage_not_the_latency():
    """A partition: the runtime's links queue a round's messages and flush them at the
    heal, so its replies come seconds late.  Since a retry waits for observed rounds
    past retry_max_s, such a sample would park the proposer right after the heal."""
    core = C.StepCommit(node="a", voters=FIVE)
    value = step_value(0, FIVE)
    core.handle(C.ProposeValue(step=0, value=value), 0.0)  # round 0, sent at 0.0
    core.handle(C.ViewUpdated(alive=("a", "b")), 0.3)  # cut off
    core.handle(C.ViewUpdated(alive=FIVE), 8.0)  # the heal
    reply = AcceptedReply(sender="b", step=0, ballot=(0, 0), value_fp=value.agg_fp)
    core.handle(C.MessageReceived(message=reply), 8.1)  # flushed at the heal
    assert core.reply_latency_s == 0.0
    assert core.next_deadline() - 8.1 <= 2 * core.config.retry_max_s


def test_fast_replies_bring_the_retry_delay_back_down():
    core = C.StepCommit(node="a", voters=NAMES)
    core.reply_latency_s = 1.0  # a spike seen before
    value = step_value(0, NAMES)
    core.handle(C.ProposeValue(step=0, value=value), 10.0)
    for voter in ("b", "c"):
        reply = AcceptedReply(sender=voter, step=0, ballot=(0, 0), value_fp=value.agg_fp)
        core.handle(C.MessageReceived(message=reply), 10.1)
    assert core.reply_latency_s < 1.0  # decays toward 0.1 s, one sample at a time


def test_a_proposer_defers_its_retry_to_a_round_its_acceptor_just_joined():
    core = C.StepCommit(node="b", voters=NAMES)
    core.handle(C.ProposeValue(step=0, value=step_value(1, NAMES)), 0.0)
    own_retry = core.next_deadline()
    later = own_retry - 0.01
    core.handle(C.MessageReceived(message=Prepare(sender="c", step=0, ballot=(5, 2))), later)
    assert core.next_deadline() >= later + core.config.retry_base_s
    # A round the acceptor refuses is no reason to wait.
    deferred = core.next_deadline()
    core.handle(C.MessageReceived(message=Prepare(sender="a", step=0, ballot=(1, 0))), later)
    assert core.next_deadline() == deferred


@pytest.mark.parametrize(
    ("field", "value"), [("retry_reply_latencies", 0.0), ("reply_latency_weight", 1.5)]
)
def test_the_retry_latency_settings_are_validated(field, value):
    with pytest.raises(LocalProtocolError, match=field):
        C.CommitConfig(**{field: value})
