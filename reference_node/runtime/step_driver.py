"""Asyncio driver of the step-commit core (``protocol.commit.StepCommit``).

One training step ``s`` on this node, as the driver runs it:

1. ``Contribute(s)``: the worker computes this node's gradient and streams it to
   every other member on the bulk channel (it logs ``agg_send`` before each send).
2. Contributions arrive (``ContributionArrived``).  Every decision from here on is
   the node core's ``step_node.StepNode`` (the same code the simulator runs), fed
   each input and performed here: its leader's ``BuildValue`` asks the worker to
   aggregate exactly that set, and the worker's ``AggregateHeld`` becomes the
   proposal; a value this node's acceptor accepted before a restart is re-proposed.
3. Its actions are performed in order: events logged *before* the sends they
   describe, acceptor records persisted (fsync) before any later action.  An
   acceptor that must hold a value's bytes first rebuilds the aggregate from the
   contributions it holds (``RebuildAggregate``), else fetches it from a peer over
   the bulk channel (``RequestAggregate``).  The worker reports an aggregate held
   only once its bytes are durable (``aggregate_store``), so an accept record never
   claims bytes a restart would lose; after a restart the reloaded ones are
   announced to the commit core and served.
4. ``ApplyAggregate`` -> the worker applies the aggregate -> ``Applied`` -> the core
   says ``Committed`` (logged as ``commit``), and ``StepStarted`` begins ``s + 1``.

A node that finds peers beyond its reach (``Behind``), and every node as it
starts, runs the rejoin core: it pulls the live state from a peer in streamed
chunks, verified against its fingerprint, and restarts its commit core at the
installed step (a peer that has committed nothing answers with a genesis offer, so
a fresh cluster starts at step 0 and a fresh node in a trained cluster fetches the
state instead of training from step 0).  The state carries its configuration
(``StateOffer.voters``), so the new commit core votes with the right quorum.

Membership (``membership_driver``): join and leave requests go to the membership
core; the next proposal carries its one pending change; a committed change is
applied by the commit core itself and logged (``config_change``).  A joiner runs no
step until a member treats it as one (its heartbeats or commit messages reach it),
then fetches the state, contributes as a learner, and is promoted once a voter sees
its contribution for the voter's current step (it has caught up).  When to
checkpoint is the node core's decision (``node_core.Checkpointing``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from swarmshake.reference_node.protocol import aggregate_pulls as ap
from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol import membership as mb
from swarmshake.reference_node.protocol import messages as msgs
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import rejoin as rj
from swarmshake.reference_node.protocol import sharding
from swarmshake.reference_node.protocol import state_transfer as st
from swarmshake.reference_node.protocol import step_apply as sa
from swarmshake.reference_node.protocol import step_node as sn
from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.runtime import ipc
from swarmshake.reference_node.runtime.durable import write_atomically
from swarmshake.reference_node.runtime.membership_driver import Configuration

if TYPE_CHECKING:
    from swarmshake.reference_node.runtime.node import ControlProcess

IDLE_RECHECK_S = 0.5  # bound on any wait; every input that matters also wakes the loop
# Action batches that may wait on one acceptor fsync: inbound messages arrive at most
# a few hundred per second, so this many means the disk hung for minutes; the node
# stops rather than grow without bound.
MAX_DEFERRED_BATCHES = 100_000
# Exit code of a joiner that nobody added within ``join_timeout_s``.
EXIT_JOIN_FAILED = 4


def _resume_on_loop(loop, callback, rest, generation, done) -> None:  # noqa: ANN001
    """Done-callback of a persist (runs on the fsync thread): continue on the loop."""
    loop.call_soon_threadsafe(callback, done, rest, generation)


FLOOR_FILE = "pruned-through"  # AcceptorStore: the highest step whose record is gone


def _record_step(path: Path) -> int:
    return int(path.stem.removeprefix("step-"))


class AcceptorStore:
    """Durable acceptor records, one small file per step, written atomically with fsync."""

    def __init__(
        self, folder: Path, config: nc.NodeConfig = nc.NODE_DEFAULTS, bugs: BugSet = NO_BUGS
    ):
        self.folder = folder
        self.config = config
        self.bugs = bugs
        folder.mkdir(parents=True, exist_ok=True)
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(cm.AcceptorRecord)
        # This store is the floor's only writer (one per node process), so it is read
        # once here rather than on every write.
        self._floor = self._read_floor()
        # The value each kept record accepted (step -> fingerprint): their bytes stay
        # in the worker's aggregate store (node_core.aggregates_to_keep).  Written on
        # the persist thread, read on the control loop: replaced whole, never changed
        # in place, so a reader always sees one consistent mapping.
        self.accepted: Mapping[int, str] = {
            r.step: r.accepted_value.agg_fp for r in self.load() if r.accepted_value is not None
        }

    def write(self, record: cm.AcceptorRecord) -> None:
        write_atomically(self.folder, f"step-{record.step:012d}.json", self._encoder.encode(record))
        accepted = dict(self.accepted)
        if record.accepted_value is not None:
            accepted[record.step] = record.accepted_value.agg_fp
        paths = {_record_step(path): path for path in self.folder.glob("step-*.json")}
        pruning = nc.prune_records(paths, self._floor, config=self.config, bugs=self.bugs)
        if pruning.floor > self._floor:
            # The floor goes to disk before the records do (node_core.prune_records).
            write_atomically(self.folder, FLOOR_FILE, str(pruning.floor).encode())
            self._floor = pruning.floor
        for step in pruning.steps:
            paths[step].unlink(missing_ok=True)
            accepted.pop(step, None)
        self.accepted = accepted

    def pruned_through(self) -> int:
        """The highest step whose record was pruned (-1: none)."""
        return self._floor

    def _read_floor(self) -> int:
        try:
            return int((self.folder / FLOOR_FILE).read_text())
        except FileNotFoundError:
            return -1
        except ValueError:
            # Written durably before any record goes, so it is never torn; a file
            # damaged by hand makes this node stay out of every step it recorded.
            records = sorted(self.folder.glob("step-*.json"))
            return _record_step(records[-1]) if records else -1

    def load(self) -> list[cm.AcceptorRecord]:
        records = []
        for path in sorted(self.folder.glob("step-*.json")):
            try:
                records.append(self._decoder.decode(path.read_bytes()))
            except (msgspec.DecodeError, OSError):
                continue  # a torn write of the newest record: its reply was never sent
        return records


class StepDriver:
    def __init__(self, node: ControlProcess):
        self.node = node
        self.config = node.config
        self.name = node.node
        self.membership = node.membership
        self.decisions = node.config.decisions()  # the node core's knobs
        self.store = AcceptorStore(
            node.config.data_dir / "acceptor", self.decisions, node.config.bug_set
        )
        self.persisted = self.store.load()
        ready = node.worker_ready
        assert ready is not None
        self.step = ready.step  # the next step to run
        self.param_fp = ready.param_fp
        self.genesis_fp = ready.initial_param_fp
        self.latest_checkpoint: rj.CheckpointInfo | None = None
        if ready.checkpoint_path and ready.step > 0:
            self.latest_checkpoint = rj.CheckpointInfo(
                path=ready.checkpoint_path, step=ready.step - 1, param_fp=ready.param_fp
            )
        # The configuration the worker's state runs under (a checkpoint may be older
        # than the newest configuration this node saw).
        self.membership.restart_at(
            self.membership.configs.after(self.step - 1), from_peer=False, tell_detector=False
        )
        # Joins and clean leaves: the node core's decisions (its timeouts are this
        # node's [node] settings).
        self.enrolment = nc.Enrolment(
            joining=self.membership.state.starts_as_joiner(), now=node.clock.now(),
            join_timeout_s=self.config.node.join_timeout_s,
            leave_timeout_s=self.config.node.leave_timeout_s, config=self.decisions,
        )  # fmt: skip
        # The configuration the install under way runs under (StateTransfer's InstallState).
        self.install_config: Configuration | None = None
        # The node core's step part: the commit core (attached while steps run), who
        # proposes and when, the pulls, the apply and the aggregates held.
        self.step_node = sn.StepNode(node=self.name, config=self.decisions, alive=self._alive())
        for step, agg_fp in ready.stored_aggregates:
            # Reloaded after a restart: told to the commit core once the startup
            # rejoin has started it at the right step (StepNode.attach).
            self.step_node.held.add(step, agg_fp)
        first_start = nc.is_first_start(node.incarnation)
        self.checkpoints = nc.Checkpointing(
            self.config.step.checkpointing(), node.clock.now(), restarted=not first_start
        )
        # What the first pass of the loop does: fetch the cluster's state (a restart),
        # begin the step the worker's state is at (the first start), or nothing (a
        # joiner, which waits to be added).
        self.startup: str | None = None
        if not self.enrolment.joining:
            rejoins = nc.rejoins_at_start(first_start=first_start, joining=False)
            self.startup = "rejoin" if rejoins else "begin"
        # Acceptor records are fsynced on this thread, off the control loop (perform()).
        self._persist_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="acceptor-fsync"
        )
        self._persisting = False
        self._deferred: collections.deque[list] = collections.deque()
        self._generation = 0  # bumped when the core is replaced: its queued actions are moot
        # The commit core of the configuration the worker's state runs under: the step
        # node's once a step begins (the first pass of the loop, or an install).
        self.core = self._new_core(self.step)
        self.committed = 0
        self._wake = asyncio.Event()
        # Per-step bookkeeping for the current step (reset when the step advances).
        self.contributed_at: float | None = None
        self.requested_contribution = -1
        self.gradient_asked = -1  # the step of the worker's last Contribute since an install
        # The node core's state fetch: whether the step runs or the state is fetched,
        # from whom, and what is installed.
        self.transfer = st.StateTransfer(
            node=self.name, incarnation=node.events.incarnation, seed=self.config.node.seed,
            configs=self.membership.configs, config=self.decisions, bugs=self.config.bug_set,
        )  # fmt: skip
        self._records_durable()
        self.rejoin_started = 0.0
        self.rejoin_durations: list[float] = []
        self.started_at = node.clock.now()
        self.step_started_at = node.clock.now()
        self.step_durations: list[float] = []
        self.peer_steps: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.loop_iterations = 0
        self.last_due: float | None = None
        # Sharded aggregation: the (step, owner plan) last told to the worker.
        training = self.config.training
        self.sharded = sharding.uses_sharding(training.aggregation_path, training.aggregation)
        self.shard_plan_sent: tuple[int, tuple[str, ...]] | None = None

    def _new_core(
        self, first_step: int, configuration: Configuration | None = None
    ) -> cm.StepCommit:
        conf = configuration or self.membership.configs.after(first_step - 1)
        voters, learners = nc.commit_roles(conf.voters, conf.learners, self.name)
        return cm.StepCommit(
            node=self.name,
            voters=voters,
            learners=learners,
            first_step=first_step,
            seed=self.config.node.seed,
            persisted=tuple(r for r in self.persisted if r.step >= first_step),
            bugs=self.config.bug_set,
            vote_floor=self.store.pruned_through(),
        )

    @property
    def steps_run(self) -> bool:
        """Whether the commit core runs: not while the state is fetched or a failed
        fetch waits for its retry (node_core.StateFetch), and not for a joiner, whose
        core is a placeholder (DRIVERS.md: a joiner runs no step; its leftover core,
        built from its checkpoint's configuration, once ran rounds of a step as a voter
        it no longer was -- the agreement test's peer_prepare draws found it)."""
        return self.transfer.steps and not self.enrolment.joining

    @property
    def rejoin(self) -> rj.Rejoin | None:
        """The rejoin core of the fetch under way, if any (StateTransfer's)."""
        return self.transfer.rejoin

    # -- inputs --------------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def on_message(self, message: msgs.Message) -> None:
        if isinstance(message, msgs.LeaveConfirmed):
            # Not a step this node is behind on: the step of its own removal.
            members = self.membership.configs.latest().members
            recorded = False
            if self.enrolment.confirms_removal(message.sender, members):
                # On disk before the stop or restart (its next process joins).
                recorded = self.membership.removal_confirmed(message.step)
            self.enrol(
                self.enrolment.removal_confirmed(
                    message.sender, members, step=message.step, recorded=recorded
                )
            )
            return
        step = nc.running_step(message)
        if step is not None:
            nc.note_peer_step(self.peer_steps, message.sender, step)
        if isinstance(message, msgs.StateRequest):
            self._serve_state(message.sender)
            return
        if isinstance(message, msgs.StateOffer):
            self._on_offer(message)
            return
        if isinstance(message, msgs.JoinRequest):
            if self.enrolment.takes_requests:
                self.membership.feed(
                    mb.JoinRequested(peer=message.sender, incarnation=message.incarnation)
                )
            return
        if isinstance(message, msgs.LeaveNotice):
            if self.enrolment.takes_requests:
                self.membership.feed(
                    mb.LeaveRequested(peer=message.sender, incarnation=message.incarnation)
                )
                self._confirm_removal(message.sender)
            return
        if isinstance(message, cm.CommitMessage.__args__):  # type: ignore[attr-defined]
            if self.enrolment.joining:
                self.on_join_evidence(message.sender)
                return
            if not self.steps_run:
                return  # our core restarts at the installed step; older traffic is moot
            self.feed(cm.MessageReceived(message=message))
        self.wake()

    def on_join_evidence(self, peer: str) -> None:
        """``peer`` sent this joiner heartbeats or commit traffic: it holds this node as
        a member, so the add is committed there and the state can be fetched."""
        if self.enrolment.joining:
            self.enrol(self.enrolment.evidence(peer, self.membership.configs.latest().members))
            self.wake()

    def on_detector_action(self, action: object) -> None:
        now = self.node.clock.now()
        match action:
            case det.ViewChanged():
                self.feed(nc.ViewChanged(alive=tuple(action.alive)))
                if self.shard_plan_sent is not None and self.shard_plan_sent[0] == self.step:
                    self._send_shard_plan(self.step)  # a dead owner's shards move on
            case det.DeclaredDead():
                self.feed_rejoin(st.SourceDead(peer=action.peer))
                self.checkpoints.failure(now)  # Young-Daly's input: the observed failures
                self.membership.feed(
                    mb.PeerDeclaredDead(peer=action.peer, incarnation=action.peer_incarnation)
                )
            case det.DeclaredAlive():
                self.membership.feed(
                    mb.PeerAlive(peer=action.peer, incarnation=action.peer_incarnation)
                )

    def on_worker(self, message: object) -> None:
        match message:
            case ipc.Contributed():
                # A gradient asked for before the last install is moot: the install
                # starts the step afresh (it asks again, or re-proposes a stored value).
                current = self.gradient_asked == message.step
                if message.step == self.step and self.steps_run and current:
                    self.contributed_at = self.node.clock.now()
                    self.feed(nc.OwnContribution(step=message.step))
            case ipc.ContributionArrived():
                self.feed(nc.ContributionArrived(step=message.step, sender=message.sender))
                if message.step == self.step and message.sender in self.core.learners:
                    # A learner computed a gradient for our current step: it holds the
                    # committed state of the step before, i.e. it has caught up.
                    self.membership.feed(mb.LearnerCaughtUp(peer=message.sender, step=message.step))
            case ipc.AggregateHeld():
                self.feed(
                    sn.AggregateHeld(
                        step=message.step,
                        value_fp=message.agg_fp,
                        contributors=tuple(message.contributors),
                        change=self.membership.core.change_for_next_step(),
                    )
                )
            case ipc.AggregateMissing():
                if not message.agg_fp:  # a BuildAggregate that could not run
                    self.errors["aggregate_failed"] = self.errors.get("aggregate_failed", 0) + 1
                self.feed(
                    sn.AggregateUnavailable(
                        step=message.step,
                        value_fp=message.agg_fp,
                        source=message.source,
                        contributors=tuple(message.contributors),
                        missing=tuple(message.missing),
                        state_step=message.state_step,
                    )
                )
            case ipc.AggregateStoreFailed():
                # Like a failed acceptor record: a node whose disk cannot keep the bytes
                # its votes claim must not vote.
                self.node.request_stop(
                    f"aggregate store write failed for step {message.step}: {message.reason}"
                )
            case ipc.Applied():
                self.feed(
                    sn.AggregateApplied(
                        step=message.step, value_fp=message.agg_fp, param_fp=message.param_fp
                    )
                )
            case ipc.StateServing():
                self._offer(message.requester, message.step, message.param_fp, message.nbytes)
            case ipc.StateStaged():
                if message.source == "checkpoint":
                    self.feed_rejoin(
                        rj.CheckpointLoaded(step=message.step, computed_fp=message.computed_fp)
                    )
                else:
                    self.feed_rejoin(
                        st.BytesArrived(
                            source=message.source, step=message.step,
                            computed_fp=message.computed_fp, nbytes=message.nbytes,
                        )
                    )  # fmt: skip
            case ipc.StateInstalled():
                self._on_state_installed(message)
            case ipc.StateFailed():
                self.errors["state_failed"] = self.errors.get("state_failed", 0) + 1
                self.feed_rejoin(st.StateFailed(source=message.source, reason=message.reason))
            case ipc.CheckpointFailed():
                self.errors["checkpoint_failed"] = self.errors.get("checkpoint_failed", 0) + 1
                self.checkpoints.failed(self.node.clock.now(), message.reason)
            case ipc.CheckpointDone():
                self.checkpoints.done(self.node.clock.now())
                if message.param_fp and message.step > 0:
                    self.latest_checkpoint = rj.CheckpointInfo(
                        path=message.path, step=message.step - 1, param_fp=message.param_fp
                    )
        self.wake()

    # -- the core ------------------------------------------------------------------------------

    def feed(self, event: object) -> None:
        """Feed the node core's step part (its commit core runs only while steps run:
        ``StepNode.attach``/``detach``); perform its actions."""
        self.perform(self.step_node.handle(event, self.node.clock.now()))  # type: ignore[arg-type]
        self.wake()

    def perform(self, actions: list) -> None:
        """Perform the core's actions in order.  A ``Persist`` (fsync: milliseconds,
        at times hundreds under disk load) runs on the persistence thread so the
        control loop keeps sending heartbeats; every later action -- of this batch
        and of batches produced meanwhile -- waits in ``_deferred`` until the record
        is durable, so nothing a peer sees ever precedes the persist."""
        if self._persisting:
            if len(self._deferred) >= MAX_DEFERRED_BATCHES:
                self._deferred.clear()  # never performed: to peers, lost messages
                self.node.request_stop(
                    f"acceptor store: {MAX_DEFERRED_BATCHES} action batches waited on one fsync"
                )
                return
            self._deferred.append(list(actions))
            return
        self._perform_until_persist(list(actions))

    def _perform_until_persist(self, actions: list) -> None:
        running = self.steps_run
        for index, action in enumerate(actions):
            if isinstance(action, cm.Persist):
                self._persisting = True
                generation = self._generation
                rest = actions[index + 1 :]
                loop = asyncio.get_running_loop()
                future = self._persist_pool.submit(self.store.write, action.record)
                future.add_done_callback(
                    functools.partial(_resume_on_loop, loop, self._persisted, rest, generation)
                )
                return
            self._perform_one(action)
            if running and not self.steps_run:
                return  # a Behind began a fetch: the rest of the batch is dropped

    def _persisted(self, done: concurrent.futures.Future, rest: list, generation: int) -> None:
        self._persisting = False
        error = done.exception()
        if error is not None:
            # Not durable: the vote must never be sent.  Stop the node (a disk that
            # fails fsync cannot keep an acceptor's promises).
            self._deferred.clear()
            self.node.request_stop(f"acceptor store write failed: {error!r}")
            return
        self._records_durable()
        if generation == self._generation:  # else: the core was replaced meanwhile
            self._perform_until_persist(rest)
        while not self._persisting and self._deferred:
            self._perform_until_persist(self._deferred.popleft())
        self.wake()

    def _records_durable(self) -> None:
        """Hand the node core the accepted values of the durable acceptor records: the
        aggregates an apply or an install keeps (node_core.aggregates_to_keep).  The
        store replaces its mapping whole on every write, so both parts get the new one."""
        accepted = self.store.accepted
        self.step_node.accepted = accepted
        self.transfer.accepted = accepted

    def _perform_one(self, action: object) -> None:
        self._history(action)  # logged before the action it describes
        match action:
            case cm.Send():
                for peer in action.to:
                    self.node.send_message(peer, action.message)
            case cm.Committed():
                self.param_fp = action.param_fp
                self.committed += 1
                if action.value.config_change is not None:
                    self._config_committed(action.step, action.value.config_change)
                self._maybe_checkpoint(
                    action.step, changes_configuration=action.value.config_change is not None
                )
            case cm.Behind():
                nc.note_peer_step(self.peer_steps, action.peer, action.peer_step)
                self._start_rejoin(action.peer)
            case nc.BuildValue() | ap.RebuildAggregate():
                # The worker answers AggregateHeld (or AggregateMissing).
                self.node.to_worker(
                    ipc.BuildAggregate(step=action.step, contributors=list(action.contributors))
                )
            case ap.RequestAggregate():
                self.node.to_worker(
                    ipc.FetchAggregate(
                        step=action.step, agg_fp=action.value_fp, source=action.source
                    )
                )
            case sa.ApplyAggregate():
                # The worker applies, then answers Applied (or AggregateMissing); it also
                # drops from memory what the window no longer keeps (the pinned bytes
                # stay on its disk only, for a restart).
                self.node.to_worker(
                    ipc.ApplyCommitted(
                        step=action.step,
                        agg_fp=action.value.agg_fp,
                        keep_from_step=action.keep_from_step,
                        pinned=list(action.pinned),
                    )
                )
            case sn.StepStarted():
                self._advance_to(action.step)
            case sn.StateDiverged():
                # The worker's parameters are not the ones this step applies to.
                self.errors["state_diverged"] = self.errors.get("state_diverged", 0) + 1
                self._start_rejoin(None)
            case sn.MessageRefused():
                reason = nc.refusal_reason("commit", action.reason)
                self.node.drops.drop(reason, action.sender)
                self.node.refused(action.sender, action.reason)

    def _history(self, action: object) -> None:
        mapped = nc.history_of(action, node=self.name, step=self.step)
        if mapped is not None:
            self.node.events.log(mapped[0], **mapped[1])

    # -- rejoin -----------------------------------------------------------------------------------

    def at_genesis(self) -> bool:
        """This node holds the initial parameters and has committed nothing."""
        return self.step == 0 and bool(self.genesis_fp) and self.param_fp == self.genesis_fp

    def _start_rejoin(self, peer: str | None) -> None:
        """Fetch the cluster's state: ``peer`` showed we are behind (None: this node
        starts, or a failed fetch is tried again).  StateTransfer decides the rest."""
        fetch = st.FetchState(
            evidence=peer,
            own_step=self.step,
            alive=self._alive(),
            members=self.core.members,
            newest_members=self.membership.configs.latest().members,
            peer_steps=dict(self.peer_steps),
            at_genesis=self.at_genesis(),
            genesis_param_fp=self.genesis_fp,
            joining=self.enrolment.joining,
            local_checkpoint=self.latest_checkpoint,
            local_param_fp=self.param_fp,
            vote_floor=self.store.pruned_through(),
        )
        self.feed_rejoin(fetch)

    def feed_rejoin(self, event: object) -> None:
        """Feed the node core's state fetch; perform its actions."""
        actions = self.transfer.handle(event, self.node.clock.now())  # type: ignore[arg-type]
        for action in actions:
            self._history(action)  # logged before the action it describes
            match action:
                case st.SuspendSteps():
                    # What the old core still had queued behind a persist, and an apply
                    # under way, are moot.
                    self.step_node.detach()
                    self._generation += 1
                    self._deferred.clear()
                    self.install_config = None
                    self.rejoin_started = self.node.clock.now()
                case rj.RequestState():
                    self.node.to_worker(ipc.ExpectState(source=action.source))
                    self.node.send_message(
                        action.source,
                        msgs.StateRequest(sender=self.name, incarnation=self.node.incarnation),
                    )
                case rj.LoadCheckpoint():
                    self.node.to_worker(ipc.LoadCheckpointFile(path=action.path))
                case st.InstallState():
                    self.install_config = action.configuration
                    if action.step == msgs.GENESIS_STEP:
                        # The initial parameters, which this node still holds (the
                        # core is given the genesis fingerprint only then): nothing
                        # to install, start at step 0.
                        self._installed(0, self.genesis_fp, action.source)
                    else:
                        self.node.to_worker(
                            ipc.InstallStaged(
                                source=action.source,
                                next_step=action.step,
                                keep_from_step=action.keep_from_step,
                                pinned=list(action.pinned),
                            )
                        )
                case rj.RejoinFailed():
                    self.errors["rejoin_failed"] = self.errors.get("rejoin_failed", 0) + 1
                case st.FrameRefused():
                    self.node.drops.drop(action.reason, action.peer)
        self.wake()

    def _on_state_installed(self, message: ipc.StateInstalled) -> None:
        self._installed(message.next_step, message.param_fp, message.source)

    def _installed(self, next_step: int, param_fp: str, source: str) -> None:
        # Actions of the replaced core still waiting on a persist are dropped: to the
        # peers that is message loss, which the commit protocol tolerates.
        self._generation += 1
        self._deferred.clear()
        self.feed_rejoin(st.StateInstalled())
        self.rejoin_durations.append(self.node.clock.now() - self.rejoin_started)
        configuration = self.install_config or self.membership.configs.after(next_step - 1)
        self.install_config = None
        from_peer = nc.state_from_peer(source)
        # Not named by the state's configuration: (still) a joiner, or a removed leaver.
        self.enrol(
            self.enrolment.installed(member=self.name in configuration.members, from_peer=from_peer)
        )
        self.membership.restart_at(
            configuration,
            from_peer=from_peer,
            tell_detector=True,
            held_as_member=self.enrolment.held_as_member,
        )
        self.param_fp = param_fp
        self.step = next_step
        self.persisted = self.store.load()
        self.core = self._new_core(next_step, configuration)
        self.step_node.detach()  # the apply under way, if any, is moot
        # The installed parameters start the step afresh: a gradient asked for before
        # (a checkpoint fallback lands on the step the node was at) came from the
        # parameters the install replaced.
        self.requested_contribution = next_step - 1
        self.gradient_asked = -1
        self.peer_steps = {}
        if self.steps_run:
            self._begin_steps()
        else:
            self._advance_to(next_step)  # a joiner's step: none runs until it is added

    def _begin_steps(self) -> None:
        """The commit core runs: the step node attaches it (it sees the view, is told of
        the aggregates held, and its step begins)."""
        self.perform(self.step_node.attach(self.core, self.node.clock.now()))
        self.wake()

    # -- state offers ------------------------------------------------------------------------------

    def _serve_state(self, requester: str) -> None:
        serve = nc.state_to_serve(
            joining=self.enrolment.joining,
            at_genesis=self.at_genesis(),
            fetching=not self.transfer.steps,
        )
        if serve == nc.SERVE_GENESIS:
            self._offer(requester, msgs.GENESIS_STEP, self.genesis_fp, 0)  # no bytes follow
        elif serve == nc.SERVE_STATE:
            self.node.to_worker(ipc.ServeState(requester=requester))

    def _offer(self, requester: str, step: int, param_fp: str, nbytes: int) -> None:
        offer = nc.state_offer(
            self.name, step=step, param_fp=param_fp, nbytes=nbytes, configs=self.membership.configs
        )
        self.node.send_message(requester, offer)

    def _on_offer(self, message: msgs.StateOffer) -> None:
        self.feed_rejoin(st.OfferArrived(offer=message, joining=self.enrolment.joining))

    # -- membership ---------------------------------------------------------------------------------

    def _confirm_removal(self, peer: str) -> None:
        """Tell ``peer`` its removal committed here, if it did (node_core.removal_step)."""
        step = nc.removal_step(self.membership.configs, peer)
        if step is not None:
            self.node.send_message(peer, msgs.LeaveConfirmed(sender=self.name, step=step))

    def _config_committed(self, step: int, change: msgs.ConfigChangeRequest) -> None:
        self.membership.committed(step, change)
        self.enrol(self.enrolment.configuration_committed(step, change, node=self.name))

    def begin_leave(self, reason: str) -> None:
        """A clean leave: ask the voters to remove this node through a committed step,
        keep voting until it commits (bounded by ``leave_timeout_s``), then stop."""
        self.enrol(
            self.enrolment.begin_leave(
                reason, self.node.clock.now(), member=self.name in self.core.members,
                last_voter=self.core.voters == (self.name,),
            )
        )  # fmt: skip
        self.wake()

    def enrol(self, actions: list[nc.EnrolmentAction]) -> None:
        """Perform the enrolment core's actions (node_core.Enrolment)."""
        incarnation = self.node.events.incarnation
        for action in actions:
            match action:
                case nc.StopNode():
                    code = EXIT_JOIN_FAILED if action.join_failed else 0
                    self.node.request_stop(action.reason, code=code)
                case nc.RestartAsJoiner():
                    self.node.request_restart(action.reason)
                case nc.RequestRemoval():
                    self.membership.feed(mb.LeaveRequested(peer=self.name, incarnation=incarnation))
                case nc.StartDetector():
                    self.node.start_detector()  # heartbeat back before its watch's grace ends
                case nc.FetchStateFrom():
                    self._start_rejoin(action.peer)
                case nc.ConfirmRemoval():
                    self._confirm_removal(action.peer)
                case nc.SendJoinRequest():
                    request = msgs.JoinRequest(sender=self.name, incarnation=incarnation)
                    for voter in action.to:
                        self.node.send_message(voter, request)
                case nc.SendLeaveNotice():
                    notice = msgs.LeaveNotice(sender=self.name, incarnation=incarnation)
                    for voter in action.to:
                        self.node.send_message(voter, notice)

    # -- checkpoints ------------------------------------------------------------------------------

    def _maybe_checkpoint(self, step: int, *, changes_configuration: bool) -> None:
        now = self.node.clock.now()
        due = self.checkpoints.committed(step, now, changes_configuration=changes_configuration)
        if due is not None:
            self.node.to_worker(ipc.WriteCheckpoint(replicate_to=self.replica_peers()))

    def force_checkpoint(self) -> None:
        self.checkpoints.forced(self.node.clock.now(), "forced by the harness")
        self.node.to_worker(ipc.WriteCheckpoint(replicate_to=self.replica_peers()))

    def replica_peers(self) -> list[str]:
        core = self.core
        wanted = self.config.step.checkpoint_replicas
        seed = self.config.node.seed
        return list(nc.replica_peers(seed, self.name, core.voters, core.members, wanted))

    # -- the step loop ------------------------------------------------------------------------------

    def _advance_to(self, step: int) -> None:
        now = self.node.clock.now()
        if step != self.step:
            self.step_durations.append(now - self.step_started_at)
            if len(self.step_durations) > 1000:  # bounded: the recent window is what matters
                del self.step_durations[:500]
        self.step = step
        self.step_started_at = now
        self.contributed_at = None

    def _done(self) -> bool:
        limit = self.config.step.max_steps
        return bool(limit) and self.step >= limit

    def _behind_peers(self) -> str | None:
        return nc.peer_ahead(
            self.step,
            self.peer_steps,
            self.node.detector.core.alive_view(),
            self.core.config.state_transfer_gap_steps,
            self.core.members,
        )

    def _maybe_progress(self, now: float) -> float | None:
        """Start what is due; returns the next node-clock time something is due (a
        joiner's next request and a leaver's next notice included)."""
        enrolment = self.enrolment
        if enrolment.leaving is not None or enrolment.joining:
            self.enrol(
                enrolment.tick(
                    now, voters=self.core.voters,
                    join_voters=self.membership.configs.latest().voters,
                    fetching=self.rejoin is not None,
                )
            )  # fmt: skip
        if enrolment.joining:
            due = self.rejoin.next_deadline() if self.rejoin is not None else None
        else:
            due = self._progress(now)
        enrolment_due = enrolment.next_deadline(fetching=self.rejoin is not None)
        return min((d for d in (due, enrolment_due) if d is not None), default=None)

    def _progress(self, now: float) -> float | None:
        """A member's step loop: start what is due; returns when something next is."""
        if self.startup is not None:
            startup, self.startup = self.startup, None
            if startup == "rejoin":
                self._start_rejoin(None)
            else:
                self._begin_steps()
        if self.rejoin is not None:
            return self.rejoin.next_deadline()
        fetch = self.transfer.fetch
        if fetch.retry_at is not None:
            if not fetch.retry_due(now):
                return fetch.retry_at
            self._start_rejoin(None)
            return None
        peer = self._behind_peers()
        if peer is not None and self.step_node.apply.pending is None:
            self._start_rejoin(peer)
            return None
        if self._done():
            return None
        step = self.step
        if self.name not in self.core.members:
            return None  # removed: the node is stopping
        if self.requested_contribution < step:
            self._send_shard_plan(step)  # before Contribute: the worker sends by it
        leader = self.step_node.leader
        if self.requested_contribution < step and not leader.contributes():
            self.requested_contribution = step  # re-proposing a stored value: no gradient
        if self.requested_contribution < step:
            self.requested_contribution = step
            self.gradient_asked = step
            others = [m for m in self.core.members if m != self.name]
            self.node.to_worker(ipc.Contribute(step=step, to=others))
            return None
        due = leader.next_deadline()  # who proposes and when: the node core's
        if due is not None and due <= now:
            self.feed(nc.Tick())
            due = leader.next_deadline()
        return due

    def _send_shard_plan(self, step: int) -> None:
        """Tell the worker who aggregates each shard of ``step`` (protocol.sharding
        decides; sent again only when the plan changed)."""
        if not self.sharded:
            return
        owners = sharding.shard_owners(self.core.members)
        plan = sharding.owner_plan(owners, self._alive(), self.name)
        if self.shard_plan_sent == (step, plan):
            return
        self.shard_plan_sent = (step, plan)
        self.node.to_worker(ipc.ShardPlan(step=step, owners=list(owners), plan=list(plan)))

    def _alive(self) -> tuple[str, ...]:
        return tuple(self.node.detector.core.alive_view())

    def poll(self, now: float) -> float | None:
        """One pass of the loop at node-clock time ``now``: fire what is due (the commit
        core's and the rejoin core's timers, then the leader's and the step's); returns
        the next node-clock time something is due (None: only an input wakes it)."""
        while True:
            deadline = self.step_node.deadlines()[0]
            if deadline is not None and deadline <= now:
                self.feed(cm.Tick())
                continue
            rejoin_deadline = self.rejoin.next_deadline() if self.rejoin else None
            if rejoin_deadline is not None and rejoin_deadline <= now:
                self.feed_rejoin(rj.Tick())
                continue
            break
        due = self._maybe_progress(now)
        self.loop_iterations += 1
        self.last_due = due
        # Every unanswered pull that is due moves on to its next source.
        pulls_due = self.step_node.deadlines()[2]
        if pulls_due is not None and pulls_due <= now:
            self.feed(sn.PullsDue())
            pulls_due = self.step_node.deadlines()[2]
        return min((t for t in (deadline, due, pulls_due) if t is not None), default=None)

    async def run(self, group: asyncio.TaskGroup) -> None:
        del group  # every task this driver needs is this one loop
        clock = self.node.clock
        while True:
            now = clock.now()
            wake_at = self.poll(now)
            delay = (
                IDLE_RECHECK_S
                if wake_at is None
                else min(IDLE_RECHECK_S, clock.host_delay_s(wake_at - now))
            )
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(delay, 0.0)):
                    await self._wake.wait()

    # -- status ---------------------------------------------------------------------------------

    def _pull_errors(self) -> dict[str, int]:
        pulls = self.step_node.pulls
        counts = {
            "rebuild_mismatch": pulls.mismatches,
            "pulls_refused": pulls.refused,
            "proposals_refused": self.step_node.proposals_refused,
        }
        return {name: count for name, count in counts.items() if count}

    def status(self) -> dict[str, Any]:
        recent = self.step_durations[-50:]
        leader, proposer, apply = (
            self.step_node.leader,
            self.step_node.proposer,
            self.step_node.apply,
        )
        return {
            "core_step": self.core.step,
            "phase": self.core.phase,
            "leader_rank": leader.rank(),
            "leader": leader.status(self.node.clock.now()),
            "rejoining": self.rejoin.phase if self.rejoin else "",
            "rejoin_retry_in_s": None
            if self.transfer.fetch.retry_at is None
            else self.transfer.fetch.retry_at - self.node.clock.now(),
            "rejoin_durations_s": [round(d, 3) for d in self.rejoin_durations[-10:]],
            "step_time_s_mean_recent": sum(recent) / len(recent) if recent else 0.0,
            "step_time_s_median_recent": sorted(recent)[len(recent) // 2] if recent else 0.0,
            "dropped_by_core": self.core.dropped,
            "contributed": self.contributed_at is not None,
            "arrived": sorted(leader.arrived.get(self.step, ())),
            "building": list(proposer.building[1]) if proposer.building else None,
            "proposed": proposer.proposed,
            "loop_iterations": self.loop_iterations,
            "last_due_in_s": None
            if self.last_due is None
            else self.last_due - self.node.clock.now(),
            "pending_apply": [apply.pending[0], apply.pending[1].agg_fp] if apply.pending else None,
            "fetching": [f"{s}:{fp}" for s, fp in self.step_node.pulls.keys()],
            "errors": {**self.errors, **self._pull_errors()},
            "joining": self.enrolment.joining,
            "leaving": self.enrolment.leaving or "",
            "membership": self.membership.status(),
            "checkpoints": self.checkpoints.status(self.node.clock.now()),
        }
