"""Strict-mode step commit: one single-decree Paxos instance per training step.

How a driver uses it (see also DRIVERS.md)
------------------------------------------
One ``StepCommit(node=..., voters=..., learners=..., first_step=..., seed=...)`` per
node process; after a restart pass the acceptor records the driver persisted
(``persisted=``).  Feed it with ``handle(event, now) -> list[CommitAction]``:

- ``ProposeValue(step, value)`` once this node holds an aggregate for ``step``
  (``value`` = aggregate fingerprint + sorted contributor set, optionally one
  membership change).  Proposing implies holding that aggregate's bytes.
- ``MessageReceived(message)`` for every ``Prepare``/``PromiseReply``/``AcceptRequest``/
  ``AcceptedReply``/``Nack``/``Decided`` received.
- ``HoldsAggregate(step, value_fp)`` once the aggregate's bytes are held and verified.
- ``Applied(step, param_fp)`` once the worker applied the step's committed aggregate.
- ``ViewUpdated(alive)`` when the detector view changes: it picks the step's acting
  coordinator (below) and wakes a proposer that was waiting out a backoff.
- ``PeerAt(peer, step)`` when a member's gradient of a step past this node's arrives:
  that peer holds this step's decision, and is asked for it.
- ``Tick()`` at ``next_deadline()`` (proposer retries with backoff).

Perform the returned actions **in order**; each one completes before the next:

=====================  ==========================================================
``Proposed``           log ``propose`` (ballot, value_fp, contributors)
``Promised``           log ``promise`` (ballot, to)
``AcceptedValue``      log ``accept`` (ballot, value_fp, contributors, to, holds_bytes)
``Persist``            write ``record`` durably (replace the record of its step),
                       with the bytes of its ``accepted_value`` when held,
                       *before* any later action: the reply after it is only
                       sent once the promise/accept survives a crash
``Send``               send ``message`` to every name in ``to`` (control channel)
``FetchAggregate``     fetch the aggregate with ``value_fp`` from one of
                       ``sources`` (bulk channel); then feed ``HoldsAggregate``
``ApplyStep``          apply the committed aggregate of ``step`` (fetch it first if
                       not held); then feed ``Applied``
``Committed``          log ``commit`` (value_fp, contributors, param_fp, voters, quorum)
``Behind``             peers are at a step this node cannot join, or two steps
                       ahead: start rejoin (one state transfer)
=====================  ==========================================================

Protocol (Lamport's single-decree Paxos, one instance per step)
---------------------------------------------------------------
Ballots are ``(round, proposer index)`` tuples, the index being the node's position
in the sorted members of the step's configuration, so ballots are unique and totally
ordered.  The step's *coordinator* (``voters[step % len(voters)]``) may start at ballot
``(0, index)`` without phase 1: it is the lowest possible ballot and no one else can
use it, so there is nothing lower to discover.  Everyone else, and the coordinator on
a retry, runs phase 1 with a round above every round seen.

Recovery: the detector view decides who leads when the coordinator is gone.  The
*acting coordinator* (``acting_coordinator(step)``) is the first voter in rotation
order from the coordinator that is in this node's view; nodes with the same view
agree on it, and it is the coordinator itself while that one is alive.  An acting
coordinator that is not the coordinator starts phase 1 as soon as it proposes, and a
node that *becomes* the acting coordinator on a view change (the one before it was
declared dead) starts a new round at once rather than when its backoff timer fires.
When voters come back into the view (a heal, a refutation), the backoff starts over:
a proposer that was already retrying retries now if it is the acting coordinator,
within ``retry_base_s`` otherwise, instead of up to ``2 * retry_max_s`` later (the
timer doubled through the outage while no quorum could answer).  Safety never rests
on the view: a wrong view costs a round, not a second value (Paxos's rule).  A retry adopts the value
of the highest accepted ballot among the promises (Paxos's rule).  An acceptor
accepts only once it holds the aggregate's bytes (DESIGN), so every value that can
be chosen can be applied by any member of the quorum that chose it.  The quorum is a
majority of the step's configured voters, never of the detector view (S3); learners
don't vote.  A committed value carrying a membership change takes effect from the
next step (one change at a time: Raft's single-server changes).

Acceptor rules (the acceptor's whole transition table; ``p`` is the promised
ballot, ``b`` the message's):

===================  ============================  =============================
message              condition                     effect
===================  ============================  =============================
Prepare(b)           b >= p                        p := b; persist; PromiseReply
Prepare(b)           b < p                         Nack(p)
AcceptRequest(b,v)   b >= p, holds v's bytes        p := b, accept (b, v); persist;
                                                   AcceptedReply
AcceptRequest(b,v)   b >= p, bytes not held         remember it; FetchAggregate;
                                                   accept on HoldsAggregate if still
                                                   b >= p
AcceptRequest(b,v)   b < p                         Nack(p)
===================  ============================  =============================

The proposer's phases are ``PROPOSER_TRANSITIONS`` below.

Bug switches: ``no-quorum`` counts a majority of the voters in the current detector
view; ``ack-before-apply`` accepts without holding the bytes; ``forget-vote`` does not
persist accepts (a restart forgets them).
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

import msgspec

from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.messages import (
    AcceptedReply,
    AcceptRequest,
    Ballot,
    ConfigChangeRequest,
    Decided,
    DecisionRequest,
    Nack,
    Prepare,
    PromiseReply,
    StepValue,
)
from swarmshake.reference_node.protocol.structs import (
    Clock,
    CoreAction,
    CoreEvent,
    check_count,
    check_name,
    check_names,
    check_positive,
)

Phase = Literal["idle", "preparing", "accepting", "backoff", "decided"]
CommitMessage = (
    Prepare | PromiseReply | AcceptRequest | AcceptedReply | Nack | Decided | DecisionRequest
)
_COMMIT_MESSAGES = CommitMessage.__args__  # for isinstance (a tuple: no union per call)

# Everything that moves a proposer between phases of one step.  Inputs:
#   start_round0      the coordinator proposes at ballot (0, index), skipping phase 1
#   retry             the retry timer fired: new round, phase 1
#   promise_quorum    promises from a quorum: send accept requests
#   accepted_quorum   accepts from a quorum: the value is chosen
#   nack              an acceptor promised higher: back off, retry above it
#   decided           learned the decision (own quorum or a Decided message)
PROPOSER_TRANSITIONS: dict[tuple[Phase, str], Phase] = {
    ("idle", "start_round0"): "accepting",
    ("idle", "retry"): "preparing",
    ("idle", "decided"): "decided",
    ("preparing", "promise_quorum"): "accepting",
    ("preparing", "nack"): "backoff",
    ("preparing", "retry"): "preparing",
    ("preparing", "decided"): "decided",
    ("accepting", "accepted_quorum"): "decided",
    ("accepting", "nack"): "backoff",
    ("accepting", "retry"): "preparing",
    ("accepting", "decided"): "decided",
    ("backoff", "retry"): "preparing",
    ("backoff", "decided"): "decided",
}


class CommitConfig(msgspec.Struct, frozen=True, kw_only=True):
    # First retry after 0.2 s: a round trip is <= 150 ms in the 50 +- 25 ms envelope,
    # so the coordinator's round 0 normally completes before anyone retries.
    retry_base_s: float = 0.2
    # Backoff doubles up to this (times the jitter, so at most twice this): the wait
    # after a heal that no view change announces.  After a partition with no majority
    # anywhere, each side holds the other dead for seconds, so no ViewUpdated wakes the
    # proposers; with 3.2 s every proposer slept up to 6.4 s past the heal (recovery
    # benchmark: 1.7 s of silence after the heal).  1 s still dwarfs a round (0.1-0.5 s),
    # so duelling proposers still drift apart.
    retry_max_s: float = 1.0
    # ... unless the rounds observed take longer: then a retry waits
    # ``retry_reply_latencies`` of them (and the backoff and the wait for a fetching
    # acceptor are capped there, not at retry_max_s).  At 100M parameters an acceptor
    # fetches the 400 MB aggregate before it accepts, a round takes 2-3 s, and retries
    # capped at 1 s abandoned every round: 7 proposals for one step (session 20).
    # Bounded by R, the time a stable cluster has to commit (DESIGN's L2, 10 s), so
    # one reply delayed by a stall cannot park the proposer for longer.
    retry_observed_max_s: float = 10.0
    # A retry abandons a round that may still succeed, so it waits at least this many
    # observed reply latencies: under a 250 ms latency spike a round trip takes ~0.55 s,
    # and a 0.2-0.4 s timer restarted the round before any reply could come back
    # (recovery benchmark: up to 2.6 s without a commit, all of it in retries).
    retry_reply_latencies: float = 2.0
    # Weight of a new sample when the reply latency estimate comes down; a slower
    # sample replaces the estimate at once (a retry too early costs a whole round,
    # one too late only the time it waits).
    reply_latency_weight: float = 0.25
    steps_ahead_max: int = 8  # HoldsAggregate accepted this far ahead; bounds early buffering
    buffered_messages_max: int = 512  # bounded memory for early messages (N voters x phases)
    retained_steps: int = 16  # decided values kept to answer laggards with Decided
    # A commit message for step s comes from a node whose core is at s, so it holds the
    # committed state of s - 1.  One step behind is normal (peers decide while this node
    # still applies); two or more, and one state transfer (``Behind``, the rejoin core)
    # brings this node level at once, where learning the decisions one by one costs an
    # aggregate transfer plus a propose timeout per missed step (explore, seed 2: a
    # restarted node caught up one step per compute cycle and no step committed for
    # 11.3 s, past the recovery bound R = 10 s).
    state_transfer_gap_steps: int = 2

    def __post_init__(self) -> None:
        check_positive(self.retry_base_s, "CommitConfig.retry_base_s")
        check_positive(self.retry_max_s, "CommitConfig.retry_max_s")
        check_positive(self.retry_observed_max_s, "CommitConfig.retry_observed_max_s")
        check_positive(self.retry_reply_latencies, "CommitConfig.retry_reply_latencies")
        if not 0.0 < self.reply_latency_weight <= 1.0:
            raise LocalProtocolError(
                f"CommitConfig.reply_latency_weight = {self.reply_latency_weight} must lie in (0, 1]"
            )
        for name in ("steps_ahead_max", "buffered_messages_max", "retained_steps"):
            check_count(getattr(self, name), f"CommitConfig.{name}")
        if not 2 <= self.state_transfer_gap_steps <= self.steps_ahead_max + 1:
            raise LocalProtocolError(
                f"CommitConfig.state_transfer_gap_steps = {self.state_transfer_gap_steps} must "
                f"lie in [2, steps_ahead_max + 1 = {self.steps_ahead_max + 1}]: one step "
                "behind is normal, and messages up to steps_ahead_max ahead are buffered"
            )


class AcceptorRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What an acceptor must not forget about one step (the Persist payload)."""

    step: int
    promised: Ballot | None = None
    accepted_ballot: Ballot | None = None
    accepted_value: StepValue | None = None


# --- events --------------------------------------------------------------------------------


class ProposeValue(CoreEvent, frozen=True, kw_only=True):
    """Propose ``value`` for ``step``.  ``first``: the node core ranks this node first
    for the step (its coordinator is in the view but cannot lead yet: back after a
    restart or a pause, no gradient since), so its round starts now rather than a
    retry later (GPU run: a 403 MB accept round had pushed that retry to ~6 s)."""

    step: int
    value: StepValue
    first: bool = False

    def __post_init__(self) -> None:
        check_count(self.step, "ProposeValue.step")
        if not isinstance(self.value, StepValue):
            raise LocalProtocolError("ProposeValue.value must be a StepValue")


class MessageReceived(CoreEvent, frozen=True, kw_only=True):
    message: CommitMessage

    def __post_init__(self) -> None:
        if not isinstance(self.message, _COMMIT_MESSAGES):
            raise LocalProtocolError(f"not a commit message: {type(self.message).__name__}")


class HoldsAggregate(CoreEvent, frozen=True, kw_only=True):
    step: int
    value_fp: str

    def __post_init__(self) -> None:
        check_count(self.step, "HoldsAggregate.step")
        if not isinstance(self.value_fp, str) or not self.value_fp:
            raise LocalProtocolError("HoldsAggregate.value_fp must be a fingerprint string")


class Applied(CoreEvent, frozen=True, kw_only=True):
    step: int
    param_fp: str

    def __post_init__(self) -> None:
        check_count(self.step, "Applied.step")
        if not isinstance(self.param_fp, str) or not self.param_fp:
            raise LocalProtocolError("Applied.param_fp must be a fingerprint string")


class ViewUpdated(CoreEvent, frozen=True, kw_only=True):
    alive: tuple[str, ...]

    def __post_init__(self) -> None:
        check_names(self.alive, "ViewUpdated.alive")


class PeerAt(CoreEvent, frozen=True, kw_only=True):
    """Traffic of ``peer`` outside this core shows it at ``step``: its gradient of that
    step arrived (a node computes one only after applying the step before).  Past
    this node's step, the peer holds this step's decision: ask it (``DecisionRequest``),
    as for its commit messages.  Without this a laggard learnt the decision only from
    the next commit message, and the peers could not send one: the GPU run (median,
    f = 1), a node back from a rejoin one step behind while another was paused, and
    the two at the next step waiting for its gradient (3 needed) while it waited for
    the decision: 14.7 s without a commit (L2, R = 10 s)."""

    peer: str
    step: int

    def __post_init__(self) -> None:
        check_name(self.peer, "PeerAt.peer")
        check_count(self.step, "PeerAt.step")


class Tick(CoreEvent, frozen=True, kw_only=True):
    pass


CommitEvent = (
    ProposeValue | MessageReceived | HoldsAggregate | Applied | ViewUpdated | PeerAt | Tick
)


# --- actions -------------------------------------------------------------------------------


class Proposed(CoreAction, frozen=True, kw_only=True):
    step: int
    ballot: Ballot
    value: StepValue


class Promised(CoreAction, frozen=True, kw_only=True):
    step: int
    ballot: Ballot
    to: str


class AcceptedValue(CoreAction, frozen=True, kw_only=True):
    step: int
    ballot: Ballot
    value: StepValue
    to: str
    holds_bytes: bool


class Persist(CoreAction, frozen=True, kw_only=True):
    record: AcceptorRecord


class Send(CoreAction, frozen=True, kw_only=True):
    to: tuple[str, ...]
    message: CommitMessage


class FetchAggregate(CoreAction, frozen=True, kw_only=True):
    step: int
    value_fp: str
    sources: tuple[str, ...]


class ApplyStep(CoreAction, frozen=True, kw_only=True):
    step: int
    value: StepValue


class Committed(CoreAction, frozen=True, kw_only=True):
    step: int
    value: StepValue
    param_fp: str
    voters: tuple[str, ...]
    learners: tuple[str, ...]
    quorum: tuple[str, ...]


class Behind(CoreAction, frozen=True, kw_only=True):
    step: int  # this node's step
    peer_step: int  # a step peers are working on
    peer: str


CommitAction = (
    Proposed
    | Promised
    | AcceptedValue
    | Persist
    | Send
    | FetchAggregate
    | ApplyStep
    | Committed
    | Behind
)


# --- per-step state ------------------------------------------------------------------------


class _Acceptor:
    __slots__ = ("promised", "accepted_ballot", "accepted_value", "pending", "pending_since")

    def __init__(self, record: AcceptorRecord | None = None):
        self.promised: tuple[int, int] | None = None if record is None else _tuple(record.promised)
        self.accepted_ballot = None if record is None else _tuple(record.accepted_ballot)
        self.accepted_value: StepValue | None = None if record is None else record.accepted_value
        self.pending: tuple[tuple[int, int], StepValue, str] | None = None  # waits for bytes
        self.pending_since = 0.0  # when ``pending`` started waiting

    def snapshot(self) -> tuple:
        return (
            self.promised,
            self.accepted_ballot,
            self.accepted_value,
            self.pending,
            self.pending_since,
        )


class _Proposer:
    __slots__ = (
        "phase",
        "candidate",
        "ballot",
        "value",
        "promises",
        "accepts",
        "highest_round",
        "attempts",
        "retry_at",
        "sent_at",
    )

    def __init__(self) -> None:
        self.phase: Phase = "idle"
        self.candidate: StepValue | None = None
        self.ballot: tuple[int, int] | None = None
        self.value: StepValue | None = None
        self.promises: dict[str, tuple[tuple[int, int] | None, StepValue | None]] = {}
        self.accepts: set[str] = set()
        self.highest_round = 0
        self.attempts = 0
        self.retry_at: float | None = None
        # When each of this step's rounds sent its requests: ("prepare" | "accept",
        # ballot) -> time; replies to them measure the reply latency.
        self.sent_at: dict[tuple[str, tuple[int, int]], float] = {}

    def snapshot(self) -> tuple:
        return (
            self.phase,
            self.candidate,
            self.ballot,
            self.value,
            tuple(sorted(self.promises.items())),
            tuple(sorted(self.accepts)),
            self.highest_round,
            self.attempts,
            self.retry_at,
            tuple(sorted(self.sent_at.items())),
        )


# isinstance() with a tuple of classes: ``A | B`` builds a union object at every
# call, and these tests run for every message a node handles.
_VOTES = (PromiseReply, AcceptedReply, Nack)
_BALLOT_REQUESTS = (Prepare, AcceptRequest)
_CARRY_VALUE = (AcceptRequest, Decided, PromiseReply)


def _tuple(ballot: object) -> tuple[int, int] | None:
    return None if ballot is None else (int(ballot[0]), int(ballot[1]))  # type: ignore[index]


class StepCommit:
    """One node's proposer, acceptor and learner for the per-step commit."""

    def __init__(
        self,
        *,
        node: str,
        voters: tuple[str, ...],
        learners: tuple[str, ...] = (),
        first_step: int = 0,
        seed: int = 0,
        persisted: tuple[AcceptorRecord, ...] = (),
        config: CommitConfig | None = None,
        bugs: BugSet = NO_BUGS,
        vote_floor: int = -1,
    ):
        check_name(node, "node")
        check_names(voters, "voters")
        check_names(learners, "learners")
        check_count(first_step, "first_step")
        check_count(seed, "seed")
        if not voters:
            raise LocalProtocolError("a configuration needs at least one voter")
        if set(voters) & set(learners):
            raise LocalProtocolError("a node is either a voter or a learner, not both")
        if node not in voters and node not in learners:
            raise LocalProtocolError(f"node {node!r} is neither a voter nor a learner")
        self.node = node
        self.seed = seed
        self.config = config or CommitConfig()
        self.bugs = bugs
        self._no_quorum = "no-quorum" in bugs
        self._ack_before_apply = "ack-before-apply" in bugs
        self._forget_vote = "forget-vote" in bugs
        # Steps <= vote_floor: this node's acceptor records of them are gone (the
        # driver keeps a bounded number), so it must neither vote nor propose on them
        # again: a node whose state rolled back below its records would otherwise
        # accept a second value for a step it helped decide.  It still learns their
        # decisions, or catches up by state transfer.
        if vote_floor < -1:
            raise LocalProtocolError(f"vote_floor {vote_floor} must be >= -1")
        self.vote_floor = vote_floor
        self.voters: tuple[str, ...] = tuple(sorted(voters))
        self.learners: tuple[str, ...] = tuple(sorted(learners))
        self.step = first_step
        self.view: tuple[str, ...] = tuple(sorted(set(voters) | set(learners)))
        self._members_of: tuple = (None, None, (), frozenset())  # _configuration()
        self._clock = Clock()
        self._acceptors: dict[int, _Acceptor] = {}
        for record in persisted:
            if not isinstance(record, AcceptorRecord):
                raise LocalProtocolError("persisted must hold AcceptorRecord values")
            self._acceptors[record.step] = _Acceptor(record)
        self._proposer = _Proposer()
        self._held: dict[int, set[str]] = {}
        self._decided: dict[int, tuple[StepValue, tuple[str, ...]]] = {}
        self._applying: int | None = None
        self._buffer: list[CommitMessage] = []
        # Peers asked for this step's decision (DecisionRequest): once each a step, so
        # a laggard's requests are bounded by the member count.
        self._decision_asked: set[str] = set()
        # The newest step each member's gradients showed it at (PeerAt): a peer past
        # the step this node moves to is asked for that step's decision at once.
        # Bounded by the members.
        self._peer_steps: dict[str, int] = {}
        self.dropped = 0  # messages dropped by bounds (counted, never silently lost)
        # Seconds from sending a request to a peer's reply (0: none seen yet); sets
        # how long a proposer waits before it gives a round up.
        self.reply_latency_s = 0.0
        # When the detector view last changed: a reply to a round sent before it
        # measures the outage (a partition's links flush their queues at the heal, a
        # paused acceptor answers when it wakes), not the latency, and is no sample:
        # since retries may wait for observed rounds past retry_max_s, one such
        # sample would park the proposer for seconds right after a heal.
        self.view_changed_at = -math.inf

    # -- public API -------------------------------------------------------------------------

    def handle(self, event: CommitEvent, now: float) -> list[CommitAction]:
        self._clock.check(now)
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"StepCommit cannot handle {type(event).__name__}")
        actions: list[CommitAction] = []
        handler(self, event, now, actions)
        self._clock.last = now
        return self._deliver_locally(actions, now)

    def next_deadline(self, now: float | None = None) -> float | None:
        return self._proposer.retry_at

    def _deliver_locally(self, actions: list, now: float) -> list:
        """Messages this node sends to itself are handled here, after everything the
        handler did and *before* the same message goes to the others.

        After: a message to oneself arrives once the handler that sent it is done, so
        the actions come out in the order the state changed.  The shells log and
        persist in that order; a local promise placed before an accept the handler
        made after sending it was logged ahead of it (History.tla rejected a real run
        at shutdown: a takeover's promise, then the coordinator's round-0 accept) and
        the record persisted last held the older promise.
        Before the others: the coordinator's own accept of a round-0 value is
        persisted before any peer can see that value, so a restarted coordinator finds
        it and never proposes a second value at ballot (0, index)."""
        if not actions:
            return actions  # most messages change nothing visible
        out: list = []
        to_self: list[Send] = []
        for action in actions:
            if isinstance(action, Send) and self.node in action.to:
                to_self.append(action)
            else:
                out.append(action)
        if not to_self:
            return actions
        for send in to_self:
            local: list = []
            self._dispatch(send.message, now, local)
            out.extend(self._deliver_locally(local, now))
            others = tuple(name for name in send.to if name != self.node)
            if others:
                out.append(Send(to=others, message=send.message))
        return out

    @property
    def members(self) -> tuple[str, ...]:
        cached = self._members_of
        if self.voters is cached[0] and self.learners is cached[1]:
            return cached[2]  # the usual case, without a call
        return self._configuration()[2]

    @property
    def _member_set(self) -> frozenset[str]:
        cached = self._members_of
        if self.voters is cached[0] and self.learners is cached[1]:
            return cached[3]
        return self._configuration()[3]

    def _configuration(self) -> tuple:
        """``(voters, learners, members, members as a set)``.  Asked for every
        message; recomputed only when the configuration tuples are replaced (they are
        immutable, so the same objects mean the same members)."""
        voters, learners = self.voters, self.learners
        cached = self._members_of
        if voters is not cached[0] or learners is not cached[1]:
            members = tuple(sorted(voters + learners))
            cached = self._members_of = (voters, learners, members, frozenset(members))
        return cached

    def quorum_size(self) -> int:
        if self._no_quorum:  # bug: a majority of whoever the detector sees
            return len(set(self.view) & set(self.voters)) // 2 + 1
        return len(self.voters) // 2 + 1

    def coordinator(self, step: int) -> str:
        return self.voters[step % len(self.voters)]

    def acting_coordinator(self, step: int) -> str:
        """The first voter in rotation order from ``coordinator(step)`` that is in this
        node's detector view (the coordinator itself if no voter is: a node that
        sees no one leads nothing, and the coordinator stays the default)."""
        return self._acting_coordinator(step, self.view)

    def _acting_coordinator(self, step: int, view: tuple[str, ...]) -> str:
        voters = self.voters
        alive = set(view)
        first = step % len(voters)
        for offset in range(len(voters)):
            voter = voters[(first + offset) % len(voters)]
            if voter in alive:
                return voter
        return voters[first]

    def has_proposal(self) -> bool:
        """Whether this node proposed a value for its current step (``ProposeValue``):
        a driver asked to build another (the leader's sharded rebuild) ignores it."""
        return self._proposer.candidate is not None

    def decided_value(self, step: int) -> StepValue | None:
        entry = self._decided.get(step)
        return None if entry is None else entry[0]

    def acceptor_record(self, step: int) -> AcceptorRecord | None:
        acceptor = self._acceptors.get(step)
        if acceptor is None:
            return None
        return AcceptorRecord(
            step=step,
            promised=acceptor.promised,
            accepted_ballot=acceptor.accepted_ballot,
            accepted_value=acceptor.accepted_value,
        )

    def check_valid(self) -> None:
        """The core's invariants, checked after every rule of its stateful tests: a
        well-formed configuration, no acceptor accepted above its promise, bounded
        buffers, and no proposal on a step at or below the vote floor."""
        assert self.voters == tuple(sorted(self.voters)) and self.voters
        assert not set(self.voters) & set(self.learners)
        assert self.node in self.voters or self.node in self.learners
        for step, acceptor in self._acceptors.items():
            if acceptor.accepted_ballot is not None:
                assert acceptor.promised is not None, step
                assert acceptor.accepted_ballot <= acceptor.promised, step
                assert acceptor.accepted_value is not None, step
        assert len(self._buffer) <= self.config.buffered_messages_max
        assert self._decision_asked <= set(self.members), "asked a non-member"
        assert set(self._peer_steps) <= set(self.members) - {self.node}
        for step in self._held:
            assert step <= self.step + self.config.steps_ahead_max, step
        proposer = self._proposer
        if proposer.phase != "idle" and proposer.phase != "decided":
            assert self.step > self.vote_floor, "a proposal at or below the vote floor"
        assert self.reply_latency_s >= 0.0

    @property
    def phase(self) -> Phase:
        return self._proposer.phase

    def snapshot(self) -> tuple:
        return (
            self.node,
            self.step,
            self.voters,
            self.learners,
            self.view,
            tuple(sorted((s, a.snapshot()) for s, a in self._acceptors.items())),
            self._proposer.snapshot(),
            tuple(sorted((s, tuple(sorted(f))) for s, f in self._held.items())),
            tuple(sorted(self._decided.items())),
            self._applying,
            tuple(self._buffer),
            tuple(sorted(self._decision_asked)),
            tuple(sorted(self._peer_steps.items())),
            self.dropped,
            self.reply_latency_s,
            self.view_changed_at,
            self._clock.last,
        )

    # -- validation -------------------------------------------------------------------------

    def _index(self, node: str) -> int:
        return self.members.index(node)

    def _check_value(self, value: StepValue, error: type[Exception]) -> None:
        members = self._member_set
        unknown = [c for c in value.contributors if c not in members]
        if unknown:
            raise error(f"contributors {unknown} are not members", reason="invalid-value")
        change = value.config_change
        if change is not None:
            problem = self._config_change_problem(change)
            if problem:
                raise error(f"invalid membership change: {problem}", reason="invalid-value")

    def _config_change_problem(self, change: ConfigChangeRequest) -> str:
        if change.change == "add" and change.peer in self.members:
            return f"{change.peer} is already a member"
        if change.change == "promote" and change.peer not in self.learners:
            return f"{change.peer} is not a learner"
        if change.change == "remove":
            if change.peer not in self.members:
                return f"{change.peer} is not a member"
            if self.voters == (change.peer,):
                return "cannot remove the last voter"
        return ""

    def _check_message(self, message: CommitMessage) -> None:
        sender = message.sender
        if sender not in self._member_set:
            raise RemoteProtocolError(
                f"{type(message).__name__} from non-member {sender!r}", reason="unknown-peer"
            )
        if isinstance(message, _VOTES) and sender not in self.voters:
            raise RemoteProtocolError(
                f"{sender!r} is not a voter and cannot vote", reason="not-voter"
            )
        # A ballot carries its proposer's index in the configuration of its step, so it
        # is checked only for this node's step (an earlier or later one may run under
        # another configuration; it is buffered and checked again when its step comes,
        # or answered with the decision).  Checked against this node's step's members,
        # a removal that shifted the indices made the step's laggard and its leader
        # drop each other's requests as forged, and neither learned the decision
        # (explore --leaves, 3 nodes, seed 4: no commit for 33 s).
        if isinstance(message, _BALLOT_REQUESTS) and message.step == self.step:
            if message.ballot[1] != self._index(sender):
                raise RemoteProtocolError(
                    f"ballot {tuple(message.ballot)} does not carry {sender!r}'s index "
                    f"{self._index(sender)}",
                    reason="forged-ballot",
                )
        if isinstance(message, _CARRY_VALUE):
            value = (
                message.value if not isinstance(message, PromiseReply) else message.accepted_value
            )
            if value is not None and message.step == self.step:
                self._check_value(value, RemoteProtocolError)

    # -- handlers ---------------------------------------------------------------------------

    def _on_propose(self, event: ProposeValue, now: float, actions: list) -> None:
        if event.step != self.step:
            raise LocalProtocolError(
                f"ProposeValue for step {event.step}; this node is at step {self.step}"
            )
        if self._proposer.candidate is not None:
            raise LocalProtocolError(f"step {self.step} already has a proposal")
        self._check_value(event.value, LocalProtocolError)
        proposer = self._proposer
        proposer.candidate = event.value
        self._held.setdefault(self.step, set()).add(event.value.agg_fp)
        if proposer.phase == "decided" or self.step <= self.vote_floor:
            return
        self._retry_later(now)
        acceptor = self._acceptors.get(self.step)
        if self.coordinator(self.step) == self.node and (
            acceptor is None or acceptor.promised is None
        ):
            self._move("start_round0")
            proposer.ballot = (0, self._index(self.node))
            self._send_accepts(event.value, now, actions)
        elif self.acting_coordinator(self.step) == self.node != self.coordinator(self.step):
            # The coordinator is out of our view: lead now, not after a backoff.
            self._start_round(now, actions)
        elif event.first and self.coordinator(self.step) != self.node:
            # The node core ranks this node first (the coordinator is in the view but
            # not ready): lead now as well.  Any proposer may start a round at any time
            # (safety never depends on who leads); the rank says a round-0 accept from
            # the coordinator is not coming.
            self._start_round(now, actions)
        elif (
            acceptor is not None
            and acceptor.promised is not None
            and (self.coordinator(self.step) == self.node or acceptor.accepted_value == event.value)
        ):
            # Round 0 is gone for this step (this acceptor already promised a ballot):
            # the coordinator, or a restarted node re-proposing the value it accepted
            # (node_core's ProposeStored), runs phase 1 now rather than after a backoff
            # (explore without a bug, seed 3: a restarted pair re-committing the steps
            # it had lost waited a retry per step and stalled 11 s).
            self._start_round(now, actions)
        # Our own pending accept request may have been waiting for these bytes.
        self._acceptor_bytes_arrived(self.step, event.value.agg_fp, actions)

    def _on_message(self, event: MessageReceived, now: float, actions: list) -> None:
        message = event.message
        self._check_message(message)
        self._dispatch(message, now, actions)

    def _dispatch(self, message: CommitMessage, now: float, actions: list) -> None:
        step = message.step
        if isinstance(message, DecisionRequest):
            self._answer_decision_request(message, actions)
            return
        if step > self.step:
            if step >= self.step + self.config.state_transfer_gap_steps:
                # The sender holds committed state at least two steps past this node's.
                self.dropped += 1
                actions.append(Behind(step=self.step, peer_step=step, peer=message.sender))
                return
            self._ask_decision(message.sender, actions)
            if len(self._buffer) >= self.config.buffered_messages_max:
                self.dropped += 1
                return
            self._buffer.append(message)
            return
        self._measure_reply(message, now)
        if step < self.step:
            self._answer_laggard(message, actions)
            return
        if isinstance(message, _BALLOT_REQUESTS) and step <= self.vote_floor:
            self.dropped += 1  # records of this step are gone: silence, like a lost reply
            return
        if isinstance(message, Prepare):
            self._acceptor_prepare(message, actions)
            self._defer_to(message, now)
        elif isinstance(message, AcceptRequest):
            self._acceptor_accept_request(message, now, actions)
            self._defer_to(message, now)
        elif isinstance(message, PromiseReply):
            self._proposer_promise(message, now, actions)
        elif isinstance(message, AcceptedReply):
            self._proposer_accepted(message, actions)
        elif isinstance(message, Nack):
            self._proposer_nack(message, now, actions)
        else:
            self._learn(message.value, tuple(message.quorum), actions)

    def _on_peer_at(self, event: PeerAt, now: float, actions: list) -> None:
        peer = event.peer
        if peer == self.node or peer not in self.members:
            return  # a removed node's late gradient, or a joiner's: no evidence
        if event.step > self._peer_steps.get(peer, -1):
            self._peer_steps[peer] = event.step
        if event.step > self.step:
            self._ask_decision(peer, actions)

    def _on_holds(self, event: HoldsAggregate, now: float, actions: list) -> None:
        if event.step < self.step:
            return
        if event.step > self.step + self.config.steps_ahead_max:
            raise LocalProtocolError(
                f"HoldsAggregate for step {event.step} is far ahead of {self.step}"
            )
        held = self._held.setdefault(event.step, set())
        if (
            event.value_fp not in held and len(held) >= 16
        ):  # distinct aggregates per step are few (one per contributor set)
            raise LocalProtocolError(f"more than 16 distinct aggregates held for step {event.step}")
        held.add(event.value_fp)
        if event.step == self.step:
            self._acceptor_bytes_arrived(event.step, event.value_fp, actions)
            if self._proposer.phase == "decided" and self._applying is None:
                self._start_apply(actions)

    def _on_applied(self, event: Applied, now: float, actions: list) -> None:
        if self._applying != event.step:
            raise LocalProtocolError(
                f"Applied for step {event.step}, but the step being applied is {self._applying}"
            )
        value, quorum = self._decided[event.step]
        actions.append(
            Committed(
                step=event.step,
                value=value,
                param_fp=event.param_fp,
                voters=self.voters,
                learners=self.learners,
                quorum=quorum,
            )
        )
        self._advance(value, now, actions)

    def _on_view(self, event: ViewUpdated, now: float, actions: list) -> None:
        before = self.view
        self.view = tuple(sorted(event.alive))
        if self.view != before:
            self.view_changed_at = now  # replies to rounds sent before: no samples
        proposer = self._proposer
        if proposer.candidate is None or proposer.phase == "decided":
            return  # nothing of ours in flight: ProposeValue will look at the new view
        if self.node not in self.members:
            return
        was_acting = self._acting_coordinator(self.step, before) == self.node
        acting = self.acting_coordinator(self.step) == self.node
        returned = (set(self.view) - set(before)) & set(self.voters)
        if acting and not was_acting:
            # The node that led this step left our view: take over at once.
            proposer.attempts = 0
            self._start_round(now, actions)
        elif returned and (proposer.phase == "backoff" or proposer.attempts > 0):
            # Voters are back (a heal): the backoff that grew while no quorum could
            # answer no longer says anything; start over from the first retry.
            proposer.attempts = 0
            if acting:
                self._start_round(now, actions)
            else:
                first_retry_at = now + self._retry_base_s() * self._jitter()
                if proposer.retry_at is None or proposer.retry_at > first_retry_at:
                    proposer.retry_at = first_retry_at

    def _on_tick(self, event: Tick, now: float, actions: list) -> None:
        proposer = self._proposer
        if proposer.retry_at is None or proposer.retry_at > now:
            return
        if proposer.phase == "decided" or proposer.candidate is None:
            proposer.retry_at = None
            return
        acceptor = self._acceptors.get(self.step)
        if (
            acceptor is not None
            and acceptor.pending is not None
            and (acceptor.promised is None or acceptor.pending[0] >= acceptor.promised)
            and now < acceptor.pending_since + self._retry_cap_s()
        ):
            # Our acceptor is fetching the bytes of the live round (ours or another
            # proposer's): a retry now would only pre-empt it, and the new round would
            # wait for the same bytes (explore and the recovery benchmark after a heal:
            # proposers restarted each other's rounds every 0.3 s while acceptors
            # fetched for 0.5 s).  Bounded by _retry_cap_s in case the bytes never come.
            proposer.retry_at = now + self._retry_base_s() * self._jitter()
            return
        proposer.attempts += 1
        self._start_round(now, actions)

    def _start_round(self, now: float, actions: list) -> None:
        """Phase 1 of a new round above every round seen (a retry, or a takeover)."""
        proposer = self._proposer
        if self.step <= self.vote_floor:
            proposer.retry_at = None  # a forgotten step: learn it, never lead it
            return
        self._move("retry")
        round_ = proposer.highest_round + 1
        acceptor = self._acceptors.get(self.step)
        if acceptor is not None and acceptor.promised is not None:
            round_ = max(round_, acceptor.promised[0] + 1)
        proposer.highest_round = round_
        proposer.ballot = (round_, self._index(self.node))
        proposer.promises = {}
        proposer.accepts = set()
        proposer.value = None
        self._sent(("prepare", proposer.ballot), now)
        self._retry_later(now)
        actions.append(
            Send(
                to=self.voters,
                message=Prepare(sender=self.node, step=self.step, ballot=proposer.ballot),
            )
        )

    # -- acceptor -------------------------------------------------------------------------------

    def _acceptor(self, step: int) -> _Acceptor:
        acceptor = self._acceptors.get(step)
        if acceptor is None:
            acceptor = self._acceptors[step] = _Acceptor()
        return acceptor

    def _acceptor_prepare(self, message: Prepare, actions: list) -> None:
        if self.node not in self.voters:
            return  # learners don't vote
        ballot = _tuple(message.ballot)
        acceptor = self._acceptor(message.step)
        if acceptor.promised is not None and ballot < acceptor.promised:
            actions.append(self._nack(message, acceptor.promised))
            return
        acceptor.promised = ballot
        actions.append(Promised(step=message.step, ballot=ballot, to=message.sender))
        actions.append(Persist(record=self._record(message.step, acceptor)))
        actions.append(
            Send(
                to=(message.sender,),
                message=PromiseReply(
                    sender=self.node,
                    step=message.step,
                    ballot=ballot,
                    accepted_ballot=acceptor.accepted_ballot,
                    accepted_value=acceptor.accepted_value,
                ),
            )
        )

    def _acceptor_accept_request(self, message: AcceptRequest, now: float, actions: list) -> None:
        if self.node not in self.voters:
            return
        ballot = _tuple(message.ballot)
        acceptor = self._acceptor(message.step)
        if acceptor.promised is not None and ballot < acceptor.promised:
            actions.append(self._nack(message, acceptor.promised))
            return
        holds = message.value.agg_fp in self._held.get(message.step, ())
        if holds or self._ack_before_apply:
            self._accept(message.step, ballot, message.value, message.sender, holds, actions)
            if not holds:
                actions.append(self._fetch(message.step, message.value.agg_fp, message.sender))
            return
        if acceptor.pending is None or acceptor.pending[0] <= ballot:
            if acceptor.pending is None:
                acceptor.pending_since = now
            acceptor.pending = (ballot, message.value, message.sender)
            actions.append(self._fetch(message.step, message.value.agg_fp, message.sender))

    def _acceptor_bytes_arrived(self, step: int, value_fp: str, actions: list) -> None:
        acceptor = self._acceptors.get(step)
        if acceptor is None or acceptor.pending is None:
            return
        ballot, value, proposer = acceptor.pending
        if value.agg_fp != value_fp:
            return
        acceptor.pending = None
        if acceptor.promised is not None and ballot < acceptor.promised:
            actions.append(
                Send(
                    to=(proposer,),
                    message=Nack(
                        sender=self.node, step=step, ballot=ballot, promised=acceptor.promised
                    ),
                )
            )
            return
        self._accept(step, ballot, value, proposer, True, actions)

    def _accept(
        self, step: int, ballot, value: StepValue, proposer: str, holds: bool, actions: list
    ) -> None:
        acceptor = self._acceptor(step)
        acceptor.promised = ballot
        acceptor.accepted_ballot = ballot
        acceptor.accepted_value = value
        actions.append(
            AcceptedValue(step=step, ballot=ballot, value=value, to=proposer, holds_bytes=holds)
        )
        if not self._forget_vote:  # bug: the vote is not made durable
            actions.append(Persist(record=self._record(step, acceptor)))
        actions.append(
            Send(
                to=(proposer,),
                message=AcceptedReply(
                    sender=self.node, step=step, ballot=ballot, value_fp=value.agg_fp
                ),
            )
        )

    def _record(self, step: int, acceptor: _Acceptor) -> AcceptorRecord:
        return AcceptorRecord(
            step=step,
            promised=acceptor.promised,
            accepted_ballot=acceptor.accepted_ballot,
            accepted_value=acceptor.accepted_value,
        )

    def _nack(self, message: Prepare | AcceptRequest, promised) -> Send:
        return Send(
            to=(message.sender,),
            message=Nack(
                sender=self.node, step=message.step, ballot=message.ballot, promised=promised
            ),
        )

    def _fetch(self, step: int, value_fp: str, proposer: str) -> FetchAggregate:
        sources = (proposer, *(v for v in self.voters if v not in (proposer, self.node)))
        return FetchAggregate(step=step, value_fp=value_fp, sources=sources)

    # -- proposer -------------------------------------------------------------------------------

    def _move(self, trigger: str) -> None:
        proposer = self._proposer
        new_phase = PROPOSER_TRANSITIONS.get((proposer.phase, trigger))
        if new_phase is None:
            raise LocalProtocolError(f"proposer cannot {trigger} in phase {proposer.phase}")
        proposer.phase = new_phase

    def _send_accepts(self, value: StepValue, now: float, actions: list) -> None:
        proposer = self._proposer
        proposer.value = value
        proposer.accepts = set()
        self._sent(("accept", proposer.ballot), now)
        actions.append(Proposed(step=self.step, ballot=proposer.ballot, value=value))
        actions.append(
            Send(
                to=self.voters,
                message=AcceptRequest(
                    sender=self.node, step=self.step, ballot=proposer.ballot, value=value
                ),
            )
        )

    def _proposer_promise(self, message: PromiseReply, now: float, actions: list) -> None:
        proposer = self._proposer
        if proposer.phase != "preparing" or _tuple(message.ballot) != proposer.ballot:
            return  # an answer to an older round
        proposer.promises[message.sender] = (
            _tuple(message.accepted_ballot),
            message.accepted_value,
        )
        if self._quorum(proposer.promises):
            accepted = [(b, v) for b, v in proposer.promises.values() if b is not None]
            value = max(accepted, key=lambda bv: bv[0])[1] if accepted else proposer.candidate
            self._move("promise_quorum")
            self._send_accepts(value, now, actions)
            # Phase 2 gets a timeout of its own: a retry timed for phase 1 alone fired
            # while the accepts were on their way back (recovery benchmark: a takeover
            # round restarted itself with its quorum 1 ms away).
            self._retry_later(now)

    def _proposer_accepted(self, message: AcceptedReply, actions: list) -> None:
        proposer = self._proposer
        if proposer.phase != "accepting" or _tuple(message.ballot) != proposer.ballot:
            return
        if proposer.value is None or message.value_fp != proposer.value.agg_fp:
            raise RemoteProtocolError(
                "an accept of a value this ballot did not propose", reason="invalid-value"
            )
        proposer.accepts.add(message.sender)
        if self._quorum(proposer.accepts):
            quorum = tuple(sorted(proposer.accepts))
            value = proposer.value
            actions.append(
                Send(
                    to=tuple(m for m in self.members if m != self.node),
                    message=Decided(
                        sender=self.node, step=self.step, value=value, quorum=list(quorum)
                    ),
                )
            )
            self._learn(value, quorum, actions)

    def _proposer_nack(self, message: Nack, now: float, actions: list) -> None:
        if message.sender_step is not None and message.sender_step > self.step:
            actions.append(
                Behind(step=self.step, peer_step=message.sender_step, peer=message.sender)
            )
            return
        proposer = self._proposer
        proposer.highest_round = max(proposer.highest_round, message.promised[0])
        if (
            proposer.phase in ("preparing", "accepting")
            and _tuple(message.ballot) == proposer.ballot
        ):
            self._move("nack")
            self._retry_later(now)

    def _quorum(self, voters_heard) -> bool:
        counted = [v for v in voters_heard if v in self.voters]
        if self._no_quorum:
            counted = [v for v in counted if v in self.view]
        return len(counted) >= self.quorum_size()

    def _retry_later(self, now: float) -> None:
        proposer = self._proposer
        backoff = min(self._retry_base_s() * (2**proposer.attempts), self._retry_cap_s())
        proposer.retry_at = now + backoff * self._jitter()

    def _retry_base_s(self) -> float:
        """The first retry's delay: ``retry_base_s``, or longer when replies are slow."""
        observed = self.config.retry_reply_latencies * self.reply_latency_s
        return min(max(self.config.retry_base_s, observed), self.config.retry_observed_max_s)

    def _retry_cap_s(self) -> float:
        """The longest backoff: ``retry_max_s``, or the first retry's delay when the
        observed rounds make that longer (CommitConfig.retry_observed_max_s)."""
        return max(self.config.retry_max_s, self._retry_base_s())

    def _sent(self, key: tuple[str, tuple[int, int]], now: float) -> None:
        sent_at = self._proposer.sent_at
        sent_at[key] = now
        if len(sent_at) > 8:  # the latest rounds say enough; bounds a long duel's memory
            del sent_at[min(sent_at, key=sent_at.__getitem__)]

    def _measure_reply(self, message: CommitMessage, now: float) -> None:
        """A peer's reply to one of our rounds, current or not: a latency sample."""
        if message.sender == self.node or message.step != self.step:
            return
        if isinstance(message, PromiseReply):
            key = ("prepare", _tuple(message.ballot))
        elif isinstance(message, AcceptedReply):
            key = ("accept", _tuple(message.ballot))
        else:
            return
        sent = self._proposer.sent_at.get(key)
        if sent is None or sent < self.view_changed_at:
            return
        sample = max(now - sent, 0.0)
        if sample < self.reply_latency_s:
            weight = self.config.reply_latency_weight
            self.reply_latency_s += weight * (sample - self.reply_latency_s)
            return
        self.reply_latency_s = sample
        # The round in flight was timed with the old estimate: give it the new one.
        proposer = self._proposer
        if proposer.retry_at is None or proposer.ballot is None:
            return
        phase = {"preparing": "prepare", "accepting": "accept"}.get(proposer.phase)
        started = proposer.sent_at.get((phase, proposer.ballot)) if phase else None
        if started is not None:
            backoff = self._retry_base_s() * (2**proposer.attempts)
            proposer.retry_at = max(proposer.retry_at, started + min(backoff, self._retry_cap_s()))

    def _defer_to(self, message: Prepare | AcceptRequest, now: float) -> None:
        """Our acceptor joined another proposer's round: give that round the time it
        needs before our own retry pre-empts it (dueling proposers after a heal)."""
        if message.sender == self.node:
            return
        proposer = self._proposer
        if proposer.retry_at is None or proposer.phase == "decided":
            return
        acceptor = self._acceptors.get(message.step)
        ballot = _tuple(message.ballot)
        if acceptor is None or (
            acceptor.promised != ballot
            and (acceptor.pending is None or acceptor.pending[0] != ballot)
        ):
            return  # refused: that round is no better than ours
        proposer.retry_at = max(proposer.retry_at, now + self._retry_base_s())

    def _jitter(self) -> float:
        """Deterministic jitter in [1, 2): dueling proposers drift apart without randomness."""
        digest = hashlib.blake2b(
            f"{self.seed}:{self.node}:{self.step}:{self._proposer.attempts}".encode(),
            digest_size=4,
        )
        return 1.0 + int.from_bytes(digest.digest(), "big") / 2**32

    # -- learner --------------------------------------------------------------------------------

    def _learn(self, value: StepValue, quorum: tuple[str, ...], actions: list) -> None:
        if self.step in self._decided:
            return  # the first decision stands (a second would be an S1 violation to log)
        self._decided[self.step] = (value, quorum)
        proposer = self._proposer
        proposer.phase = (
            PROPOSER_TRANSITIONS[(proposer.phase, "decided")]
            if proposer.phase != "decided"
            else "decided"
        )
        proposer.retry_at = None
        self._start_apply(actions)

    def _start_apply(self, actions: list) -> None:
        value, _ = self._decided[self.step]
        self._applying = self.step
        if value.agg_fp not in self._held.get(self.step, ()):
            actions.append(
                FetchAggregate(
                    step=self.step,
                    value_fp=value.agg_fp,
                    sources=tuple(v for v in self.voters if v != self.node),
                )
            )
        actions.append(ApplyStep(step=self.step, value=value))

    def _ask_decision(self, peer: str, actions: list) -> None:
        """``peer``'s core is past this node's step, so it holds that step's decision:
        ask for it unless it is known.  One step behind is normal while this node
        applies, but a node that missed the step's ``Decided`` (a rejoin installed a
        state one step old: the decision was broadcast while the state was in flight)
        would otherwise wait until the cluster is two steps ahead and transfer state
        again, which can be one step old again (GPU chaos run: 43.5 s, three state
        transfers, before such a node committed a step of its own)."""
        if self.step in self._decided or peer in self._decision_asked:
            return
        self._decision_asked.add(peer)
        actions.append(Send(to=(peer,), message=DecisionRequest(sender=self.node, step=self.step)))

    def _answer_decision_request(self, message: DecisionRequest, actions: list) -> None:
        """Tell a laggard a decision this node holds; silence otherwise (it started past
        that step, or is not there yet): the laggard's ``Behind`` rule covers it once
        the cluster is two steps ahead."""
        if message.step in self._decided:
            actions.append(self._tell_decision(message.sender, message.step))

    def _tell_decision(self, peer: str, step: int) -> Send:
        """``Decided`` for a step this node holds the decision of, to ``peer``."""
        value, quorum = self._decided[step]
        return Send(
            to=(peer,),
            message=Decided(sender=self.node, step=step, value=value, quorum=list(quorum)),
        )

    def _answer_laggard(self, message: CommitMessage, actions: list) -> None:
        if isinstance(message, _BALLOT_REQUESTS):
            entry = self._decided.get(message.step)
            far_behind = self.step - message.step >= self.config.state_transfer_gap_steps
            if entry is not None and not far_behind:
                actions.append(self._tell_decision(message.sender, message.step))
            else:
                # This node started past that step (checkpoint or state transfer) and
                # cannot tell its value; silence would stall the laggard for ever (found
                # by explore: a node restored from its checkpoint at step 0 and one that
                # rejoined at genesis never committed again).  Or the laggard is so far
                # behind that one state transfer beats learning step by step (see
                # ``CommitConfig.state_transfer_gap_steps``).  Tell it that it is behind.
                actions.append(
                    Send(
                        to=(message.sender,),
                        message=Nack(
                            sender=self.node,
                            step=message.step,
                            ballot=message.ballot,
                            promised=message.ballot,
                            sender_step=self.step,
                        ),
                    )
                )

    def _advance(self, value: StepValue, now: float, actions: list) -> None:
        change = value.config_change
        if change is not None:
            voters, learners = set(self.voters), set(self.learners)
            if change.change == "add":
                learners.add(change.peer)
            elif change.change == "promote":
                learners.discard(change.peer)
                voters.add(change.peer)
            else:
                voters.discard(change.peer)
                learners.discard(change.peer)
            self.voters, self.learners = tuple(sorted(voters)), tuple(sorted(learners))
        self._applying = None
        self.step += 1
        self._proposer = _Proposer()
        self._decision_asked = set()
        low = self.step - self.config.retained_steps
        for table in (self._acceptors, self._decided, self._held):
            for old in [s for s in table if s < low]:
                del table[old]
        self._held.pop(self.step - 1, None)
        buffered, self._buffer = self._buffer, []
        if self.node not in self.members:
            return  # removed: this node stops taking part
        for message in buffered:
            if message.step >= self.step:
                try:
                    self._check_message(message)
                except RemoteProtocolError:
                    self.dropped += 1
                    continue
                self._dispatch(message, now, actions)
        members = set(self.members)
        for peer, step in list(self._peer_steps.items()):
            if peer not in members:
                del self._peer_steps[peer]  # removed by this step's change
            elif step > self.step:
                self._ask_decision(peer, actions)  # its gradient showed it past this step


_HANDLERS = {
    ProposeValue: StepCommit._on_propose,
    MessageReceived: StepCommit._on_message,
    PeerAt: StepCommit._on_peer_at,
    HoldsAggregate: StepCommit._on_holds,
    Applied: StepCommit._on_applied,
    ViewUpdated: StepCommit._on_view,
    Tick: StepCommit._on_tick,
}
