"""The node's worker process: training steps, bulk tensor I/O, aggregation, checkpoints.

Started by the control process (``node.py``) through ``worker_entry`` with one
end of a socketpair; runs niced (DESIGN.md: so heartbeats on the control process
win the CPU) and dies with its parent (``PR_SET_PDEATHSIG`` plus EOF on the
socketpair).

Its asyncio loop owns the bulk listener and diallers (decoding and HMAC of large
frames happen here, never on the control loop).  Tensor math runs on one compute
thread (torch releases the GIL), so the loop keeps serving bulk frames while a
step computes, and compute operations never race on the parameters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import json
import os
import socket
import sys
import time
from pathlib import Path

import msgspec
import torch

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.config import NodeConfig, load
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol.sharding import uses_sharding
from swarmshake.reference_node.runtime import ipc
from swarmshake.reference_node.runtime.aggregate_store import AggregateStore, AggregateStoreError
from swarmshake.reference_node.runtime.bulk import (
    CONTENT_NAMED_KINDS,
    Assembler,
    AssemblyError,
    BulkChunk,
    BulkMessage,
    BulkRefusal,
    BulkRequest,
    HeldStateChunks,
    send_chunks,
    split,
    state_blob,
)
from swarmshake.reference_node.runtime.checkpoint_replication import ReplicaService
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.frames import Channel, DropCounter, Frame, PayloadCodec
from swarmshake.reference_node.runtime.links import AddressBook, PeerAddress, PeerLinks
from swarmshake.reference_node.runtime.loop_watchdog import WORKER_REPORT_STALL_S, LoopWatchdog
from swarmshake.reference_node.runtime.malloc_tuning import (
    keep_freed_memory,
    keeps_freed_memory_for,
)
from swarmshake.reference_node.runtime.sharded import ShardExchange, ShardInputsMissing
from swarmshake.reference_node.training.aggregation import AggregationError, aggregate
from swarmshake.reference_node.training.behaviour import ByzantineBehaviour
from swarmshake.reference_node.training.environment import configure_torch, environment_facts
from swarmshake.reference_node.training.state import TrainingState
from swarmshake.reference_node.training.step import LocalGradient, Replica
from swarmshake.reference_node.training.wire import WireEncoder, WireError, decode

# A chunk waits this long for room in a peer's bulk queue: a stalled peer must not
# hold up the others for longer than a step is worth.
BULK_SEND_TIMEOUT_S = 10.0
# The largest state whose pull buffer is mapped ahead of a rejoin (every page touched,
# checkpoint.paged_in_payload_buffer): it saves ~1.2 s of page faults on an 800 MB
# pull, but it stays resident whether or not the node ever rejoins, and at 100M
# parameters four workers' 800 MB each helped run a 24 GB machine out of memory
# (session 20).  256 MiB: up to ~32M parameters with SGD's momentum.
PULL_BUFFER_PREPARED_MAX_BYTES = 256 << 20
# Contributions are accepted for the current step and this many ahead (peers run
# at most one step ahead of a node that is applying its commit).
AHEAD_STEPS = 2
# Bulk frames held while the worker starts: about two steps of three peers' chunks.
EARLY_FRAMES_MAX = 64


AggregateOutcome = tuple[torch.Tensor, str] | AggregationError  # (aggregate, its fingerprint)


@dataclasses.dataclass(frozen=True)
class PrefetchedGradient:
    """A gradient computed ahead for ``step`` by ``replica`` under ``behaviour``: used
    only if all three are still the worker's when Contribute arrives."""

    step: int
    replica: Replica
    behaviour: ByzantineBehaviour
    task: asyncio.Task[tuple[LocalGradient, float]]


class Worker:
    def __init__(self, config: NodeConfig, init: ipc.WorkerInit, channel: ipc.IpcChannel):
        self.config = config
        self.node = config.node_id
        self.incarnation = init.incarnation
        self.channel = channel
        self.compute = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="compute"
        )
        self.events = history.EventWriter(config.events_path)
        self.lamport = 0
        # The node's clock for the worker's own timers (shard gathers, replica
        # restores); a clock-skew fault reaches it as ipc.SetClock.  Events keep the
        # host's clock (t_mono), as the control process's do.
        self.clock = NodeClock()
        self.replica = Replica(config.training, self.node)
        # Contributions as sent (training.wire): fp32, or int8 with this node's
        # error-feedback residual, kept for the replica it was computed from.
        self.wire = WireEncoder(config.training)
        self.wire_replica: Replica | None = None
        self.source = "initial"
        param_bytes = self.replica.model.parameter_count * 4
        self.assembler = Assembler(max_blob_bytes=param_bytes)
        self.replicas = ReplicaService(self)  # checkpoint replicas (DESIGN S2)
        self.contributions: dict[int, dict[str, torch.Tensor]] = {}
        self.aggregates: dict[tuple[int, str], torch.Tensor] = {}
        # Every held aggregate is written here before AggregateHeld reports it
        # (aggregate_store.py: an accept record must never claim bytes a restart loses),
        # on its own thread: an fsync must not hold up the compute thread or the loop.
        self.aggregate_store = AggregateStore(config.data_dir / "aggregates", param_bytes)
        self.store_thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="aggregate-fsync"
        )
        self.durable: dict[tuple[int, str], asyncio.Future[object]] = {}
        # Aggregates of steps this node applied are served from the store, not memory:
        # at 100M parameters the window of four was 1.6 GB a worker, and four workers on
        # a 24 GB machine ran out of memory.  Those of steps from here on are servable
        # (the node core's window, ``ApplyCommitted.keep_from_step``), as they were
        # when memory held them.
        self.servable_from_step = 0
        self.aggregate_waiters: dict[tuple[int, str], str] = {}  # (step, fp) -> source asked
        # Latency work done ahead, with no change to what is sent or committed (the
        # same pure functions of the same inputs, started before the control process
        # asks): the aggregate of a step's full contributor set once every expected
        # contribution is held (the coordinator's and every acceptor's BuildAggregate
        # asks for exactly it on the fast path), and the next step's gradient right
        # after a commit is applied (Contribute follows once the control process has
        # handled Applied).  Each saves a control round trip per step.
        self.expected_contributors: dict[int, frozenset[str]] = {}  # step -> Contribute.to + us
        self.prebuilt: dict[tuple[int, tuple[str, ...]], asyncio.Task[AggregateOutcome]] = {}
        self.next_gradient: PrefetchedGradient | None = None
        self.state_pull: tuple[str, checkpoint.StateAssembler] | None = None
        # State chunks that beat their ExpectState to this loop (bulk.HeldStateChunks):
        # at most one state, and never more than 64 MiB.
        self.held_state = HeldStateChunks(
            min(self.replica.model.parameter_count * 4 * 3 + checkpoint.MAX_PREFIX_BYTES, 64 << 20)
        )
        # The next state pull lands here: a state-sized buffer whose pages are already
        # mapped (checkpoint.paged_in_payload_buffer: first touches cost more than the
        # transfer on this VM).  Prepared off the critical path after start and after
        # each pull; costs one state's memory per worker.
        self.pull_buffer: torch.Tensor | None = None
        # Snapshots for serving state are copied here, not into a fresh allocation:
        # cloning 800 MB into new memory costs ~1 s of page faults on this VM, into
        # mapped memory ~0.15 s.  Allocated at the first serve and kept (one state's
        # memory); a second serve while one is streaming clones as before.
        self.serve_storage: torch.Tensor | None = None
        self.serve_storage_busy = False
        # A verified state waiting for the rejoin core's decision: (source, state).
        self.staged: tuple[str, TrainingState] | None = None
        # Peers the harness's hold_bulk fault keeps every bulk frame from (empty: none).
        self.held_bulk: frozenset[str] = frozenset()
        # Blobs being queued now, as (peer, kind, step, key), of the kinds whose name
        # says their bytes (bulk.CONTENT_NAMED_KINDS).  A blob over one chunk (4 MiB: a
        # 100M model's 100 MB shard) takes long enough for its owner to be asked for it
        # again while it is still sending, and a second send would queue its bytes
        # again behind the first's: the send under way answers the request instead.
        self.blobs_sending: set[tuple[str, str, int, str]] = set()
        self.blob_sends_coalesced = 0
        self.checkpoint_path = ""
        self.ready_sent = False
        self.early_frames: list[Frame] = []
        self.drops = DropCounter(on_drop=self._on_drop)
        self.codec: PayloadCodec[BulkMessage] = PayloadCodec(BulkMessage, self.drops)
        self.book = AddressBook(
            {
                peer: PeerAddress(host=host, control_port=0, bulk_port=port)
                for peer, (host, port) in init.peers.items()
            }
        )
        self.links = PeerLinks(
            node_id=self.node,
            incarnation=self.incarnation,
            run_key=config.run_key(),
            channel=Channel.BULK,
            listen_host=config.network.listen_host,
            listen_port=init.bulk_port,
            book=self.book,
            on_frame=self._on_frame,
            counter=self.drops,
            timeouts=config.link_timeouts(),
            seed=config.node.seed,
        )
        self.group: asyncio.TaskGroup | None = None
        # Sharded aggregation (runtime/sharded.py), or None: contributions all-to-all.
        training = config.training
        self.sharded = (
            ShardExchange(self)
            if uses_sharding(training.aggregation_path, training.aggregation)
            else None
        )
        self.last_step_s = 0.0
        self._param_fp_cache: tuple[int, str] | None = None
        self.watchdog = LoopWatchdog(
            self.log, event=history.WorkerStall, report_stall_s=WORKER_REPORT_STALL_S
        )

    # -- events -------------------------------------------------------------------------------

    def log(self, cls: type[history.EventBase], step: int = -1, **fields: object) -> None:
        self.lamport += 1
        self.events.write(
            cls(
                t_wall=time.time(),
                t_mono=time.monotonic(),
                node=self.node,
                incarnation=self.incarnation,
                step=step,
                lamport=self.lamport,
                **fields,
            )
        )

    def _on_drop(self, peer: str, reason: str) -> None:
        self.log(history.FrameDrop, peer=peer, reason=f"bulk:{reason}")

    async def run_compute(self, function, *args):  # noqa: ANN001, ANN201
        return await asyncio.get_running_loop().run_in_executor(self.compute, function, *args)

    def spawn(self, coroutine):  # noqa: ANN001, ANN201
        """A task of the worker's group (it lives as long as the worker)."""
        assert self.group is not None
        return self.group.create_task(coroutine)

    # -- startup ------------------------------------------------------------------------------

    async def load_checkpoint(self) -> None:
        result = await self.run_compute(
            lambda: checkpoint.load_latest(
                self.config.checkpoint_dir,
                max_payload_bytes=self.replica.model.parameter_count * 4 * 3,
            )
        )
        for skipped in result.skipped:
            self.log(history.CheckpointSkip, path=str(skipped.path), reason=skipped.reason)
        if result.state is not None:
            self.replica = Replica(self.config.training, self.node, result.state)
            self.source = "checkpoint"
            self.checkpoint_path = str(result.path)

    def param_fp(self) -> str:
        step = self.replica.step
        if self._param_fp_cache is None or self._param_fp_cache[0] != step:
            self._param_fp_cache = (step, self.replica.param_fingerprint())
        return self._param_fp_cache[1]

    async def serve(self, init: ipc.WorkerInit) -> None:
        async with asyncio.TaskGroup() as group:
            self.group = group
            ready = asyncio.Event()
            group.create_task(self.links.serve(group, ready))
            async with asyncio.timeout(10):
                await ready.wait()
            initial_fp = await self.run_compute(self.param_fp)  # before any checkpoint
            if init.resume_from_checkpoint:
                await self.load_checkpoint()
                if self.source == "initial" and init.incarnation > 1:
                    # A restart without a checkpoint that verifies: its peers may
                    # hold a replica (a first start has none anywhere: don't wait).
                    if await self.replicas.restore(sorted(self.book.peers())) is not None:
                        await self.load_checkpoint()
                        if self.source == "checkpoint":
                            self.source = "replica"
            stored = await self.load_stored_aggregates()
            facts = environment_facts(self.config.node.seed)
            self.channel.send(
                ipc.WorkerReady(
                    step=self.replica.step,
                    param_fp=await self.run_compute(self.param_fp),
                    bulk_port=self.links.bound_port or 0,
                    worker_pid=os.getpid(),
                    source=self.source,
                    checkpoint_path=self.checkpoint_path,
                    initial_param_fp=initial_fp,
                    torch_version=facts.torch_version,
                    threads=facts.threads,
                    cpu_flags=facts.cpu_flags,
                    stored_aggregates=stored,
                )
            )
            self.ready_sent = True
            early, self.early_frames = self.early_frames, []
            for frame in early:
                self._on_frame(frame)
            group.create_task(self.report_loop())
            group.create_task(self.watchdog.run())
            group.create_task(self.prepare_pull_buffer())
            await self.command_loop(group)

    async def report_loop(self) -> None:
        while True:
            stats = self.links.stats
            self.channel.send(
                ipc.WorkerReport(
                    step=self.replica.step,
                    param_fp=self._param_fp_cache[1] if self._param_fp_cache else "",
                    bulk_drops=dict(self.drops.counts),
                    bulk_bytes_sent=stats.bytes_sent,
                    bulk_bytes_received=stats.bytes_received,
                    queue_rejected=stats.queue_rejected,
                    bulk_sends_coalesced=self.blob_sends_coalesced,
                    last_step_s=self.last_step_s,
                )
            )
            await self.channel.flush()
            await asyncio.sleep(ipc.WORKER_REPORT_S)

    async def command_loop(self, group: asyncio.TaskGroup) -> None:
        while True:
            # The control process sends at least its own pings; silence = it is gone.
            message = await self.channel.receive(timeout_s=ipc.WORKER_SILENCE_S)
            if isinstance(message, ipc.Shutdown):
                raise SystemExit(0)
            if isinstance(message, ipc.ExpectState):
                # At once, not as a task: the source streams as soon as it hears the
                # request the control process sent right after this message, and a
                # chunk handled before the pull is set up is dropped as unrequested
                # (seen: 3 of 4 rejoins then waited ~5 s for the retry).
                self.expect_state(message.source)
                continue
            # Commands run as tasks so a long one (a step) never blocks bulk I/O or infer.
            group.create_task(self.dispatch(message))

    async def dispatch(self, message: object) -> None:
        match message:
            case ipc.Contribute():
                await self.contribute(message)
            case ipc.ShardPlan():
                if self.sharded is not None:
                    self.sharded.set_plan(message)
            case ipc.BuildAggregate():
                await self.build_aggregate(message.step, message.contributors)
            case ipc.FetchAggregate():
                await self.fetch_aggregate(message)
            case ipc.ApplyCommitted():
                await self.apply(message)
            case ipc.ExpectState():
                self.expect_state(message.source)
            case ipc.ServeState():
                await self.serve_state(message.requester)
            case ipc.LoadCheckpointFile():
                await self.load_checkpoint_file(message.path)
            case ipc.InstallStaged():
                self.install_staged(message)
            case ipc.WriteCheckpoint():
                await self.write_checkpoint(message.replicate_to)
            case ipc.SetBehaviour():
                await self.set_behaviour(message)
            case ipc.HoldBulk():
                self.held_bulk = frozenset(message.peers)
            case ipc.Infer():
                await self.infer(message)
            case ipc.Ping():
                pass
            case ipc.SetClock():
                self.clock.set_skew(message.offset_s, message.drift_ppm)
            case ipc.SetIncarnation():
                self.incarnation = message.incarnation
            case ipc.UpdatePeers():
                for peer, (host, port) in message.peers.items():
                    self.book.set_harness(
                        peer, PeerAddress(host=host, control_port=0, bulk_port=port)
                    )
                    self.links.link(peer).reconnect()
            case _:
                raise ipc.IpcError(f"worker cannot handle {type(message).__name__}")

    # -- steps --------------------------------------------------------------------------------

    def _timed_contribution(self) -> tuple[LocalGradient, float]:
        """The replica's gradient for its current step (compute thread) and its time."""
        started = time.perf_counter()
        result = self.replica.contribution()
        return result, time.perf_counter() - started

    def _prefetch_gradient(self) -> None:
        """Start the gradient of the replica's current step now (see ``next_gradient``).
        Honest behaviour only: a Byzantine source may keep per-step state."""
        behaviour = self.replica.source.behaviour
        if not behaviour.is_honest() or self.group is None:
            return
        task = self.group.create_task(self.run_compute(self._timed_contribution))
        self.next_gradient = PrefetchedGradient(self.replica.step, self.replica, behaviour, task)

    async def contribute(self, message: ipc.Contribute) -> None:
        if message.step != self.replica.step:
            return  # the control process moved on (a commit raced the request)
        step = message.step
        # A state installed while the gradient is computed replaces the parameters it
        # came from, even at the same step (a rejoin that fell back to the checkpoint
        # of the step before): the control process asks for the step's gradient again.
        replica = self.replica
        self.expected_contributors[step] = frozenset(message.to) | {self.node}
        prefetched, self.next_gradient = self.next_gradient, None
        if (
            prefetched is not None
            and prefetched.step == step
            and prefetched.replica is self.replica
            and prefetched.behaviour is self.replica.source.behaviour
        ):
            result, self.last_step_s = await prefetched.task
        else:
            result, self.last_step_s = await self.run_compute(self._timed_contribution)
        if self.replica is not replica or step != replica.step:
            return  # a state was installed, or the step applied, meanwhile
        if self.wire_replica is not self.replica:
            self.wire.reset()  # a state was installed: the residual was of other parameters
            self.wire_replica = self.replica
        if self.config.training.wire_dtype == "fp32":
            payload, own = self.wire.encode(result.gradient)
        else:
            payload, own = await self.run_compute(self.wire.encode, result.gradient)
            if self.replica is not replica or step != replica.step:
                return  # a state was installed, or the step applied, meanwhile
        self.log(history.TrainStep, step=step, loss=result.loss, samples=result.samples)
        # Our own contribution as every receiver decodes it (the same bits: S1).
        self.contributions.setdefault(step, {})[self.node] = own
        if self.sharded is not None:
            self.channel.send(ipc.Contributed(step=step, loss=result.loss, samples=result.samples))
            self.sharded.contribute(step, payload, own)  # shard i to its owner only
            return
        self._maybe_prebuild(step)
        self.channel.send(ipc.Contributed(step=step, loss=result.loss, samples=result.samples))
        for peer in message.to:
            if peer == self.node:
                continue
            # DESIGN: log the send before doing it.
            self.log(history.AggSend, step=step, to=peer, nbytes=payload.nbytes)
            assert self.group is not None
            self.group.create_task(self.send_blob(peer, split("contribution", step, "", payload)))

    async def send_blob(self, peer: str, chunks) -> None:  # noqa: ANN001
        if peer in self.held_bulk:
            # The harness's hold_bulk fault: the bytes never leave this node (a proxy
            # would already hold them, and could still deliver them).  Logged as a
            # drop so the history says where the bytes went.
            self._on_drop(peer, "held")
            return
        messages = iter(chunks)
        first = next(messages, None)
        if first is None:
            return
        blob = (
            (peer, first.kind, first.step, first.key)
            if isinstance(first, BulkChunk) and first.kind in CONTENT_NAMED_KINDS
            else None
        )
        if blob is not None and blob in self.blobs_sending:
            # The same bytes are on their way to this peer: they answer this send too.
            self.blob_sends_coalesced += 1
            return
        if blob is not None:
            self.blobs_sending.add(blob)
        try:
            # A full queue is counted in links.stats.queue_rejected; the protocol
            # retries or moves on.
            await send_chunks(
                self.links,
                self.codec,
                peer,
                itertools.chain([first], messages),
                BULK_SEND_TIMEOUT_S,
            )
        finally:
            if blob is not None:
                self.blobs_sending.discard(blob)

    def _aggregate_job(self, chosen: dict[str, torch.Tensor]) -> AggregateOutcome:
        """Aggregate and fingerprint in one compute-thread job (one hand-off, not two)."""
        try:
            result = aggregate(self.config.training, chosen)
        except AggregationError as error:
            return error
        return result, fingerprint_hex(result)

    def _maybe_prebuild(self, step: int) -> None:
        """Once every expected contribution of ``step`` is held, start its aggregate."""
        expected = self.expected_contributors.get(step)
        held = self.contributions.get(step, {})
        if expected is None or not expected <= held.keys() or self.group is None:
            return
        key = (step, tuple(sorted(expected)))
        if key not in self.prebuilt:
            chosen = {name: held[name] for name in key[1]}
            self.prebuilt[key] = self.group.create_task(self._prebuild(step, chosen))

    async def _prebuild(self, step: int, chosen: dict[str, torch.Tensor]) -> AggregateOutcome:
        outcome = await self.run_compute(self._aggregate_job, chosen)
        if not isinstance(outcome, AggregationError):
            # Written before anyone asks, so the fsync is off the vote's path.
            self.make_durable(step, outcome[1], outcome[0])
        return outcome

    async def build_aggregate(self, step: int, contributors: list[str]) -> None:
        held = self.contributions.get(step, {})
        prebuilt = self.prebuilt.get((step, tuple(sorted(contributors))))
        if self.sharded is not None:
            outcome = await self.sharded.gather(step, tuple(contributors))  # shards joined
        elif prebuilt is not None:
            outcome = await prebuilt  # the same set: the same bits
        else:
            missing = sorted(set(contributors) - set(held))
            if missing:
                self.channel.send(
                    ipc.AggregateMissing(
                        step=step,
                        missing=missing,
                        reason="contributions",
                        contributors=sorted(contributors),
                    )
                )
                return
            chosen = {name: held[name] for name in contributors}
            outcome = await self.run_compute(self._aggregate_job, chosen)
        if isinstance(outcome, AggregationError):
            # Sharded: the contributors a live owner never got a shard from.
            missing = sorted(outcome.missing) if isinstance(outcome, ShardInputsMissing) else []
            self.channel.send(
                ipc.AggregateMissing(
                    step=step,
                    missing=missing,
                    reason=str(outcome)[:120],
                    contributors=sorted(contributors),
                )
            )
            return
        result, agg_fp = outcome
        self.aggregates[(step, agg_fp)] = result
        await self.report_held(step, agg_fp, result, sorted(contributors))

    async def fetch_aggregate(self, message: ipc.FetchAggregate) -> None:
        key = (message.step, message.agg_fp)
        if key in self.aggregates:
            await self.report_held(message.step, message.agg_fp, self.aggregates[key], [])
            return
        if self._stored(key):
            self.channel.send(
                ipc.AggregateHeld(step=message.step, agg_fp=message.agg_fp, contributors=[])
            )
            return
        self.aggregate_waiters[key] = message.source
        request = BulkRequest(kind="aggregate", step=message.step, key=message.agg_fp)
        await self.send_blob(message.source, iter([request]))

    async def apply(self, message: ipc.ApplyCommitted) -> None:
        held = await self._held((message.step, message.agg_fp))
        if held is None or message.step != self.replica.step:
            reason = "not held" if held is None else f"state is at step {self.replica.step}"
            self.channel.send(
                ipc.AggregateMissing(
                    step=message.step, missing=[], agg_fp=message.agg_fp, reason=reason,
                    state_step=-1 if held is None else self.replica.step,
                )
            )  # fmt: skip
            return
        param_fp = await self.run_compute(self.replica.apply, message.step, held)
        self._param_fp_cache = (self.replica.step, param_fp)
        self.contributions = {s: c for s, c in self.contributions.items() if s > message.step}
        # Pulls of steps now applied are over (the control process forgot them too): a
        # source that never answered leaves no waiter behind.
        self.aggregate_waiters = {
            k: v for k, v in self.aggregate_waiters.items() if k[0] > message.step
        }
        self._forget_speculation_through(message.step)
        if self.sharded is not None:
            self.sharded.forget_through(message.step)
        # Memory keeps the steps to come, and whatever the store failed to take.
        self.aggregates = {
            key: value
            for key, value in self.aggregates.items()
            if key[0] > message.step or (key[0] >= message.keep_from_step and not self._stored(key))
        }
        self.servable_from_step = message.keep_from_step
        self.prune_stored_aggregates(message.keep_from_step, message.pinned)
        self.assembler.forget_steps_before(message.step + 1)
        # When to checkpoint is the control process's decision (node_core.Checkpointing).
        self.channel.send(ipc.Applied(step=message.step, agg_fp=message.agg_fp, param_fp=param_fp))
        self._prefetch_gradient()

    def _forget_speculation_through(self, step: int) -> None:
        self.expected_contributors = {
            s: names for s, names in self.expected_contributors.items() if s > step
        }
        self.prebuilt = {key: task for key, task in self.prebuilt.items() if key[0] > step}

    async def set_behaviour(self, message: ipc.SetBehaviour) -> None:
        # A switch takes effect at the current step boundary (replay switches there too).
        behaviour = msgspec.structs.replace(message.behaviour, since_step=self.replica.step)
        self.replica.set_behaviour(behaviour)
        self.log(
            history.ByzantineSwitch,
            step=self.replica.step,
            mode=behaviour.mode,
            seed=behaviour.seed,
            magnitude=behaviour.magnitude,
            noise_std=behaviour.noise_std,
        )

    async def infer(self, message: ipc.Infer) -> None:
        def forward() -> list[list[float]]:
            with torch.no_grad():
                inputs = torch.tensor(message.inputs, dtype=torch.float32)
                return self.replica.model.forward(self.replica.state.params, inputs).tolist()

        outputs = await self.run_compute(forward)
        self.channel.send(ipc.InferResult(request_id=message.request_id, outputs=outputs))

    # -- durable aggregates (aggregate_store.py) -----------------------------------------------

    async def load_stored_aggregates(self) -> list[tuple[int, str]]:
        """The aggregates stored before a restart, each verified by its fingerprint, held
        again (served to peers); a bad file is skipped with a ``checkpoint_skip`` event."""

        def fingerprint(payload: bytearray) -> str:
            return fingerprint_hex(torch.frombuffer(payload, dtype=torch.float32))

        result = await self.run_compute(self.aggregate_store.load, fingerprint)
        for skipped in result.skipped:
            self.log(
                history.CheckpointSkip,
                path=str(skipped.path),
                reason=f"stored aggregate: {skipped.reason}",
            )
        loop = asyncio.get_running_loop()
        for entry in result.held:
            key = (entry.step, entry.agg_fp)
            self.aggregates[key] = torch.frombuffer(entry.payload, dtype=torch.float32)
            self.durable[key] = loop.create_future()
            self.durable[key].set_result(entry.path)
        return [(entry.step, entry.agg_fp) for entry in result.held]

    def make_durable(self, step: int, agg_fp: str, tensor: torch.Tensor) -> asyncio.Future[object]:
        """Start writing the aggregate to the store (once); done when it is durable."""
        key = (step, agg_fp)
        future = self.durable.get(key)
        if future is None:
            payload = memoryview(tensor.numpy()).cast("B")  # aggregates are never mutated
            future = asyncio.get_running_loop().run_in_executor(
                self.store_thread, self.aggregate_store.write, step, agg_fp, payload
            )
            future.add_done_callback(_retrieve_error)  # a prebuilt one nobody asks for
            self.durable[key] = future
        return future

    async def report_held(
        self, step: int, agg_fp: str, tensor: torch.Tensor, contributors: list[str]
    ) -> None:
        """``AggregateHeld`` once the bytes are durable: an accept may claim them then."""
        try:
            await self.make_durable(step, agg_fp, tensor)
        except (OSError, AggregateStoreError) as error:
            self.durable.pop((step, agg_fp), None)
            self.channel.send(
                ipc.AggregateStoreFailed(step=step, agg_fp=agg_fp, reason=repr(error)[:200])
            )
            return
        self.channel.send(ipc.AggregateHeld(step=step, agg_fp=agg_fp, contributors=contributors))

    def prune_stored_aggregates(
        self, keep_from_step: int, pinned: list[tuple[int, str]] | tuple = ()
    ) -> None:
        """Forget stored aggregates of steps below ``keep_from_step`` but the ``pinned``
        ones (node_core.aggregates_to_keep decides both); the files go on the store's
        thread.  A pinned aggregate stays on disk only: it is loaded again at a
        restart, the one time it is needed."""
        keep = frozenset((int(step), str(fp)) for step, fp in pinned)
        self.durable = {
            key: f for key, f in self.durable.items() if key[0] >= keep_from_step or key in keep
        }
        self.store_thread.submit(self.aggregate_store.prune, keep_from_step, keep)

    # -- checkpoints and state transfer --------------------------------------------------------

    async def write_checkpoint(self, replicate_to: list[str] | None = None) -> None:
        """Write the current state as a checkpoint.  A write that fails (a full disk:
        the ``disk_full`` fault) is logged and reported, not raised: raised inside
        the command task group it stopped the worker, and with it the node, which a
        full checkpoint disk must not do (suites/disk.yaml: n2 exited)."""
        state = self.replica.state
        try:
            info = await self.run_compute(
                lambda: checkpoint.write_checkpoint(
                    self.config.checkpoint_dir, state, node=self.node
                )
            )
        except (OSError, checkpoint.CheckpointError) as error:
            reason = f"{type(error).__name__}: {error}"[:200]
            errno = getattr(error, "errno", None) or 0
            self.log(history.CheckpointFail, step=state.step, reason=reason, errno=errno)
            self.channel.send(ipc.CheckpointFailed(step=state.step, reason=reason, errno=errno))
            return
        self.log(
            history.CheckpointWrite,
            step=info.step,
            path=str(info.path),
            sha256=info.sha256,
            param_fp=info.param_fp,
            nbytes=info.nbytes,
        )
        self.channel.send(
            ipc.CheckpointDone(step=info.step, path=str(info.path), param_fp=info.param_fp)
        )
        self.replicas.replicate(info.path, info.step, info.param_fp, replicate_to or [])

    async def prepare_pull_buffer(self) -> None:
        """Map the next state pull's buffer, in a helper thread (not the compute
        thread: steps must not wait behind it)."""
        nbytes = checkpoint.state_payload_bytes(
            self.replica.model.parameter_count, self.config.training.optimizer
        )
        if nbytes > PULL_BUFFER_PREPARED_MAX_BYTES:
            return  # a pull maps its buffer as it fills (the StateAssembler's own)
        loop = asyncio.get_running_loop()
        buffer = await loop.run_in_executor(None, checkpoint.paged_in_payload_buffer, nbytes)
        if self.pull_buffer is None:
            self.pull_buffer = buffer

    def expect_state(self, source: str) -> None:
        limit = self.replica.model.parameter_count * 4 * 3  # params + two Adam buffers
        # Live mode: bulk frames are authenticated (keyed BLAKE3) and TCP-ordered, so
        # the payload is not hashed again; the parameter fingerprint is still checked
        # against the offer (checkpoint.state_chunks).  The pulled state's tensors
        # are views of the pull buffer, so the next pull gets a new one, prepared
        # once this pull ended (not during it: it would compete for the CPU).
        buffer, self.pull_buffer = self.pull_buffer, None
        assembler = checkpoint.StateAssembler(
            max_payload_bytes=limit, require_payload_hash=False, payload_buffer=buffer
        )
        self.state_pull = (source, assembler)
        self.staged = None
        for chunk in self.held_state.take(source):  # what arrived before this message
            if self.state_pull is None:
                break  # the held stream was broken: the pull already failed
            self._on_state_chunk(source, chunk)

    async def serve_state(self, requester: str) -> None:
        """Stream a snapshot of the live state (a committed step boundary) to ``requester``."""
        if self.serve_storage_busy or self.replica.state.device.type != "cpu":
            await self._serve_snapshot(requester, await self.run_compute(self.replica.state.clone))
            return
        self.serve_storage_busy = True
        try:
            snapshot = await self.run_compute(self._snapshot_into_serve_storage)
            await self._serve_snapshot(requester, snapshot)
            # Chunks are queued as views of the storage: reuse it only once written.
            await self.links.drained(requester, BULK_SEND_TIMEOUT_S)
        except TimeoutError:
            self.serve_storage = None  # frames may still point into it: take a new one
        finally:
            self.serve_storage_busy = False

    def _snapshot_into_serve_storage(self) -> TrainingState:
        state = self.replica.state
        if self.serve_storage is None or self.serve_storage.numel() != state.storage_elements():
            self.serve_storage = torch.empty(state.storage_elements(), dtype=torch.float32)
        return state.clone_into(self.serve_storage)

    async def _serve_snapshot(self, requester: str, snapshot: TrainingState) -> None:
        if snapshot.step == 0:
            return  # nothing committed to offer; the requester times out and moves on
        cached = self._param_fp_cache
        if cached is not None and cached[0] == snapshot.step:
            fp = cached[1]  # the fingerprint Applied reported for this step
        else:
            fp = await self.run_compute(snapshot.param_fingerprint)
        header = checkpoint.build_header(
            snapshot, self.node, payload_sha256=checkpoint.UNHASHED, param_fp=fp
        )
        prefix = checkpoint.encode_prefix(header)
        self.channel.send(
            ipc.StateServing(
                requester=requester,
                step=snapshot.step - 1,
                param_fp=fp,
                nbytes=len(prefix) + header.payload_nbytes,
            )
        )
        await self.send_blob(requester, state_blob(snapshot, self.node, fp))

    async def load_checkpoint_file(self, path: str) -> None:
        try:
            state = await self.run_compute(
                lambda: checkpoint.read_checkpoint(
                    path, max_payload_bytes=self.replica.model.parameter_count * 4 * 3
                )
            )
        except (checkpoint.CheckpointError, OSError) as error:
            self.log(history.CheckpointSkip, path=path, reason=str(error)[:200])
            self.channel.send(ipc.StateFailed(source="checkpoint", reason=str(error)[:200]))
            return
        fp = await self.run_compute(state.param_fingerprint)
        self.staged = ("checkpoint", state)
        self.channel.send(
            ipc.StateStaged(source="checkpoint", step=state.step - 1, computed_fp=fp, nbytes=0)
        )

    def install_staged(self, message: ipc.InstallStaged) -> None:
        source = message.source
        if source == "local" and "stale-rejoin" in self.config.bug_set:
            # The bug: rejoin at the cluster's step with our stale parameters.
            state = dataclasses.replace(
                self.replica.state, step=max(message.next_step, self.replica.step)
            )
        elif self.staged is None or self.staged[0] != source:
            self.channel.send(ipc.StateFailed(source=source, reason="nothing staged from it"))
            return
        else:
            state = self.staged[1]
            self.staged = None
        self.replica = Replica(self.config.training, self.node, state)  # honest behaviour
        fp = state.param_fingerprint()
        self._param_fp_cache = (state.step, fp)
        self.contributions = {s: c for s, c in self.contributions.items() if s >= state.step}
        self._forget_speculation_through(state.step - 1)
        if self.sharded is not None:
            self.sharded.forget_through(state.step - 1)
        self.prune_stored_aggregates(message.keep_from_step, message.pinned)
        # A restarted node runs honest whatever its previous incarnation did; the
        # replay learns from this event which behaviour produced its next gradients.
        honest = ByzantineBehaviour()
        self.log(
            history.ByzantineSwitch,
            step=state.step,
            mode=honest.mode,
            seed=honest.seed,
            magnitude=honest.magnitude,
            noise_std=honest.noise_std,
        )
        self.channel.send(ipc.StateInstalled(next_step=state.step, param_fp=fp, source=source))

    def _stored(self, key: tuple[int, str]) -> bool:
        """Whether the store holds this aggregate durably and it is servable."""
        future = self.durable.get(key)
        return (
            key[0] >= self.servable_from_step
            and future is not None
            and future.done()
            and not future.cancelled()
            and future.exception() is None
        )

    async def _held(self, key: tuple[int, str]) -> torch.Tensor | None:
        """The aggregate's bytes: from memory, else read from the store (not kept)."""
        held = self.aggregates.get(key)
        if held is not None or not self._stored(key):
            return held
        payload = await asyncio.get_running_loop().run_in_executor(
            self.store_thread, self.aggregate_store.read, *key
        )
        return None if payload is None else torch.frombuffer(payload, dtype=torch.float32)

    async def serve_aggregate(self, requester: str, step: int, key: str) -> None:
        held = await self._held((step, key))
        if held is None:
            refusal = BulkRefusal(kind="aggregate", step=step, key=key, reason="not held")
            await self.send_blob(requester, iter([refusal]))
            return
        payload = memoryview(held.numpy()).cast("B")
        # DESIGN: log the send before doing it.
        self.log(
            history.AggregateServe, step=step, to=requester, value_fp=key, nbytes=payload.nbytes
        )
        await self.send_blob(requester, split("aggregate", step, key, payload))

    # -- inbound bulk ---------------------------------------------------------------------------

    def _on_frame(self, frame: Frame) -> None:
        if not self.ready_sent:
            if self.replicas.early_frame(frame):
                return  # a replica this starting worker asked for
            # Peers may stream to our bulk port before the control process knows we
            # exist; hold their frames (bounded) until WorkerReady has gone out.
            if len(self.early_frames) < EARLY_FRAMES_MAX:
                # Copied: a frame's payload is a view of its connection's buffer.
                self.early_frames.append(Frame(frame.header, bytes(frame.payload)))
            else:
                self.drops.drop("before_ready", frame.header.sender)
            return
        message = self.codec.decode(frame)
        if message is None:
            return
        sender = frame.header.sender
        assert self.group is not None
        if isinstance(message, BulkRequest):
            if message.kind == "aggregate":
                self.group.create_task(self.serve_aggregate(sender, message.step, message.key))
            elif message.kind == "replica":
                self.group.create_task(self.replicas.serve(sender))
            elif message.kind == "shard_aggregate" and self.sharded is not None:
                self.sharded.on_request(sender, message)
            elif message.kind == "shard" and self.sharded is not None:
                self.sharded.on_shard_request(sender, message)  # an owner lacks our shard
            else:
                self.drops.drop("unsupported_request", sender)  # state goes via StateRequest
        elif isinstance(message, BulkRefusal) and message.kind == "replica":
            self.replicas.on_refusal(sender)
        elif isinstance(message, BulkRefusal) and message.kind == "shard_aggregate":
            if self.sharded is not None:
                self.sharded.on_refusal(sender, message)
        elif isinstance(message, BulkRefusal):
            self._on_aggregate_refusal(sender, message)
        elif message.kind == "state":
            self._on_state_chunk(sender, message)
        elif message.kind == "replica":
            self.replicas.on_chunk(sender, message)
        else:
            self._on_blob_chunk(sender, message)

    def _on_blob_chunk(self, sender: str, chunk: BulkChunk) -> None:
        step = self.replica.step
        sharded_kind = chunk.kind in ("shard", "shard_aggregate")
        if chunk.kind == "shard" and chunk.step >= step:
            pass  # an owner aggregates shards of steps its own state has not reached
            # (it is rejoining): the shard exchange keeps a few of the newest steps
        elif (chunk.kind == "contribution" or sharded_kind) and not (
            step <= chunk.step <= step + AHEAD_STEPS
        ):
            self.drops.drop("stale_step", sender)
            return
        if sharded_kind and self.sharded is None:
            self.drops.drop("unsupported_shard", sender)  # this node aggregates all-to-all
            return
        try:
            blob = self.assembler.feed(sender, chunk)
        except AssemblyError as error:
            self.drops.drop(error.reason, sender)
            return
        if blob is None:
            if sharded_kind:
                assert self.sharded is not None
                self.sharded.chunk_arrived(sender, chunk)
            return
        if sharded_kind:
            assert self.sharded is not None
            self.sharded.on_chunk_blob(sender, chunk, blob)
            return
        numel = self.replica.model.parameter_count
        if chunk.kind == "contribution":
            try:
                tensor = decode(self.config.training, blob, numel)  # int8: dequantized
            except WireError:
                self.drops.drop("wrong_tensor_size", sender)
                return
        elif len(blob) != numel * 4:  # an aggregate: always fp32
            self.drops.drop("wrong_tensor_size", sender)
            return
        else:
            tensor = torch.frombuffer(blob, dtype=torch.float32)
        if chunk.kind == "contribution":
            self.contributions.setdefault(chunk.step, {})[sender] = tensor
            self._maybe_prebuild(chunk.step)
            self.channel.send(ipc.ContributionArrived(step=chunk.step, sender=sender))
        elif chunk.kind == "aggregate":
            assert self.group is not None
            self.group.create_task(self._verify_aggregate(sender, chunk.step, chunk.key, tensor))

    async def _verify_aggregate(
        self, sender: str, step: int, key: str, tensor: torch.Tensor
    ) -> None:
        if (step, key) not in self.aggregate_waiters:
            self.drops.drop("unrequested_aggregate", sender)
            return
        actual = await self.run_compute(fingerprint_hex, tensor)
        if (step, key) not in self.aggregate_waiters:
            return  # asked of several peers: another copy was judged while this one hashed
        if actual != key:
            self.drops.drop("aggregate_fingerprint_mismatch", sender)
            if self.aggregate_waiters[(step, key)] != sender:
                return  # from a peer asked before: the one asked last may still send them
            del self.aggregate_waiters[(step, key)]
            self.channel.send(
                ipc.AggregateMissing(
                    step=step, missing=[], agg_fp=key, reason="fingerprint mismatch", source=sender
                )
            )
            return
        del self.aggregate_waiters[(step, key)]
        self.aggregates[(step, key)] = tensor
        await self.report_held(step, key, tensor, [])

    def _on_aggregate_refusal(self, sender: str, message: BulkRefusal) -> None:
        """A peer has no bytes of an aggregate this node pulls.  Only the peer asked
        last counts: a refusal from one asked before (after its request timed out) must
        not cancel the request to the current one, whose bytes would then be dropped as
        unrequested and the pull wait out another ``fetch_timeout_s``."""
        key = (message.step, message.key)
        if self.aggregate_waiters.get(key) != sender:
            return
        del self.aggregate_waiters[key]
        self.channel.send(
            ipc.AggregateMissing(
                step=message.step,
                missing=[],
                agg_fp=message.key,
                reason=message.reason,
                source=sender,
            )
        )

    def _pull_ended(self) -> None:
        if self.pull_buffer is None and self.group is not None:
            self.group.create_task(self.prepare_pull_buffer())

    def _on_state_chunk(self, sender: str, chunk: BulkChunk) -> None:
        if self.state_pull is None or self.state_pull[0] != sender:
            if not self.held_state.hold(sender, chunk):  # its ExpectState may be on its way
                self.drops.drop("unrequested_state", sender)
            return
        source, assembler = self.state_pull
        try:
            assembler.feed(chunk.data)
        except checkpoint.CheckpointError as error:
            self.state_pull = None
            self.channel.send(ipc.StateFailed(source=source, reason=error.reason))
            self._pull_ended()
            return
        if chunk.last:
            self.state_pull = None
            assert self.group is not None
            self.group.create_task(self._stage_state(source, assembler))

    async def _stage_state(self, source: str, assembler: checkpoint.StateAssembler) -> None:
        try:
            state = await self.run_compute(assembler.finish)  # hashes + header fingerprint
        except checkpoint.CheckpointError as error:
            self.channel.send(ipc.StateFailed(source=source, reason=error.reason))
            return
        finally:
            self._pull_ended()
        # ``finish`` computed the parameters' fingerprint and checked it equals the
        # header's: no second pass over the parameters (0.2 s per 100M on this CPU).
        assert assembler.header is not None
        fp = assembler.header.param_fp
        self.staged = (source, state)
        self.channel.send(
            ipc.StateStaged(
                source=source, step=state.step - 1, computed_fp=fp, nbytes=assembler.received_bytes
            )
        )


def _retrieve_error(future: asyncio.Future[object]) -> None:
    """Mark a write's error as seen (it is reported when someone awaits the write)."""
    if not future.cancelled():
        future.exception()


async def worker_main(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    channel = await ipc.IpcChannel.from_socket(sock, ipc.ToWorker)
    init = await channel.receive(timeout_s=30)
    if not isinstance(init, ipc.WorkerInit):
        raise ipc.IpcError(f"first message must be init, got {type(init).__name__}")
    overrides = json.loads(init.overrides_json)
    config = load(Path(init.config_toml_path), overrides)
    configure_torch(config.training.threads)
    if keeps_freed_memory_for(4 * config.training.parameter_count()):
        keep_freed_memory()  # step buffers reuse mapped pages (malloc_tuning explains)
    worker = Worker(config, init, channel)
    code = 0
    try:
        await worker.serve(init)
    except* ipc.IpcError as group:
        code = 3  # the control process is gone: the node dies as a whole
        print(f"node {worker.node} worker: exiting: {group.exceptions[0]}", file=sys.stderr)
    return code


def run(fd: int) -> int:
    return asyncio.run(worker_main(fd))
