"""Membership core: the configured membership (voters, learners) and the live view.

Two different things, kept apart (DESIGN): the *configuration* changes only through
committed steps, one node at a time (Raft's single-server changes, so the majorities
of two consecutive configurations overlap); the *view* is what the failure detector
currently believes is alive, with an epoch that grows on every change.  A crashed
node stays a voter until a committed ``remove``; a node declared dead must come back
with a higher incarnation.

How a driver uses it (see also DRIVERS.md)
------------------------------------------
``Membership(node=..., voters=..., learners=..., incarnation=...)``; then
``handle(event, now) -> list[MembershipAction]``:

- ``JoinRequested(peer, incarnation)`` for a ``messages.JoinRequest``;
  ``LeaveRequested(peer, incarnation)`` for a ``messages.LeaveNotice``;
- ``PeerDeclaredDead`` / ``PeerAlive`` from the detector's ``DeclaredDead`` /
  ``DeclaredAlive`` actions (``ViewChanged`` needs no event here);
- ``SelfDeclaredDead(incarnation)`` from the detector's ``SelfDeclaredDead``;
- ``LearnerCaughtUp(peer, step)`` when a learner's committed step reaches the cluster's;
- ``ConfigCommitted(step, change)`` for every committed ``StepValue`` with a
  ``config_change`` (from the commit core's ``Committed``).

Before proposing a step's value, ask ``change_for_next_step()`` and put the result in
``StepValue.config_change`` (``None`` if nothing is pending).

Actions: ``ConfigChanged`` -> log ``config_change`` and feed ``MembersChanged`` to the
detector; ``JoinRejected`` -> answer the joiner (no event); ``MustRejoin`` -> this node
was declared dead: stop taking part, restart the rejoin core with ``incarnation``.

Per-peer role transitions (``ROLE_TRANSITIONS``): absent --add--> learner
--promote--> voter; learner/voter --remove--> absent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Literal

import msgspec

from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.messages import MAX_CLUSTER_NODES, ConfigChangeRequest
from swarmshake.reference_node.protocol.structs import (
    Clock,
    CoreAction,
    CoreEvent,
    check_count,
    check_name,
    check_names,
)

Role = Literal["absent", "learner", "voter"]

ROLE_TRANSITIONS: dict[tuple[Role, str], Role] = {
    ("absent", "add"): "learner",
    ("learner", "promote"): "voter",
    ("learner", "remove"): "absent",
    ("voter", "remove"): "absent",
}

PENDING_CHANGES_MAX = 64  # join/leave requests waiting their turn; more is a join storm


class JoinRequested(CoreEvent, frozen=True, kw_only=True):
    peer: str
    incarnation: int

    def __post_init__(self) -> None:
        check_name(self.peer, "JoinRequested.peer")
        check_count(self.incarnation, "JoinRequested.incarnation")


class LeaveRequested(CoreEvent, frozen=True, kw_only=True):
    peer: str
    incarnation: int

    def __post_init__(self) -> None:
        check_name(self.peer, "LeaveRequested.peer")
        check_count(self.incarnation, "LeaveRequested.incarnation")


class PeerDeclaredDead(CoreEvent, frozen=True, kw_only=True):
    peer: str
    incarnation: int

    def __post_init__(self) -> None:
        check_name(self.peer, "PeerDeclaredDead.peer")
        check_count(self.incarnation, "PeerDeclaredDead.incarnation")


class PeerAlive(CoreEvent, frozen=True, kw_only=True):
    peer: str
    incarnation: int

    def __post_init__(self) -> None:
        check_name(self.peer, "PeerAlive.peer")
        check_count(self.incarnation, "PeerAlive.incarnation")


class SelfDeclaredDead(CoreEvent, frozen=True, kw_only=True):
    incarnation: int

    def __post_init__(self) -> None:
        check_count(self.incarnation, "SelfDeclaredDead.incarnation")


class LearnerCaughtUp(CoreEvent, frozen=True, kw_only=True):
    peer: str
    step: int

    def __post_init__(self) -> None:
        check_name(self.peer, "LearnerCaughtUp.peer")
        check_count(self.step, "LearnerCaughtUp.step")


class ConfigCommitted(CoreEvent, frozen=True, kw_only=True):
    step: int
    change: ConfigChangeRequest

    def __post_init__(self) -> None:
        check_count(self.step, "ConfigCommitted.step")
        if not isinstance(self.change, ConfigChangeRequest):
            raise LocalProtocolError("ConfigCommitted.change must be a ConfigChangeRequest")


MembershipEvent = (
    JoinRequested
    | LeaveRequested
    | PeerDeclaredDead
    | PeerAlive
    | SelfDeclaredDead
    | LearnerCaughtUp
    | ConfigCommitted
)


class ConfigChanged(CoreAction, frozen=True, kw_only=True):
    step: int
    change: Literal["add", "remove", "promote"]
    peer: str
    voters: tuple[str, ...]
    learners: tuple[str, ...]


class JoinRejected(CoreAction, frozen=True, kw_only=True):
    peer: str
    reason: str


class MustRejoin(CoreAction, frozen=True, kw_only=True):
    incarnation: int  # the incarnation to come back with


MembershipAction = ConfigChanged | JoinRejected | MustRejoin


class Membership:
    def __init__(
        self,
        *,
        node: str,
        voters: tuple[str, ...],
        learners: tuple[str, ...] = (),
        incarnation: int = 0,
        bugs: BugSet = NO_BUGS,
    ):
        check_name(node, "node")
        check_names(voters, "voters")
        check_names(learners, "learners")
        check_count(incarnation, "incarnation")
        if not voters or set(voters) & set(learners):
            raise LocalProtocolError("need >= 1 voter, and voters and learners are disjoint")
        self.node = node
        self.incarnation = incarnation
        self.bugs = bugs
        self.voters: tuple[str, ...] = tuple(sorted(voters))
        self.learners: tuple[str, ...] = tuple(sorted(learners))
        self.config_step = -1  # the step whose commit made this configuration
        self.dead: dict[str, int] = {}  # peer -> incarnation declared dead
        self.incarnations: dict[str, int] = {}
        self.pending: deque[ConfigChangeRequest] = deque()
        self.must_rejoin = False
        self._clock = Clock()

    def handle(self, event: MembershipEvent, now: float) -> list[MembershipAction]:
        self._clock.check(now)
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"Membership cannot handle {type(event).__name__}")
        actions: list[MembershipAction] = []
        handler(self, event, actions)
        self._clock.last = now
        return actions

    def role(self, peer: str) -> Role:
        if peer in self.voters:
            return "voter"
        if peer in self.learners:
            return "learner"
        return "absent"

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(sorted(self.voters + self.learners))

    def change_for_next_step(self) -> ConfigChangeRequest | None:
        """The one change to carry in the next proposed value (still valid), or None."""
        while self.pending:
            head = self.pending[0]
            if (self.role(head.peer), head.change) in ROLE_TRANSITIONS and not (
                head.change == "remove" and self.voters == (head.peer,)
            ):
                return head
            self.pending.popleft()  # no longer applicable (e.g. another node's copy won)
        return None

    def check_valid(self) -> None:
        """Invariants: >= 1 voter, voters and learners disjoint and sorted, a bounded
        queue of pending changes, no duplicate pending change."""
        assert self.voters and self.voters == tuple(sorted(self.voters))
        assert self.learners == tuple(sorted(self.learners))
        assert not set(self.voters) & set(self.learners)
        assert len(self.pending) <= PENDING_CHANGES_MAX
        assert len(set(self.pending)) == len(self.pending)

    def snapshot(self) -> tuple:
        return (
            self.node,
            self.incarnation,
            self.voters,
            self.learners,
            self.config_step,
            tuple(sorted(self.dead.items())),
            tuple(sorted(self.incarnations.items())),
            tuple(self.pending),
            self.must_rejoin,
            self._clock.last,
        )

    # -- handlers -----------------------------------------------------------------------------

    def _want(self, change: ConfigChangeRequest) -> None:
        if change in self.pending:
            return
        if len(self.pending) >= PENDING_CHANGES_MAX:
            raise RemoteProtocolError(
                f"{PENDING_CHANGES_MAX} membership changes already pending", reason="overload"
            )
        self.pending.append(change)

    def _on_join(self, event: JoinRequested, actions: list) -> None:
        dead_at = self.dead.get(event.peer)
        if dead_at is not None and event.incarnation <= dead_at:
            actions.append(
                JoinRejected(
                    peer=event.peer,
                    reason=f"declared dead at incarnation {dead_at}; rejoin with a higher one",
                )
            )
            return
        if event.incarnation < self.incarnations.get(event.peer, 0):
            actions.append(JoinRejected(peer=event.peer, reason="an older incarnation"))
            return
        if self.role(event.peer) == "absent":
            if len(self.members) >= MAX_CLUSTER_NODES:
                actions.append(JoinRejected(peer=event.peer, reason="cluster is full"))
                return
            self._want(
                ConfigChangeRequest(change="add", peer=event.peer, incarnation=event.incarnation)
            )
        self.incarnations[event.peer] = event.incarnation
        self.dead.pop(event.peer, None)

    def _on_leave(self, event: LeaveRequested, actions: list) -> None:
        if self.role(event.peer) != "absent":
            self._want(
                ConfigChangeRequest(change="remove", peer=event.peer, incarnation=event.incarnation)
            )

    def _on_dead(self, event: PeerDeclaredDead, actions: list) -> None:
        if event.incarnation >= self.dead.get(event.peer, -1):
            self.dead[event.peer] = event.incarnation

    def _on_alive(self, event: PeerAlive, actions: list) -> None:
        dead_at = self.dead.get(event.peer)
        if dead_at is not None and event.incarnation > dead_at:
            del self.dead[event.peer]
        if event.incarnation > self.incarnations.get(event.peer, 0):
            self.incarnations[event.peer] = event.incarnation

    def _on_self_dead(self, event: SelfDeclaredDead, actions: list) -> None:
        if self.must_rejoin:
            return
        self.must_rejoin = True
        actions.append(MustRejoin(incarnation=max(self.incarnation, event.incarnation) + 1))

    def _on_caught_up(self, event: LearnerCaughtUp, actions: list) -> None:
        if self.role(event.peer) == "learner":
            self._want(ConfigChangeRequest(change="promote", peer=event.peer))

    def _on_committed(self, event: ConfigCommitted, actions: list) -> None:
        change = event.change
        if event.step <= self.config_step:
            raise LocalProtocolError(
                f"config change at step {event.step} after one at step {self.config_step}: "
                "committed changes arrive in step order"
            )
        new_role = ROLE_TRANSITIONS.get((self.role(change.peer), change.change))
        if new_role is None:
            raise LocalProtocolError(
                f"committed change {change.change} {change.peer} does not apply to role "
                f"{self.role(change.peer)} (the commit core validates changes)"
            )
        voters = [v for v in self.voters if v != change.peer]
        learners = [v for v in self.learners if v != change.peer]
        if new_role == "voter":
            voters.append(change.peer)
        elif new_role == "learner":
            learners.append(change.peer)
        self.voters, self.learners = tuple(sorted(voters)), tuple(sorted(learners))
        self.config_step = event.step
        self.pending = deque(p for p in self.pending if p != change)
        actions.append(
            ConfigChanged(
                step=event.step,
                change=change.change,
                peer=change.peer,
                voters=self.voters,
                learners=self.learners,
            )
        )


_HANDLERS = {
    JoinRequested: Membership._on_join,
    LeaveRequested: Membership._on_leave,
    PeerDeclaredDead: Membership._on_dead,
    PeerAlive: Membership._on_alive,
    SelfDeclaredDead: Membership._on_self_dead,
    LearnerCaughtUp: Membership._on_caught_up,
    ConfigCommitted: Membership._on_committed,
}


# --- a node's configurations: which one governs which step --------------------------------

GENESIS_CONFIG_STEP = -1  # the "step" of the initial configuration (nothing committed yet)
# Configurations a node keeps: a checkpoint is at most a few hundred steps old and
# membership changes are rare (one per join or leave), so 64 reach far past any
# checkpoint still on disk while keeping the runtime's file a few KB.
CONFIGS_KEPT = 64


class Configuration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The configuration committed at ``step`` (``GENESIS_CONFIG_STEP``: the initial one)."""

    step: int
    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(sorted(self.voters + self.learners))


def initial_configuration(members: Iterable[str], node: str, join: bool) -> Configuration:
    """Every configured member votes, except this node when it joins."""
    voters = tuple(sorted(m for m in members if not (join and m == node)))
    return Configuration(step=GENESIS_CONFIG_STEP, voters=voters)


class Configurations:
    """The configurations a node saw committed, by the step that committed them: what
    survives its crashes (the runtime keeps it in ``membership.json``, the simulator
    on its ``NodeDisk``), so a restart and a checkpoint restore start the commit core
    with the configuration that governed their state's step, and a node that left
    knows it must join again.  A change committed at step ``c`` governs from step
    ``c + 1``: the state after applying step ``k`` runs under the newest with
    ``c <= k``.  Pure; the shell persists it after ``record`` and ``reset``."""

    def __init__(self, initial: Configuration, entries: Iterable[Configuration] = ()):
        self.entries: list[Configuration] = sorted(entries, key=lambda e: e.step) or [initial]

    def latest(self) -> Configuration:
        return self.entries[-1]

    def after(self, step: int) -> Configuration:
        """The configuration the state after committing ``step`` runs under."""
        chosen = self.entries[0]
        for entry in self.entries:
            if entry.step <= step:
                chosen = entry
        return chosen

    def record(self, entry: Configuration) -> None:
        """A change committed here, or a state installed from a peer with its
        configuration: it replaces everything at or after its step."""
        self.entries = [e for e in self.entries if e.step < entry.step] + [entry]
        del self.entries[:-CONFIGS_KEPT]

    def check_valid(self) -> None:
        assert self.entries and len(self.entries) <= CONFIGS_KEPT
        steps = [e.step for e in self.entries]
        assert steps == sorted(set(steps)), steps


class NodeMembership:
    """A node's membership core plus its ``Configurations``: the bookkeeping both
    shells did around ``Membership`` (the runtime's ``MembershipDriver`` before
    issue 12), pure.  ``feed`` returns the ``ConfigChanged`` actions a shell logs
    (before acting) and then persists ``configs`` for; ``watched_members`` says what
    the detector watches after one."""

    def __init__(
        self, *, node: str, incarnation: int, configs: Configurations, bugs: BugSet = NO_BUGS
    ):
        self.node = node
        self.incarnation = incarnation
        self.configs = configs
        self.bugs = bugs
        self.rejected_joins = 0
        self.core = self._core_for(configs.latest())

    def _core_for(self, configuration: Configuration) -> Membership:
        core = Membership(
            node=self.node,
            voters=configuration.voters,
            learners=configuration.learners,
            incarnation=self.incarnation,
            bugs=self.bugs,
        )
        core.config_step = configuration.step
        return core

    @property
    def current(self) -> Configuration:
        core = self.core
        return Configuration(step=core.config_step, voters=core.voters, learners=core.learners)

    def is_member(self) -> bool:
        return self.core.role(self.node) != "absent"

    def starts_as_joiner(self) -> bool:
        """Whether a starting process must ask to be added: the newest configuration
        it knows lacks it.  Not the configuration of the state it starts from: a
        checkpoint older than the node's removal named it, and a node that started
        as a member by it watched peers that had stopped heartbeating it and
        declared them dead (the simulator's leave churn, 4 nodes, seed 17)."""
        return self.node not in self.configs.latest().members

    def restart_at(
        self, configuration: Configuration, *, from_peer: bool, held_as_member: bool = False
    ) -> tuple[str, ...]:
        """The node's state was replaced (start, rejoin): its configuration comes with
        it (recorded when it came from a peer).  Pending requests die with the old
        core; joiners and leavers ask again.  Returns the members a running detector
        watches from now on: the configuration's, or -- when it does not name this
        node -- none but itself.  A node outside the configuration that kept watching
        the members it remembered declared them dead once they, rightly, stopped
        heartbeating it (the simulator's leave churn, 3 nodes, seed 2: a removed
        node's verdict on a live voter).

        ``held_as_member``: a joiner whose detector a member's traffic started
        (``node_core.Enrolment.held_as_member``) keeps watching the newest
        configuration's members it knows, as that start made it: they hold it as a
        member and watch it.  Shrunk to itself, it stopped heartbeating them and they
        declared it dead while it fetched again (explore --leaves, 3 nodes, seed 1: a
        joiner whose fetch fell back to its own checkpoint, from before its add).  So
        does a node the newest configuration it knows names (a learner whose fetch fell
        back to a checkpoint from before its add): the members watch it; shrunk to
        itself, it also dropped its watch of a member that had crashed meanwhile
        (explore --leaves, 3 nodes, seed 1: L1)."""
        if from_peer:
            self.configs.record(configuration)
        self.core = self._core_for(configuration)
        if self.is_member():
            return configuration.members
        latest = self.configs.latest().members
        if held_as_member or self.node in latest:
            return tuple(sorted({*latest, self.node}))
        return (self.node,)

    def feed(self, event: MembershipEvent, now: float) -> list[ConfigChanged]:
        """Feed one event; returns the ``ConfigChanged`` actions (already recorded in
        ``configs``).  A rejected join, or a join storm past ``PENDING_CHANGES_MAX``,
        is counted: no wire message says "rejected"; the joiner times out and, if it
        was declared dead, restarts with a higher incarnation.  ``MustRejoin`` needs
        nothing here: both shells restart on the detector's ``SelfDeclaredDead``."""
        try:
            actions = self.core.handle(event, now)
        except RemoteProtocolError:
            self.rejected_joins += 1
            return []
        changed: list[ConfigChanged] = []
        for action in actions:
            if isinstance(action, ConfigChanged):
                self.configs.record(
                    Configuration(step=action.step, voters=action.voters, learners=action.learners)
                )
                changed.append(action)
            elif isinstance(action, JoinRejected):
                self.rejected_joins += 1
        return changed

    def committed(self, step: int, change: ConfigChangeRequest, now: float) -> list[ConfigChanged]:
        """A committed value carried ``change``: apply it (the caller feeds steps in
        order).  One the node already has (it came with a state transfer) is skipped."""
        if step <= self.core.config_step:
            return []
        try:
            return self.feed(ConfigCommitted(step=step, change=change), now)
        except LocalProtocolError as error:
            # The commit core validated the change against the same configuration, so
            # this is a driver bug; say so loudly rather than diverge silently.
            raise LocalProtocolError(f"membership and commit cores disagree: {error}") from None

    def removal_confirmed(self, step: int) -> bool:
        """A member said it committed this node's removal at ``step``, a step this node
        never saw: record a configuration without it from there (the others' changes
        it missed stay unknown), so that its next process starts as a joiner and does
        not watch, as a member, peers that no longer heartbeat it.  Returns whether
        ``configs`` changed (then the shell persists it)."""
        latest = self.configs.latest()
        if step <= latest.step or self.node not in latest.members:
            return False
        self.configs.record(
            Configuration(
                step=step,
                voters=tuple(v for v in latest.voters if v != self.node),
                learners=tuple(v for v in latest.learners if v != self.node),
            )
        )
        return True

    def watched_members(self, change: ConfigChanged) -> tuple[str, ...] | None:
        """The members the detector watches after ``change``; None when this node is
        not one of them (a removed node stops; a joiner waits to be added)."""
        members = tuple(sorted(change.voters + change.learners))
        return members if self.node in members else None

    def check_valid(self) -> None:
        self.core.check_valid()
        self.configs.check_valid()
        assert self.rejected_joins >= 0
