"""The node core's step part: one object, one ``handle(event, now)``, for a node's steps.

A node's step is five pieces working together: the commit core (``commit.StepCommit``:
the consensus on each step's value), who proposes and when (``node_core.StepLeader``
and ``Proposer``), how missing aggregate bytes are got (``aggregate_pulls``), when a
committed value is applied (``step_apply``) and which aggregates are held
(``held_aggregates``).  Each shell used to call them in turn and write the glue between
them itself: what a ``FetchAggregate`` or an ``ApplyStep`` of the commit core makes the
others do, what a built aggregate means for the proposal, the pulls, the commit core
and the apply, what begins a step.  The runtime's step driver and the simulator's
``NodeApp`` each had their own copy of that glue (issue 12).  It lives here, once:

| event (``handle``) | what the node does |
|---|---|
| ``commit.MessageReceived`` | a value it names is remembered for a rebuild (``value_seen``); the commit core takes the message (a refused one: ``MessageRefused``) |
| ``node_core.ViewChanged`` | the commit core, the leader and the pulls see the detector's view |
| ``node_core.OwnContribution`` | the leader: this node's gradient is ready |
| ``node_core.ContributionArrived`` | the leader; a sender past this node's step shows it the decision is there (``commit.PeerAt``); a pull waiting for it may rebuild now |
| ``AggregateHeld`` | the bytes are held: a build's result is proposed if it was the proposal's; the pulls end; the commit core is told (``HoldsAggregate``); a decided value is applied |
| ``AggregateUnavailable`` | a build could not run (the leader proposes without the missing), or the apply's bytes are gone (pulled again), or a peer had none (the next one is asked) |
| ``AggregateApplied`` | the apply is done: the commit core is told (``Applied``) |
| ``commit.Tick`` / ``node_core.Tick`` / ``PullsDue`` | the commit core's, the leader's and the pulls' timers (``deadlines``) |

``attach(core, now)`` starts a new commit core (a start, a rejoin's install): it sees the
view, is told of the aggregates held in its window, and its step begins; ``detach()``
stops it while the node fetches the cluster's state (the apply under way is moot).

What comes out, in the order the shells perform it (a ``commit.Persist`` before anything
after it): every commit core action as it is (the shells log its history event, send,
persist, and handle ``Committed`` and ``Behind``; they only log ``FetchAggregate`` and
``ApplyStep``, whose work this object did), and the I/O this object decided:
``node_core.BuildValue`` and ``aggregate_pulls.RebuildAggregate`` (aggregate exactly
these contributors' gradients, answer ``AggregateHeld`` or ``AggregateUnavailable``),
``aggregate_pulls.RequestAggregate`` (ask a peer for the bytes), ``step_apply.
ApplyAggregate`` (apply, answer ``AggregateApplied``), ``StepStarted`` (compute the
gradient if it says so), ``StateDiverged`` (fetch the state) and ``MessageRefused``.

Every event is handled depth first: a proposal the leader makes while the commit core's
actions are worked through goes to the core at once, and its actions follow the one
that caused them.  Pure like every core: ``now`` comes in, no clock, no I/O.

Where what comes next goes (node_core's docstring): relaxed mode's ``GroupLeader`` is
chosen here, in ``__init__``, in place of ``StepLeader`` (same events, same actions);
pipeline mode's stage index comes in with ``StepStarted`` and ``attach``.
"""

from __future__ import annotations

from collections.abc import Mapping

from swarmshake.reference_node.protocol import aggregate_pulls as ap
from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import held_aggregates as ha
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import step_apply as sa
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.messages import AcceptRequest, ConfigChangeRequest, Decided
from swarmshake.reference_node.protocol.structs import (
    CoreAction,
    CoreEvent,
    check_count,
    check_name,
)

# isinstance() with a tuple (``A | B`` builds a union object at every call).
_CARRY_CONTRIBUTORS = (AcceptRequest, Decided)

# --- events ---------------------------------------------------------------------------------


class AggregateHeld(CoreEvent, frozen=True, kw_only=True):
    """The bytes of ``step``'s aggregate ``value_fp`` are held, durably.  ``contributors``:
    the answer to a build (``BuildValue`` or ``RebuildAggregate``) over exactly them;
    empty for bytes a peer sent.  ``change``: the membership core's next change, which a
    proposal built from them carries if the commit core agrees it applies
    (``node_core.change_to_propose``)."""

    step: int
    value_fp: str
    contributors: tuple[str, ...] = ()
    change: ConfigChangeRequest | None = None

    def __post_init__(self) -> None:
        check_count(self.step, "AggregateHeld.step")
        if not isinstance(self.value_fp, str) or not self.value_fp:
            raise LocalProtocolError("AggregateHeld.value_fp must be a fingerprint string")
        if not isinstance(self.contributors, tuple):
            raise LocalProtocolError("AggregateHeld.contributors must be a tuple")


class AggregateUnavailable(CoreEvent, frozen=True, kw_only=True):
    """The bytes could not be had.  ``value_fp`` empty: a build of ``contributors`` could
    not run (``missing``: whose inputs it lacked).  Else ``source`` sent none (or wrong
    ones), or (no source) the bytes of the apply under way are gone; ``state_step`` >= 0:
    the apply was refused because the worker's parameters are at that step."""

    step: int
    value_fp: str = ""
    source: str = ""
    contributors: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    state_step: int = -1

    def __post_init__(self) -> None:
        check_count(self.step, "AggregateUnavailable.step")
        if self.source:
            check_name(self.source, "AggregateUnavailable.source")


class AggregateApplied(CoreEvent, frozen=True, kw_only=True):
    """The worker applied ``step``'s aggregate ``value_fp``; the parameters are ``param_fp``."""

    step: int
    value_fp: str
    param_fp: str

    def __post_init__(self) -> None:
        check_count(self.step, "AggregateApplied.step")


class PullsDue(CoreEvent, frozen=True, kw_only=True):
    """The pulls' deadline (``AggregatePulls.next_deadline``) came."""


StepNodeEvent = (
    cm.MessageReceived
    | cm.Tick
    | nc.ViewChanged
    | nc.OwnContribution
    | nc.ContributionArrived
    | nc.Tick
    | AggregateHeld
    | AggregateUnavailable
    | AggregateApplied
    | PullsDue
)


# --- actions ----------------------------------------------------------------------------------


class StepStarted(CoreAction, frozen=True, kw_only=True):
    """The node's step is now ``step``.  ``contributes``: compute this node's gradient of
    it and send it to the other members (not when the step is decided already, when a
    stored value is re-proposed, or when this node is no member)."""

    step: int
    contributes: bool


class StateDiverged(CoreAction, frozen=True, kw_only=True):
    """The worker's parameters are at ``worker_step``, not at the step whose value it was
    asked to apply: fetch the cluster's state.  Pulling the bytes again, as for bytes
    that are gone, would have the worker refuse the same apply in a loop as fast as
    it answers (the bytes are held: it answers at once)."""

    step: int
    worker_step: int


class MessageRefused(CoreAction, frozen=True, kw_only=True):
    """The commit core refused ``sender``'s message (``RemoteProtocolError.reason``)."""

    sender: str
    reason: str


# --- the step part of the node ------------------------------------------------------------------


class StepNode:
    """One node's steps: the commit core and the decisions around it (module docstring)."""

    def __init__(self, *, node: str, config: nc.NodeConfig, alive: tuple[str, ...] = ()):
        self.node = node
        self.config = config
        self.core: cm.StepCommit | None = None  # None: no step runs (a fetch, a joiner)
        self.leader = nc.StepLeader(node=node, config=config)
        self.proposer = nc.Proposer()
        self.pulls = ap.AggregatePulls(node=node, config=config)
        self.apply = sa.StepApply(config)
        self.held = ha.HeldAggregates(config)
        self.alive = tuple(alive)
        self.leader.handle(nc.ViewChanged(alive=self.alive), 0.0)
        # The value each durable acceptor record accepted (step -> fingerprint): its
        # bytes outlive an apply (node_core.aggregates_to_keep).  The shells' stores
        # own the records; they hand over their mapping whenever it changes.
        self.accepted: Mapping[int, str] = {}
        self.proposals_refused = 0  # proposals the commit core refused (status)

    # -- what the shells read ---------------------------------------------------------------

    @property
    def core_step(self) -> int | None:
        """The commit core's step, None while no step runs."""
        return self.core.step if self.core is not None else None

    def deadlines(self) -> tuple[float | None, float | None, float | None]:
        """When the commit core's, the leader's and the pulls' timers are next due (node
        clock; None: nothing), fed as ``commit.Tick``, ``node_core.Tick`` and ``PullsDue``."""
        commit_due = self.core.next_deadline() if self.core is not None else None
        return commit_due, self.leader.next_deadline(), self.pulls.next_deadline()

    def check_valid(self) -> None:
        self.leader.check_valid()
        self.proposer.check_valid()
        self.pulls.check_valid()
        self.apply.check_valid()
        self.held.check_valid()
        asked = self.apply.asked
        if asked is not None:
            assert (asked.step, asked.value.agg_fp) in self.held, "applying bytes not held"
        assert self.core is not None or self.apply.pending is None, "an apply with no core"

    # -- the commit core's life ---------------------------------------------------------------

    def attach(self, core: cm.StepCommit, now: float) -> list[CoreAction]:
        """A new commit core runs (a start, an install): it sees the view, is told of the
        aggregates held in its window (bytes that came while no core ran included, or
        an accept waiting for them stalls), and its step begins."""
        self.core = core
        out: list[CoreAction] = []
        self._commit(cm.ViewUpdated(alive=self.alive), now, out)
        for event in self.held.announce(core.step):
            # The core may have moved on while the ones before were told.
            if self.held.in_window(event.step, core.step):
                self._commit(event, now, out)
        self._begin(now, out)
        return out

    def detach(self) -> None:
        """The node fetches the cluster's state: no step runs, the apply is moot."""
        self.core = None
        self.apply.dropped()

    # -- events ---------------------------------------------------------------------------

    def handle(self, event: StepNodeEvent, now: float) -> list[CoreAction]:
        out: list[CoreAction] = []
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"StepNode takes no {type(event).__name__}")
        handler(self, event, now, out)
        return out

    # The handlers, one per event (``_HANDLERS``); each appends its actions to ``out``.

    def _on_message(self, event: cm.MessageReceived, now: float, out: list) -> None:
        message = event.message
        if isinstance(message, _CARRY_CONTRIBUTORS):
            value = message.value
            self.pulls.value_seen(
                message.step, value.agg_fp, value.contributors, core_step=self.core_step
            )
        if self.core is None:
            return  # no step runs: the commit traffic of a core that will start afresh
        try:
            self._commit(event, now, out)
        except RemoteProtocolError as error:
            out.append(MessageRefused(sender=message.sender, reason=error.reason))

    def _on_view(self, event: nc.ViewChanged, now: float, out: list) -> None:
        self.alive = tuple(event.alive)
        if self.core is not None:
            self._commit(cm.ViewUpdated(alive=self.alive), now, out)
        self._lead(event, now, out)
        out += self.pulls.view_changed(self.alive, now)

    def _on_own(self, event: nc.OwnContribution, now: float, out: list) -> None:
        self._lead(event, now, out)

    def _on_arrived(self, event: nc.ContributionArrived, now: float, out: list) -> None:
        decisions = self.leader.handle(event, now)  # _lead inlined: the hottest event
        if decisions:
            self._decided(decisions, now, out)
        core = self.core
        if core is not None and event.step > core.step:  # the sender is past this node
            self._commit(cm.PeerAt(peer=event.sender, step=event.step), now, out)
        if self.pulls.pending:  # a waiting pull may now be rebuilt
            out += self.pulls.contribution(event.step, self.leader.arrived.get(event.step, ()))

    def _on_held(self, event: AggregateHeld, now: float, out: list) -> None:
        step, value_fp = event.step, event.value_fp
        self.held.add(step, value_fp)
        if event.contributors:  # the answer to a build: the proposal's, or a rebuild's
            core = self.core
            change = nc.change_to_propose(event.change, core) if core is not None else None
            proposed = self.proposer.built(
                step, value_fp, event.contributors, core_step=self.core_step, change=change
            )
            for proposal in proposed:
                self._propose(proposal, now, out)
            out += self.pulls.built(step, value_fp, event.contributors, alive=self.alive, now=now)
        self.pulls.held(step, value_fp)
        core = self.core
        if core is not None and self.held.in_window(step, core.step):
            self._commit(cm.HoldsAggregate(step=step, value_fp=value_fp), now, out)
        out += self.apply.held(step, value_fp, accepted=self.accepted)

    def _on_unavailable(self, event: AggregateUnavailable, now: float, out: list) -> None:
        step = event.step
        if not event.value_fp:  # a build that could not run
            contributors = tuple(sorted(event.contributors))
            for failed in self.proposer.build_failed(step, contributors, event.missing):
                self._lead(failed, now, out)  # propose later, without the missing
            out += self.pulls.rebuild_failed(step, contributors, alive=self.alive, now=now)
            return
        key = (step, event.value_fp)
        if event.state_step >= 0:
            if self.apply.lost(*key):  # that very apply was refused: the state is wrong
                out.append(StateDiverged(step=step, worker_step=event.state_step))
            return
        if self.apply.lost(*key):  # gone after all: pulled again, applied on arrival
            self.held.discard(*key)
            voters = self.core.voters if self.core is not None else ()
            out += self.pulls.lost(*key, voters, alive=self.alive, now=now)
            return
        out += self.pulls.missing(*key, source=event.source, alive=self.alive, now=now)

    def _on_applied(self, event: AggregateApplied, now: float, out: list) -> None:
        done = self.apply.applied(event.step, event.value_fp)
        if done is None:
            return  # an apply a rejoin made moot
        # The worker no longer holds in memory what its window dropped.
        self.held.forget_below(done.keep_from_step)
        if self.core is not None:
            self._commit(cm.Applied(step=event.step, param_fp=event.param_fp), now, out)

    def _on_commit_tick(self, event: cm.Tick, now: float, out: list) -> None:
        if self.core is not None:
            self._commit(event, now, out)

    def _on_lead_tick(self, event: nc.Tick, now: float, out: list) -> None:
        self._lead(event, now, out)

    def _on_pulls_due(self, event: PullsDue, now: float, out: list) -> None:
        out += self.pulls.tick(now, self.alive)

    # -- the glue, once -------------------------------------------------------------------------

    def _commit(self, event: cm.CommitEvent, now: float, out: list) -> None:
        """Feed the commit core; its actions go out, each followed by what it makes the
        rest of the node do."""
        core = self.core
        assert core is not None
        for action in core.handle(event, now):
            out.append(action)
            kind = type(action)
            if kind is cm.FetchAggregate:
                out += self.pulls.wanted(
                    action,
                    arrived=self.leader.arrived.get(action.step, ()),
                    alive=self.alive,
                    holds=(action.step, action.value_fp) in self.held,
                    now=now,
                )
            elif kind is cm.ApplyStep:
                self._lead(nc.StepDecided(step=action.step), now, out)
                holds = (action.step, action.value.agg_fp) in self.held
                out += self.apply.decided(
                    action.step, action.value, holds=holds, accepted=self.accepted
                )
            elif kind is cm.Committed:
                self._begin(now, out)

    def _begin(self, now: float, out: list) -> None:
        """The commit core is at a new step: the pulls and the proposal of earlier
        steps are over, and the leader is told (a member only: a removed node stops)."""
        core = self.core
        assert core is not None
        step = core.step
        self.pulls.forget_below(step)
        self.proposer.step_began(step)
        if self.node not in core.members:
            out.append(StepStarted(step=step, contributes=False))
            return
        self._lead(nc.step_began(core, self.held.at(step)), now, out)
        out.append(StepStarted(step=step, contributes=self.leader.contributes()))

    def _lead(self, event: nc.LeaderEvent, now: float, out: list) -> None:
        """Feed the leader; its decisions become a build (out) or a proposal (the core)."""
        decisions = self.leader.handle(event, now)
        if decisions:  # most events decide nothing (every arrival but the last)
            self._decided(decisions, now, out)

    def _decided(self, decisions: list[nc.LeaderAction], now: float, out: list) -> None:
        for decision in decisions:
            for action in self.proposer.lead(decision, core_step=self.core_step):
                if type(action) is nc.Propose:
                    self._propose(action, now, out)
                else:
                    out.append(action)

    def _propose(self, proposal: nc.Propose, now: float, out: list) -> None:
        core = self.core
        if core is None or core.step != proposal.step or core.phase == "decided":
            return  # the step moved on, or was decided by a peer's value meanwhile
        event = cm.ProposeValue(step=proposal.step, value=proposal.value, first=proposal.first)
        try:
            self._commit(event, now, out)
        except LocalProtocolError:
            # The core checks the value against its configuration (a change that no
            # longer applies) and refuses a second proposal: the step goes on without
            # this one, as a peer's proposal or a later retry decides it.
            self.proposals_refused += 1


_HANDLERS = {
    cm.MessageReceived: StepNode._on_message,
    nc.ViewChanged: StepNode._on_view,
    nc.OwnContribution: StepNode._on_own,
    nc.ContributionArrived: StepNode._on_arrived,
    AggregateHeld: StepNode._on_held,
    AggregateUnavailable: StepNode._on_unavailable,
    AggregateApplied: StepNode._on_applied,
    cm.Tick: StepNode._on_commit_tick,
    nc.Tick: StepNode._on_lead_tick,
    PullsDue: StepNode._on_pulls_due,
}
