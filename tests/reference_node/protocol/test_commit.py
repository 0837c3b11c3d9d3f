"""Step commit: model-vs-implementation under random schedules, bug switches, bad input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from protocol_harness import CommitNet, ConsensusModel, drain, step_value

from swarmshake.reference_node.protocol import commit as C
from swarmshake.reference_node.protocol.bugs import BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.messages import (
    AcceptedReply,
    AcceptRequest,
    Decided,
    DecisionRequest,
    Nack,
    Prepare,
    StepValue,
)

NAMES = ("a", "b", "c")


def test_all_commit_the_same_value_with_a_majority_quorum():
    net = CommitNet(NAMES)
    for index, node in enumerate(NAMES):
        net.feed(node, C.ProposeValue(step=0, value=step_value(index, NAMES)))
    drain(net)
    assert sorted(node for node, step, _ in net.committed) == list(NAMES)
    assert len({value.agg_fp for _, _, value in net.committed}) == 1
    commits = [net.cores[n] for n in NAMES]
    assert all(core.step == 1 for core in commits)


def test_commit_survives_the_coordinator_crashing_and_retries_adopt_the_accepted_value():
    net = CommitNet(NAMES)
    coordinator = net.cores["a"].coordinator(0)
    assert coordinator == "a"
    first = step_value(0, NAMES)
    net.feed("a", C.ProposeValue(step=0, value=first))
    # b accepts a's round-0 value (after fetching its bytes); then a crashes.
    drain(net, drop_to={"a", "c"})
    net.crash("a")
    net.feed("c", C.ProposeValue(step=0, value=step_value(1, NAMES)))
    net.now = 5.0
    net.feed("c", C.Tick())
    drain(net, drop_to={"a"})
    committed = {node: value for node, _, value in net.committed}
    assert committed == {"b": first, "c": first}  # c adopted the accepted value


def _forget_vote_scenario(bugs: BugSet) -> CommitNet:
    """b accepts v1 (chosen with a), restarts; c then runs phase 1 with b only."""
    net = CommitNet(NAMES, bugs=bugs)
    v1, v2 = step_value(0, NAMES), step_value(1, NAMES)
    net.feed("a", C.ProposeValue(step=0, value=v1))
    drain(net, drop_to={"a", "c"})  # b fetches and accepts; a's quorum reply is lost
    net.crash("b")
    net.restart("b")
    net.feed("c", C.ProposeValue(step=0, value=v2))
    net.now = 5.0
    net.feed("c", C.Tick())
    drain(net, drop_to={"a"})
    return net


def test_forget_vote_lets_a_restarted_acceptor_choose_a_second_value():
    net = _forget_vote_scenario(BugSet.parse([]))
    assert {value.agg_fp for _, _, value in net.committed} == {"a00"}
    with pytest.raises(AssertionError, match="two values chosen"):
        _forget_vote_scenario(BugSet.parse(["forget-vote"]))


def _partitioned_minority(bugs: BugSet) -> CommitNet:
    names = ("a", "b", "c", "d", "e")
    net = CommitNet(names, bugs=bugs)
    for node in ("a", "b"):
        net.feed(node, C.ViewUpdated(alive=("a", "b")))
    net.feed("a", C.ProposeValue(step=0, value=step_value(0, names)))
    drain(net, drop_to={"c", "d", "e"})
    return net


def test_no_quorum_commits_in_a_minority_partition():
    net = _partitioned_minority(BugSet.parse([]))
    assert net.committed == [] and net.cores["a"].phase == "accepting"
    with pytest.raises(AssertionError, match="chosen is None"):
        _partitioned_minority(BugSet.parse(["no-quorum"]))


def _accept_request_without_bytes(bugs: BugSet) -> list:
    core = C.StepCommit(node="b", voters=NAMES, bugs=bugs)
    request = AcceptRequest(sender="a", step=0, ballot=(0, 0), value=step_value(0, NAMES))
    return core.handle(C.MessageReceived(message=request), 0.0)


def test_acceptor_waits_for_the_aggregate_bytes_and_ack_before_apply_does_not():
    actions = _accept_request_without_bytes(BugSet.parse([]))
    assert [type(a) for a in actions] == [C.FetchAggregate]
    actions = _accept_request_without_bytes(BugSet.parse(["ack-before-apply"]))
    accepted = [a for a in actions if isinstance(a, C.AcceptedValue)]
    assert len(accepted) == 1 and accepted[0].holds_bytes is False


def test_promise_and_accept_are_persisted_before_the_reply():
    core = C.StepCommit(node="b", voters=NAMES)
    actions = core.handle(
        C.MessageReceived(message=Prepare(sender="c", step=0, ballot=(1, 2))), 0.0
    )
    assert [type(a) for a in actions] == [C.Promised, C.Persist, C.Send]
    value = step_value(0, NAMES)
    core.handle(C.HoldsAggregate(step=0, value_fp=value.agg_fp), 0.0)
    request = AcceptRequest(sender="c", step=0, ballot=(1, 2), value=value)
    actions = core.handle(C.MessageReceived(message=request), 0.0)
    assert [type(a) for a in actions] == [C.AcceptedValue, C.Persist, C.Send]
    assert actions[1].record == C.AcceptorRecord(
        step=0, promised=(1, 2), accepted_ballot=(1, 2), accepted_value=value
    )
    restarted = C.StepCommit(node="b", voters=NAMES, persisted=(actions[1].record,))
    assert restarted.acceptor_record(0) == actions[1].record


def test_a_node_below_its_vote_floor_neither_votes_nor_leads_but_still_learns():
    """A node whose acceptor records of steps <= vote_floor were pruned, and whose
    state rolled back to such a step, must stay out of deciding it again."""
    core = C.StepCommit(node="c", voters=NAMES, first_step=5, vote_floor=7)
    value = step_value(5, NAMES)
    core.handle(C.HoldsAggregate(step=5, value_fp=value.agg_fp), 0.0)
    for message in (
        Prepare(sender="a", step=5, ballot=(1, 0)),
        AcceptRequest(sender="a", step=5, ballot=(1, 0), value=value),
    ):
        assert core.handle(C.MessageReceived(message=message), 0.0) == []
    assert core.acceptor_record(5) is None
    # "c" coordinates step 5 (voters[5 % 3]): no round 0, and no retry later.
    assert core.handle(C.ProposeValue(step=5, value=value), 0.0) == []
    assert core.next_deadline() is None
    decided = Decided(sender="a", step=5, value=value, quorum=["a", "b"])
    actions = core.handle(C.MessageReceived(message=decided), 0.0)
    assert any(isinstance(a, C.ApplyStep | C.Committed) for a in actions), actions
    # Above the floor it votes as ever.
    above = C.StepCommit(node="c", voters=NAMES, first_step=8, vote_floor=7)
    actions = above.handle(
        C.MessageReceived(message=Prepare(sender="a", step=8, ballot=(1, 0))), 0.0
    )
    assert [type(a) for a in actions] == [C.Promised, C.Persist, C.Send]


@pytest.mark.parametrize(
    "message, reason",
    [
        (Prepare(sender="zz", step=0, ballot=(1, 0)), "unknown-peer"),
        (Prepare(sender="b", step=0, ballot=(1, 0)), "forged-ballot"),
        (AcceptedReply(sender="zz", step=0, ballot=(0, 0), value_fp="ab"), "unknown-peer"),
        (
            AcceptRequest(
                sender="b", step=0, ballot=(1, 1), value=StepValue(agg_fp="ab", contributors=["q"])
            ),
            "invalid-value",
        ),
        (
            Decided(sender="b", step=0, value=StepValue(agg_fp="ab", contributors=["zz"])),
            "invalid-value",
        ),
    ],
)
def test_bad_remote_messages_raise_and_leave_the_state_unchanged(message, reason):
    core = C.StepCommit(node="a", voters=NAMES)
    core.handle(C.ProposeValue(step=0, value=step_value(0, NAMES)), 0.0)
    before = core.snapshot()
    with pytest.raises(RemoteProtocolError) as error:
        core.handle(C.MessageReceived(message=message), 1.0)
    assert error.value.reason == reason
    assert core.snapshot() == before


def test_bad_local_events_raise_and_leave_the_state_unchanged():
    core = C.StepCommit(node="a", voters=NAMES)
    core.handle(C.Tick(), 5.0)
    before = core.snapshot()
    with pytest.raises(LocalProtocolError):
        core.handle(C.ProposeValue(step=3, value=step_value(0, NAMES)), 6.0)
    with pytest.raises(LocalProtocolError):
        core.handle(C.Tick(), 4.0)  # time went backwards
    with pytest.raises(LocalProtocolError):
        core.handle(C.Applied(step=0, param_fp="ff"), 6.0)  # nothing being applied
    with pytest.raises(LocalProtocolError):
        C.HoldsAggregate(step=-1, value_fp="ab")
    assert core.snapshot() == before
    with pytest.raises(LocalProtocolError):
        C.StepCommit(node="x", voters=NAMES)


def test_consensus_model_refuses_a_second_value():
    model = ConsensusModel()
    model.choose(0, step_value(0, NAMES), "first")
    model.choose(0, step_value(0, NAMES), "same again")
    with pytest.raises(AssertionError):
        model.choose(0, step_value(1, NAMES), "second")


class CommitMachine(RuleBasedStateMachine):
    """Random proposals, message orders, drops, duplicates, crashes and restarts; the
    ConsensusModel inside CommitNet checks every acceptance, decision and commit."""

    def __init__(self):
        super().__init__()
        self.names = NAMES  # 3 voters: small, so random schedules reach the corner cases
        self.net = CommitNet(self.names, seed=7)

    @rule(node=st.sampled_from(NAMES), index=st.integers(0, 2))
    def propose(self, node, index):
        core = self.net.cores[node]
        if node in self.net.down or core._proposer.candidate is not None:
            return
        self.net.feed(node, C.ProposeValue(step=core.step, value=step_value(index, self.names)))

    @precondition(lambda self: self.net.in_flight)
    @rule(data=st.data())
    def deliver(self, data):
        self.net.deliver(data.draw(st.integers(0, len(self.net.in_flight) - 1)))

    @precondition(lambda self: self.net.in_flight)
    @rule(data=st.data())
    def drop(self, data):
        self.net.in_flight.pop(data.draw(st.integers(0, len(self.net.in_flight) - 1)))

    @precondition(lambda self: self.net.in_flight)
    @rule(data=st.data())
    def duplicate(self, data):
        index = data.draw(st.integers(0, len(self.net.in_flight) - 1))
        self.net.in_flight.append(self.net.in_flight[index])

    @precondition(lambda self: self.net.fetches)
    @rule(data=st.data())
    def fetch_done(self, data):
        node, step, fp = self.net.fetches.pop(data.draw(st.integers(0, len(self.net.fetches) - 1)))
        self.net.feed(node, C.HoldsAggregate(step=step, value_fp=fp))

    @precondition(lambda self: self.net.applies)
    @rule()
    def apply_done(self):
        node, step = self.net.applies.pop(0)
        self.net.feed(node, C.Applied(step=step, param_fp="f" + str(step)))

    @rule(node=st.sampled_from(NAMES), seconds=st.floats(0.05, 4.0))
    def tick(self, node, seconds):
        self.net.now += seconds
        self.net.feed(node, C.Tick())

    @rule(node=st.sampled_from(NAMES), peer=st.sampled_from(NAMES), ahead=st.integers(0, 3))
    def peer_at(self, node, peer, ahead):
        # A peer's gradient of some step: asks for a decision at most, never decides.
        self.net.feed(node, C.PeerAt(peer=peer, step=self.net.cores[peer].step + ahead))

    @rule(node=st.sampled_from(NAMES), alive=st.sets(st.sampled_from(NAMES), min_size=1))
    def view_changes(self, node, alive):
        # The detector view must not matter for safety (it does under no-quorum).
        self.net.feed(node, C.ViewUpdated(alive=tuple(sorted(alive))))

    @precondition(lambda self: len(self.net.down) < 1)
    @rule(node=st.sampled_from(NAMES))
    def crash(self, node):
        self.net.crash(node)

    @precondition(lambda self: self.net.down)
    @rule()
    def restart(self):
        self.net.restart(sorted(self.net.down)[0])

    @invariant()
    def every_core_is_valid(self):
        for core in self.net.cores.values():
            core.check_valid()

    @invariant()
    def acceptors_never_accept_above_their_promise(self):
        for node, core in self.net.cores.items():
            for step in range(core.step + 2):
                record = core.acceptor_record(step)
                if record is None or record.accepted_ballot is None:
                    continue
                assert record.promised is not None and tuple(record.accepted_ballot) <= tuple(
                    record.promised
                )
                if "forget-vote" in self.net.bugs:
                    continue  # that bug's point: the accept is not persisted
                persisted = self.net.persisted[node].get(step)
                assert persisted is not None and tuple(persisted.promised) <= tuple(record.promised)

    @invariant()
    def committed_steps_agree(self):
        by_step: dict[int, set] = {}
        for _, step, value in self.net.committed:
            by_step.setdefault(step, set()).add(value.agg_fp)
        assert all(len(values) == 1 for values in by_step.values())


TestCommitMachine = CommitMachine.TestCase
TestCommitMachine.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["no-quorum"])  # forget-vote: see its scenario test
def test_the_model_check_catches_the_safety_bugs(bug):
    """The model-vs-implementation machine has teeth: with a safety bug switched on,
    random schedules reach two chosen values or a decision nobody chose."""
    from hypothesis.stateful import run_state_machine_as_test

    class Buggy(CommitMachine):
        def __init__(self):
            super().__init__()
            self.net = CommitNet(NAMES, seed=7, bugs=BugSet.parse([bug]))

    with pytest.raises((AssertionError, ExceptionGroup)) as caught:
        run_state_machine_as_test(
            Buggy,
            settings=settings(
                max_examples=400,
                stateful_step_count=60,
                deadline=None,
                database=None,
                derandomize=True,
            ),
        )
    text = str(caught.value) + "".join(str(e) for e in getattr(caught.value, "exceptions", ()))
    assert "two values chosen" in text or "chosen is None" in text


def test_a_laggard_asking_a_node_that_started_past_its_step_is_told_it_is_behind():
    """Regression (explore): a node restored from its checkpoint at step 0 starts at
    step 1 and knows no decision for step 0; a peer that rejoined at genesis proposes
    for step 0.  Silence stalled both for ever; now the laggard learns it is Behind."""
    ahead = C.StepCommit(node="a", voters=NAMES, learners=(), first_step=1, seed=0)
    laggard = C.StepCommit(node="b", voters=NAMES, learners=(), first_step=0, seed=0)
    prepare = Prepare(sender="b", step=0, ballot=(1, 1))
    [reply] = ahead.handle(C.MessageReceived(message=prepare), 0.1)
    assert isinstance(reply, C.Send) and reply.to == ("b",)
    assert reply.message.sender_step == 1
    actions = laggard.handle(C.MessageReceived(message=reply.message), 0.2)
    assert C.Behind(step=0, peer_step=1, peer="a") in actions


def _two_steps_without(laggard: str) -> CommitNet:
    """a and b commit steps 0 and 1; ``laggard`` hears none of it."""
    net = CommitNet(NAMES)
    for step in (0, 1):
        coordinator = net.cores["a"].coordinator(step)  # a, then b: round 0 needs no retry
        net.feed(coordinator, C.ProposeValue(step=step, value=step_value(0, NAMES)))
        drain(net, drop_to={laggard})
    assert net.cores["a"].step == 2 and net.cores[laggard].step == 0
    return net


def test_a_node_two_steps_behind_is_told_to_transfer_state_not_fed_step_by_step():
    """Regression (explore, seed 2): a restarted node learned one decided step per
    compute cycle (11.3 s without a commit, R = 10 s).  A peer two steps ahead holds
    the committed state of the step before its own: one state transfer catches up."""
    net = _two_steps_without("c")
    prepare = Prepare(sender="c", step=0, ballot=(1, 2))
    [reply] = net.cores["a"].handle(C.MessageReceived(message=prepare), net.now)
    assert isinstance(reply, C.Send) and reply.message.sender_step == 2
    actions = net.cores["c"].handle(C.MessageReceived(message=reply.message), net.now)
    assert C.Behind(step=0, peer_step=2, peer="a") in actions


def test_a_message_two_steps_ahead_means_behind_and_one_step_ahead_waits():
    laggard = C.StepCommit(node="c", voters=NAMES)
    ahead = Prepare(sender="a", step=2, ballot=(1, 0))
    assert laggard.handle(C.MessageReceived(message=ahead), 0.0) == [
        C.Behind(step=0, peer_step=2, peer="a")
    ]
    # One step ahead: buffered, and the sender (past step 0) is asked for step 0's
    # decision, once.
    next_step = Prepare(sender="a", step=1, ballot=(1, 0))
    assert laggard.handle(C.MessageReceived(message=next_step), 0.1) == [
        C.Send(to=("a",), message=DecisionRequest(sender="c", step=0))
    ]
    again = AcceptRequest(sender="a", step=1, ballot=(1, 0), value=step_value(0, NAMES))
    assert laggard.handle(C.MessageReceived(message=again), 0.2) == []


def test_a_node_that_missed_a_decision_learns_it_from_the_first_peer_ahead():
    """Regression (GPU chaos run, CI): a rejoin installed a state one step old, the
    step's Decided had gone out while the state was in flight, and the node waited
    until the cluster was two steps ahead, transferred state again (one step old
    again), and committed nothing of its own for 43.5 s.  Now the first message of the
    next step makes it ask the sender, which is past the step, for the decision."""
    net = CommitNet(NAMES)
    net.feed("a", C.ProposeValue(step=0, value=step_value(0, NAMES)))
    drain(net, drop_to={"c"})  # c misses step 0's accept and Decided
    assert net.cores["c"].step == 0 and net.cores["b"].step == 1
    coordinator = net.cores["b"].coordinator(1)
    net.feed(coordinator, C.ProposeValue(step=1, value=step_value(1, NAMES)))
    drain(net)
    assert ("c", 0, step_value(0, NAMES)) in net.committed
    assert ("c", 1, step_value(1, NAMES)) in net.committed
    assert net.cores["c"].step == 2


def test_a_peers_gradient_past_this_step_makes_the_node_ask_for_the_decision():
    """Regression (GPU run, median f = 1): a node back from a rejoin one step behind,
    another paused; the two at the next step waited for its gradient (3 needed) and
    sent no commit message, so it never learnt the decision it lacked: 14.7 s
    without a commit.  Their gradients of the next step show them past it."""
    net = CommitNet(NAMES)
    net.feed("a", C.ProposeValue(step=0, value=step_value(0, NAMES)))
    drain(net, drop_to={"c"})  # c misses step 0's accept and Decided
    laggard = net.cores["c"]
    assert laggard.step == 0 and net.cores["a"].step == 1
    # Its own step's gradient, a non-member's or its own: no evidence.
    for peer, step in (("a", 0), ("zz", 1), ("c", 1)):
        assert laggard.handle(C.PeerAt(peer=peer, step=step), net.now) == []
    ask = C.Send(to=("a",), message=DecisionRequest(sender="c", step=0))
    assert laggard.handle(C.PeerAt(peer="a", step=1), net.now) == [ask]
    assert laggard.handle(C.PeerAt(peer="a", step=1), net.now) == []  # once a step
    net.in_flight.append(("a", ask.message))
    drain(net)
    assert ("c", 0, step_value(0, NAMES)) in net.committed and laggard.step == 1
    laggard.check_valid()


def test_a_peer_seen_past_the_next_step_is_asked_when_the_node_gets_there():
    """Gradients of a step two ahead may arrive while the node is still catching up:
    it asks for each step's decision as it reaches it, not after the next message."""
    laggard = C.StepCommit(node="c", voters=NAMES)
    laggard.handle(C.PeerAt(peer="b", step=2), 0.0)  # asks b for step 0's decision
    decided = Decided(sender="b", step=0, value=step_value(0, NAMES), quorum=["a", "b"])
    actions = laggard.handle(C.MessageReceived(message=decided), 0.1)
    assert [a for a in actions if isinstance(a, C.ApplyStep)]  # fetched, then applied
    actions = laggard.handle(C.Applied(step=0, param_fp="f0"), 0.3)
    assert laggard.step == 1
    assert C.Send(to=("b",), message=DecisionRequest(sender="c", step=1)) in actions


def test_a_decision_request_is_answered_only_with_a_decision_held():
    ahead = C.StepCommit(node="a", voters=NAMES, first_step=3)
    request = DecisionRequest(sender="c", step=2)
    assert ahead.handle(C.MessageReceived(message=request), 0.0) == []  # started past it
    with pytest.raises(RemoteProtocolError):
        ahead.handle(C.MessageReceived(message=DecisionRequest(sender="zz", step=2)), 0.0)


def test_a_node_one_step_behind_still_learns_the_decision():
    net = CommitNet(NAMES)
    net.feed("a", C.ProposeValue(step=0, value=step_value(0, NAMES)))
    drain(net, drop_to={"c"})
    prepare = Prepare(sender="c", step=0, ballot=(1, 2))
    [reply] = net.cores["a"].handle(C.MessageReceived(message=prepare), net.now)
    assert isinstance(reply.message, Decided) and reply.message.value == step_value(0, NAMES)


def test_ballots_of_another_steps_configuration_are_not_taken_for_forgeries():
    """A ballot carries its proposer's index in its own step's configuration.  After a
    removal at step 3 ("a" out: "b" 1 -> 0, "c" 2 -> 1), the leader of step 4 and the
    laggard still at step 3 once dropped each other's requests as forged, and the
    laggard never learned step 3 (explore --leaves, 3 nodes, seed 4: no commit for
    33 s).  An earlier step's request is answered, a later one's makes it ask."""
    leader = C.StepCommit(node="b", voters=("b", "c"), first_step=4)
    old_prepare = Prepare(sender="c", step=3, ballot=(1, 2))  # index 2 of (a, b, c)
    [reply] = leader.handle(C.MessageReceived(message=old_prepare), 0.0)
    assert reply.to == ("c",) and isinstance(reply.message, Nack)  # started past it: behind
    laggard = C.StepCommit(node="c", voters=NAMES, first_step=3)
    new_prepare = Prepare(sender="b", step=4, ballot=(1, 0))  # index 0 of (b, c)
    actions = laggard.handle(C.MessageReceived(message=new_prepare), 0.0)
    asks = [a for a in actions if isinstance(a, C.Send) and isinstance(a.message, DecisionRequest)]
    assert [a.to for a in asks] == [("b",)]
    # At its own step a ballot must still carry the sender's index.
    with pytest.raises(RemoteProtocolError) as error:
        laggard.handle(C.MessageReceived(message=Prepare(sender="b", step=3, ballot=(1, 0))), 0.0)
    assert error.value.reason == "forged-ballot"


@pytest.mark.parametrize("gap", [1, 10])
def test_the_state_transfer_gap_is_validated(gap):
    with pytest.raises(LocalProtocolError, match="state_transfer_gap_steps"):
        C.CommitConfig(state_transfer_gap_steps=gap)


def test_a_proposer_the_node_core_ranks_first_starts_its_round_at_once():
    """Step 0's coordinator is a, alive in b's view.  A plain proposal from b waits for
    a's round 0 (a retry later); one the node core ranks first (a is back from a pause
    with no gradient since: it cannot lead) starts phase 1 now (the GPU run: that retry
    came ~6 s later, timed by a 403 MB accept round's reply latency)."""
    plain = C.StepCommit(node="b", voters=NAMES)
    plain.handle(C.ViewUpdated(alive=NAMES), 0.0)
    actions = plain.handle(C.ProposeValue(step=0, value=step_value(1, NAMES)), 1.0)
    assert not [a for a in actions if isinstance(a, C.Send)]
    assert plain.next_deadline() is not None and plain.next_deadline() > 1.0
    first = C.StepCommit(node="b", voters=NAMES)
    first.handle(C.ViewUpdated(alive=NAMES), 0.0)
    actions = first.handle(C.ProposeValue(step=0, value=step_value(1, NAMES), first=True), 1.0)
    prepares = [a.message for a in actions if isinstance(a, C.Send)]
    assert [type(m).__name__ for m in prepares] == ["Prepare"] and prepares[0].ballot[0] >= 1
    # The coordinator itself still runs round 0 (accepts straight away), first or not.
    coordinator = C.StepCommit(node="a", voters=NAMES)
    coordinator.handle(C.ViewUpdated(alive=NAMES), 0.0)
    actions = coordinator.handle(
        C.ProposeValue(step=0, value=step_value(0, NAMES), first=True), 1.0
    )
    assert [type(a.message).__name__ for a in actions if isinstance(a, C.Send)] == ["AcceptRequest"]


def test_a_takeover_that_also_accepts_the_coordinators_value_logs_in_the_order_it_acted():
    # b holds a's round-0 request without its bytes; a leaves b's view; b's own
    # aggregate is the same value.  b accepts (0, 0) with the bytes it now holds and
    # starts its own round (1, 1).  Found by CI (a real smoke run at shutdown): the
    # promise to itself came out before the accept it followed, and the record
    # persisted last held the older promise.
    net = CommitNet(NAMES)
    value = step_value(0, NAMES)
    net.feed("a", C.ProposeValue(step=0, value=value))
    request = next(m for to, m in net.in_flight if to == "b" and isinstance(m, AcceptRequest))
    net.in_flight.clear()
    net.feed("b", C.MessageReceived(message=request))
    net.fetches.clear()
    net.feed("b", C.ViewUpdated(alive=("b", "c")))
    actions = net.feed("b", C.ProposeValue(step=0, value=value))
    logged = [
        (type(a).__name__, tuple(a.ballot))
        for a in actions
        if isinstance(a, C.Promised | C.AcceptedValue)
    ]
    assert logged == [("AcceptedValue", (0, 0)), ("Promised", (1, 1))]
    last_record = [a.record for a in actions if isinstance(a, C.Persist)][-1]
    assert tuple(last_record.promised) == (1, 1) and tuple(last_record.accepted_ballot) == (0, 0)
