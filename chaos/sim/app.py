"""The simulated worker: abstract training driven through the real step-commit,
membership, rejoin and checkpoint-policy cores (DRIVERS.md), one ``NodeApp`` per
node process.

A step, in the simulator's terms:

1. compute (``compute_s``, slower when throttled), then log ``agg_send`` and send the
   contribution to every other member (bulk channel), as the runtime does;
2. the step's *acting coordinator* (the commit core's ``acting_coordinator``: the
   coordinator, or the next voter in rotation order that this node's detector view
   holds) proposes the aggregate of the contributions it holds once every voter in
   its view contributed, ``straggler_grace_s`` after a majority did, or at
   ``collect_s``.  A contributor that crashes is dropped from the view when the
   detector declares it dead, and that view change ends the wait; a node that
   becomes the acting coordinator on a view change proposes then, with phase 1 at
   once (the core does not wait for a backoff timer).  A node restarted from an
   older state proposes the values its acceptor records still hold at once.
   The next live voter proposes ``backup_delay_s`` after its gradient and everyone else
   later still, if the step is not decided yet (a step stuck for another reason
   stalls nothing, and a healthy run has one proposer per step);
3. a proposer pushes the aggregate's bytes on the bulk channel before its accept
   requests on the control channel (once per value); an acceptor that lacks them when
   asked to accept rebuilds the aggregate from the contributions it holds (the same
   inputs give the same bits), at once or as soon as the missing ones arrive, and
   otherwise waits ``push_grace_s`` for the push, then pulls from the sources the core
   names;
4. ``ApplyStep`` adds the aggregate of exactly the committed contributors to the
   integer parameters; ``Committed`` logs ``commit`` with the parameters' fingerprint.

What survives a crash is ``NodeDisk``: acceptor records (``Persist``) and the last
checkpoint.  A restarted node runs the rejoin core (state from a live peer, verified
by fingerprint; else the local checkpoint) and starts its commit core after the step
it got.  Every bound below has its reason next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec

from swarmshake.chaos.sim import training
from swarmshake.reference_node.protocol import checkpoint_policy, rejoin
from swarmshake.reference_node.protocol.commit import (
    AcceptedValue,
    AcceptorRecord,
    Applied,
    ApplyStep,
    Behind,
    CommitMessage,
    Committed,
    FetchAggregate,
    HoldsAggregate,
    MessageReceived,
    Persist,
    Promised,
    Proposed,
    ProposeValue,
    Send,
    StepCommit,
    ViewUpdated,
)
from swarmshake.reference_node.protocol.commit import Tick as CommitTick
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.history import (
    Accept,
    AggSend,
    CheckpointWrite,
    Commit,
    ConfigChange,
    FrameDrop,
    Promise,
    Propose,
    RejoinBegin,
    RejoinDone,
)
from swarmshake.reference_node.protocol.membership import (
    ConfigChanged,
    ConfigCommitted,
    Membership,
    PeerAlive,
    PeerDeclaredDead,
)
from swarmshake.reference_node.protocol.messages import (
    AcceptRequest,
    AggregateRequest,
    Decided,
    StateOffer,
    StateRequest,
    StepValue,
)

RETAINED_STEPS = 16  # aggregates and acceptor records kept for laggards (= the core's)
FETCH_ROUNDS_MAX = 3  # pull attempts per source list before waiting for a new decision
AHEAD_STEPS_MAX = 8  # contributions buffered this far ahead (the commit core's window)
REJOIN_RETRY_S = 1.0  # a failed rejoin is tried again this much later (one request a second)


class AppSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The simulated workload; defaults give ~1 step/s on the 50 ± 25 ms envelope."""

    compute_s: float = 0.5  # one local training step
    # The acting coordinator waits this long after its own gradient for a voter that is
    # alive in its view but late (a straggler).  A contribution takes ~0.45 s to arrive
    # (40 MB on the 100 MB/s bulk channel plus latency), so this must be longer, or
    # steps aggregate only the coordinator's own gradient; a crashed contributor costs
    # no more than its detection, since the view change ends the wait.
    collect_s: float = 1.0
    # ... and this long after a majority of the voters' contributions arrived: healthy
    # contributions land within ~0.1 s of each other (start offsets of a decision's
    # propagation plus link jitter), so one this far behind its peers is a straggler,
    # and the step goes on without it instead of waiting out ``collect_s``.
    straggler_grace_s: float = 0.25
    # The next live voter takes over a step still undecided this long after its own
    # gradient: a healthy step decides ~0.6 s after it (contributions 0.45 s, a round
    # trip), so this catches a coordinator that is alive but slow (a straggler) without
    # duelling a healthy one; a dead one is replaced at its declaration instead.
    backup_delay_s: float = 1.0
    fallback_delay_s: float = 3.0  # then anyone (rank-staggered by 0.5 s)
    # Wait this long for a pushed aggregate before pulling it: a push leaves with its
    # accept request and takes ~0.45 s (40 MB at 100 MB/s plus latency).
    push_grace_s: float = 0.5
    fetch_timeout_s: float = 0.5  # one pull attempt
    rejoin_delay_s: float = 0.2  # a restarted node lets its detector see a view first
    # 10M float32 parameters: 40 MB, 0.4 s on the 100 MB/s bulk channel, so a tensor
    # is visibly slower than a vote (what ``ack-before-apply`` gets wrong).
    aggregate_nbytes: int = 40_000_000
    state_nbytes: int = 40_000_000
    checkpoint_every_steps: int = 10


# --- sim-internal bulk messages (the bytes the real node moves as tensors) -----------------


class Contribution(msgspec.Struct, frozen=True):
    step: int
    sender: str


class AggregateBytes(msgspec.Struct, frozen=True):
    step: int
    value_fp: str
    contributors: tuple[str, ...]


class NoAggregate(msgspec.Struct, frozen=True):
    step: int
    value_fp: str


class StateBytes(msgspec.Struct, frozen=True):
    step: int
    params: tuple[int, ...]
    nbytes: int


@dataclass
class NodeDisk:
    """What a node's disk keeps across crashes."""

    records: dict[int, AcceptorRecord] = field(default_factory=dict)
    checkpoint: tuple[int, tuple[int, ...], str] | None = None  # (step, params, fp)
    applied_any: bool = False  # whether this node ever applied a committed step
    # The bytes of each accepted value, written with its accept record: the acceptor
    # vouched for holding them, and a retry must adopt that value (explore, seed 2: a
    # restarted acceptor's value could be fetched from no one and commits stopped).
    aggregates: dict[tuple[int, str], tuple[str, ...]] = field(default_factory=dict)


class NodeApp:
    def __init__(self, sim: Any, proc: Any, settings: AppSettings, disk: NodeDisk, first: bool):
        self.sim = sim
        self.proc = proc
        self.name = proc.name
        self.settings = settings
        self.disk = disk
        self.first = first
        self.bugs = sim.bugs
        self.commit: StepCommit | None = None
        self.rejoin: rejoin.Rejoin | None = None
        self.membership = Membership(
            node=self.name, voters=sim.names, incarnation=proc.incarnation, bugs=sim.bugs
        )
        self.policy = checkpoint_policy.FixedInterval(every_steps=settings.checkpoint_every_steps)
        self.params = training.INITIAL_PARAMS
        self.param_step = -1  # the committed step the parameters hold (-1: initial)
        self.held: dict[int, dict[str, tuple[str, ...]]] = {}
        for (step, value_fp), contributors in disk.aggregates.items():
            self.held.setdefault(step, {})[value_fp] = contributors
        self.contributions: dict[int, set[str]] = {}
        # The contributors of values seen in accept requests and decisions: what an
        # acceptor needs to rebuild an aggregate from the contributions it holds.
        self.values: dict[tuple[int, str], tuple[str, ...]] = {}
        self.pushed: dict[tuple[int, str], float] = {}  # value -> when its bytes were pushed
        self.proposed_step = -1
        self.computed_step = -1
        self.computed_at = 0.0  # when this node's gradient of ``computed_step`` was ready
        self.majority_step = -1  # the step whose straggler timer runs (armed once)
        self.applying: tuple[int, StepValue] | None = None
        self.fetches: dict[tuple[int, str], list] = {}  # key -> [sources, attempt]
        self.commit_timer_at = math.inf
        self.rejoin_timer_at = math.inf
        self.highest_step_seen = -1
        self.pending_state: tuple[str, StateBytes] | None = None
        self.alive_view: tuple[str, ...] = sim.names

    # --- plumbing -----------------------------------------------------------------------

    def _local(self, t: float) -> float:
        return self.proc.clock.local(t)

    def _true(self, local: float) -> float:
        clock = self.proc.clock
        return local if clock.identity else clock.true_time(local)

    def _log(self, cls: type, t: float, **fields: Any) -> None:
        self.sim.log(cls, self.proc, t, **fields)

    def _send(
        self, t: float, to: str, message: Any, channel: str = "control", nbytes: int = 0
    ) -> None:
        self.sim.send(self.proc, t, to, message, nbytes=nbytes, channel=channel)

    def _timer(self, t: float, payload: tuple) -> None:
        self.sim.timer(self.proc, t, payload)

    # --- lifecycle ----------------------------------------------------------------------

    def start(self, t: float) -> None:
        if self.first or not self.disk.applied_any:
            # Nothing was ever applied here: the deterministic initial parameters are
            # this node's verified state, whatever the cluster did since (a node that
            # is behind learns the decided steps or rejoins from a peer when told).
            records = tuple(r for _, r in sorted(self.disk.records.items()))
            self.commit = StepCommit(
                node=self.name,
                voters=self.sim.names,
                first_step=0,
                seed=self.sim.core_seed,
                persisted=records,
                bugs=self.bugs,
            )
            self._announce_held(t)
            self._begin_step(t)
        else:
            self._timer(t + self.settings.rejoin_delay_s, ("rejoin_begin",))

    def clock_changed(self, t: float) -> None:
        self._arm_commit_timer(t)

    def view_changed(self, t: float, alive: tuple[str, ...]) -> None:
        self.alive_view = alive
        if self.commit is None:
            return
        self._commit(t, ViewUpdated(alive=tuple(alive)))
        step = self.commit.step if self.commit is not None else -1
        if self.computed_step == step and self._acting_coordinator(step):
            # Either the contributor we waited for was declared dead, or the node that
            # led this step was: lead it now (or at the straggler bound).
            if not self._maybe_propose_early(t, step):
                deadline = self.computed_at + self.settings.collect_s
                if t >= deadline:
                    self._propose(t, step)
                else:
                    self._timer(deadline, ("propose", step))

    def peer_dead(self, t: float, peer: str) -> None:
        if self.rejoin is not None and self.rejoin.source == peer:
            # The state source died mid-transfer: ask the next one now, not after the
            # fetch timeout (5-40 s; explore, seed 2: 11 s without a commit).
            self._rejoin(t, rejoin.FetchFailed(source=peer, reason="declared dead"))
        if peer != self.name:
            incarnation = self.proc.detector.known_incarnation.get(peer, 0)
            self.membership.handle(
                PeerDeclaredDead(peer=peer, incarnation=incarnation), self._local(t)
            )

    def peer_alive(self, t: float, peer: str) -> None:
        incarnation = self.proc.detector.known_incarnation.get(peer, 0)
        self.membership.handle(PeerAlive(peer=peer, incarnation=incarnation), self._local(t))

    # --- the step loop ------------------------------------------------------------------

    def _begin_step(self, t: float) -> None:
        step = self.commit.step
        self.contributions.setdefault(step, set())
        self._timer(t + self.settings.compute_s / self.proc.cpu_fraction, ("computed", step))
        if self._stored_value(step) is not None:
            self._timer(t, ("replay", step))

    def _stored_value(self, step: int) -> StepValue | None:
        """The value this node's acceptor accepted for ``step`` before a restart took it
        back to an older state, if the bytes are still held (persisted with the accept)."""
        record = self.disk.records.get(step)
        value = record.accepted_value if record is not None else None
        if value is None or value.agg_fp not in self.held.get(step, {}):
            return None
        return value

    def _replay(self, t: float, step: int) -> None:
        """Propose the stored accepted value at once: a step the cluster may already
        have chosen is recommitted from the acceptor records (a retry adopts the highest
        accepted value anyway) instead of waiting for a new gradient round, so nodes
        that restarted from an old checkpoint catch up at one round per step (explore:
        replaying five steps at ~1.4 s each broke L2's 10 s bound)."""
        commit = self.commit
        value = self._stored_value(step)
        if commit is None or commit.step != step or value is None or self.proposed_step == step:
            return
        if commit.phase == "decided":
            return
        try:
            actions = commit.handle(ProposeValue(step=step, value=value), self._local(t))
        except LocalProtocolError:
            return  # the stored change no longer applies: the step runs as usual
        self.proposed_step = step
        self._perform(t, actions)
        self._arm_commit_timer(t)

    def _acting_coordinator(self, step: int) -> bool:
        return self.commit.acting_coordinator(step) == self.name

    def _proposer_rank(self, step: int) -> int:
        """0 for the acting coordinator, 1 for the next live voter, and so on in
        rotation order over the voters in this node's view (learners come last)."""
        voters = self.commit.voters
        if self.name not in voters:
            return len(voters)
        alive = set(self.alive_view) | {self.name}
        order = [voters[(step + k) % len(voters)] for k in range(len(voters))]
        return [v for v in order if v in alive].index(self.name)

    def _computed(self, t: float, step: int) -> None:
        if self.commit is None or self.commit.step != step:
            return
        self.computed_step = step
        self.computed_at = t
        # Its own gradient is always at hand: a fallback proposal aggregates at least it.
        self.contributions.setdefault(step, set()).add(self.name)
        # To every other member, as the runtime does: whoever ends up proposing holds
        # the gradients, and every acceptor can rebuild the aggregate it is asked to
        # accept instead of waiting for its bytes.
        for peer in self.commit.members:
            if peer == self.name:
                continue
            self._log(AggSend, t, step=step, to=peer, nbytes=self.settings.aggregate_nbytes)
            self._send(
                t, peer, Contribution(step, self.name), "bulk", self.settings.aggregate_nbytes
            )
        settings = self.settings
        rank = self._proposer_rank(step)
        if rank == 0:
            self._timer(t + settings.collect_s, ("propose", step))
            self._maybe_propose_early(t, step)
        elif rank == 1:
            self._timer(t + settings.backup_delay_s, ("propose", step))
        else:
            self._timer(t + settings.fallback_delay_s + 0.5 * rank, ("propose", step))

    def _maybe_propose_early(self, t: float, step: int) -> bool:
        """Propose if every voter in our view has contributed; whether it proposed."""
        got = self.contributions.get(step, set())
        voters = set(self.commit.voters)
        if self.computed_step != step:
            return False
        if all(node in got for node in self.alive_view if node in voters):
            self._propose(t, step)
            return self.proposed_step == step
        if self.majority_step != step and len(got & voters) > len(voters) // 2:
            self.majority_step = step
            self._timer(t + self.settings.straggler_grace_s, ("propose", step))
        return False

    def _propose(self, t: float, step: int) -> None:
        commit = self.commit
        if commit is None or commit.step != step or self.proposed_step == step:
            return
        if commit.phase == "decided" or self.computed_step != step:
            return
        members = set(commit.members)
        contributors = tuple(sorted(n for n in self.contributions.get(step, ()) if n in members))
        if not contributors:
            return
        value_fp = training.fingerprint(training.aggregate(self.sim.seed, step, contributors))
        self.held.setdefault(step, {})[value_fp] = contributors
        self.proposed_step = step
        value = StepValue(
            agg_fp=value_fp,
            contributors=list(contributors),
            config_change=self.membership.change_for_next_step(),
        )
        self._commit(t, ProposeValue(step=step, value=value))

    # --- the commit core ----------------------------------------------------------------

    def _commit(self, t: float, event: Any) -> None:
        try:
            actions = self.commit.handle(event, self._local(t))
        except RemoteProtocolError as error:
            sender = getattr(getattr(event, "message", None), "sender", "")
            self._log(FrameDrop, t, peer=sender or "?", reason=error.reason)
            return
        self._perform(t, actions)
        self._arm_commit_timer(t)

    def _arm_commit_timer(self, t: float) -> None:
        if self.commit is None:
            return
        deadline = self.commit.next_deadline()
        if deadline is None:
            return
        at = max(self._true(deadline), t)
        if at < self.commit_timer_at or self.commit_timer_at <= t:
            self.commit_timer_at = at
            self._timer(at, ("commit_tick",))

    def _perform(self, t: float, actions: list) -> None:
        rebuilt: list[tuple[int, str]] = []
        for action in actions:
            if self.commit is None:
                return  # a Behind earlier in the list handed the node to the rejoin core
            if isinstance(action, Send):
                self._send_commit(t, action)
            elif isinstance(action, Persist):
                if not self.proc.up:
                    return  # killed before the write: the rest of the list is lost too
                record = action.record
                self.disk.records[record.step] = record
                value = record.accepted_value
                if value is not None and value.agg_fp in self.held.get(record.step, {}):
                    key = (record.step, value.agg_fp)
                    self.disk.aggregates[key] = self.held[record.step][value.agg_fp]
                for old in [s for s in self.disk.records if s < record.step - RETAINED_STEPS]:
                    del self.disk.records[old]
                for old in [k for k in self.disk.aggregates if k[0] < record.step - RETAINED_STEPS]:
                    del self.disk.aggregates[old]
            elif isinstance(action, Proposed):
                self._log(
                    Propose,
                    t,
                    step=action.step,
                    ballot=list(action.ballot),
                    value_fp=action.value.agg_fp,
                    contributors=list(action.value.contributors),
                )
            elif isinstance(action, Promised):
                self._log(Promise, t, step=action.step, ballot=list(action.ballot), to=action.to)
            elif isinstance(action, AcceptedValue):
                self._log(
                    Accept,
                    t,
                    step=action.step,
                    ballot=list(action.ballot),
                    value_fp=action.value.agg_fp,
                    contributors=list(action.value.contributors),
                    to=action.to,
                    holds_bytes=action.holds_bytes,
                )
            elif isinstance(action, FetchAggregate):
                key = (action.step, action.value_fp)
                if key not in self.fetches and action.value_fp not in self.held.get(
                    action.step, {}
                ):
                    if self._rebuild(key):
                        rebuilt.append(key)
                    else:
                        sources = tuple(s for s in action.sources if s != self.name)
                        self.fetches[key] = [sources, 0]
                        # Our own round adopted a value we lack: no push is coming.
                        own = bool(action.sources) and action.sources[0] == self.name
                        grace = 0.0 if own else self.settings.push_grace_s
                        self._timer(t + grace, ("fetch", key))
            elif isinstance(action, ApplyStep):
                self.applying = (action.step, action.value)
                self._apply_if_held(t)
            elif isinstance(action, Committed):
                self._committed(t, action)
            elif isinstance(action, Behind):
                self.highest_step_seen = max(self.highest_step_seen, action.peer_step)
                self._start_rejoin(t, ahead=action.peer)
        # Told after the list is done: the core is not re-entered mid-list.
        for key in rebuilt:
            self._holds(t, key)

    def _rebuild(self, key: tuple[int, str]) -> bool:
        """Build the aggregate ``key`` names from the contributions this node holds;
        whether it now holds it (the fingerprint must match: same inputs, same bits)."""
        step, value_fp = key
        contributors = self.values.get(key)
        got = self.contributions.get(step, ())
        if contributors is None or not all(c in got for c in contributors):
            return False
        if training.fingerprint(training.aggregate(self.sim.seed, step, contributors)) != value_fp:
            return False
        self.held.setdefault(step, {})[value_fp] = contributors
        self.fetches.pop(key, None)
        return True

    def _holds(self, t: float, key: tuple[int, str]) -> None:
        commit = self.commit
        if commit is not None and commit.step <= key[0] <= commit.step + AHEAD_STEPS_MAX:
            self._commit(t, HoldsAggregate(step=key[0], value_fp=key[1]))
        self._apply_if_held(t)

    def _send_commit(self, t: float, action: Send) -> None:
        message = action.message
        if isinstance(message, AcceptRequest):
            key = (message.step, message.value.agg_fp)
            contributors = self.held.get(message.step, {}).get(message.value.agg_fp)
            last = self.pushed.get(key)
            if contributors is not None and (
                last is None or t - last >= self.settings.push_grace_s
            ):
                # Not again while the last push is still on its way (a retry's accept
                # requests find those bytes, and a second 40 MB push would hold up the
                # next step's contributions on the same link); again after that, as
                # the push may have been lost to a partition.
                self.pushed[key] = t
                push = AggregateBytes(message.step, message.value.agg_fp, contributors)
                for peer in action.to:
                    self._send(t, peer, push, "bulk", self.settings.aggregate_nbytes)
        for peer in action.to:
            self._send(t, peer, message)

    def _apply_if_held(self, t: float) -> None:
        if self.applying is None:
            return
        step, value = self.applying
        if value.agg_fp not in self.held.get(step, {}):
            return
        self.applying = None
        update = training.aggregate(self.sim.seed, step, value.contributors)
        self.params = training.apply(self.params, update)
        self.param_step = step
        self.disk.applied_any = True
        self._commit(t, Applied(step=step, param_fp=training.fingerprint(self.params)))

    def _committed(self, t: float, action: Committed) -> None:
        value = action.value
        self._log(
            Commit,
            t,
            step=action.step,
            value_fp=value.agg_fp,
            contributors=list(value.contributors),
            param_fp=action.param_fp,
            voters=list(action.voters),
            quorum=list(action.quorum),
        )
        if value.config_change is not None:
            for change in self.membership.handle(
                ConfigCommitted(step=action.step, change=value.config_change), self._local(t)
            ):
                if isinstance(change, ConfigChanged):
                    self._log(
                        ConfigChange,
                        t,
                        step=change.step,
                        change=change.change,
                        peer=change.peer,
                        voters=list(change.voters),
                        learners=list(change.learners),
                    )
        for write in self.policy.handle(
            checkpoint_policy.StepCommitted(step=action.step), self._local(t)
        ):
            self.disk.checkpoint = (write.step, self.params, action.param_fp)
            self._log(
                CheckpointWrite,
                t,
                step=write.step,
                path=f"checkpoints/{self.name}/step-{write.step}",
                sha256=action.param_fp,
                param_fp=action.param_fp,
                nbytes=self.settings.state_nbytes,
            )
        for old in [s for s in self.held if s < action.step - RETAINED_STEPS]:
            del self.held[old]
        for old in [s for s in self.contributions if s <= action.step]:
            del self.contributions[old]
        self.values = {k: v for k, v in self.values.items() if k[0] > action.step}
        self.pushed = {k: v for k, v in self.pushed.items() if k[0] > action.step}
        self._begin_step(t)

    # --- messages -----------------------------------------------------------------------

    def receive(self, t: float, sender: str, message: Any) -> None:
        if isinstance(message, CommitMessage.__args__):  # type: ignore[attr-defined]
            self.highest_step_seen = max(self.highest_step_seen, message.step)
            if isinstance(message, AcceptRequest | Decided) and self._near(message.step):
                key = (message.step, message.value.agg_fp)
                self.values[key] = tuple(message.value.contributors)
            if self.commit is not None:
                self._commit(t, MessageReceived(message=message))
        elif isinstance(message, Contribution):
            self._contribution(t, message)
        elif isinstance(message, AggregateBytes):
            self._aggregate_bytes(t, message)
        elif isinstance(message, AggregateRequest):
            contributors = self.held.get(message.step, {}).get(message.value_fp)
            if contributors is None:
                self._send(t, sender, NoAggregate(message.step, message.value_fp))
            else:
                reply = AggregateBytes(message.step, message.value_fp, contributors)
                self._send(t, sender, reply, "bulk", self.settings.aggregate_nbytes)
        elif isinstance(message, NoAggregate):
            self._fetch_next(t, (message.step, message.value_fp), sender)
        elif isinstance(message, StateRequest):
            self._serve_state(t, sender)
        elif isinstance(message, StateOffer | StateBytes):
            self._state_arrived(t, sender, message)

    def _near(self, step: int) -> bool:
        """Within the window this node keeps per-step data for (bounded memory)."""
        commit = self.commit
        return commit is not None and commit.step <= step <= commit.step + AHEAD_STEPS_MAX

    def _contribution(self, t: float, message: Contribution) -> None:
        if self.commit is None:
            return
        step = self.commit.step
        if step <= message.step <= step + AHEAD_STEPS_MAX:
            self.contributions.setdefault(message.step, set()).add(message.sender)
            # An acceptor waiting for this value's bytes may now rebuild it.
            for key in [k for k in self.fetches if k[0] == message.step]:
                if self._rebuild(key):
                    self._holds(t, key)
            if message.step == step and self.commit is not None and self._acting_coordinator(step):
                self._maybe_propose_early(t, step)

    def _aggregate_bytes(self, t: float, message: AggregateBytes) -> None:
        held = self.held.setdefault(message.step, {})
        if message.value_fp in held:
            return
        held[message.value_fp] = message.contributors
        self.fetches.pop((message.step, message.value_fp), None)
        commit = self.commit
        if commit is not None and commit.step <= message.step <= commit.step + AHEAD_STEPS_MAX:
            self._commit(t, HoldsAggregate(step=message.step, value_fp=message.value_fp))
        self._apply_if_held(t)

    def _fetch(self, t: float, key: tuple[int, str]) -> None:
        entry = self.fetches.get(key)
        if entry is None or key[1] in self.held.get(key[0], {}):
            self.fetches.pop(key, None)
            return
        sources, attempt = entry
        if not sources or attempt >= FETCH_ROUNDS_MAX * len(sources):
            self.fetches.pop(key, None)  # no one has it: a later decision or rejoin decides
            return
        source = sources[attempt % len(sources)]
        entry[1] = attempt + 1
        self._send(t, source, AggregateRequest(sender=self.name, step=key[0], value_fp=key[1]))
        self._timer(t + self.settings.fetch_timeout_s, ("fetch_timeout", key, attempt + 1))

    def _fetch_next(self, t: float, key: tuple[int, str], source: str) -> None:
        entry = self.fetches.get(key)
        if entry is not None:
            self._fetch(t, key)

    # --- rejoin -------------------------------------------------------------------------

    def _start_rejoin(self, t: float, ahead: str | None = None) -> None:
        checkpoint = self.disk.checkpoint
        info = None
        local_fp = training.INITIAL_FP
        if checkpoint is not None:
            info = rejoin.CheckpointInfo(
                path=f"checkpoints/{self.name}/step-{checkpoint[0]}",
                step=checkpoint[0],
                param_fp=checkpoint[2],
            )
            local_fp = checkpoint[2]
        if self.commit is not None and self.param_step >= 0:
            local_fp = training.fingerprint(self.params)  # a live node that fell behind
        self.commit = None
        self.applying = None
        # The peers' committed step: one below the highest step their messages carry.
        self.rejoin = rejoin.Rejoin(
            node=self.name,
            incarnation=self.proc.incarnation,
            seed=self.sim.core_seed,
            local_checkpoint=info,
            local_param_fp=local_fp,
            cluster_step=max(self.highest_step_seen - 1, -1),
            bugs=self.bugs,
        )
        # A peer whose message showed it is ahead is alive, whatever this node's
        # detector believes (after a partition each side may think the other dead).
        live = tuple(p for p in self.alive_view if p != self.name)
        if ahead is not None and ahead not in live and ahead != self.name:
            live = (*live, ahead)
        self._rejoin(t, rejoin.Begin(live_peers=live))

    def _rejoin(self, t: float, event: Any) -> None:
        if self.rejoin is None:
            return
        try:
            actions = self.rejoin.handle(event, self._local(t))
        except RemoteProtocolError as error:
            self._log(FrameDrop, t, peer=getattr(event, "source", "?"), reason=error.reason)
            return
        for action in actions:
            if isinstance(action, rejoin.RequestState):
                self.pending_state = None
                self._log(RejoinBegin, t, source=action.source, from_step=action.from_step)
                self._send(
                    t,
                    action.source,
                    StateRequest(sender=self.name, incarnation=self.proc.incarnation),
                )
            elif isinstance(action, rejoin.LoadCheckpoint):
                self._log(RejoinBegin, t, source="checkpoint", from_step=action.step)
                step, params, _ = self.disk.checkpoint
                self.params = params
                self._rejoin(
                    t, rejoin.CheckpointLoaded(step=step, computed_fp=training.fingerprint(params))
                )
            elif isinstance(action, rejoin.RejoinDone):
                self._rejoined(t, action)
            elif isinstance(action, rejoin.RejoinFailed):
                # No source answered and nothing local is usable.  Try again later, as
                # the runtime does while peers are ahead: the source may have restarted
                # mid-transfer (explore, seed 2: a node whose only source was declared
                # dead and restarted stayed without a commit core for 30 s).  If no one
                # can ever serve, strict mode stalls by design and the history shows no
                # rejoin_done.
                self.rejoin = None
                self._timer(t + REJOIN_RETRY_S, ("rejoin_begin",))
        deadline = self.rejoin.next_deadline() if self.rejoin is not None else None
        if deadline is not None:
            at = max(self._true(deadline), t)
            if at < self.rejoin_timer_at or self.rejoin_timer_at <= t:
                self.rejoin_timer_at = at
                self._timer(at, ("rejoin_tick",))

    def _rejoined(self, t: float, done: rejoin.RejoinDone) -> None:
        if done.source == "local":  # stale-rejoin: whatever the disk holds, unverified
            self.params = (
                self.disk.checkpoint[1] if self.disk.checkpoint else training.INITIAL_PARAMS
            )
        self.param_step = done.step
        self._log(
            RejoinDone,
            t,
            step=done.step,
            source=done.source,
            param_fp=done.param_fp,
            nbytes=done.nbytes,
            verified=done.verified,
        )
        self.rejoin = None
        records = tuple(r for s, r in sorted(self.disk.records.items()) if s > done.step)
        self.commit = StepCommit(
            node=self.name,
            voters=self.sim.names,
            first_step=done.step + 1,
            seed=self.sim.core_seed,
            persisted=records,
            bugs=self.bugs,
        )
        self.proposed_step = -1
        self.commit_timer_at = math.inf
        self._commit(t, ViewUpdated(alive=tuple(self.alive_view)))
        self._announce_held(t)
        self._begin_step(t)

    def _announce_held(self, t: float) -> None:
        """Aggregates that arrived while no commit core ran are held all the same."""
        commit = self.commit
        for step in sorted(self.held):
            if commit is not None and commit.step <= step <= commit.step + AHEAD_STEPS_MAX:
                for value_fp in sorted(self.held[step]):
                    self._commit(t, HoldsAggregate(step=step, value_fp=value_fp))

    def _serve_state(self, t: float, requester: str) -> None:
        if self.commit is None or self.param_step < 0:
            return  # nothing verified to give: the requester times out and moves on
        nbytes = self.settings.state_nbytes
        offer = StateOffer(
            sender=self.name,
            step=self.param_step,
            param_fp=training.fingerprint(self.params),
            nbytes=nbytes,
        )
        self._send(t, requester, offer)
        self._send(t, requester, StateBytes(self.param_step, self.params, nbytes), "bulk", nbytes)

    def _state_arrived(self, t: float, sender: str, message: StateOffer | StateBytes) -> None:
        if self.rejoin is None:
            return
        if isinstance(message, StateOffer):
            self._rejoin(
                t,
                rejoin.StateOffered(
                    source=sender,
                    step=message.step,
                    param_fp=message.param_fp,
                    nbytes=message.nbytes,
                ),
            )
            pending = self.pending_state
            if pending is not None and pending[0] == sender:
                self.pending_state = None
                self._state_arrived(t, sender, pending[1])
            return
        if self.rejoin.offer is None or self.rejoin.source != sender:
            self.pending_state = (sender, message)  # the bytes overtook their offer
            return
        self.params = message.params
        self._rejoin(
            t,
            rejoin.StateReceived(
                source=sender,
                step=message.step,
                computed_fp=training.fingerprint(message.params),
                nbytes=message.nbytes,
            ),
        )

    # --- timers -------------------------------------------------------------------------

    def timer(self, t: float, payload: tuple) -> None:
        kind = payload[0]
        if kind == "computed":
            self._computed(t, payload[1])
        elif kind == "propose":
            self._propose(t, payload[1])
        elif kind == "replay":
            self._replay(t, payload[1])
        elif kind == "commit_tick":
            if self.commit is not None and t >= self.commit_timer_at:
                self.commit_timer_at = math.inf
                self._commit(t, CommitTick())
        elif kind == "fetch":
            self._fetch(t, payload[1])
        elif kind == "fetch_timeout":
            entry = self.fetches.get(payload[1])
            if entry is not None and entry[1] == payload[2]:
                self._fetch(t, payload[1])
        elif kind == "rejoin_begin":
            if self.commit is None and self.rejoin is None:  # not already back or rejoining
                self._start_rejoin(t)
        elif kind == "rejoin_tick":
            if self.rejoin is not None and t >= self.rejoin_timer_at:
                self.rejoin_timer_at = math.inf
                self._rejoin(t, rejoin.Tick())
