"""The node core: the decisions a training node makes around its protocol cores.

The detector, membership, step-commit, rejoin and checkpoint-policy cores each own
one protocol.  What a node does *between* them -- when its gradient is ready, who
proposes a step and when, whether an acceptor rebuilds an aggregate or fetches it,
which acceptor records it keeps and how far down it may vote again, what a restarted
node rejoins from, and which history event every core action is logged as -- used to
be written twice, once in the runtime's ``step_driver`` and once in the simulator's
``NodeApp``, and the two drifted (issue 12).  It lives here, once, and both drivers
call it: the simulator runs the decisions of the node that ships.

Pure like every core (h11 style): typed events plus ``now`` in, typed actions out,
no clock, no randomness, no I/O.  A node's steps are one object, ``step_node.StepNode``
(its own module): it owns the commit core and composes the leader, the proposer, the
pulls, the apply and the held record below behind one ``handle(event, now)``, with the
glue between them written once; the drivers perform its actions.  A node's fetch of
the cluster's state is another, ``state_transfer.StateTransfer``: the rejoin core and
the decisions below around it (whom to ask, what an offer means, what an install
keeps, when a failed fetch is retried).  The pieces:

- ``NodeConfig``: every timing knob and bound of these decisions, with its reason.
  The runtime's ``StepSection`` and the simulator take their defaults from here.
- ``StepLeader``: who proposes step ``s`` and when.  Its transitions are the table
  in ``StepLeader.handle`` (one method per event, listed in ``_LEADER_HANDLERS``).
- ``Proposer``: the leader's decision turned into at most one proposal a step (the
  build it asks for, the value it proposes, a failed build back to the leader).
- ``prune_records``: which acceptor records a node keeps and its durable vote floor
  (the ``no-vote-floor`` bug lives here: records pruned, floor never raised);
  ``aggregates_to_keep``: which aggregate bytes outlive a crash.
- ``aggregate_pulls.AggregatePulls`` (its own module, one job): how a node that
  lacks a committed value's bytes gets them -- rebuild from held contributions or
  pull, from whom, and when a pull moves on to the next source -- and the
  contributors of the values peers named (``value_seen``), which a rebuild needs.
- ``step_apply.StepApply`` (its own module): when a committed value is applied (once
  decided and held, one at a time) and what stays held after it.
- ``held_aggregates.HeldAggregates`` (its own module): which aggregates the node
  holds, and what a new commit core is told of them.
- ``change_to_propose``: the membership change a proposal carries, if the commit
  core's configuration agrees it applies.
- ``rejoins_at_start``: whether a started process fetches the cluster's state before
  its first step; ``rejoin_start``: whom a rejoin asks, the cluster step it knows of
  and whether genesis is a valid outcome (``rejoin_sources`` orders the peers);
  ``replica_peers``: the peers that keep this node's checkpoint replicas.
- ``Checkpointing`` (with ``CheckpointConfig``): when the node checkpoints, the
  checkpoint-policy core fed the same inputs in both shells (every commit, every
  peer it declares dead and its own restart, the measured cost of each write).
- ``StateFetch``: whether the node runs its step or fetches the cluster's state
  (the step is suspended meanwhile), and when a failed fetch is tried again.
- ``state_to_serve``: what a node answers a peer's state request with;
  ``state_bytes_wait``: whether state bytes that came before their offer wait for it.
- ``Enrolment``: a joiner's way in (requests, the member whose traffic shows it was
  added, its timeout) and a clean leave's way out (notices, the stop), and what a
  committed configuration change makes the node do, for both shells.
- ``next_incarnation`` / ``is_first_start``: a start's incarnation (the first is
  ``FIRST_INCARNATION`` in both shells) and whether it is the node's first.
- ``history_of``: the one mapping from a core's action to the history event logged
  for it (DESIGN: a node logs a vote before sending it).

Where what comes next goes.  DESIGN's relaxed mode (averaging in random groups)
replaces *who contributes to whom and who proposes*: it becomes a second leader
beside ``StepLeader`` (a ``GroupLeader`` drawing the step's group from the seed and
the view) chosen by ``NodeConfig.mode``, with the same events and a
``BuildProposal`` over the group's contributors.  Pipeline mode (stages with
replicas) adds a stage index to ``StepBegan`` and a ``SendActivations`` action:
the leader then waits for the stage's replicas rather than for all voters, and
``aggregate_pulls.plan_aggregate`` picks sources among the stage's replicas.  Both
stay decisions of the node core; the drivers only move bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from swarmshake.reference_node.protocol import checkpoint_policy as cp
from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol import membership as mb
from swarmshake.reference_node.protocol import rejoin as rj
from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import ConfigChangeRequest, StateOffer, StepValue
from swarmshake.reference_node.protocol.structs import (
    VALID_NAMES,
    Clock,
    CoreAction,
    CoreEvent,
    check_count,
    check_name,
    check_positive,
)

_COMMIT_DEFAULTS = cm.CommitConfig()


class NodeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The node's decision knobs, defined once (the drivers re-declare none of them).

    Proposal timing is the simulator's former rule, kept because it is the better of
    the two: the runtime waited a fixed ``contribution_wait_s`` (2 s) for every voter
    and let everyone else take over one ``round_timeout_s`` later, so one straggler
    cost 2 s a step and a slow but alive coordinator caused a duel of all nodes at
    once; this rule ends the wait as soon as a majority is in plus a short grace,
    and takes over in rank order (one backup first, then the rest staggered)."""

    # The acting coordinator waits this long after its own gradient for a voter that
    # is alive in its view but late.  A 40 MB contribution takes ~0.45 s on a
    # 100 MB/s link, so this must be longer; a crashed contributor costs no more than
    # its detection, since the view change ends the wait.
    collect_s: float = 1.0
    # ... and this long after a majority of the voters' contributions arrived: healthy
    # contributions land within ~0.1 s of each other, so one this far behind its
    # peers is a straggler and the step goes on without it.
    straggler_grace_s: float = 0.25
    # The next live voter (rank 1) takes over a step still undecided this long after
    # its own gradient: a healthy step decides ~0.6 s after it, so this catches a
    # coordinator that is alive but slow without duelling a healthy one.
    backup_delay_s: float = 1.0
    # Everyone else (rank r >= 2) after fallback_delay_s + r * fallback_rank_step_s:
    # staggered, so the ranks do not pre-empt each other's phase-1 rounds.
    fallback_delay_s: float = 3.0
    fallback_rank_step_s: float = 0.5
    # Every delay above was tuned for a step that decides ~0.6 s after its gradient
    # (the simulator's 4 and 8 nodes: 0.53-0.69 s, 5th to 95th percentile).  A bigger
    # model's step decides later: at 100M parameters on the reference machine ~10 s
    # (the shards and the aggregate are 400 MB), and with these delays as they are
    # every rank took over a healthy coordinator (session 20: up to 7 proposals for one
    # step, each round pre-empting the last).  So the leader times its own steps (its
    # gradient to the step moving on) and keeps the median of the last
    # ``decision_latency_samples`` (one step slowed by a crash does not count):
    # - the coordinator's waits for contributions (collect_s, straggler_grace_s) are
    #   multiplied by its pace, that median over this nominal latency (the slowest the
    #   delays were tuned for), never below 1: a small model keeps them as they are;
    decision_latency_nominal_s: float = 0.75
    decision_latency_samples: int = 5
    # - ... never above this (a coordinator waits at most 30 s for contributions);
    pace_max: float = 30.0
    # - the takeovers (backup_delay_s and the fallbacks) are shifted, not multiplied:
    #   the backup waits at least this many median latencies and every later rank that
    #   much longer than its own delay.  Multiplied, the fallbacks grew with the pace
    #   (the GPU run, 5.5 s steps: rank 2 at 29 s) and a coordinator alive but unable to
    #   lead (restarted, its worker still loading) held a step 20 s (L2 invalid).
    takeover_latencies: float = 1.33
    # One pull attempt; then the next source (fetch_source).  The fetch is retried
    # for as long as its step is the node's (the drivers drop it when the step moves
    # on or the node rejoins): one request a second is nothing next to heartbeats,
    # and a node that gave up could hold its peers' next step without its vote
    # (explore, 3 nodes, seed 2: no commit for 26 s after a heal).
    fetch_timeout_s: float = 1.0
    # Acceptor records kept on disk: the commit core's retained window, one number.
    # A node rolled back further than this catches up by state transfer anyway (the
    # core answers laggards from the same window), and the vote floor below it keeps
    # it from voting again on a step whose record is gone (49f9838).
    records_kept: int = _COMMIT_DEFAULTS.retained_steps
    # The bytes of every aggregate a node held (built, rebuilt, fetched) are kept for
    # the steps above its last applied step minus this many, so a lagging acceptor
    # or learner can fetch them.  The accepted value of every acceptor record kept
    # stays longer, as long as its record (aggregates_to_keep says why).
    aggregates_kept_steps: int = 4
    # Contributions and aggregate announcements are kept this far ahead of the
    # current step: the commit core's own look-ahead window.
    steps_ahead_max: int = _COMMIT_DEFAULTS.steps_ahead_max
    # A rejoin that found no source is tried again this much later (one request a
    # second is nothing next to heartbeats); a joiner's request and a leaver's notice
    # are repeated as often.
    rejoin_retry_s: float = 1.0
    join_retry_s: float = 1.0
    leave_retry_s: float = 1.0
    # A node removed while it was away (restarted before its removal committed) still
    # heartbeats its old peers as a member; each answers it with ``LeaveConfirmed``
    # at most this often (``RemovalAnswers``): its heartbeats come every few tens of
    # ms and one answer is enough, but a lost one must be repeated well inside the
    # detector's suspicion timeout (1 s), or the stale node declares the members dead.
    removal_answer_interval_s: float = 0.25
    # The aggregation rule's fewest contributions (the runtime sets it from its
    # training section: TrainingConfig.min_contributors, e.g. 3 for the median with
    # f = 1): the leader proposes from no fewer.  A build from fewer is refused by the
    # worker, and the retry came a straggler grace later even when the missing
    # gradient arrived meanwhile (the GPU run: 1.4 s of a step).  1 for the mean.
    min_contributors: int = 1
    # Contributions travel sharded (protocol.sharding; the runtime sets it from its
    # training section): a contributor out of the view is left out of a proposal.  Its
    # own shard's inputs died with it (contributors keep their shards at the owner),
    # so no set holding it can be gathered unless its owner broadcast that exact set
    # first; the bench's crash on medium waited 1.3 s (the owner's input wait, then
    # BuildFailed) in 2 of 3 trials for a set that still named the dead node.
    sharded_contributions: bool = False

    def __post_init__(self) -> None:
        for name in (
            "collect_s",
            "straggler_grace_s",
            "backup_delay_s",
            "fallback_delay_s",
            "fallback_rank_step_s",
            "fetch_timeout_s",
            "rejoin_retry_s",
            "join_retry_s",
            "leave_retry_s",
            "removal_answer_interval_s",
            "decision_latency_nominal_s",
            "takeover_latencies",
        ):
            check_positive(getattr(self, name), f"NodeConfig.{name}")
        if not self.pace_max >= 1.0:
            raise LocalProtocolError("NodeConfig.pace_max must be >= 1")
        for name in (
            "decision_latency_samples",
            "records_kept",
            "steps_ahead_max",
            "aggregates_kept_steps",
            "min_contributors",
        ):
            check_count(getattr(self, name), f"NodeConfig.{name}")
        if (
            min(
                self.records_kept,
                self.aggregates_kept_steps,
                self.decision_latency_samples,
                self.min_contributors,
            )
            < 1
        ):
            raise LocalProtocolError(
                "NodeConfig.records_kept, aggregates_kept_steps, "
                "decision_latency_samples and min_contributors must be >= 1"
            )


NODE_DEFAULTS = NodeConfig()


# --- StepLeader: who proposes and when ----------------------------------------------------


class StepBegan(CoreEvent, frozen=True, kw_only=True):
    """The commit core moved to ``step`` (a commit, a rejoin, a start).

    ``stored`` is the value this node's acceptor record of ``step`` holds, if any,
    and ``held`` the aggregates whose bytes it holds for ``step``: a node restarted
    from an older state re-proposes a stored value at once (a retry adopts the
    highest accepted value anyway), one round per step instead of a gradient round.

    ``decided``: the commit core learnt the step's decision already (a peer's
    ``Decided`` waited for this node to get here): the node only fetches and applies
    it, and neither computes a gradient nor leads."""

    step: int
    voters: tuple[str, ...]
    members: tuple[str, ...]
    stored: StepValue | None = None
    held: tuple[str, ...] = ()
    decided: bool = False

    def __post_init__(self) -> None:
        # The names come from the commit core's configuration, checked when it was
        # built: here only the shape (a regex per name per step was a tenth of a
        # simulated run).
        check_count(self.step, "StepBegan.step")
        if not isinstance(self.voters, tuple) or not isinstance(self.members, tuple):
            raise LocalProtocolError("StepBegan.voters and members must be tuples")
        if not self.voters or not set(self.voters) <= set(self.members):
            raise LocalProtocolError("StepBegan.voters must be >= 1 members")


class StepDecided(CoreEvent, frozen=True, kw_only=True):
    """The commit core learnt the decision of ``step`` (it asks to apply it): nobody
    leads it any more.  The decision's bytes may take seconds to arrive (a 403 MB
    aggregate on the GPU run), and a takeover timer that fired meanwhile built an
    aggregate no one would propose; a node that got to a step only after it was
    decided built one every 0.3 s, from its own gradient alone, for 12 s."""

    step: int

    def __post_init__(self) -> None:
        check_count(self.step, "StepDecided.step")


class OwnContribution(CoreEvent, frozen=True, kw_only=True):
    """This node's gradient of ``step`` is ready (and sent to the other members)."""

    step: int

    def __post_init__(self) -> None:
        check_count(self.step, "OwnContribution.step")


class ContributionArrived(CoreEvent, frozen=True, kw_only=True):
    step: int
    sender: str

    def __post_init__(self) -> None:
        # The most frequent event (one per peer per step): the checks' common cases
        # without their calls (2 % of a simulated run), the calls for the rest.
        step, sender = self.step, self.sender
        if type(step) is not int or step < 0:
            check_count(step, "ContributionArrived.step")
        if type(sender) is not str or sender not in VALID_NAMES:
            check_name(sender, "ContributionArrived.sender")


class ViewChanged(CoreEvent, frozen=True, kw_only=True):
    """The detector's alive view (``ViewChanged.alive``)."""

    alive: tuple[str, ...]


class BuildFailed(CoreEvent, frozen=True, kw_only=True):
    """The worker could not build the asked aggregate: propose later.

    ``missing``: contributors whose inputs the build could not get although their
    gradient reached this node (sharded aggregation: a live shard owner never got
    their shard, e.g. over a one-way bulk fault): the next proposal leaves them out
    (this node's own gradient is never left out, nor so many that less than a
    majority of the voters would remain), or the step would fail the same way every
    time while the view holds them alive."""

    step: int
    missing: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_count(self.step, "BuildFailed.step")
        if not isinstance(self.missing, tuple):
            raise LocalProtocolError("BuildFailed.missing must be a tuple")
        for name in self.missing:
            check_name(name, "BuildFailed.missing")


class Tick(CoreEvent, frozen=True, kw_only=True):
    pass


LeaderEvent = (
    StepBegan
    | StepDecided
    | OwnContribution
    | ContributionArrived
    | ViewChanged
    | BuildFailed
    | Tick
)


class BuildProposal(CoreAction, frozen=True, kw_only=True):
    """Aggregate exactly ``contributors``' gradients of ``step`` and propose the result
    (``ProposeValue`` to the commit core, with ``change_to_propose``'s change and
    ``first``: this node ranked first when it decided to build, so its round starts
    at once even when the step's coordinator is in the view)."""

    step: int
    contributors: tuple[str, ...]
    first: bool = False


class ProposeStored(CoreAction, frozen=True, kw_only=True):
    """Propose ``value`` (this acceptor's stored accepted value) for ``step`` now."""

    step: int
    value: StepValue


LeaderAction = BuildProposal | ProposeStored


def step_began(core: cm.StepCommit, held: Iterable[str]) -> StepBegan:
    """What the leader is told when the commit core is at a step (a commit, a rejoin,
    a start), in both shells: the core's configuration, the value its acceptor record
    of the step holds (the runtime read the core's record, the simulator its disk's
    copy), the aggregates this node holds bytes of for it (``held``), and whether the
    core knows the step's decision already."""
    step = core.step
    record = core.acceptor_record(step)
    return StepBegan(
        step=step,
        voters=core.voters,
        members=core.members,
        stored=record.accepted_value if record is not None else None,
        held=tuple(sorted(held)),
        decided=core.phase == "decided",
    )


class StepLeader:
    """One node's proposal timing for its current step.

    Per step: rank 0 (the acting coordinator: the first voter in rotation order from
    ``step % len(voters)`` that is ready in this node's view: alive, and not a node
    back in the view with no gradient since) proposes once every ready voter
    contributed, ``straggler_grace_s`` after a majority did, or at ``collect_s`` after
    its own gradient; a view change that makes it rank 0 (the coordinator or a missing
    contributor was declared dead) proposes at once if that bound passed.  Rank 1
    proposes ``backup_delay_s`` after its own gradient, rank r >= 2 (learners rank
    last) ``fallback_delay_s + r * fallback_rank_step_s`` after it, if the step has not
    moved on; a coordinator displaced by a node ranked before it (back and ready, or
    new) waits as its new rank.  At most one proposal per step, and none from fewer
    contributions than the aggregation rule needs (``NodeConfig.min_contributors``):
    a node whose time came with fewer proposes at the arrival that makes enough.
    With sharded contributions a proposal names only contributors in the view.
    The waits of rank 0 are multiplied by ``pace()`` and the takeovers of the other ranks shifted by
    ``takeover_shift_s()``: both say how much slower than nominal this node's recent
    steps decided (NodeConfig.decision_latency_nominal_s says why)."""

    def __init__(self, *, node: str, config: NodeConfig = NODE_DEFAULTS):
        check_name(node, "node")
        self.node = node
        self.config = config
        self.step = -1
        self.voters: tuple[str, ...] = ()
        self.members: tuple[str, ...] = ()
        self.alive: frozenset[str] = frozenset()
        self.arrived: dict[int, set[str]] = {}
        self.computed_at: float | None = None  # when this node's gradient was ready
        self.deadline: float | None = None  # the earliest armed proposal time
        self.majority_armed = False  # the straggler bound is armed once per step
        self.proposed = False
        # The contributors of this step's BuildProposal (None: none asked, or it failed)
        self.built: tuple[str, ...] | None = None
        self.replaying = False  # this step re-proposes a stored value: no gradient
        self.learnt = False  # this step was decided before the node got to it: no gradient
        self.decided = False  # this step's decision is known: nobody leads it (proposed)
        # Its time to propose came with fewer contributions than the aggregation rule
        # needs (NodeConfig.min_contributors): the next arrival proposes, no timer.
        self.starved = False
        self._rank: int | None = None  # rank() for the current step and view
        self._waited: frozenset[str] | None = None  # the voters in view, likewise
        self._voter_set: frozenset[str] = frozenset()
        # Seconds from this node's gradient to its step moving on, the latest last
        # (bounded: NodeConfig.decision_latency_samples).
        self.decision_latencies: list[float] = []
        # Readiness: a node alive again after this node's view lost it (a restart, a
        # pause, a heal) is alive seconds before it can lead: the GPU run at 100M had a
        # restarted node heartbeating 5.4 s before its worker was up and 3 s more
        # before its state was current, and every step it coordinated in that time
        # waited for a backup (L2: 10.2-11.5 s without a commit, R = 10 s).  So such a
        # node ranks nowhere and is not waited for until one of its gradients arrives
        # (a node contributes only once its worker is up and its state current).  Both
        # sets hold names of this node's view only: bounded by the members.
        self._left: set[str] = set()  # alive once, then not
        self._returning: set[str] = set()  # alive again, no gradient since
        self._pace = 1.0
        self._takeover_shift_s = 0.0
        self._clock = Clock()

    # -- public API -------------------------------------------------------------------------

    def handle(self, event: LeaderEvent, now: float) -> list[LeaderAction]:
        clock = self._clock
        if type(now) is not float or not -math.inf < now < math.inf or now < clock.last:
            clock.check(now)  # raises; the common case (a finite float, in order) needs no call
        handler = _LEADER_HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"StepLeader cannot handle {type(event).__name__}")
        actions: list[LeaderAction] = []
        handler(self, event, now, actions)
        self._clock.last = now
        return actions

    def next_deadline(self) -> float | None:
        return None if self.proposed else self.deadline

    def contributes(self) -> bool:
        """Whether this node computes and sends a gradient for its current step: not
        when it re-proposes the value it accepted before a restart (that value is
        the step's, or a retry adopts a higher one: a gradient would be wasted, and
        its 40 MB on the bulk link would hold up the fetch of the re-proposed value
        the peers wait for; explore without a bug, seed 2: 1.1 s a replayed step),
        and not when the step was decided before this node got to it: a laggard one
        step behind computed a gradient no peer would count for every step it caught
        up on, as long as a real step, so it never caught up (a paused node, 28M
        parameters on the CPU: 6 steps, 26 s, one step behind the whole time)."""
        return not (self.replaying or self.learnt)

    def leads(self) -> bool:
        """Whether this node may still propose its current step: not once the step's
        decision is known (``StepDecided``, or ``StepBegan.decided``)."""
        return not self.decided

    def pace(self) -> float:
        """The factor on rank 0's waits for contributions (collect_s, the straggler
        grace): the median recent decision latency over the nominal one, clamped to
        [1, pace_max].  Takeovers are shifted instead (``takeover_shift_s``)."""
        return self._pace

    def takeover_shift_s(self) -> float:
        """Seconds added to every takeover delay: how far ``takeover_latencies``
        median decision latencies exceed the backup's own delay (0 for small models)."""
        return self._takeover_shift_s

    def _time_decision(self, now: float) -> None:
        samples = self.decision_latencies
        samples.append(now - self.computed_at)  # type: ignore[operator]
        del samples[: -self.config.decision_latency_samples]
        ordered = sorted(samples)
        config = self.config
        median = min(
            ordered[len(ordered) // 2], config.pace_max * config.decision_latency_nominal_s
        )
        self._pace = max(median / config.decision_latency_nominal_s, 1.0)
        self._takeover_shift_s = max(
            config.takeover_latencies * median - config.backup_delay_s, 0.0
        )

    def returning(self) -> frozenset[str]:
        """The nodes alive again in this node's view that have not contributed since:
        they rank nowhere and are not waited for (``__init__`` says why)."""
        return frozenset(self._returning)

    def _ready(self) -> frozenset[str]:
        return (self.alive - self._returning) | {self.node}

    def rank(self) -> int:
        """0 for the acting coordinator, 1 for the next ready voter, and so on in
        rotation order over the voters alive in this node's view and not returning
        (learners last)."""
        if self._rank is not None:
            return self._rank  # every arrival asks: computed once per step and view
        voters = self.voters
        if self.node not in voters:
            self._rank = len(voters)
            return self._rank
        ready = self._ready()
        first = self.step % len(voters)
        order = [voters[(first + k) % len(voters)] for k in range(len(voters))]
        self._rank = [v for v in order if v in ready].index(self.node)
        return self._rank

    def status(self, now: float) -> dict[str, object]:
        """What this leader waits for, for a node's ``/status`` (a cluster that never
        reached steady state is judged by these pages: chaos/node_status.py)."""
        return {
            "step": self.step,
            "rank": self.rank(),
            "computed": self.computed_at is not None,
            "deadline_in_s": None if self.deadline is None else round(self.deadline - now, 3),
            "proposed": self.proposed,
            "decided": self.decided,
            "starved": self.starved,
            "built": None if self.built is None else list(self.built),
            "arrived": sorted(self.arrived.get(self.step, ())),
            "usable": sorted(self._usable()),
            "alive": sorted(self.alive),
            "returning": sorted(self._returning),
            "pace": round(self._pace, 3),
        }

    def check_valid(self) -> None:
        """The leader's invariants (called after every rule of its stateful test)."""
        assert self.voters == tuple(sorted(self.voters))
        assert set(self.voters) <= set(self.members)
        for step in self.arrived:
            assert self.step <= step <= self.step + self.config.steps_ahead_max, step
        if self.computed_at is not None:
            assert self.node in self.arrived.get(self.step, ()), "own gradient not counted"
            assert self.deadline is not None or self.proposed or self.starved, (
                "a computed step with no timer"
            )
        else:
            assert self.deadline is None and not self.majority_armed and not self.starved
        if self.starved:  # it waits for contributions only while too few arrived
            assert not self.proposed
            assert len(self._usable()) < self.config.min_contributors
        if self.built is not None:
            assert self.proposed and self.computed_at is not None
            assert set(self.built) <= self.arrived.get(self.step, set()) | {self.node}
        assert len(self.decision_latencies) <= self.config.decision_latency_samples
        assert all(latency >= 0.0 for latency in self.decision_latencies)
        assert 1.0 <= self._pace <= self.config.pace_max
        assert self._takeover_shift_s >= 0.0
        assert self._returning <= self.alive and not self._left & self.alive
        assert self.node not in self._returning | self._left
        assert self.proposed or not self.decided, "a decided step is led by no one"
        if self.learnt:  # a step decided before this node got to it: no gradient, no lead
            assert self.decided and self.computed_at is None and not self.replaying

    # -- transitions (the whole table) ------------------------------------------------------

    def _on_step_began(self, event: StepBegan, now: float, actions: list) -> None:
        if event.step == self.step + 1 and self.computed_at is not None:
            self._time_decision(now)  # the step this node computed for moved on
        self.step = event.step
        self._rank = None
        self._waited = None
        self.voters = tuple(sorted(event.voters))
        self._voter_set = frozenset(self.voters)
        self.members = tuple(sorted(event.members))
        window = self.config.steps_ahead_max
        self.arrived = {
            s: c for s, c in self.arrived.items() if event.step <= s <= event.step + window
        }
        self.computed_at = None
        self.deadline = None
        self.majority_armed = False
        self.starved = False
        self.proposed = False
        self.built = None
        self.replaying = False
        self.learnt = self.decided = self.proposed = event.decided
        if event.decided:
            return  # nothing to lead or compute: only the bytes to fetch and apply
        stored = event.stored
        if stored is not None and stored.agg_fp in event.held and self.node in self.voters:
            self.proposed = True
            self.replaying = True
            actions.append(ProposeStored(step=event.step, value=stored))

    def _on_own(self, event: OwnContribution, now: float, actions: list) -> None:
        if event.step != self.step or self.computed_at is not None or self.learnt:
            return  # a gradient of a step this node has left, or that was decided
        self.computed_at = now
        self.arrived.setdefault(self.step, set()).add(self.node)
        if self.rank() == 0:
            self._arm(now + self.config.collect_s * self._pace)
            self._maybe_early(now, actions)
        else:
            self._arm(self._takeover_at())

    def _takeover_at(self) -> float:
        """When this node (rank >= 1, its gradient ready) proposes if the step is still
        undecided: rank 1 after the backup delay, later ranks staggered after it."""
        config = self.config
        rank = self.rank()
        delay = config.backup_delay_s
        if rank >= 2:
            delay = config.fallback_delay_s + config.fallback_rank_step_s * rank
        return self.computed_at + delay + self._takeover_shift_s  # type: ignore[operator]

    def _on_arrived(self, event: ContributionArrived, now: float, actions: list) -> None:
        step = event.step
        if not self.step <= step <= self.step + self.config.steps_ahead_max:
            return  # bounded: a contribution of a past step, or too far ahead
        got = self.arrived.get(step)
        if got is None:
            got = self.arrived[step] = set()
        got.add(event.sender)
        if event.sender in self._returning:
            # Ready again: it ranks (and is waited for) from now on, this step too.
            led = self._leads()
            self._returning.discard(event.sender)
            self._rerank(now, actions, led)
        elif event.step == self.step and self.computed_at is not None and self.rank() == 0:
            self._maybe_early(now, actions)
        if self.starved and step == self.step:
            self._build(actions)  # its time passed: it proposes once enough arrived

    def _on_view(self, event: ViewChanged, now: float, actions: list) -> None:
        led = self._leads()
        alive = frozenset(event.alive) - {self.node}
        back = alive & self._left
        self._left = (self._left | (self.alive - alive)) - alive
        self._returning = (self._returning & alive) | back
        self.alive = alive
        if (
            self.config.sharded_contributions
            and self.built is not None
            and not self.decided
            and not set(self.built) - {self.node} <= alive
        ):
            # A contributor of the build in flight left the view: its own shard died
            # with it, so no owner can aggregate that set (the owner's input wait, then
            # BuildFailed: 1.3-1.5 s in the bench's sharded pause cells).  Build again
            # without it now; a shell whose value is already proposed ignores this.
            self.proposed = False
            self.built = None
            self._build(actions)
        elif self.starved and self.config.sharded_contributions:
            # Its time came with too few usable contributions: a contributor back in
            # the view may make enough, as an arrival does.
            self._build(actions)
        self._rerank(now, actions, led)

    def _leads(self) -> bool:
        return self.computed_at is not None and not self.proposed and self.rank() == 0

    def _rerank(self, now: float, actions: list, led: bool) -> None:
        """The ranks changed (a view change, a returning node ready): arm or propose
        by the new rank; ``led``: this node was rank 0 of its computed step before."""
        self._rank = None
        self._waited = None
        if self.computed_at is None or self.proposed:
            return
        if self.rank() != 0:
            if led:
                # A node ranked before this one took the lead of a step this node was
                # leading: a returning node whose gradient arrived (it is up, its state
                # current) or one this node never saw before.  It can lead, so this
                # node waits as its new rank does, not as a coordinator (whose paced
                # bound it had armed: 7 s at 100M on the GPU) nor at once (a duel).
                self.deadline = None
                self._arm(self._takeover_at())
            return
        # Either the contributor waited for was declared dead, or the node that led
        # this step was: lead it now (or at the collect bound).
        if not self._maybe_early(now, actions):
            bound = self.computed_at + self.config.collect_s * self._pace
            if now >= bound:
                self._build(actions)
            else:
                self._arm(bound)

    def _on_decided(self, event: StepDecided, now: float, actions: list) -> None:
        if event.step == self.step:
            # Like a proposal made: no timer, no build (and a failed build of this
            # node's, still on its way back, re-arms nothing: _on_build_failed).
            self.decided = self.proposed = True
            self.starved = False

    def _on_build_failed(self, event: BuildFailed, now: float, actions: list) -> None:
        if event.step == self.step and self.proposed and not self.decided:
            got = self.arrived.get(self.step)
            left = (got or set()) - (set(event.missing) - {self.node})
            if got is not None and len(left & self._voter_set) > len(self.voters) // 2:
                # Left out only while a majority of the voters stays in: a shard owner
                # that lacks everyone's input is behind, not they (a smaller set could
                # not be aggregated or committed any better).
                got.intersection_update(left)
            self.proposed = False  # propose again with what arrives next
            self.built = None
            self._arm(now + self.config.straggler_grace_s * self._pace)

    def _on_tick(self, event: Tick, now: float, actions: list) -> None:
        if self.deadline is not None and now >= self.deadline and not self.proposed:
            self.deadline = None
            self._build(actions)

    # -- helpers ----------------------------------------------------------------------------

    def _arm(self, at: float) -> None:
        self.deadline = at if self.deadline is None else min(self.deadline, at)

    def _maybe_early(self, now: float, actions: list) -> bool:
        """Propose if every voter in the view contributed; whether it proposed."""
        if self.proposed:
            return False
        got = self.arrived.get(self.step, set())
        waited = self._waited
        if waited is None:  # the voters in this node's view: once per step and view
            waited = self._waited = self._ready() & self._voter_set
        if waited <= got:
            self._build(actions)
            return self.proposed
        voters = self._voter_set
        if not self.majority_armed and len(got & voters) > len(voters) // 2:
            self.majority_armed = True
            self._arm(now + self.config.straggler_grace_s * self._pace)
        return False

    def _usable(self) -> set[str]:
        """The contributions a proposal may name: members' (a node removed meanwhile
        may still have sent a gradient), and with sharded contributions only those of
        nodes in the view (a dead contributor's own shard died with it)."""
        usable = set(self.arrived.get(self.step, ())) & set(self.members)
        if self.config.sharded_contributions:
            usable &= self.alive | {self.node}
        return usable

    def _build(self, actions: list) -> None:
        contributors = tuple(sorted(self._usable()))
        if not contributors or self.proposed or self.computed_at is None:
            return
        # Fewer than the aggregation rule needs: no worker could build it.
        self.starved = len(contributors) < self.config.min_contributors
        if self.starved:
            return
        self.proposed = True
        self.built = contributors
        actions.append(
            BuildProposal(step=self.step, contributors=contributors, first=self.rank() == 0)
        )


_LEADER_HANDLERS = {
    StepBegan: StepLeader._on_step_began,
    OwnContribution: StepLeader._on_own,
    ContributionArrived: StepLeader._on_arrived,
    ViewChanged: StepLeader._on_view,
    BuildFailed: StepLeader._on_build_failed,
    StepDecided: StepLeader._on_decided,
    Tick: StepLeader._on_tick,
}


# --- Proposer: one proposal a step, from the leader's decision -----------------------------


class BuildValue(CoreAction, frozen=True, kw_only=True):
    """Aggregate exactly ``contributors``' gradients of ``step``; report the result with
    ``Proposer.built`` (or ``Proposer.build_failed``)."""

    step: int
    contributors: tuple[str, ...]


class Propose(CoreAction, frozen=True, kw_only=True):
    """Feed the commit core ``ProposeValue(step, value, first)``."""

    step: int
    value: StepValue
    first: bool = False


class Proposer:
    """The leader's actions turned into at most one proposal a step.

    A ``BuildProposal`` becomes a build of exactly its contributors (a later one for
    the same step replaces the build in flight: the leader left a dead contributor
    out); the build's result becomes the proposal, if it is the build asked last, the
    node has not proposed yet and its commit core is still at that step; a failed
    build goes back to the leader (``BuildFailed``).  A ``ProposeStored`` is proposed
    as it is.  Nothing is proposed while the node's step does not run (``core_step``
    None: it fetches the state, or joins).  (Issue 12: the runtime kept a ``proposed``
    flag and its build in flight, the simulator asked its commit core whether it had
    proposed; both now ask this.)  The value's configuration change is the caller's
    ``change_to_propose``, the one the commit core validates the value against."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.building: tuple[int, tuple[str, ...]] | None = None
        self.building_first = False
        self.proposed = False

    def step_began(self, step: int) -> None:
        self.step = step
        self.building = None
        self.building_first = False
        self.proposed = False

    def lead(self, action: LeaderAction, *, core_step: int | None) -> list[BuildValue | Propose]:
        """The leader's ``BuildProposal`` or ``ProposeStored`` for ``action.step``."""
        if core_step is None or action.step != core_step or action.step != self.step:
            return []  # the step moved on while the leader decided, or does not run
        if self.proposed:
            return []  # one proposal a step (a sharded rebuild after the value was built)
        if isinstance(action, ProposeStored):
            self.proposed = True
            self.building = None  # a build in flight is moot: its answer is not proposed
            return [Propose(step=action.step, value=action.value)]
        self.building = (action.step, action.contributors)
        self.building_first = action.first
        return [BuildValue(step=action.step, contributors=action.contributors)]

    def built(
        self,
        step: int,
        value_fp: str,
        contributors: Iterable[str],
        *,
        core_step: int | None,
        change: ConfigChangeRequest | None,
    ) -> list[Propose]:
        """An aggregate over ``contributors`` gave ``value_fp``: the proposal, if it is
        the build asked last and the step is still this node's to propose."""
        contributors = tuple(contributors)
        if self.building != (step, contributors) or self.proposed or core_step is None:
            return []
        self.building = None
        if core_step != step:
            return []
        self.proposed = True
        value = StepValue(agg_fp=value_fp, contributors=list(contributors), config_change=change)
        return [Propose(step=step, value=value, first=self.building_first)]

    def build_failed(
        self, step: int, contributors: Iterable[str], missing: Iterable[str]
    ) -> list[BuildFailed]:
        """The build of ``contributors`` could not run: if it was the one asked last,
        the leader proposes later without ``missing``."""
        if self.building is None or self.building[0] != step:
            return []
        if sorted(self.building[1]) != sorted(contributors):
            return []  # a replaced build's failure: the leader asked for another since
        self.building = None
        return [BuildFailed(step=step, missing=tuple(missing))]

    def check_valid(self) -> None:
        assert self.building is None or self.building[0] == self.step, "a build of another step"
        assert not (self.proposed and self.building is not None), "building after proposing"


# --- acceptor records and the vote floor ---------------------------------------------------


class Pruning(msgspec.Struct, frozen=True, kw_only=True):
    """Delete ``steps``' records, after writing ``floor`` durably if it rose."""

    steps: tuple[int, ...]
    floor: int


def prune_records(
    steps: Iterable[int], floor: int, *, config: NodeConfig = NODE_DEFAULTS, bugs: BugSet = NO_BUGS
) -> Pruning:
    """Keep the ``records_kept`` newest acceptor records; the floor (the highest
    pruned step) goes to disk before the records do, so a node whose state later
    rolls back below it does not vote on those steps again (StepCommit's and
    Rejoin's ``vote_floor``).  ``no-vote-floor``: prune, but never raise the floor."""
    ordered = sorted(steps)
    pruned = tuple(ordered[: max(0, len(ordered) - config.records_kept)])
    if not pruned or "no-vote-floor" in bugs:
        return Pruning(steps=pruned, floor=floor)
    return Pruning(steps=pruned, floor=max(floor, pruned[-1]))


class AggregatesKept(msgspec.Struct, frozen=True, kw_only=True):
    from_step: int  # every held aggregate of this step and later stays
    pinned: tuple[tuple[int, str], ...]  # (step, value fp): stays although older


def aggregates_to_keep(
    accepted: Mapping[int, str], applied_step: int, *, config: NodeConfig = NODE_DEFAULTS
) -> AggregatesKept:
    """Which aggregate bytes a node keeps durably once it applied ``applied_step``;
    ``accepted`` maps the step of each acceptor record it keeps to the value it
    accepted there.

    Every aggregate of the last ``aggregates_kept_steps`` steps and later (for lagging
    peers), and the accepted value of every record kept, however old.  Why the
    second: when a majority restarts from checkpoints older than the steps it
    decided (forced restarts after a partition, a crash of several nodes), a retry
    must re-propose each recorded value (Paxos: the highest accepted one), and only
    an acceptor that kept the bytes can serve them.  With the bytes gone no value
    can be chosen and commits stop for good (explore, 4 nodes, seed 0: 26 s without
    a commit once the window was 4 steps and the checkpoints 10 apart).  Records
    are kept ``records_kept`` steps, so a checkpoint interval up to that many steps
    is covered."""
    return AggregatesKept(
        from_step=applied_step + 1 - config.aggregates_kept_steps,
        pinned=tuple(sorted(accepted.items())),
    )


def in_commit_window(step: int, core_step: int, config: NodeConfig = NODE_DEFAULTS) -> bool:
    """Whether ``step`` lies in the window of a commit core at ``core_step``: its own
    step and ``steps_ahead_max`` after it (what it takes a ``HoldsAggregate`` for, and
    what a node remembers of peers' values)."""
    return core_step <= step <= core_step + config.steps_ahead_max


# --- membership and rejoin decisions ----------------------------------------------------------


def change_to_propose(
    change: ConfigChangeRequest | None, core: cm.StepCommit
) -> ConfigChangeRequest | None:
    """The membership core's next change, if the commit core's configuration (the one
    the value is validated against) agrees it applies."""
    if change is None:
        return None
    if change.change == "add" and change.peer not in core.members:
        return change
    if change.change == "promote" and change.peer in core.learners:
        return change
    if change.change == "remove" and change.peer in core.members and core.voters != (change.peer,):
        return change
    return None


def peer_ahead(
    own_step: int,
    peer_steps: Mapping[str, int],
    alive: Iterable[str],
    gap_steps: int,
    members: Iterable[str],
) -> str | None:
    """A live member whose messages carried a step at least ``gap_steps`` past this
    node's (the commit core's ``state_transfer_gap_steps``): catching up step by step
    would lag, one state transfer brings the node level.  The furthest ahead (ties:
    the greatest name) is the evidence for ``rejoin_sources``.  The commit core says
    the same of a message it is handed (``Behind``); this covers the messages it
    buffers or is not handed (a node fetching the state) and a step the node reaches
    after an apply while a peer it heard from is already further on.  ``peer_steps``:
    the highest ``running_step`` of each peer's messages.

    Only members of the node's configuration count, as only theirs reach the commit
    core: a peer removed here is still in the detector's view for a while, and its
    claim of a later step is either stale or (it was added back) shown by the
    members that added it too.  (Issue 12, session 17: the runtime checked after a
    removed peer's refused message and rejoined from it, the simulator did not.)"""
    threshold = own_step + gap_steps
    # Called after every commit-core event of both shells and nearly always None:
    # no peer's step reaches the threshold, and then the view need not be looked at.
    if not peer_steps or max(peer_steps.values()) < threshold:
        return None
    alive_set = set(alive).intersection(members)
    ahead = [(s, p) for p, s in peer_steps.items() if p in alive_set and s >= threshold]
    return max(ahead)[1] if ahead else None


def running_step(message: object) -> int | None:
    """The step a peer's message shows it runs, for ``peer_ahead`` (None: none).

    Only the commit protocol's messages say so (a peer sends those of the step it
    runs).  A ``StateOffer`` carries a committed state, not the step its sender runs,
    and one arriving after the fetch that asked for it ended is no evidence of being
    behind; a ``LeaveConfirmed`` names the step of a removal.  Aggregate requests
    travel between workers in the runtime and never reach the step's decisions.
    (Issue 12: the runtime counted offers, the simulator aggregate requests.)"""
    if isinstance(message, cm.CommitMessage.__args__):  # type: ignore[attr-defined]
        return message.step  # type: ignore[attr-defined]
    return None


def note_peer_step(peer_steps: dict[str, int], peer: str, step: int) -> None:
    """Keep the highest step ``peer`` was seen running (``peer_ahead`` reads it): from
    its commit messages (``running_step``) and from a ``Behind`` (a Nack's
    ``sender_step`` may be past the message's own step).  Issue 12: the simulator kept
    a ``Behind``'s step and the runtime did not."""
    if step > peer_steps.get(peer, -1):
        peer_steps[peer] = step


def rejoins_at_start(*, first_start: bool, joining: bool) -> bool:
    """Whether a node whose process just started fetches the cluster's state before
    its first step.

    Every restart does (DESIGN L3: a restarted node catches up by state transfer from
    a live peer, its local checkpoint as the fallback), whether or not it ever applied
    a step: the cluster may be far ahead, and one transfer is cheaper than learning
    that from the first message of a later step.  The process's first start (nothing
    on its disk: incarnation 1 in the runtime) does not: every node derives the
    initial parameters from the seed, so a genesis exchange would cost a round trip
    and prove nothing; a fresh node that is behind learns it from the commit core
    (``Behind``) or ``peer_ahead`` and rejoins then.  A joiner is not a member yet:
    it rejoins once a member shows it was added (its own path)."""
    return not first_start and not joining


class RejoinStart(msgspec.Struct, frozen=True, kw_only=True):
    """The inputs of a rejoin core (``rejoin.Rejoin`` and its ``Begin``)."""

    sources: tuple[str, ...]  # whom it may ask (rejoin_sources)
    cluster_step: int  # the cluster's committed step as far as this node knows (-1: none)
    genesis_param_fp: str  # "" unless the initial parameters are a valid outcome


def rejoin_start(
    node: str,
    *,
    alive: Iterable[str],
    members: Iterable[str],
    peer_steps: Mapping[str, int],
    own_step: int,
    evidence: str | None,
    at_genesis: bool,
    genesis_param_fp: str,
    joining: bool = False,
    newest_members: Iterable[str] = (),
) -> RejoinStart:
    """How a rejoin starts: ``evidence`` is the peer whose message showed this node is
    behind (None: the process is starting).

    The cluster's committed step: one below the step the evidence peer's messages
    carried (a peer sends messages of the step it runs, so it committed the one
    before), else one below the highest step any peer's did.  Genesis is a valid
    outcome only for a node that holds the initial parameters and has committed
    nothing (``at_genesis``), and never for a joiner, which was added at a committed
    step: then a peer's genesis offer ends the rejoin at once, and when every peer
    restarted together (a partition that every live node was declared dead in) the
    initial state is the one state they can start from.

    ``members``: those of the configuration the node runs under (its state's);
    ``newest_members``: those of the newest configuration it recorded, which a
    restart from an older checkpoint knows of too.  Either may hold the state: a
    restarted node whose checkpoint predates a peer's add asked only the members its
    checkpoint named, found none alive, fell back to that checkpoint, and ran under
    its old configuration, refusing the newer member, which declared it dead
    (explore --leaves, 3 nodes, seed 1: S4)."""
    members = tuple(dict.fromkeys((*members, *newest_members)))
    if evidence is not None:
        heard = peer_steps.get(evidence, -1)
    else:
        heard = max(peer_steps.values(), default=-1)
    return RejoinStart(
        sources=rejoin_sources(node, alive, members, peer_steps, own_step, evidence, joining),
        cluster_step=max(heard - 1, -1),
        genesis_param_fp=genesis_param_fp if at_genesis and not joining else "",
    )


def rejoin_sources(
    node: str,
    alive: Iterable[str],
    members: Iterable[str],
    peer_steps: Mapping[str, int],
    own_step: int,
    evidence: str | None,
    joining: bool = False,
) -> tuple[str, ...]:
    """Who a rejoin may ask (the rejoin core orders them by rendezvous hashing).

    ``evidence``: the peer whose message showed this node is behind (None: the node
    is starting, and every live member may serve).  Otherwise the live members known
    to be ahead of this node (their messages carried a later step), else the
    evidence peer, alive whatever this node's detector believes (after a partition
    each side may think the other dead).  Only peers known to be ahead: the rejoin
    core takes any offer above the vote floor, so a peer at this node's own step
    would hand it the state it has, and two such nodes rejoined from each other
    every second (real lost-vote run: 15 s without a commit while n2 was ahead).
    A joiner asks the member that showed it was added: that one has committed the
    add."""
    if joining and evidence is not None:
        return (evidence,)
    member_set = set(members)
    live = tuple(p for p in alive if p != node and p in member_set)
    if evidence is None:
        return live
    ahead = tuple(p for p in live if peer_steps.get(p, -1) > own_step)
    if ahead:
        return ahead
    return (evidence,) if evidence != node else live


class StateFetch:
    """Whether the node runs its step or fetches the cluster's state, and when a failed
    fetch is tried again.

    While a rejoin runs, and until a failed one is retried, the node's step is
    *suspended*: its commit core (the one of the step it fell behind at) takes no
    message, tick, view or proposal, and the actions of its last batch after the
    ``Behind`` that began the fetch are dropped.  The state it installs restarts the
    core at the installed step; until then a round of the abandoned step is noise to
    peers that are past it, and a proposal there could only duel them.  (Issue 12: the
    runtime's step driver kept feeding its old core during a rejoin -- a view change
    made it propose step 0 while it fetched step 2's state -- and retried a failed
    rejoin at its next poll, the simulator after ``rejoin_retry_s``; the agreement
    test's ``ahead`` and ``state`` draws found both.)

    A failed fetch (no source answered and nothing local is usable) is retried
    ``rejoin_retry_s`` later; a joiner's is not: its enrolment asks to join again
    (``Enrolment.tick``).  Times are the node's clock."""

    def __init__(self, config: NodeConfig = NODE_DEFAULTS):
        self._config = config
        self.fetching = False
        self.retry_at: float | None = None

    @property
    def steps(self) -> bool:
        """Whether the node's commit core runs (not while fetching or waiting to retry)."""
        return not self.fetching and self.retry_at is None

    def begun(self) -> None:
        self.fetching = True
        self.retry_at = None

    def failed(self, now: float, *, joining: bool) -> float | None:
        """The fetch failed: when to begin the next one (None: the joiner's enrolment
        decides)."""
        self.fetching = False
        self.retry_at = None if joining else now + self._config.rejoin_retry_s
        return self.retry_at

    def retry_due(self, now: float) -> bool:
        """Whether a failed fetch's retry is due now (the caller begins it)."""
        return self.retry_at is not None and now >= self.retry_at

    def installed(self) -> None:
        """A state was installed: the step runs again."""
        self.fetching = False
        self.retry_at = None

    def check_valid(self) -> None:
        assert not (self.fetching and self.retry_at is not None), "fetching and waiting at once"


def replica_peers(
    seed: int, node: str, voters: Iterable[str], members: Iterable[str], wanted: int
) -> tuple[str, ...]:
    """The peers that hold this node's checkpoint replicas: chosen by rendezvous
    hashing over the other members, so the same peers keep receiving them (each keeps
    the newest) and different nodes spread over different holders.  ``wanted`` < 0:
    (voters - 1) // 2, the most crashes a majority quorum tolerates, so the node plus
    its replicas are f + 1 copies and some copy outlives any f crashes."""
    if wanted < 0:
        wanted = (len(tuple(voters)) - 1) // 2
    others = tuple(m for m in members if m != node)
    return rj.rendezvous_order(seed, node, 0, others)[:wanted]


# --- Enrolment: how a node comes into and goes out of the membership ----------------------


class SendJoinRequest(CoreAction, frozen=True, kw_only=True):
    """Ask these voters to add this node (``messages.JoinRequest``)."""

    to: tuple[str, ...]


class SendLeaveNotice(CoreAction, frozen=True, kw_only=True):
    """Ask these voters to remove this node (``messages.LeaveNotice``)."""

    to: tuple[str, ...]


class RequestRemoval(CoreAction, frozen=True, kw_only=True):
    """Feed this node's own removal to its membership core (``LeaveRequested``)."""


class FetchStateFrom(CoreAction, frozen=True, kw_only=True):
    """A member treats this joiner as one: its add is committed there; fetch the
    state from it (a rejoin from ``peer``)."""

    peer: str


class StartDetector(CoreAction, frozen=True, kw_only=True):
    """Start heartbeating: a member now watches this node (before its grace ends)."""


class StopNode(CoreAction, frozen=True, kw_only=True):
    """Stop this node's process; ``join_failed``: nobody added it in time."""

    reason: str
    join_failed: bool = False


class ConfirmRemoval(CoreAction, frozen=True, kw_only=True):
    """Tell ``peer`` its removal committed (``messages.LeaveConfirmed`` at
    ``removal_step``): a leaver waits for it to stop."""

    peer: str


class RestartAsJoiner(CoreAction, frozen=True, kw_only=True):
    """End this process and start a new incarnation, which asks to join: the node
    learned it was removed while it ran as a member (``Enrolment.removal_confirmed``).
    The shell records the removal on disk first, as for a leaver's stop."""

    reason: str


EnrolmentAction = (
    SendJoinRequest
    | SendLeaveNotice
    | RequestRemoval
    | FetchStateFrom
    | StartDetector
    | StopNode
    | RestartAsJoiner
    | ConfirmRemoval
)


# How long a joiner keeps asking before it gives up and exits: long enough for a
# loaded cluster to commit the add (a few steps of a few seconds), short enough that a
# joiner nobody answers does not wait for ever.  Both shells' default (the runtime's
# ``[node] join_timeout_s``).
JOIN_TIMEOUT_S = 120.0
# A clean leave waits this long for the step that removes the node to commit, then
# stops anyway (the others then hold a crashed member until it is removed -- what a
# crash would leave).  A removal needs one commit: a few seconds even under load.
LEAVE_TIMEOUT_S = 30.0


def commit_roles(
    voters: tuple[str, ...], learners: tuple[str, ...], node: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The voters and learners a node's commit core is built with for a configuration:
    the configuration's, plus the node itself as a learner when it is not in it (a
    joiner, or a leaver whose removal came with a state).  That placeholder core never
    votes, and the shell runs no step on it until the node is added."""
    if node in voters or node in learners:
        return voters, learners
    return voters, tuple(sorted((*learners, node)))


def removal_step(configs: mb.Configurations, peer: str) -> int | None:
    """The step at which this node committed ``peer``'s removal, if ``peer`` is out of
    the newest configuration it knows and an earlier one held it (None otherwise: a
    stranger, a member, or a removal older than the configurations kept).  A member
    sends it as ``LeaveConfirmed`` when the removal commits and to every notice from
    a node already removed, so a leaver that missed that step stops."""
    entries = configs.entries
    if peer in entries[-1].members:
        return None
    for before, after in zip(reversed(entries[:-1]), reversed(entries[1:]), strict=True):
        if peer in before.members:
            return after.step
    return None


def heartbeats_stranger(peer: str, reason: str) -> bool:
    """Whether ``peer``, whose message was refused (``RemoteProtocolError.reason``),
    is a stranger this node's detector heartbeats (``detector.StrangerHeard``):
    refused as a non-member's.  A node this node removed is one too (it is also told
    so, ``RemovalAnswers``): it may have been added again in a configuration this
    node has not learnt (explore --leaves, 6 nodes, seed 2).  Those heartbeats are
    flagged (``Heartbeat.stranger``): a removed leaver's next process, a joiner, took
    the ones its last heartbeats had started for the evidence of its add (explore
    --leaves, 3 nodes, seed 1)."""
    return reason == "unknown-peer" and bool(peer)


class RemovalAnswers:
    """When a member answers a node it removed that still talks to it as a member.

    A node whose removal committed while its process was down or fetching a state
    (churn restarts a leaver before the removal commits) starts again as a member; it
    never sees the removing step, and the members refuse its heartbeats, gossip and
    commit traffic as a non-member's.  Each refusal of a removed peer's traffic may be
    answered with ``LeaveConfirmed(step)`` (``Enrolment.removal_confirmed`` makes the
    node restart as a joiner), at most once per ``removal_answer_interval_s`` a peer:
    its heartbeats alone come every few tens of ms.  Pure: ``now`` comes in."""

    def __init__(self, config: NodeConfig = NODE_DEFAULTS):
        self.interval_s = config.removal_answer_interval_s
        self.answered_at: dict[str, float] = {}

    def refused(self, peer: str, reason: str, configs: mb.Configurations, now: float) -> int | None:
        """``peer``'s message was refused (``RemoteProtocolError.reason``): the removal
        step to tell it, or None (not refused as a non-member's, a stranger, a member,
        or answered less than an interval ago)."""
        if reason != "unknown-peer" or not peer:
            return None
        step = removal_step(configs, peer)
        if step is None:
            return None
        last = self.answered_at.get(peer)
        if last is not None and now - last < self.interval_s:
            return None
        if len(self.answered_at) >= mb.CONFIGS_KEPT:
            # removal_step only names peers removed within the configurations kept, so
            # this holds at most CONFIGS_KEPT peers; forget answers no longer limiting.
            self.answered_at = {
                p: at for p, at in self.answered_at.items() if now - at < self.interval_s
            }
        self.answered_at[peer] = now
        return step

    def check_valid(self) -> None:
        assert len(self.answered_at) <= mb.CONFIGS_KEPT + 1


# ``state_to_serve``: what a node answers a peer's ``StateRequest`` with.
SERVE_GENESIS = "genesis"  # StateOffer(step=GENESIS_STEP, initial fingerprint), no bytes
SERVE_STATE = "state"  # its last applied step's state: the offer, then the bytes


def state_to_serve(*, joining: bool, at_genesis: bool, fetching: bool) -> str | None:
    """What a node answers a ``StateRequest`` with (None: nothing; the requester's
    offer timeout moves it on).  A joiner holds nobody's committed state.  A node that
    has committed nothing says so at once, even while it fetches itself (DRIVERS.md:
    every node restarted together after a partition starts from genesis).  A node
    fetching the state (``StateFetch.steps`` false) stays silent otherwise: the state
    it holds is being replaced, and it fell behind, so it would hand the requester a
    state the requester must fetch again (issue 12: the runtime served it, the
    simulator did not)."""
    if joining:
        return None
    if at_genesis:
        return SERVE_GENESIS
    return None if fetching else SERVE_STATE


def state_offer(
    node: str, *, step: int, param_fp: str, nbytes: int, configs: mb.Configurations
) -> StateOffer:
    """The offer of this node's state of ``step`` (``GENESIS_STEP``: the initial
    parameters, no bytes follow), with the configuration that state runs under: a
    joiner is added only by a state whose configuration names it, and a member's
    restart runs under the configuration of the state it installed."""
    configuration = configs.after(step)
    return StateOffer(
        sender=node,
        step=step,
        param_fp=param_fp,
        nbytes=nbytes,
        voters=list(configuration.voters),
        learners=list(configuration.learners),
        config_step=configuration.step,
    )


def state_bytes_wait(rejoin: rj.Rejoin, source: str) -> bool:
    """Whether state bytes from ``source`` wait for their offer instead of going to the
    rejoin core now: they came before the rejoin holds an offer from that source.  The
    offer travels on the control channel and the bytes on the bulk channel, so the
    bytes may overtake it (a latency fault on the control link); handed over now, the
    rejoin core would refuse them (``order``) and the transfer would be lost to the
    fetch timeout.  The latest transfer waits, one at most; the next ``RequestState``
    forgets it (its bytes belong to an attempt that is over).  (Issue 12: the
    simulator kept such bytes, the runtime handed them to the core, which refused
    them; the agreement test's drops across a restart told them apart.)"""
    return rejoin.offer is None or rejoin.source != source


def state_from_peer(source: str) -> bool:
    """Whether a rejoin's state came from a peer (its configuration is recorded as
    this node's newest), not from this node's own disk or the initial parameters."""
    return source not in ("checkpoint", "local", "genesis")


# ``OfferedConfiguration.refused``: drop the offer (a malformed configuration), or
# try the next source (it has not committed this joiner's add yet).
BAD_OFFER = "offer_bad_configuration"
NOT_ADDED_THERE = "not added there"


class OfferedConfiguration(msgspec.Struct, frozen=True, kw_only=True):
    """What a state offer's configuration means to the node that asked."""

    configuration: mb.Configuration | None = None  # None: the offer named none
    refused: str = ""  # BAD_OFFER or NOT_ADDED_THERE; "" takes the offer


def offered_configuration(
    voters: Iterable[str],
    learners: Iterable[str],
    config_step: int,
    *,
    node: str,
    joining: bool,
) -> OfferedConfiguration:
    """The configuration a ``StateOffer`` carries (the one its state runs under), or
    why the offer is refused: voters and learners that overlap are malformed; a
    joiner asks a source that has not added it yet for nothing it can use."""
    voters, learners = tuple(sorted(voters)), tuple(sorted(learners))
    if not voters:
        return OfferedConfiguration()  # an offer without one (genesis, an older peer)
    if set(voters) & set(learners):
        return OfferedConfiguration(refused=BAD_OFFER)
    configuration = mb.Configuration(step=config_step, voters=voters, learners=learners)
    if joining and node not in configuration.members:
        return OfferedConfiguration(refused=NOT_ADDED_THERE)
    return OfferedConfiguration(configuration=configuration)


class Enrolment:
    """How a node comes into the membership (a join) and goes out (a clean leave).

    A joiner is not a member: it asks the voters to add it every ``join_retry_s``
    until a member treats it as one (that member's heartbeats or commit traffic
    reach it: the add is committed there), then fetches the state from that member
    and is a member once the state it installs names it; it gives up after
    ``join_timeout_s``, state transfer included.  A joiner takes no part in others'
    joins and leaves (``takes_requests``): it holds no committed configuration.

    A clean leave asks the voters to remove this node through a committed step,
    repeating its notice every ``leave_retry_s``, keeps voting until the removal
    commits, and stops then or after ``leave_timeout_s``.  A node that is not a
    member (or still joining), or the last voter, has nothing to be removed from
    and stops at once.  Pure: ``now`` comes in; the actions are performed by the
    shell (sends, the membership feed, the rejoin, the stop)."""

    def __init__(
        self,
        *,
        joining: bool,
        now: float,
        join_timeout_s: float,
        leave_timeout_s: float,
        config: NodeConfig = NODE_DEFAULTS,
    ):
        check_positive(join_timeout_s, "Enrolment.join_timeout_s")
        check_positive(leave_timeout_s, "Enrolment.leave_timeout_s")
        self.config = config
        self.join_timeout_s = join_timeout_s
        self.leave_timeout_s = leave_timeout_s
        self.joining = joining
        self.join_started = now
        self.next_join_request = now
        self.evidence_from: str | None = None  # a member that treats this node as one
        # The member whose evidence started this joiner's detector (None: a member, or
        # no evidence yet); ``removal_confirmed`` from it voids that evidence.
        self.evidence_source: str | None = None
        self.leaving: str | None = None  # the reason of a clean leave in progress
        self.leave_started = now
        self.next_leave_notice = now

    @property
    def takes_requests(self) -> bool:
        """Whether others' join and leave requests are fed to this node's membership."""
        return not self.joining

    def evidence(self, peer: str, members: Iterable[str]) -> list[EnrolmentAction]:
        """``peer`` sent this node heartbeats or commit traffic."""
        if not self.joining or peer not in set(members):
            return []
        first = self.evidence_from is None and self.evidence_source is None
        self.evidence_from = peer
        if first:
            self.evidence_source = peer
        return [StartDetector()] if first else []

    @property
    def held_as_member(self) -> bool:
        """Whether this joiner's detector runs because a member's traffic showed it
        holds this node as one (``evidence``): the members then watch it, and it
        watches them (``NodeMembership.restart_at``), even after an install whose
        configuration predates its add."""
        return self.joining and self.evidence_source is not None

    def installed(self, *, member: bool, from_peer: bool) -> list[EnrolmentAction]:
        """A state was installed; ``member``: its configuration names this node;
        ``from_peer``: a peer sent it (not this node's checkpoint).  A leaver whose
        installed state no longer names it was removed: it stops.  A joiner is added
        only by a peer's state: its own checkpoint names it from before its removal
        (explore --leaves, 3 nodes, seed 5: a joiner whose fetch fell back to its
        checkpoint took itself for a member and declared a member dead)."""
        if not member and self.leaving is not None:
            return [StopNode(reason=f"{self.removed_reason()}: removed (installed state)")]
        if self.joining and not from_peer:
            return []
        was_joining, self.joining = self.joining, not member
        if member:
            # Consumed: a later loss of membership needs new evidence.
            self.evidence_from = self.evidence_source = None
        return [StartDetector()] if member and was_joining else []

    def begin_leave(
        self, reason: str, now: float, *, member: bool, last_voter: bool
    ) -> list[EnrolmentAction]:
        if self.joining or not member or last_voter:
            return [StopNode(reason=reason)]  # nothing to remove, or the last voter
        if self.leaving is None:
            self.leaving = reason
            self.leave_started = now
            self.next_leave_notice = now
        return [RequestRemoval()]

    def removal_confirmed(
        self, peer: str, members: Iterable[str], *, step: int, recorded: bool
    ) -> list[EnrolmentAction]:
        """``peer``, a member of the newest configuration this node knows, says it
        committed this node's removal at ``step`` (``messages.LeaveConfirmed``).  A
        leaver stops.  A member that is not leaving missed its own removal -- a
        leaver's process restarted before the step that removes it committed, which
        the new process never saw -- and restarts as a joiner when the removal was
        news to it (``recorded``: ``NodeMembership.removal_confirmed`` took it).  Left
        running as a member, it watched peers that no longer heartbeat it and declared
        them all dead (explore --leaves, 3 nodes, seed 3: S4).  Anything else (a
        joiner, an older removal this node has since been re-added after) is ignored."""
        if not self.confirms_removal(peer, members):
            return []
        if self.leaving is not None:
            return [StopNode(reason=f"{self.leaving}: removal confirmed by {peer}")]
        if self.joining:
            if peer != self.evidence_source:
                return []
            # Its heartbeats, which started this joiner's detector, came from before it
            # learned this node's removal: no add was committed there, and the
            # detector watches members that will never heartbeat it (explore --leaves,
            # 3 nodes, seed 5).  A fresh process waits for real evidence.
            return [
                RestartAsJoiner(
                    reason=f"{peer} treated this joiner as a member before it learned of "
                    f"its removal at step {step}: joining again"
                )
            ]
        if not recorded:
            return []
        return [
            RestartAsJoiner(
                reason=f"removed from the configuration at step {step} (confirmed by "
                f"{peer}) while running as a member: joining again"
            )
        ]

    def configuration_committed(
        self, step: int, change: ConfigChangeRequest, *, node: str
    ) -> list[EnrolmentAction]:
        """``change`` committed at ``step`` (after the shell fed it to its membership
        core): a removed peer is told so; this node, removed, stops (its commit core
        takes no part from here: ``commit._advance``)."""
        if change.change != "remove":
            return []
        if change.peer != node:
            return [ConfirmRemoval(peer=change.peer)]
        return [StopNode(reason=f"{self.removed_reason()}: removed at step {step}")]

    def confirms_removal(self, peer: str, members: Iterable[str]) -> bool:
        """Whether ``peer``'s ``LeaveConfirmed`` counts: ``peer`` is a member of the
        newest configuration this node knows.  The shell then records the removal
        (``NodeMembership.removal_confirmed``: news only to a member) before acting."""
        return peer in set(members)

    def removed_reason(self) -> str:
        """Why this node stops once its removal committed."""
        return self.leaving or "removed from the configuration by the cluster"

    def tick(
        self,
        now: float,
        *,
        voters: Iterable[str],
        join_voters: Iterable[str],
        fetching: bool,
    ) -> list[EnrolmentAction]:
        """What is due: ``voters`` are the current step's (a leave's notice),
        ``join_voters`` the latest configuration's (a join request); ``fetching``: a
        state transfer is under way (a joiner's still counts against its timeout)."""
        actions: list[EnrolmentAction] = []
        if self.leaving is not None:
            if now - self.leave_started > self.leave_timeout_s:
                return [
                    StopNode(
                        reason=f"{self.leaving}: removal not committed within "
                        f"{self.leave_timeout_s}s; stopping as a member"
                    )
                ]
            if now >= self.next_leave_notice:
                self.next_leave_notice = now + self.config.leave_retry_s
                actions.append(SendLeaveNotice(to=tuple(voters)))
        if not self.joining:
            return actions
        if now - self.join_started > self.join_timeout_s:
            return [
                StopNode(reason=f"join: not added within {self.join_timeout_s}s", join_failed=True)
            ]
        if fetching:
            return actions
        if self.evidence_from is not None:
            peer, self.evidence_from = self.evidence_from, None
            return [*actions, FetchStateFrom(peer=peer)]
        if now >= self.next_join_request:
            self.next_join_request = now + self.config.join_retry_s
            actions.append(SendJoinRequest(to=tuple(join_voters)))
        return actions

    def next_deadline(self, *, fetching: bool) -> float | None:
        """When ``tick`` next has something to do (None: nothing is under way);
        ``fetching`` as for ``tick`` (a joiner's requests pause while it fetches)."""
        due: list[float] = []
        if self.leaving is not None:
            due += [self.next_leave_notice, self.leave_started + self.leave_timeout_s]
        if self.joining:
            due.append(self.join_started + self.join_timeout_s)
            if not fetching:
                due.append(self.next_join_request)
            if not fetching and self.evidence_from is not None:
                # A member's evidence waits for the fetch under way to end: once it has
                # (failed), the next fetch is due at once.  Any past time says so; the
                # runtime's loop polls at every input anyway, the simulator arms its
                # timer by this (the agreement test's ``state`` draws: a joiner's
                # refused offer, then one shell fetched again at once, one a second on).
                due.append(self.join_started)
        return min(due, default=None)

    def check_valid(self) -> None:
        """Invariants its stateful tests call after every rule."""
        assert not (self.joining and self.leaving is not None), "a joiner cannot be leaving"
        assert self.joining or self.evidence_source is None, "evidence outlived the join"
        assert self.next_join_request >= self.join_started
        assert self.next_leave_notice >= self.leave_started or self.leaving is None


# --- incarnations --------------------------------------------------------------------------

# A node's first process is incarnation 1 in both shells; 0 means "none yet" (what a
# peer holds for a node it never heard, what the runtime reads with no file on disk).
FIRST_INCARNATION = 1


def next_incarnation(highest_used: int) -> int:
    """A starting process's incarnation: one above every incarnation the node used
    (``highest_used``; 0 when it used none), so its peers tell it from its past lives
    (SWIM).  The runtime persists the result before it says anything to a peer."""
    check_count(highest_used, "next_incarnation(highest_used)")
    return max(highest_used, FIRST_INCARNATION - 1) + 1


def is_first_start(incarnation: int) -> bool:
    """The node's first process: nothing on its disk, so nothing to rejoin from and
    no failure of its own to count (``rejoins_at_start``, ``Checkpointing``)."""
    return incarnation <= FIRST_INCARNATION


# --- checkpoints: when the node writes one -------------------------------------------------


class CheckpointConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When to checkpoint (``checkpoint_policy``), defined once: the runtime's
    ``[step] checkpoint_*`` settings and the simulator's workload build one."""

    # "fixed": every ``every_steps`` committed steps; "young-daly": sqrt(2 C M) from
    # the measured write cost C and the failures this node observed (declared deaths
    # and its own restarts), clamped to [min_interval_s, max_interval_s].
    policy: str = "fixed"
    # Committed steps between two checkpoints (0: only when asked).
    every_steps: int = 50
    # Young-Daly: the MTBF assumed before any failure was seen (one pseudo-failure, so
    # a quiet start does not mean "never checkpoint"), the window failures are counted
    # over, and the interval's clamp.  An hour is the order of a preemptible cloud
    # node's lifetime.
    prior_mtbf_s: float = 3600.0
    window_s: float = 3600.0
    min_interval_s: float = 10.0
    max_interval_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.policy not in ("fixed", "young-daly"):
            raise LocalProtocolError(
                f"CheckpointConfig.policy {self.policy!r}: choose fixed or young-daly"
            )
        check_count(self.every_steps, "CheckpointConfig.every_steps")
        for name in ("prior_mtbf_s", "window_s", "min_interval_s", "max_interval_s"):
            check_positive(getattr(self, name), f"CheckpointConfig.{name}")
        if self.min_interval_s > self.max_interval_s:
            raise LocalProtocolError(
                "CheckpointConfig.min_interval_s must not exceed max_interval_s"
            )


CHECKPOINT_DEFAULTS = CheckpointConfig()


class Checkpointing:
    """When this node checkpoints: the checkpoint-policy core and the inputs both
    shells owe it.  Every commit is ``StepCommitted`` (a checkpoint is written only at
    a step boundary); every peer this node declares dead, and its own restart, is a
    ``FailureObserved`` (the failure rate Young-Daly adapts to); the time from asking
    the worker for a write (``committed`` answering a write, or ``forced``) to its
    completion (``done``) is the measured ``CheckpointCost``.  Pure: ``now`` comes in."""

    def __init__(self, config: CheckpointConfig, now: float, *, restarted: bool):
        self.config = config
        self.policy: cp.FixedInterval | cp.YoungDaly | None
        if config.policy == "young-daly":
            self.policy = cp.YoungDaly(
                prior_mtbf_s=config.prior_mtbf_s, window_s=config.window_s,
                min_interval_s=config.min_interval_s, max_interval_s=config.max_interval_s,
                start_s=now,
            )  # fmt: skip
        elif config.every_steps > 0:
            self.policy = cp.FixedInterval(every_steps=config.every_steps)
        else:
            self.policy = None  # only when asked
        self.failures_observed = 0
        self.writes_requested = 0
        self.writes_failed = 0
        self.last_failure = ""
        self.last_reason = ""
        self.last_cost_s: float | None = None
        self._asked_at: float | None = None
        if restarted:
            self.failure(now)  # this node's own restart is a failure

    def committed(
        self, step: int, now: float, *, changes_configuration: bool = False
    ) -> cp.WriteCheckpoint | None:
        """Step ``step`` committed: the write to ask the worker for, if one is due.

        A step whose value changes the configuration is written at once, whatever the
        policy's interval (unless checkpoints are off): a restart that falls back to a
        checkpoint from before it runs under the older configuration, and when the
        change removed voters it cannot commit again the steps it lost -- their
        quorum is gone -- while the newest configuration's majority is alive (explore
        --leaves, 3 nodes, seed 2: the last voter, restarted on its step-0 checkpoint,
        re-ran steps 1-3 and stalled at step 4, whose other voter had left: L2).
        Joins and leaves come one at a time, so this is one write per change."""
        if self.policy is None:
            return None
        actions = self.policy.handle(cp.StepCommitted(step=step), now)
        if changes_configuration:
            reason = f"configuration change at step {step}"
            self._asked(now, reason)
            return cp.WriteCheckpoint(step=step, reason=reason)
        if not actions:
            return None
        self._asked(now, actions[0].reason)
        return actions[0]

    def forced(self, now: float, reason: str) -> None:
        """A write asked from outside (the harness), timed like the policy's own."""
        self._asked(now, reason)

    def failure(self, now: float) -> None:
        self.failures_observed += 1
        if self.policy is not None:
            self.policy.handle(cp.FailureObserved(), now)

    def done(self, now: float) -> None:
        """The worker finished a write: its duration is the policy's cost C."""
        if self._asked_at is None:
            return  # a write nobody timed (one asked before a restart)
        self.last_cost_s = max(0.0, now - self._asked_at)
        self._asked_at = None
        if self.policy is not None:
            self.policy.handle(cp.CheckpointCost(seconds=self.last_cost_s), now)

    def failed(self, now: float, reason: str) -> None:
        """The worker could not finish a write (a full disk): no cost is measured, and
        the policy's next due write tries again (every N steps: the next multiple;
        Young-Daly: one interval after the failed attempt, which it counts as its
        last write).  Counted for the node's status."""
        self._asked_at = None
        self.writes_failed += 1
        self.last_failure = reason

    def status(self, now: float) -> dict[str, object]:
        policy = self.policy
        out: dict[str, object] = {
            "policy": "off" if policy is None else type(policy).__name__,
            "failures_observed": self.failures_observed,
            "writes_requested": self.writes_requested,
            "writes_failed": self.writes_failed,
            "last_failure": self.last_failure,
            "last_reason": self.last_reason,
            "last_cost_s": self.last_cost_s,
        }
        if isinstance(policy, cp.YoungDaly):
            out["interval_s"] = policy.interval_s(now)
            out["mtbf_s"] = policy.mtbf_s(now)
            out["interval_steps"] = policy.interval_steps(now)
        return out

    def _asked(self, now: float, reason: str) -> None:
        self.writes_requested += 1
        self.last_reason = reason
        self._asked_at = now


# --- history: one mapping from core actions to events --------------------------------------


def refusal_reason(core: str, reason: str) -> str:
    """The ``frame_drop`` reason logged when the ``core`` core ("commit" or "rejoin")
    refuses a peer's message with ``RemoteProtocolError.reason``: named after the core,
    as the runtime's frame layer names its own (``rejected_...``, ``message_...``), so
    one history reads the same from either shell (the simulator logged the bare reason)."""
    return f"{core}_{reason}"


def history_of(action: object, *, node: str, step: int = -1) -> tuple[type, dict[str, Any]] | None:
    """The history event logged for a core's action, as (event class, fields), or None
    for an action that is not logged.  ``step`` is the node's current step (logged
    with a rejoin's begin)."""
    if type(action) not in LOGGED_ACTIONS:
        return None  # most actions (sends, persists, timers) are not history: cheap
    match action:
        case cm.Proposed():
            return history.Propose, {
                "step": action.step,
                "ballot": list(action.ballot),
                "value_fp": action.value.agg_fp,
                "contributors": list(action.value.contributors),
            }
        case cm.Promised():
            return history.Promise, {
                "step": action.step,
                "ballot": list(action.ballot),
                "to": action.to,
            }
        case cm.AcceptedValue():
            return history.Accept, {
                "step": action.step,
                "ballot": list(action.ballot),
                "value_fp": action.value.agg_fp,
                "contributors": list(action.value.contributors),
                "to": action.to,
                "holds_bytes": action.holds_bytes,
            }
        case cm.Committed():
            return history.Commit, {
                "step": action.step,
                "value_fp": action.value.agg_fp,
                "contributors": list(action.value.contributors),
                "param_fp": action.param_fp,
                "voters": list(action.voters),
                "quorum": list(action.quorum),
            }
        case rj.RequestState():
            return history.RejoinBegin, {
                "step": step,
                "source": action.source,
                "from_step": action.from_step,
            }
        case rj.LoadCheckpoint():
            return history.RejoinBegin, {
                "step": step,
                "source": "checkpoint",
                "from_step": action.step,
            }
        case rj.RejoinDone():
            return history.RejoinDone, {
                "step": action.step,
                "source": action.source,
                "param_fp": action.param_fp,
                "nbytes": action.nbytes,
                "verified": action.verified,
            }
        case mb.ConfigChanged():
            return history.ConfigChange, {
                "step": action.step,
                "change": action.change,
                "peer": action.peer,
                "voters": list(action.voters),
                "learners": list(action.learners),
            }
        case det.Suspected():
            return history.Suspect, {
                "peer": action.peer,
                "peer_incarnation": action.peer_incarnation,
                "reason": action.reason,
            }
        case det.DeclaredDead():
            return history.DeclareDead, {
                "peer": action.peer,
                "peer_incarnation": action.peer_incarnation,
                "suspicions": action.suspicions,
                "reason": action.reason,
            }
        case det.DeclaredAlive():
            return history.DeclareAlive, {
                "peer": action.peer,
                "peer_incarnation": action.peer_incarnation,
            }
        case det.Refuted():
            return history.Refute, {
                "incarnation": action.incarnation,
                "suspected_by": action.suspected_by,
            }
        case det.SelfDeclaredDead():
            return history.DeclareDead, {
                "peer": node,
                "peer_incarnation": action.incarnation,
                "reason": f"declared dead by {action.declared_by}",
            }
        case det.ViewChanged():
            # The view as is (encoded like a list): a driver may share one object per
            # distinct view between events (the simulator: 1000-name views).
            return history.ViewChange, {"epoch": action.epoch, "alive": action.alive}
    return None


# The action types ``history_of`` logs (a driver may test this before calling it).
LOGGED_ACTIONS = frozenset(
    {
        cm.Proposed,
        cm.Promised,
        cm.AcceptedValue,
        cm.Committed,
        rj.RequestState,
        rj.LoadCheckpoint,
        rj.RejoinDone,
        mb.ConfigChanged,
        det.Suspected,
        det.DeclaredDead,
        det.DeclaredAlive,
        det.Refuted,
        det.SelfDeclaredDead,
        det.ViewChanged,
    }
)
