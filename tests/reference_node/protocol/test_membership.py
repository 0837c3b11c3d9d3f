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


def test_configurations_answer_which_one_governs_a_step():
    initial = MB.initial_configuration(["a", "b", "c", "d"], "d", join=True)
    assert initial == MB.Configuration(step=-1, voters=("a", "b", "c"))
    assert MB.initial_configuration(["b", "a"], "a", join=False).voters == ("a", "b")
    configs = MB.Configurations(initial)
    assert configs.latest() == initial and configs.after(100) == initial
    added = MB.Configuration(step=10, voters=("a", "b", "c"), learners=("d",))
    promoted = MB.Configuration(step=14, voters=("a", "b", "c", "d"))
    configs.record(added)
    configs.record(promoted)
    # A change committed at step c governs the steps after c: the state after step k
    # runs under the newest change with c <= k.
    assert configs.after(9) == initial and configs.after(-1) == initial
    assert configs.after(10) == added and configs.after(13) == added
    assert configs.after(14) == promoted and configs.latest() == promoted
    assert promoted.members == ("a", "b", "c", "d") and added.members == ("a", "b", "c", "d")
    # A state installed from a peer replaces everything at or after its step.
    older = MB.Configuration(step=12, voters=("a", "b"))
    configs.record(older)
    assert configs.entries == [initial, added, older] and configs.latest() == older
    configs.check_valid()
    # Loaded out of order (a file), kept in step order.
    assert MB.Configurations(initial, [promoted, added]).entries == [added, promoted]


def test_configurations_keep_a_bounded_history():
    configs = MB.Configurations(MB.Configuration(step=-1, voters=("a",)))
    for step in range(MB.CONFIGS_KEPT + 10):
        configs.record(MB.Configuration(step=step, voters=("a",)))
    assert len(configs.entries) == MB.CONFIGS_KEPT
    assert configs.entries[-1].step == MB.CONFIGS_KEPT + 9
    configs.check_valid()


def test_a_configuration_is_a_value_read_from_disk_strictly():
    """The runtime's membership.json holds these: an unknown field is refused (a wrong
    configuration can break S3), and a configuration is immutable and hashable."""
    import msgspec

    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"step": 1, "voters": ["a"], "extra": 1}', type=MB.Configuration)
    config = MB.Configuration(step=1, voters=("a",))
    assert hash(config) == hash(MB.Configuration(step=1, voters=("a",)))
    with pytest.raises(AttributeError):
        config.step = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        MB.Configuration(1, ("a",))  # type: ignore[misc]


def test_a_configuration_recorded_at_a_known_step_replaces_it_and_old_steps_get_the_oldest():
    configs = MB.Configurations(MB.Configuration(step=-1, voters=("a", "b")))
    configs.record(MB.Configuration(step=3, voters=("a",)))
    configs.record(MB.Configuration(step=3, voters=("b",)))  # a state installed at step 3
    assert [e.voters for e in configs.entries] == [("a", "b"), ("b",)]
    configs.check_valid()
    for step in range(4, 4 + MB.CONFIGS_KEPT):
        configs.record(MB.Configuration(step=step, voters=("a",)))
    oldest = configs.entries[0]
    assert oldest.step > 3 and configs.after(0) == oldest  # older than anything kept
    configs.entries = [oldest, oldest]
    with pytest.raises(AssertionError):
        configs.check_valid()


def test_node_membership_records_changes_and_says_what_the_detector_watches():
    initial = MB.Configuration(step=-1, voters=("a", "b", "c"))
    node = MB.NodeMembership(node="a", incarnation=1, configs=MB.Configurations(initial))
    assert node.is_member() and node.current == initial
    assert node.feed(MB.JoinRequested(peer="d", incarnation=1), 0.0) == []
    change = node.core.change_for_next_step()
    changed = node.committed(3, change, 1.0)
    assert [(c.step, c.change, c.peer) for c in changed] == [(3, "add", "d")]
    assert node.configs.latest() == MB.Configuration(
        step=3, voters=("a", "b", "c"), learners=("d",)
    )
    assert node.watched_members(changed[0]) == ("a", "b", "c", "d")
    assert node.committed(3, change, 2.0) == []  # already applied (came with a state)
    # A change that removes this node: its detector is told nothing (it stops).
    removal = ConfigChangeRequest(change="remove", peer="a", incarnation=1)
    gone = node.committed(4, removal, 3.0)
    assert node.watched_members(gone[0]) is None and not node.is_member()
    node.check_valid()


def test_a_state_installed_outside_its_configuration_leaves_the_detector_watching_none():
    """A node whose removal came with the state it installed watches no one: it kept
    watching the members it remembered and declared them dead when they, rightly,
    stopped heartbeating it."""
    initial = MB.Configuration(step=-1, voters=("a", "b", "c"))
    node = MB.NodeMembership(node="a", incarnation=2, configs=MB.Configurations(initial))
    without = MB.Configuration(step=7, voters=("b", "c"))
    assert node.restart_at(without, from_peer=True) == ("a",)
    assert node.configs.latest() == without and not node.is_member()
    assert node.current == without and node.starts_as_joiner()
    node.configs.entries = []
    with pytest.raises(AssertionError):
        node.check_valid()  # the configurations' own invariants are checked too
    node.configs.record(without)
    node.core.voters = ("c", "b")
    with pytest.raises(AssertionError):
        node.check_valid()  # ... and the core's
    node.core.voters = ("b", "c")
    with_it = MB.Configuration(step=9, voters=("b", "c"), learners=("a",))
    assert node.restart_at(with_it, from_peer=True) == ("a", "b", "c")
    # From its own disk (a checkpoint): nothing recorded.
    assert node.restart_at(initial, from_peer=False) == ("a", "b", "c")
    assert node.configs.latest() == with_it


def test_a_joiner_held_as_a_member_keeps_watching_the_members_after_an_older_install():
    """A joiner whose detector a member's traffic started (the members hold it as one
    and watch it) installs its own checkpoint, from before its add: it keeps watching
    the newest configuration's members it knows.  Shrunk to itself, it stopped
    heartbeating them and they declared it dead (explore --leaves, 3 nodes, seed 1)."""
    removed = MB.Configuration(step=0, voters=("b", "c"))
    configs = MB.Configurations(MB.Configuration(step=-1, voters=("a", "b", "c")))
    configs.record(removed)
    node = MB.NodeMembership(node="a", incarnation=4, configs=configs)
    assert node.starts_as_joiner()
    assert node.restart_at(removed, from_peer=False, held_as_member=True) == ("a", "b", "c")
    assert not node.is_member()
    # Without that evidence (a node whose removal came with its state): itself only.
    assert node.restart_at(removed, from_peer=False) == ("a",)
    # A newer configuration it knows counts, not the installed one's.
    node.configs.record(MB.Configuration(step=3, voters=("b", "c", "d")))
    assert node.restart_at(removed, from_peer=False, held_as_member=True) == ("a", "b", "c", "d")
    node.check_valid()


def test_a_member_whose_fetch_fell_back_to_an_older_checkpoint_keeps_watching_the_members():
    """A learner restarted at a member's crash whose fetch fell back to its checkpoint,
    from before its add: the newest configuration it knows names it, so it keeps
    watching its members (shrunk to itself, it dropped the crashed member's watch
    before confirming it: explore --leaves, 3 nodes, seed 1, L1)."""
    before_add = MB.Configuration(step=1, voters=("b", "c"))
    configs = MB.Configurations(MB.Configuration(step=-1, voters=("a", "b", "c")))
    configs.record(before_add)
    configs.record(MB.Configuration(step=5, voters=("b", "c"), learners=("a",)))
    node = MB.NodeMembership(node="a", incarnation=4, configs=configs)
    assert not node.starts_as_joiner()
    assert node.restart_at(before_add, from_peer=False) == ("a", "b", "c")
    node.check_valid()


def test_a_confirmed_removal_is_recorded_once_and_makes_the_next_process_a_joiner():
    initial = MB.Configuration(step=-1, voters=("a", "b", "c"), learners=("d",))
    node = MB.NodeMembership(node="a", incarnation=1, configs=MB.Configurations(initial))
    assert not node.starts_as_joiner()
    assert node.removal_confirmed(5)
    assert node.configs.latest() == MB.Configuration(step=5, voters=("b", "c"), learners=("d",))
    assert node.starts_as_joiner()
    assert not node.removal_confirmed(7)  # already out
    learner = MB.NodeMembership(node="d", incarnation=1, configs=MB.Configurations(initial))
    assert not learner.removal_confirmed(-1)  # not newer than what it knows
    assert learner.removal_confirmed(2) and learner.configs.latest().learners == ()


def test_node_membership_counts_rejected_joins():
    initial = MB.Configuration(step=-1, voters=("a", "b", "c"))
    node = MB.NodeMembership(node="a", incarnation=1, configs=MB.Configurations(initial))
    node.feed(MB.PeerDeclaredDead(peer="b", incarnation=2), 0.0)
    assert node.feed(MB.JoinRequested(peer="b", incarnation=2), 1.0) == []
    assert node.rejected_joins == 1
    for index in range(MB.PENDING_CHANGES_MAX + 1):  # a join storm: the excess is refused
        node.feed(MB.JoinRequested(peer=f"j{index}", incarnation=1), 2.0)
    assert node.rejected_joins == 2
    with pytest.raises(LocalProtocolError, match="disagree"):
        node.committed(5, ConfigChangeRequest(change="promote", peer="c"), 3.0)


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
