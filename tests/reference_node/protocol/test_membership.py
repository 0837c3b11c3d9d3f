"""Membership: one change at a time through commits, dead nodes rejoin with a new incarnation."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from swarmshake.reference_node.protocol import membership as MB
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import ConfigChangeRequest

PEERS = ("a", "b", "c", "d", "e", "f")


def test_a_joiner_is_a_learner_until_promoted_through_commits():
    members = MB.Membership(node="a", voters=("a", "b", "c"))
    members.handle(MB.JoinRequested(peer="d", incarnation=0), 0.0)
    change = members.change_for_next_step()
    assert change == ConfigChangeRequest(change="add", peer="d", incarnation=0)
    actions = members.handle(MB.ConfigCommitted(step=5, change=change), 1.0)
    assert actions == [
        MB.ConfigChanged(step=5, change="add", peer="d", voters=("a", "b", "c"), learners=("d",))
    ]
    assert members.change_for_next_step() is None
    members.handle(MB.LearnerCaughtUp(peer="d", step=9), 2.0)
    promote = members.change_for_next_step()
    members.handle(MB.ConfigCommitted(step=10, change=promote), 3.0)
    assert members.voters == ("a", "b", "c", "d") and members.learners == ()


def test_a_node_declared_dead_must_rejoin_with_a_higher_incarnation():
    members = MB.Membership(node="a", voters=("a", "b", "c"))
    members.handle(MB.PeerDeclaredDead(peer="b", incarnation=2), 0.0)
    rejected = members.handle(MB.JoinRequested(peer="b", incarnation=2), 1.0)
    assert [type(a) for a in rejected] == [MB.JoinRejected]
    assert members.handle(MB.JoinRequested(peer="b", incarnation=3), 2.0) == []
    assert "b" not in members.dead and members.voters == ("a", "b", "c")  # still a voter
    assert members.handle(MB.SelfDeclaredDead(incarnation=0), 3.0) == [MB.MustRejoin(incarnation=1)]


def test_bad_events_raise_and_change_nothing():
    members = MB.Membership(node="a", voters=("a", "b", "c"))
    before = members.snapshot()
    with pytest.raises(LocalProtocolError):
        members.handle(
            MB.ConfigCommitted(step=1, change=ConfigChangeRequest(change="promote", peer="b")), 0.0
        )
    with pytest.raises(LocalProtocolError):
        MB.JoinRequested(peer="", incarnation=0)
    assert members.snapshot() == before


class MembershipMachine(RuleBasedStateMachine):
    """Random joins, leaves, deaths and commits of the wanted change; consecutive
    configurations differ by at most one node, so their majorities overlap."""

    def __init__(self):
        super().__init__()
        self.members = MB.Membership(node="a", voters=("a", "b", "c"))
        self.step = 0
        self.now = 0.0
        self.previous = (set(self.members.voters), set(self.members.learners))
        self.dead_at: dict[str, int] = {}

    def _feed(self, event):
        self.now += 0.1
        return self.members.handle(event, self.now)

    @rule(peer=st.sampled_from(PEERS), incarnation=st.integers(0, 3))
    def join(self, peer, incarnation):
        actions = self._feed(MB.JoinRequested(peer=peer, incarnation=incarnation))
        if peer in self.dead_at and incarnation <= self.dead_at[peer]:
            assert any(isinstance(a, MB.JoinRejected) for a in actions)
        elif not actions:
            self.dead_at.pop(peer, None)

    @rule(peer=st.sampled_from(PEERS), incarnation=st.integers(0, 3))
    def leave(self, peer, incarnation):
        self._feed(MB.LeaveRequested(peer=peer, incarnation=incarnation))

    @rule(peer=st.sampled_from(PEERS), incarnation=st.integers(0, 3))
    def dies(self, peer, incarnation):
        self._feed(MB.PeerDeclaredDead(peer=peer, incarnation=incarnation))
        self.dead_at[peer] = max(self.dead_at.get(peer, -1), incarnation)

    @rule(peer=st.sampled_from(PEERS))
    def caught_up(self, peer):
        self._feed(MB.LearnerCaughtUp(peer=peer, step=self.step))

    @precondition(lambda self: self.members.pending)
    @rule()
    def commit_wanted_change(self):
        change = self.members.change_for_next_step()
        if change is None:
            return
        self.step += 1
        self._feed(MB.ConfigCommitted(step=self.step, change=change))

    @invariant()
    def core_is_valid(self):
        self.members.check_valid()

    @invariant()
    def configuration_is_well_formed_and_changes_one_node_at_a_time(self):
        voters, learners = set(self.members.voters), set(self.members.learners)
        assert voters and not voters & learners
        old_voters, old_learners = self.previous
        assert (
            len(voters ^ old_voters) + len((learners - old_learners) | (old_learners - learners))
            <= 2
        )
        assert len(voters ^ old_voters) <= 1
        self.previous = (voters, learners)


TestMembershipMachine = MembershipMachine.TestCase
TestMembershipMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
