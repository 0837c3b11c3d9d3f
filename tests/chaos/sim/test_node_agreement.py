"""The runtime's node and the simulator's node agree (issue 12).

Hypothesis draws one event sequence -- gradients ready, contributions arriving, time
passing, view changes (a peer's crash, restart or partition as this node's detector
reports it), votes from peers -- and feeds it to both shells of node ``n0``: the
runtime's ``StepDriver`` (in-memory links and worker, a fake host clock under its
``NodeClock``) and the simulator's ``NodeApp`` (an in-memory ``sim``).  Both must
send the same commit messages to the same peers and log the same history.  This is
the test that would have caught the drift between the two (contribution_wait_s vs
collect_s, 32 vs 16 records, no vote floor in the simulator).

The worker here is the simulator's abstract training (``chaos/sim/training.py``):
the same fingerprints on both sides, so values compare bit for bit.  Restarts are
drawn too: ``n0`` crashes and comes back on what its disk kept (acceptor records,
vote floor, stored aggregates, last checkpoint), asks a peer for its state, and the
peer answers with the state ``n0`` last applied (genesis when it applied nothing):
the node core decides that a restart rejoins first, whom it asks, which records and
bytes survive, and what the first step after the rejoin re-proposes; both shells must
ask the same peer and then agree again.  Rejoin events and state messages themselves
are left out of the comparison (the runtime's worker moves those bytes).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import hypothesis
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmshake.chaos.sim import training
from swarmshake.chaos.sim.app import (
    DISK_FULL_REASON,
    AggregateBytes,
    AppSettings,
    Contribution,
    NoAggregate,
    NodeApp,
    NodeDisk,
    StateBytes,
)
from swarmshake.chaos.systems.reference import node_settings
from swarmshake.reference_node import config as node_config
from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol import messages as msgs
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol.bugs import BugSet
from swarmshake.reference_node.protocol.membership import Configuration, initial_configuration
from swarmshake.reference_node.runtime import ipc
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.events import EventLog
from swarmshake.reference_node.runtime.membership_driver import ConfigHistory, MembershipDriver
from swarmshake.reference_node.runtime.node import ControlProcess
from swarmshake.reference_node.runtime.step_driver import StepDriver

NODES = ("n0", "n1", "n2")
ME = "n0"
OUTSIDER = "n7"  # a node outside the configuration that asks to join
SEED = 7
TRAINING_SEED = 11
COMMIT_MESSAGES = cm.CommitMessage.__args__  # type: ignore[attr-defined]
MEMBERSHIP_MESSAGES = (msgs.JoinRequest, msgs.LeaveNotice, msgs.LeaveConfirmed)
STATE_NBYTES = AppSettings().state_nbytes


def _offer(
    source: str, step: int, params: tuple, configuration: Configuration | None = None
) -> msgs.StateOffer:
    """``source``'s answer to a state request: its state of ``step`` (genesis: the
    initial parameters, no bytes follow), under ``configuration`` (the one in force
    at that step; default the initial one)."""
    configuration = configuration or initial_configuration(NODES, ME, join=False)
    return msgs.StateOffer(
        sender=source,
        step=step,
        param_fp=training.fingerprint(params),
        nbytes=0 if step == msgs.GENESIS_STEP else STATE_NBYTES,
        voters=list(configuration.voters),
        learners=list(configuration.learners),
        config_step=configuration.step,
    )


# Logged by the worker in the runtime (checkpoints compared by step instead), or
# startup-only (rejoin), or the worker's I/O (agg_send).
IGNORED_KINDS = {
    "rejoin_begin", "rejoin_done", "agg_send", "frame_drop", "checkpoint_write", "checkpoint_fail"
}  # fmt: skip
# frame_drop is compared apart (``refusals``): the runtime's frame layer also drops
# frames the simulator never builds (bad MACs, cut frames); the commit and rejoin
# cores' refusals of a peer's message are the node's own and named the same.
REFUSING_CORES = (nc.refusal_reason("commit", ""), nc.refusal_reason("rejoin", ""))
# Incarnations are compared: both shells count them with node_core.next_incarnation.
STAMPS = {"t_wall", "t_mono", "lamport", "epoch", "node"}


def _normal_event(event: history.EventBase) -> tuple | None:
    # As written to disk (a tuple and a list are the same JSON array).
    fields = {
        f: msgspec.to_builtins(getattr(event, f))
        for f in event.__struct_fields__
        if f not in STAMPS
    }
    kind = type(event).__struct_config__.tag
    if kind in IGNORED_KINDS:
        return None
    return (kind, tuple(sorted((k, repr(v)) for k, v in fields.items())))


# --- the runtime's shell, with in-memory links and worker ----------------------------------


class RuntimeNode:
    """What ``StepDriver`` uses of its ``ControlProcess``: links that record, a worker
    that computes with the simulator's training, the event log, a fake clock."""

    def __init__(
        self, folder: Path, bugs: tuple[str, ...], min_contributors: int = 1, sharded: bool = False
    ):
        self.host_s = 0.0
        self.folder = folder
        section = node_config.NodeSection(
            id=ME, members=list(NODES), run_dir=str(folder), seed=SEED, bugs=list(bugs)
        )
        # The simulated workload's checkpoint configuration: same inputs, same decisions.
        wanted = AppSettings().checkpoint
        step = node_config.StepSection(
            checkpoint_policy=wanted.policy, checkpoint_every=wanted.every_steps,
            checkpoint_prior_mtbf_s=wanted.prior_mtbf_s, checkpoint_window_s=wanted.window_s,
            checkpoint_min_interval_s=wanted.min_interval_s,
            checkpoint_max_interval_s=wanted.max_interval_s,
            node=nc.NodeConfig(min_contributors=min_contributors, sharded_contributions=sharded),
        )  # fmt: skip
        assert step.checkpointing() == wanted
        self.config = node_config.NodeConfig(node=section, step=step)
        self.checkpoints: list[int] = []  # the steps whose state the worker was asked to write
        self.checkpoint_failures: list[int] = []  # ... and could not (a full disk)
        self.disk_full = False  # the disk outlives the process
        self.node = ME
        self.sent: list[tuple[str, Any]] = []
        # Aggregate pulls that went to the network: (source, step, fingerprint).
        self.fetch_requests: list[tuple[str, int, str]] = []
        self.clock = NodeClock(host=lambda: self.host_s)
        # The worker's disk: its checkpoints (step -> parameters) and the aggregates it
        # holds (aggregate_store.py: every aggregate the worker held, synced first).
        self.checkpoint_params: dict[int, tuple[int, ...]] = {}
        self.stored_aggregates: set[tuple[int, str]] = set()
        # ... and the aggregates in its memory, the ones it applies and serves: pruned
        # to the window at an apply (the pinned ones stay on disk only), reloaded from
        # the disk at a start (worker.py: ``aggregates`` and ``durable``).
        self.memory_aggregates: set[tuple[int, str]] = set()
        # What the detector was told: the members it watches, and when it starts.
        self.detector_members: list[tuple[str, ...]] = []
        self.detector_starts = 0
        self.strangers_heard: list[str] = []  # refused non-members heartbeated back
        self.detector_started = True  # the detector's own I/O is not drawn here
        # (reason, peer), as the frame layer counts and logs them: the node's whole
        # history, as the simulator's log (a restart began a new list here, so a
        # refusal before one went missing on this side only: hypothesis found it).
        self.dropped: list[tuple[str, str]] = []
        self.drops = SimpleNamespace(drop=lambda reason, peer: self.dropped.append((reason, peer)))
        self._boot(
            incarnation=nc.next_incarnation(0), ready_step=0, params=training.INITIAL_PARAMS,
            checkpoint="",
        )  # fmt: skip

    def _boot(self, *, incarnation: int, ready_step: int, params: tuple, checkpoint: str) -> None:
        """A process start on this node's folder (the acceptor store, the configuration
        history and the events file are read back from it, as in the real node)."""
        folder = self.folder
        self.incarnation = incarnation
        self.events = EventLog(folder / "events.jsonl", ME, incarnation)
        configs = ConfigHistory.load(
            self.config.data_dir, initial_configuration(list(NODES), ME, False)
        )
        self.membership = MembershipDriver(
            node=ME,
            incarnation=0,
            configs=configs,
            events=self.events,
            now=self.clock.now,
            members_changed=self.detector_members.append,
        )
        # A started detector holds every member alive: the newest configuration's
        # members and this node, as the control process builds it.
        self.alive: tuple[str, ...] = tuple(sorted({*configs.latest().members, ME}))
        self.detector = SimpleNamespace(
            core=SimpleNamespace(alive_view=lambda: self.alive),
            stranger_heard=self.strangers_heard.append,
        )
        self.removal_answers = nc.RemovalAnswers(self.config.step.node)  # as ControlProcess
        self.worker_ready = ipc.WorkerReady(
            step=ready_step,
            param_fp=training.fingerprint(params),
            bulk_port=0,
            worker_pid=0,
            source="checkpoint" if checkpoint else "initial",
            torch_version="",
            threads=1,
            cpu_flags="",
            checkpoint_path=checkpoint,
            initial_param_fp=training.INITIAL_FP,
            stored_aggregates=sorted(self.stored_aggregates),
        )
        self.memory_aggregates = set(self.stored_aggregates)
        self.replies: list[object] = []  # worker answers, delivered after each input
        self.contribute_requested = -1  # the step of the worker's last Contribute ...
        self.gradient_delivered = False  # ... and whether its gradient was reported
        self.params = params
        self.applied_step = ready_step - 1  # the last committed step the parameters hold
        self.stopped = ""
        self.driver = StepDriver(self)

    async def restart(self) -> None:
        """Crash and restart: the worker comes back on its last checkpoint (or the
        initial parameters) and reloads its stored aggregates."""
        self.driver._persist_pool.shutdown(wait=True)  # noqa: SLF001 - a crash after the fsync
        last = max(self.checkpoint_params, default=None)
        if last is None:
            self._boot(
                incarnation=nc.next_incarnation(self.incarnation),
                ready_step=0,
                params=training.INITIAL_PARAMS,
                checkpoint="",
            )
        else:
            self._boot(
                incarnation=nc.next_incarnation(self.incarnation),
                ready_step=last + 1,
                params=self.checkpoint_params[last],
                checkpoint=str(self.folder / f"checkpoint-{last}"),
            )
        self.driver.poll(self.clock.now())
        await self.settle()

    async def state_from(
        self, source: str, step: int, params: tuple, configuration: Configuration
    ) -> None:
        """``source`` answers this node's state request with its state of ``step``."""
        self.driver.on_message(_offer(source, step, params, configuration))
        await self.settle()
        if step != msgs.GENESIS_STEP:
            staged = ipc.StateStaged(
                source=source,
                step=step,
                computed_fp=training.fingerprint(params),
                nbytes=STATE_NBYTES,
            )
            self.staged = (step, params)
            self.driver.on_worker(staged)
            await self.settle()

    # ControlProcess's surface
    def send_message(self, peer: str, message: Any) -> None:
        self.sent.append((peer, message))

    def request_stop(self, reason: str, code: int = 0) -> None:
        self.stopped = reason

    def request_restart(self, reason: str) -> None:
        self.stopped = f"restart: {reason}"

    # The control process's own code, on this surface (it answers removed peers).
    refused = ControlProcess.refused

    def start_detector(self) -> None:
        self.detector_starts += 1

    def to_worker(self, message: object) -> None:
        match message:
            case ipc.Contribute():
                self.contribute_requested = message.step
                self.gradient_delivered = False
            case ipc.BuildAggregate():
                value = training.aggregate(TRAINING_SEED, message.step, message.contributors)
                self._hold((message.step, training.fingerprint(value)))
                self.replies.append(
                    ipc.AggregateHeld(
                        step=message.step,
                        agg_fp=training.fingerprint(value),
                        contributors=list(message.contributors),
                    )
                )
            case ipc.ApplyCommitted() if (
                message.step,
                message.agg_fp,
            ) not in self.memory_aggregates:
                # The worker does not hold the bytes (a pull still under way): it says so.
                missing = ipc.AggregateMissing(
                    step=message.step, missing=[], agg_fp=message.agg_fp, reason="not held"
                )
                self.replies.append(missing)
            case ipc.ApplyCommitted():
                asked = self.driver.step_node.apply.asked  # the apply this message performs
                assert asked is not None and asked.value.agg_fp == message.agg_fp
                value = asked.value
                update = training.aggregate(TRAINING_SEED, message.step, value.contributors)
                self.params = training.apply(self.params, update)
                self.applied_step = message.step
                self._prune_aggregates(message.keep_from_step, message.pinned)
                self.memory_aggregates = {
                    k for k in self.memory_aggregates if k[0] >= message.keep_from_step
                }
                self.replies.append(
                    ipc.Applied(
                        step=message.step,
                        agg_fp=message.agg_fp,
                        param_fp=training.fingerprint(self.params),
                    )
                )
            case ipc.WriteCheckpoint() if self.disk_full:
                # The worker's write fails with ENOSPC; it logs and reports it.
                step = self.driver.core.step - 1
                self.checkpoint_failures.append(step)
                self.replies.append(
                    ipc.CheckpointFailed(step=step + 1, reason=DISK_FULL_REASON, errno=28)
                )
            case ipc.WriteCheckpoint():
                # The worker writes the state of the last committed step, logs it and
                # reports it (the rejoin's fallback is this file).
                self.checkpoints.append(self.driver.core.step - 1)
                self.checkpoint_params[self.applied_step] = self.params
                self.replies.append(
                    ipc.CheckpointDone(
                        step=self.applied_step + 1,
                        path=str(self.folder / f"checkpoint-{self.applied_step}"),
                        param_fp=training.fingerprint(self.params),
                    )
                )
            case ipc.FetchAggregate() if (message.step, message.agg_fp) in self.memory_aggregates:
                # The worker holds it already (it rebuilt it meanwhile): held at once.
                self.replies.append(
                    ipc.AggregateHeld(step=message.step, agg_fp=message.agg_fp, contributors=[])
                )
            case ipc.FetchAggregate():
                self.fetch_requests.append((message.source, message.step, message.agg_fp))
            case ipc.ServeState() if self.applied_step >= 0:
                # The worker offers the state of its last applied step, then streams
                # it (with nothing applied it offers nothing: the worker's rule).
                self.replies.append(
                    ipc.StateServing(
                        requester=message.requester,
                        step=self.applied_step,
                        param_fp=training.fingerprint(self.params),
                        nbytes=STATE_NBYTES,
                    )
                )
            case ipc.LoadCheckpointFile():
                # The rejoin's fallback: the worker reads back its newest checkpoint
                # (the file the control process named) and stages it.
                step = int(message.path.rsplit("-", 1)[1])
                self.staged = (step, self.checkpoint_params[step])
                self.replies.append(
                    ipc.StateStaged(
                        source="checkpoint",
                        step=step,
                        computed_fp=training.fingerprint(self.checkpoint_params[step]),
                        nbytes=0,
                    )
                )
            case ipc.InstallStaged():
                # The staged state (its step, not next_step, which only the
                # stale-rejoin bug's "local" install reads).
                step, params = self.staged
                self.params, self.applied_step = params, step
                self._prune_aggregates(message.keep_from_step, message.pinned)
                self.replies.append(
                    ipc.StateInstalled(
                        next_step=step + 1,
                        param_fp=training.fingerprint(params),
                        source=message.source,
                    )
                )

    # the harness
    async def settle(self) -> None:
        """Deliver the worker's answers and wait out persists, then let the loop run
        once (every input wakes the real loop, which polls)."""
        driver = self.driver
        polled = False
        for _ in range(10_000):  # bounded: a persist is one small fsync
            if self.replies:
                driver.on_worker(self.replies.pop(0))
                polled = False
                continue
            if driver._persisting or driver._deferred:
                await asyncio.sleep(0.0005)
                continue
            if not polled:
                driver.poll(self.clock.now())
                polled = True
                continue
            return
        raise AssertionError("the runtime shell never settled")

    async def start(self) -> None:
        # The first start (incarnation 1) begins at step 0 with no state transfer
        # (node_core.rejoins_at_start), as the simulator's first start does.
        self.driver.poll(self.clock.now())
        await self.settle()

    def _hold(self, key: tuple[int, str]) -> None:
        """The worker holds these bytes: in memory, and synced to its store first."""
        self.stored_aggregates.add(key)
        self.memory_aggregates.add(key)

    def _prune_aggregates(self, keep_from_step: int, pinned: list) -> None:
        # The worker's pruning of its aggregate store, as the control process says.
        keep = {tuple(k) for k in pinned}
        self.stored_aggregates = {
            k for k in self.stored_aggregates if k[0] >= keep_from_step or k in keep
        }

    def state(self) -> tuple[int, tuple]:
        return self.applied_step, self.params

    def state_request_to(self) -> str | None:
        for peer, message in reversed(self.sent):
            if isinstance(message, msgs.StateRequest):
                return peer
        return None

    async def gradient(self) -> None:
        step = self.driver.step
        if self.gradient_pending():
            self.gradient_delivered = True
            self.driver.on_worker(ipc.Contributed(step=step, loss=0.0, samples=1))
            await self.settle()

    async def arrive(self, step: int, sender: str) -> None:
        self.driver.on_worker(ipc.ContributionArrived(step=step, sender=sender))
        await self.settle()

    async def view(self, alive: tuple[str, ...], epoch: int) -> None:
        self.alive = alive
        now = self.clock.now()
        self.driver.on_detector_action(det.ViewChanged(alive=alive, epoch=epoch, at=now))
        await self.settle()

    async def message(self, message: Any) -> None:
        self.driver.on_message(message)
        await self.settle()

    async def aggregate_answer(
        self, source: str, step: int, agg_fp: str, contributors: tuple[str, ...], held: bool
    ) -> None:
        """``source``'s worker answers this worker's pull: the bytes (held by both from
        now on), or a refusal (it does not hold them)."""
        if held:
            self._hold((step, agg_fp))
            self.driver.on_worker(ipc.AggregateHeld(step=step, agg_fp=agg_fp, contributors=[]))
        else:
            missing = ipc.AggregateMissing(
                step=step, missing=[], agg_fp=agg_fp, reason="refused", source=source
            )
            self.driver.on_worker(missing)
        await self.settle()

    async def declared_dead(self, peer: str) -> None:
        now = self.clock.now()
        verdict = det.DeclaredDead(peer=peer, peer_incarnation=0, suspicions=2, reason="", at=now)
        self.driver.on_detector_action(verdict)
        await self.settle()

    async def declared_alive(self, peer: str, incarnation: int) -> None:
        now = self.clock.now()
        back = det.DeclaredAlive(peer=peer, peer_incarnation=incarnation, at=now)
        self.driver.on_detector_action(back)
        await self.settle()

    async def state_reset(self, source: str) -> None:
        """The state transfer from ``source`` broke off: the worker reports it."""
        self.driver.on_worker(ipc.StateFailed(source=source, reason="connection reset"))
        await self.settle()

    async def set_disk_full(self, full: bool) -> None:
        self.disk_full = full

    def writes_failed(self) -> int:
        return self.driver.checkpoints.writes_failed

    async def advance(self, seconds: float) -> None:
        target = self.host_s + seconds
        for _ in range(1000):  # bounded: every poll moves time to the next due
            # As the real loop does: an input (a worker's answer) wakes it to poll again.
            self.driver.poll(self.clock.now())
            await self.settle()
            wake_at = self.driver.poll(self.clock.now())
            await self.settle()
            if wake_at is None or wake_at > target:
                break
            self.host_s = max(self.host_s, wake_at)
        self.host_s = target
        self.driver.poll(self.clock.now())
        await self.settle()

    def commit_sends(self) -> list[tuple[str, Any]]:
        return [(p, m) for p, m in self.sent if isinstance(m, COMMIT_MESSAGES)]

    def membership_sends(self) -> list[tuple[str, Any]]:
        return [(p, m) for p, m in self.sent if isinstance(m, MEMBERSHIP_MESSAGES)]

    async def leave(self) -> None:
        self.driver.begin_leave("asked to leave")
        await self.settle()

    def history(self) -> list[tuple]:
        events = history.read_events(self.events._writer.path).events  # noqa: SLF001
        return [e for e in map(_normal_event, events) if e is not None]

    def refusals(self) -> list[tuple[str, str]]:
        """The peers' messages a core refused, as (drop reason, peer)."""
        return [(r, p) for r, p in self.dropped if r.startswith(REFUSING_CORES)]

    def step(self) -> int:
        # A joiner runs no step, nor does a node fetching the state: its commit core is
        # a placeholder (the simulator's shell builds none until the node is added or
        # the state installed).
        driver = self.driver
        return -1 if driver.enrolment.joining or not driver.transfer.steps else driver.step

    def gradient_pending(self) -> bool:
        step = self.step()
        return (
            step >= 0
            and self.contribute_requested == step
            and not self.gradient_delivered
            and self.driver.gradient_asked == step  # else the driver drops it
        )


# --- the simulator's shell, with an in-memory sim --------------------------------------------


class SimNode:
    def __init__(self, bugs: tuple[str, ...], min_contributors: int = 1, sharded: bool = False):
        self.t = 0.0
        # The node core's knobs as a suite's ``cluster.step`` gives them to the simulator.
        knobs = node_settings(
            {"node": {"min_contributors": min_contributors, "sharded_contributions": sharded}},
            {},
            {},
        )
        self.settings = AppSettings(node=knobs.node)
        self.timers: list[tuple[float, int, tuple]] = []
        self._order = itertools.count()
        self.sent: list[tuple[str, Any]] = []
        self.logged: list[history.EventBase] = []
        self.names = NODES
        self.full_disks: set[str] = set()  # the engine's: nodes whose disk is full
        self.bugs = BugSet.parse(list(bugs))
        self.core_seed = SEED
        self.seed = TRAINING_SEED
        clock = SimpleNamespace(local=lambda t: t, true_time=lambda t: t, identity=True)
        self.proc = SimpleNamespace(
            name=ME,
            # The simulation engine's count, as in the runtime (node_core.next_incarnation).
            incarnation=nc.next_incarnation(0),
            started_at=0.0,
            clock=clock,
            cpu_fraction=1.0,
            up=True,
            # Started, as the runtime side's (its detector's own I/O is not drawn).
            detector=SimpleNamespace(known_incarnation={}, started=True),
        )
        self.disk = NodeDisk()
        self.detector_members: list[tuple[str, ...]] = []
        self.detector_starts = 0
        self.strangers_heard: list[str] = []
        self.stopped = ""
        self.app = NodeApp(
            self, self.proc, self.settings, self.disk, nc.is_first_start(self.proc.incarnation)
        )

    async def restart(self) -> None:
        """Crash and restart: what survives is the node's ``NodeDisk``; a dead process's
        timers die with it (as the simulation engine drops them)."""
        self.timers.clear()
        self.stopped = ""
        self.proc.incarnation = nc.next_incarnation(self.proc.incarnation)
        self.proc.started_at = self.t
        self.app = NodeApp(
            self, self.proc, self.settings, self.disk, nc.is_first_start(self.proc.incarnation)
        )
        self.app.start(self.t)
        self._fire_due(self.t)

    async def state_from(
        self, source: str, step: int, params: tuple, configuration: Configuration
    ) -> None:
        self.app.receive(self.t, source, _offer(source, step, params, configuration))
        self._fire_due(self.t)
        if step != msgs.GENESIS_STEP:
            self.app.receive(self.t, source, StateBytes(step, params, STATE_NBYTES))
            self._fire_due(self.t)

    def state(self) -> tuple[int, tuple]:
        return self.app.param_step, self.app.params

    def state_request_to(self) -> str | None:
        for peer, message in reversed(self.sent):
            if isinstance(message, msgs.StateRequest):
                return peer
        return None

    # the sim's surface
    def log(self, cls: type, proc: Any, t: float, **fields: Any) -> None:
        fields.setdefault("incarnation", proc.incarnation)
        self.logged.append(cls(t_wall=t, t_mono=t, node=proc.name, **fields))

    def send(self, proc: Any, t: float, to: str, message: Any, **kwargs: Any) -> None:
        self.sent.append((to, message))

    def send_each_logged(
        self,
        proc: Any,
        t: float,
        peers: list[str],
        message: Any,
        nbytes: int,
        log_cls: type,
        step: int,
    ) -> None:
        for peer in peers:  # the engine's loop, by its definition: a log, then a send, each
            self.log(log_cls, proc, t, step=step, to=peer, nbytes=nbytes)
            self.send(proc, t, peer, message, nbytes=nbytes, channel="bulk")

    def timer(self, proc: Any, t: float, payload: tuple) -> None:
        heapq.heappush(self.timers, (t, next(self._order), payload))

    def members_changed(self, proc: Any, t: float, members: tuple[str, ...]) -> None:
        self.detector_members.append(tuple(members))

    def start_detector(self, proc: Any, t: float) -> None:
        self.detector_starts += 1

    def stranger_heard(self, proc: Any, t: float, peer: str) -> None:
        self.strangers_heard.append(peer)

    def heartbeat_evidence(self, receiver: str, t: float) -> list[str]:
        return []  # heartbeats are the detector's I/O, not drawn here (nor in the runtime's)

    def stop(self, name: str, t: float, reason: str) -> None:
        self.stopped = reason

    def restart_node(self, name: str, t: float, reason: str) -> None:
        self.stopped = f"restart: {reason}"

    # the harness
    def _fire_due(self, until: float) -> None:
        held: list = []
        while self.timers and self.timers[0][0] <= until:
            at, order, payload = heapq.heappop(self.timers)
            if payload[0] == "computed":
                held.append((at, order, payload))  # gradients come when the test says
                continue
            self.t = max(self.t, at)
            self.app.timer(self.t, payload)
        for item in held:
            heapq.heappush(self.timers, item)

    async def start(self) -> None:
        self.app.start(0.0)
        self._fire_due(0.0)

    async def gradient(self) -> None:
        step = self.step()
        for item in list(self.timers):
            if item[2][:2] == ("computed", step) and self._current(item[2]):
                self.timers.remove(item)
                heapq.heapify(self.timers)
                self.app.timer(self.t, item[2])
                self._fire_due(self.t)
                return

    async def arrive(self, step: int, sender: str) -> None:
        self.app.receive(self.t, sender, Contribution(step, sender))
        self._fire_due(self.t)

    async def view(self, alive: tuple[str, ...], epoch: int) -> None:
        self.app.view_changed(self.t, alive)
        self._fire_due(self.t)

    async def message(self, message: Any) -> None:
        self.app.receive(self.t, message.sender, message)
        self._fire_due(self.t)

    async def declared_dead(self, peer: str) -> None:
        self.app.peer_dead(self.t, peer)
        self._fire_due(self.t)

    async def declared_alive(self, peer: str, incarnation: int) -> None:
        # The engine's detector knows the incarnation before its action is performed.
        self.proc.detector.known_incarnation[peer] = incarnation
        self.app.peer_alive(self.t, peer)
        self._fire_due(self.t)

    async def state_reset(self, source: str) -> None:
        """The state transfer from ``source`` broke off (the engine's bulk reset)."""
        self.app.bulk_reset(self.t, source, StateBytes(0, (), STATE_NBYTES))
        self._fire_due(self.t)

    async def aggregate_answer(
        self, source: str, step: int, agg_fp: str, contributors: tuple[str, ...], held: bool
    ) -> None:
        if held:
            self.app.receive(self.t, source, AggregateBytes(step, agg_fp, contributors))
        else:
            self.app.receive(self.t, source, NoAggregate(step, agg_fp))
        self._fire_due(self.t)

    @property
    def fetch_requests(self) -> list[tuple[str, int, str]]:
        return [
            (peer, m.step, m.value_fp)
            for peer, m in self.sent
            if isinstance(m, msgs.AggregateRequest)
        ]

    async def leave(self) -> None:
        self.app.begin_leave(self.t, "asked to leave")
        self._fire_due(self.t)

    async def set_disk_full(self, full: bool) -> None:
        if full:
            self.full_disks.add(ME)
        else:
            self.full_disks.discard(ME)

    def writes_failed(self) -> int:
        return self.app.checkpoints.writes_failed

    async def advance(self, seconds: float) -> None:
        target = self.t + seconds
        self._fire_due(target)
        self.t = target

    def commit_sends(self) -> list[tuple[str, Any]]:
        return [(p, m) for p, m in self.sent if isinstance(m, COMMIT_MESSAGES)]

    def membership_sends(self) -> list[tuple[str, Any]]:
        return [(p, m) for p, m in self.sent if isinstance(m, MEMBERSHIP_MESSAGES)]

    def history(self) -> list[tuple]:
        return [e for e in map(_normal_event, self.logged) if e is not None]

    def refusals(self) -> list[tuple[str, str]]:
        """The peers' messages a core refused, as (frame_drop reason, peer)."""
        return [
            (e.reason, e.peer)
            for e in self.logged
            if isinstance(e, history.FrameDrop) and e.reason.startswith(REFUSING_CORES)
        ]

    @property
    def checkpoints(self) -> list[int]:
        return [e.step for e in self.logged if isinstance(e, history.CheckpointWrite)]

    @property
    def checkpoint_failures(self) -> list[int]:
        return [e.step for e in self.logged if isinstance(e, history.CheckpointFail)]

    def step(self) -> int:
        return self.app.commit.step if self.app.commit is not None else -1

    def gradient_pending(self) -> bool:
        return any(
            item[2][:2] == ("computed", self.step()) and self._current(item[2])
            for item in self.timers
        )

    def _current(self, payload: tuple) -> bool:
        """A gradient timer of the commit core running now (not of a replaced one)."""
        return self.app.commit is not None and payload[2] == self.app.commit_generation


# --- the drawn sequences -----------------------------------------------------------------------

GRADIENT = st.tuples(st.just("gradient"))
ARRIVE = st.tuples(st.just("arrive"), st.sampled_from(NODES[1:]), st.integers(-1, 3))
ARRIVE_NOW = st.tuples(st.just("arrive"), st.sampled_from(NODES[1:]), st.just(0))
VOTE = st.tuples(st.just("vote"), st.sampled_from(NODES[1:]), st.booleans())
ADVANCE = st.tuples(st.just("advance"), st.integers(1, 300).map(lambda cs: cs / 100))
# n0 crashes and restarts; the peer it asks answers with the state n0 last applied
# (every live majority member holds it).
RESTART = st.tuples(st.just("restart"))
# n0's checkpoint disk fills up or is freed: a due write fails, the node trains on.
DISK = st.tuples(st.just("disk"), st.booleans())
# Membership: a peer (or the outsider) asks to join or to leave; the outsider, once
# added as a learner, contributes (and so is promoted); n0 itself leaves cleanly.
JOIN = st.tuples(st.just("join_request"), st.sampled_from((OUTSIDER, *NODES[1:])))
LEAVE_NOTICE = st.tuples(st.just("leave_notice"), st.sampled_from((OUTSIDER, *NODES[1:])))
OUTSIDER_ARRIVES = st.tuples(st.just("arrive"), st.just(OUTSIDER), st.just(0))
LEAVE = st.tuples(st.just("leave"))
# A member says it committed n0's removal (n0 stops if it is leaving, restarts as a
# joiner if it is a member that never saw that step).
LEAVE_CONFIRMED = st.tuples(st.just("leave_confirmed"), st.sampled_from(NODES[1:]))
# A peer's Prepare shows it two or more steps ahead: n0 is behind and fetches the state (the
# node core decides when and from whom); the source it asks answers, or stays silent
# (time passes: the next source, the checkpoint, a failed rejoin and its retry).
AHEAD = st.tuples(st.just("ahead"), st.sampled_from(NODES[1:]), st.integers(2, 4))
STATE = st.tuples(st.just("state"))
# A peer asks n0 for its state (it restarted, or fell behind).
STATE_REQUEST = st.tuples(st.just("state_request"), st.sampled_from(NODES[1:]))
# n0's detector declares a peer dead (its view change is drawn apart: "view"), or
# takes one back (restarted: a new incarnation; or it refuted).
DECLARED_DEAD = st.tuples(st.just("declared_dead"), st.sampled_from(NODES[1:]))
DECLARED_ALIVE = st.tuples(st.just("declared_alive"), st.sampled_from(NODES[1:]), st.integers(1, 3))
# The bytes of the state n0 asked for stop coming (the source died mid-transfer): the
# runtime's worker reports it, the simulator's engine resets the bulk stream.
STATE_RESET = st.tuples(st.just("state_reset"))
# Another leader's round at n0's step: its prepare, its accept request or its decision
# for a value over the drawn contributors (n0 then rebuilds the aggregate from the
# contributions it holds, or pulls it); the peer last asked for the bytes sends them
# or refuses, or (stale) a peer asked before refuses late, after its request timed out.
CONTRIBUTORS = st.sets(st.sampled_from(NODES), min_size=2).map(lambda c: tuple(sorted(c)))
PEER_PREPARE = st.tuples(st.just("peer_prepare"), st.sampled_from(NODES[1:]))
PEER_ACCEPT = st.tuples(st.just("peer_accept"), st.sampled_from(NODES[1:]), CONTRIBUTORS)
PEER_DECIDED = st.tuples(st.just("peer_decided"), st.sampled_from(NODES[1:]), CONTRIBUTORS)
AGGREGATE_ANSWER = st.tuples(st.just("aggregate_answer"), st.booleans(), st.booleans())
VIEW = st.tuples(
    st.just("view"),
    st.sets(st.sampled_from(NODES[1:])).map(lambda peers: tuple(sorted({ME, *peers}))),
)
# Weighted towards what moves a step (a gradient, this step's arrivals, votes), so
# most sequences commit steps; time, view changes and the rest perturb them.  The
# events that end n0's process (its clean leave, a member saying n0 was removed)
# are rare: drawn as often as the others, three sequences in four stopped n0 early
# and skipped their remaining events, and one in twenty committed a step (session
# 17, ``--hypothesis-show-statistics``).
WEIGHTED = (
    (GRADIENT, 10),
    (ARRIVE_NOW, 12),
    (ARRIVE, 4),
    (VOTE, 14),
    (ADVANCE, 10),
    (VIEW, 5),
    (RESTART, 3),
    (DISK, 3),
    (JOIN, 3),
    (LEAVE_NOTICE, 2),
    (OUTSIDER_ARRIVES, 3),
    (LEAVE, 1),
    (LEAVE_CONFIRMED, 1),
    (AHEAD, 3),
    (STATE, 4),
    (STATE_REQUEST, 2),
    (DECLARED_DEAD, 2),
    (DECLARED_ALIVE, 2),
    (STATE_RESET, 2),
    (PEER_PREPARE, 2),
    (PEER_ACCEPT, 3),
    (PEER_DECIDED, 2),
    (AGGREGATE_ANSWER, 3),
)
EVENTS = st.sampled_from([kind for kind, weight in WEIGHTED for _ in range(weight)]).flatmap(
    lambda kind: kind
)


def _votes(node: RuntimeNode | SimNode, peer: str, accept_too: bool) -> list[Any]:
    """``peer``'s answers to what ``n0`` last asked it (a promise, an accept), as a
    correct acceptor with no earlier vote gives them."""
    answers = []
    for to, message in reversed(node.commit_sends()):
        if to != peer:
            continue
        if isinstance(message, msgs.Prepare):
            answers.append(
                msgs.PromiseReply(
                    sender=peer, step=message.step, ballot=message.ballot, accepted_ballot=None
                )
            )
            break
        if isinstance(message, msgs.AcceptRequest) and accept_too:
            answers.append(
                msgs.AcceptedReply(
                    sender=peer,
                    step=message.step,
                    ballot=message.ballot,
                    value_fp=message.value.agg_fp,
                )
            )
            break
    return answers


# Another leader's ballot rounds: above n0's own (which start at 0), rising by event.
PEER_ROUND = 10


def _value_of(step: int, contributors: tuple[str, ...]) -> msgs.StepValue:
    """The value a correct leader proposes over ``contributors`` at ``step``."""
    aggregate = training.aggregate(TRAINING_SEED, step, contributors)
    return msgs.StepValue(agg_fp=training.fingerprint(aggregate), contributors=list(contributors))


def _state_requests(node: RuntimeNode | SimNode) -> list[str]:
    """The peers ``node`` asked for their state, in order."""
    return [peer for peer, message in node.sent if isinstance(message, msgs.StateRequest)]


def _state_offers(node: RuntimeNode | SimNode) -> list[tuple[str, msgs.StateOffer]]:
    """The state offers ``node`` sent (the bytes that follow are the worker's)."""
    return [(peer, m) for peer, m in node.sent if isinstance(m, msgs.StateOffer)]


def _cluster_state(own: tuple[int, tuple], cluster_step: int) -> tuple[int, tuple]:
    """The state a peer holds: ``own`` (n0's step and parameters), advanced by every
    voter's aggregate of the steps up to ``cluster_step`` that n0 has not applied."""
    step, params = own
    for missed in range(step + 1, cluster_step + 1):
        params = training.apply(params, training.aggregate(TRAINING_SEED, missed, NODES))
        step = missed
    return step, params


async def _run(
    sequence: list[tuple],
    folder: Path,
    bugs: tuple[str, ...],
    record: bool = False,
    expect_failures: list[int] | None = None,
    min_contributors: int = 1,
    sharded: bool = False,
) -> tuple[RuntimeNode, SimNode]:
    runtime = RuntimeNode(folder, bugs, min_contributors, sharded)
    sim = SimNode(bugs, min_contributors, sharded)
    assert runtime.config.decisions() == sim.settings.node
    nodes = (runtime, sim)
    for node in nodes:
        await node.start()
    assert runtime.step() == sim.step() == 0
    epoch = 0
    restarts: set[str] = set()
    membership: set[str] = set()
    cluster_step = msgs.GENESIS_STEP  # the newest step a peer showed committed ("ahead")
    answered = 0  # the state requests answered so far
    values: dict[str, msgs.StepValue] = {}  # the values other leaders proposed, by fp
    step_values: dict[int, msgs.StepValue] = {}  # ... and by step
    pulled = 0  # the aggregate pulls answered so far
    for index, drawn in enumerate(sequence):
        kind = drawn[0]
        if runtime.stopped and kind != "restart":
            continue  # the process ended: only a new one can take part
        if kind == "gradient":
            assert runtime.gradient_pending() == sim.gradient_pending(), index
            for node in nodes:
                await node.gradient()
        elif kind == "arrive":
            step = max(0, runtime.step() + drawn[2])
            for node in nodes:
                await node.arrive(step, drawn[1])
        elif kind == "advance":
            for node in nodes:
                await node.advance(drawn[1])
        elif kind == "view":
            epoch += 1
            for node in nodes:
                await node.view(drawn[1], epoch)
        elif kind == "restart":
            state = runtime.state()
            if not (runtime.driver.enrolment.joining and sim.app.enrolment.joining):
                # (A joiner's parameters are nobody's state: the runtime's worker
                # loaded its old checkpoint at start, the simulator's loads it only
                # if a rejoin falls back to it.)
                assert state == sim.state(), index
            restarts.add("from a peer's state" if state[0] >= 0 else "at genesis")
            if sim.disk.records:
                restarts.add("with acceptor records")
            # The state comes with the configuration in force at its step, as a
            # member's offer carries it.
            configuration = runtime.driver.membership.configs.after(state[0])
            for node in nodes:
                await node.restart()
            source = runtime.state_request_to()
            assert source == sim.state_request_to(), index
            answered = len(_state_requests(runtime))
            if source is None:
                # Not a member by what its disk says (it left, and its removal came
                # back with the state): it asks to join instead, in both shells.
                assert runtime.driver.enrolment.joining and sim.app.enrolment.joining, index
            else:
                for node in nodes:
                    await node.state_from(source, *state, configuration)
        elif kind == "disk":
            for node in nodes:
                await node.set_disk_full(drawn[1])
        elif kind in ("join_request", "leave_notice"):
            kind_of = msgs.JoinRequest if kind == "join_request" else msgs.LeaveNotice
            for node in nodes:
                await node.message(kind_of(sender=drawn[1], incarnation=1))
            membership.add(kind)
        elif kind == "leave":
            for node in nodes:
                await node.leave()
            membership.add("n0 leaves")
        elif kind == "leave_confirmed":
            for node in nodes:
                await node.message(msgs.LeaveConfirmed(sender=drawn[1], step=runtime.step() + 1))
            membership.add(kind)
        elif kind == "ahead":
            # A peer's round for a step two or more past n0's: its state holds the step
            # before.
            target = max(runtime.step(), 0) + drawn[2]
            cluster_step = max(cluster_step, target - 1)
            prepare = msgs.Prepare(sender=drawn[1], step=target, ballot=(1, NODES.index(drawn[1])))
            for node in nodes:
                await node.message(prepare)
            restarts.add("behind a peer")
        elif kind == "state":
            requests = _state_requests(runtime)
            if len(requests) > answered:
                # The source last asked answers with the cluster's newest state: n0's
                # own, or (a peer was ahead) n0's advanced by the steps it missed.
                answered = len(requests)
                step, params = _cluster_state(runtime.state(), cluster_step)
                configuration = runtime.driver.membership.configs.latest()
                for node in nodes:
                    await node.state_from(requests[-1], step, params, configuration)
                restarts.add("state answered")
        elif kind in ("peer_prepare", "peer_accept", "peer_decided"):
            step = max(runtime.step(), 0)
            ballot = (PEER_ROUND + index, NODES.index(drawn[1]))
            if kind == "peer_prepare":
                message = msgs.Prepare(sender=drawn[1], step=step, ballot=ballot)
            else:
                # One foreign value a step (the first drawn): with two waiting for bytes,
                # the runtime's worker answers the rebuilds and the apply in its queue's
                # order, the simulator's at once (a known difference of the simulated
                # worker: the runtime may still accept the other value, moot once the
                # step is decided; both are safe).
                value = step_values.setdefault(step, _value_of(step, drawn[2]))
                values[value.agg_fp] = value
                message = (
                    msgs.AcceptRequest(sender=drawn[1], step=step, ballot=ballot, value=value)
                    if kind == "peer_accept"
                    else msgs.Decided(sender=drawn[1], step=step, value=value)
                )
            for node in nodes:
                await node.message(message)
            membership.add(f"acceptor: {kind}")
        elif kind == "aggregate_answer":
            pulls = runtime.fetch_requests
            if drawn[2] and not drawn[1] and len(pulls) >= 2 and pulls[-2][2] in values:
                source, step, agg_fp = pulls[-2]  # a late refusal of an earlier request
                contributors = tuple(values[agg_fp].contributors)
                for node in nodes:
                    await node.aggregate_answer(source, step, agg_fp, contributors, False)
                membership.add("acceptor: a late refusal")
            elif len(pulls) > pulled and pulls[-1][2] in values:
                pulled = len(pulls)
                source, step, agg_fp = pulls[-1]
                contributors = tuple(values[agg_fp].contributors)
                for node in nodes:
                    await node.aggregate_answer(source, step, agg_fp, contributors, drawn[1])
                membership.add(f"acceptor: pull answered {drawn[1]}")
        elif kind == "declared_dead":
            for node in nodes:
                await node.declared_dead(drawn[1])
        elif kind == "declared_alive":
            for node in nodes:
                await node.declared_alive(drawn[1], drawn[2])
        elif kind == "state_reset":
            requests = _state_requests(runtime)
            if len(requests) > answered:
                answered = len(requests)  # this request will not be answered
                for node in nodes:
                    await node.state_reset(requests[-1])
                restarts.add("state transfer reset")
        elif kind == "state_request":
            request = msgs.StateRequest(sender=drawn[1], incarnation=2)
            for node in nodes:
                await node.message(request)
        elif kind == "vote":
            answers = _votes(runtime, drawn[1], drawn[2])
            assert answers == _votes(sim, drawn[1], drawn[2]), index
            for answer in answers:
                for node in nodes:
                    await node.message(answer)
        where = f"after event {index} {drawn}"
        assert runtime.step() == sim.step(), where
        assert runtime.commit_sends() == sim.commit_sends(), where
        assert runtime.history() == sim.history(), where
        assert runtime.refusals() == sim.refusals(), where
        assert runtime.checkpoints == sim.checkpoints, where
        assert runtime.checkpoint_failures == sim.checkpoint_failures, where
        assert runtime.writes_failed() == sim.writes_failed(), where
        assert runtime.membership_sends() == sim.membership_sends(), where
        assert _state_requests(runtime) == _state_requests(sim), where
        assert _state_offers(runtime) == _state_offers(sim), where
        assert runtime.fetch_requests == sim.fetch_requests, where
        assert runtime.detector_members == sim.detector_members, where
        assert runtime.detector_starts == sim.detector_starts, where
        assert runtime.strangers_heard == sim.strangers_heard, where
        assert runtime.stopped == sim.stopped, where
        if runtime.stopped:
            membership.add("n0 stopped")
    if expect_failures is not None:
        assert sim.checkpoint_failures == expect_failures
        assert sim.writes_failed() == len(expect_failures) and runtime.step() > 0
    if not record:
        return runtime, sim
    hypothesis.event(
        f"steps committed: {min(runtime.step(), 3)}{'+' if runtime.step() > 3 else ''}"
    )
    kinds = {e[0] for e in sim.history()}
    hypothesis.event(
        f"prepare rounds: {'yes' if any(isinstance(m, msgs.Prepare) for _, m in sim.sent) else 'no'}"
    )
    hypothesis.event(f"promises logged: {'promise' in kinds}")
    for what in sorted(restarts):
        hypothesis.event(f"restart {what}")
    hypothesis.event(f"checkpoint writes failed: {'yes' if sim.checkpoint_failures else 'no'}")
    changes = sorted({e[0] for e in sim.history() if e[0] == "config_change"})
    hypothesis.event(f"configuration changed: {'yes' if changes else 'no'}")
    for what in sorted(membership):
        hypothesis.event(f"membership: {what}")
    return runtime, sim


@settings(
    max_examples=200,  # ~6 s: the draws now reach rejoins, state service and verdicts
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sequence=st.lists(EVENTS, min_size=20, max_size=80),
    # The aggregation rule's fewest contributors: the mean's 1 mostly, else 2 or all 3.
    min_contributors=st.sampled_from([1, 1, 2, 3]),
    # Sharded contributions: a dead contributor is left out of a proposal.
    sharded=st.booleans(),
)
def test_the_runtime_and_the_simulator_run_the_same_node(
    tmp_path_factory, sequence, min_contributors, sharded
):
    folder = tmp_path_factory.mktemp("runtime")
    asyncio.run(
        _run(sequence, folder, (), record=True, min_contributors=min_contributors, sharded=sharded)
    )


def _step(*extra: tuple) -> list[tuple]:
    """One step n0 coordinates: its gradient, n1's and n2's (and ``extra`` arrivals),
    n1's and n2's votes, half a second."""
    return [
        ("gradient",),
        ("arrive", "n1", 0),
        ("arrive", "n2", 0),
        *extra,
        ("vote", "n1", True),
        ("vote", "n2", True),
        ("advance", 0.5),
    ]


# Every voter contributes, n0 (step 0's coordinator) proposes, n1 and n2 vote.
HEALTHY_STEP = _step()


def test_a_healthy_step_commits_the_same_way_in_both_shells(tmp_path):
    """A fixed sequence through a whole step: every voter contributes, n0 (step 0's
    coordinator) proposes, n1 and n2 vote, the step commits in both."""
    asyncio.run(_run(HEALTHY_STEP, tmp_path, ()))


def _config_changes(node: RuntimeNode | SimNode) -> list[tuple[str, str]]:
    changes = [dict(e[1]) for e in node.history() if e[0] == "config_change"]
    return [(eval(c["change"]), eval(c["peer"])) for c in changes]  # noqa: S307 (our reprs)


def test_a_joiner_is_added_then_promoted_the_same_way_in_both_shells(tmp_path):
    """The outsider asks to join: step 0's value adds it as a learner; its gradient for
    step 1 shows it caught up, and a later value promotes it to voter (the steps after
    step 0 wait out the leader's fallback, n0 not being their coordinator)."""
    sequence = [
        ("join_request", OUTSIDER),
        *_step(),
        ("advance", 3.5),
        *_step(("arrive", OUTSIDER, 0)),
        ("advance", 3.5),
        *_step(),
        ("advance", 3.5),
        *_step(),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert _config_changes(sim) == [("add", OUTSIDER), ("promote", OUTSIDER)]
    assert sim.detector_members[-1] == (*NODES, OUTSIDER)


def test_a_clean_leave_removes_and_stops_the_node_and_it_comes_back_as_a_joiner(tmp_path):
    """n0 leaves: its notices go to the voters, step 0's value removes it, it stops;
    restarted on its disk (the configuration without it), it asks to join again."""
    sequence = [("leave",), *_step(), ("advance", 1.0), ("restart",), ("advance", 1.5)]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert _config_changes(sim) == [("remove", ME)]
    notices = [type(m).__name__ for _, m in sim.membership_sends()]
    assert notices[:3] == ["LeaveNotice"] * 3 and "JoinRequest" in notices[3:]
    assert sim.app.enrolment.joining and runtime.driver.enrolment.joining


def test_a_peers_leave_notice_removes_it_the_same_way_in_both_shells(tmp_path):
    """n2 asks to leave: step 0's value removes it; n0 tells n2 its removal committed
    (at the commit, in answer to n2's vote that arrives after it -- a non-member's,
    refused -- and to a later notice, which n2 sends when it missed the step)."""
    sequence = [("leave_notice", "n2"), *_step(), ("leave_notice", "n2")]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert _config_changes(sim) == [("remove", "n2")]
    assert sim.detector_members == [("n0", "n1")]
    confirmed = [
        (p, m.step) for p, m in sim.membership_sends() if isinstance(m, msgs.LeaveConfirmed)
    ]
    assert confirmed == [("n2", 0)] * 3


def test_a_leaver_told_its_removal_committed_stops_the_same_way_in_both_shells(tmp_path):
    """n0 leaves but misses the step that removes it: a member's word stops it."""
    sequence = [*_step()[:1], ("leave",), ("leave_confirmed", "n2")]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert sim.stopped == runtime.stopped == "asked to leave: removal confirmed by n2"


def test_a_member_told_it_was_removed_restarts_as_a_joiner_in_both_shells(tmp_path):
    """n0 is not leaving but a member says n0's removal committed at a step n0 never
    saw (its process restarted before the step): it records the removal, restarts, and
    the new process asks to join instead of watching peers that no longer heartbeat it."""
    sequence = [("leave_confirmed", "n1"), ("restart",), ("advance", 1.5)]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert sim.app.enrolment.joining and runtime.driver.enrolment.joining
    assert "JoinRequest" in [type(m).__name__ for _, m in sim.membership_sends()]
    assert runtime.driver.membership.configs.latest() == sim.app.membership.configs.latest()
    assert ME not in sim.app.membership.configs.latest().members


def test_a_non_members_commit_traffic_is_answered_with_its_removal_in_both_shells(tmp_path):
    """n2 left (step 0 removed it) and, restarted before it saw that step, still votes
    as a member: n0 refuses its messages and tells it its removal, once per interval."""
    again = [("vote", "n2", True), ("vote", "n2", True)]
    sequence = [("leave_notice", "n2"), *_step(), *again, ("advance", 0.3), *again]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    confirmed = [
        (p, m.step) for p, m in sim.membership_sends() if isinstance(m, msgs.LeaveConfirmed)
    ]
    # At the commit, to the step's late vote from n2, then to one of each pair of
    # refused votes (each pair 0.3 s or more after the last answer).
    assert confirmed == [("n2", 0)] * 4


def test_a_checkpoint_write_on_a_full_disk_fails_the_same_way_in_both_shells(tmp_path):
    """Step 0's commit asks for a checkpoint (every 10 steps) while n0's disk is full:
    both shells count the failure at the same step, and neither stops the node."""
    asyncio.run(_run([("disk", True), *HEALTHY_STEP], tmp_path, (), expect_failures=[0]))


def test_a_node_behind_whose_fetch_fails_retries_the_same_way_in_both_shells(tmp_path):
    """n0 commits step 0 (its checkpoint write fails: a full disk) and begins step 1;
    n1's round for step 3 shows it behind.  n1 stays silent: with no checkpoint and
    past genesis, the fetch fails, and the node tries again ``rejoin_retry_s`` later
    (every live member may serve then), until a source answers with step 2's state.
    Meanwhile its commit core of step 1 is suspended in both shells: a view change
    that leaves n0 alone makes no proposal, and no round of step 1 goes out."""
    sequence = [
        ("disk", True),
        *HEALTHY_STEP,
        ("gradient",),
        ("arrive", "n1", 0),
        ("ahead", "n1", 2),
        ("view", ("n0",)),
        ("advance", 1.5),
        ("view", ("n0", "n1", "n2")),
        ("advance", 0.7),
        ("state",),
    ]
    # n1 asked at 0.5 s; the fetch failed at 1.5 s and is begun again at 2.5 s: at
    # 2.0 s (n1 alive again, and ahead) neither shell has asked again.
    runtime, sim = asyncio.run(_run(sequence[:-2], tmp_path / "2.0s", ()))
    assert _state_requests(runtime) == _state_requests(sim) == ["n1"]
    runtime, sim = asyncio.run(_run(sequence, tmp_path / "2.7s", ()))
    assert _state_requests(sim) == ["n1", "n2"]
    assert runtime.driver.errors["rejoin_failed"] == 1
    assert runtime.step() == sim.step() == 3
    # Step 1's round never went out: n0 proposed step 0 only.
    assert {m.step for _, m in sim.commit_sends()} == {0}


def test_a_node_that_falls_back_to_its_checkpoint_computes_its_gradient_again(tmp_path):
    """n0 commits step 0 (checkpointed) and contributes to step 1; n1's round for step
    3 shows it behind, n1 stays silent, and the fetch falls back to the checkpoint of
    step 0: n0 runs step 1 again on the installed parameters, so its gradient of step
    1 is computed again in both shells (the one from before the fetch came from the
    parameters the install replaced)."""
    sequence = [*HEALTHY_STEP, ("gradient",), ("ahead", "n1", 2), ("advance", 1.5), ("gradient",)]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert runtime.step() == sim.step() == 1
    assert [e[0] for e in sim.history()].count("rejoin_done") == 0  # (ignored kind)
    sends = [m for _, m in sim.sent if isinstance(m, Contribution) and m.step == 1]
    assert len(sends) == 4  # to n1 and n2, before the fetch and after it


def test_state_requests_are_served_the_same_way_in_both_shells(tmp_path):
    """At genesis n0 answers a state request with the genesis offer; after step 0 with
    its state of step 0; while it fetches the state itself (n1 showed it behind), not
    at all."""
    sequence = [
        ("state_request", "n2"),
        *HEALTHY_STEP,
        ("state_request", "n2"),
        ("ahead", "n1", 2),
        ("state_request", "n2"),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert [m.step for _, m in _state_offers(sim)] == [msgs.GENESIS_STEP, 0]


def test_a_late_state_offer_is_no_evidence_of_being_behind(tmp_path):
    """n0 commits step 0, and falls back to its checkpoint of step 0 when n1, which
    showed it behind (its round of step 5), stays silent; n1's offer of step 4 then
    arrives after the fetch ended.  An offer carries a committed state, not the step its sender runs: neither
    shell takes it for evidence and fetches again (the runtime did)."""
    sequence = [
        *HEALTHY_STEP,
        ("gradient",),
        ("ahead", "n1", 4),
        ("advance", 1.5),
        ("state",),
        ("advance", 0.5),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert _state_requests(sim) == ["n1"]
    assert runtime.step() == sim.step() == 1


def test_a_fetch_whose_source_is_declared_dead_moves_on_at_once_in_both_shells(tmp_path):
    """n1 showed n0 behind and is the only source n0 asks; n0's detector then declares
    n1 dead: both shells give up on n1 at once and fall back to the checkpoint of step
    0 (the runtime waited out the offer timeout)."""
    sequence = [*HEALTHY_STEP, ("ahead", "n1", 2), ("view", ("n0", "n2")), ("declared_dead", "n1")]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert _state_requests(sim) == ["n1"]
    assert runtime.step() == sim.step() == 1  # back on step 0's checkpoint, at once


def test_a_removed_peers_claim_of_a_later_step_is_no_evidence_in_either_shell(tmp_path):
    """n2 asks to leave; with n0 alone in its view after a restart, step 0 commits
    n2's removal.  n2, still in the detector's view, then sends a round of step 3:
    the commit core refuses it, and ``node_core.peer_ahead`` counts members only, so
    neither shell rejoins.  (Found by the agreement test's weighted draws, session 17:
    the runtime rejoined from n2, the simulator did not look after a refused message.)"""
    sequence = [
        ("gradient",),
        ("leave_notice", "n2"),
        ("view", ("n0",)),
        ("restart",),
        ("vote", "n1", False),
        ("vote", "n1", True),
        ("ahead", "n2", 2),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert runtime.step() == sim.step() == 1
    assert "n2" not in runtime.driver.core.members
    assert _state_requests(runtime) == _state_requests(sim)
    assert runtime.driver.rejoin is None and sim.app.rejoin is None


def test_a_pull_due_with_the_leaders_proposal_waits_for_it_in_both_shells(tmp_path):
    """n1 decides step 1 for contributions n0 and n2 held here; n0 pulls the bytes
    and its own gradient arrives meanwhile.  At 1.01 s both the pull's timeout and
    n0's leader deadline are due: the runtime's loop runs the leader first (it builds
    the very value pulled, so nobody is asked again); the simulator now does too,
    whichever timer was armed first (session 17: it asked n1 again)."""
    sequence = [
        ("gradient",),
        ("advance", 0.01),
        ("view", ("n0",)),
        ("vote", "n1", True),
        ("view", ("n0", "n1")),
        ("arrive", "n2", 0),
        ("peer_accept", "n1", ("n0", "n2")),
        ("gradient",),
        ("advance", 1.0),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert runtime.fetch_requests == sim.fetch_requests
    assert len(sim.fetch_requests) == 1


def test_a_checkpoint_fallback_below_an_install_re_proposes_what_memory_holds(tmp_path):
    """n0 accepts and commits n1's value for step 1, a peer shows it behind, it
    installs step 5's state, then falls behind again and its fetch breaks off: it
    falls back to its checkpoint of step 0.  Step 1's value is still in the worker's
    memory (an install prunes the disk only; an apply prunes memory to the window), so
    both shells re-propose it at once.  (Session 17: the simulator pruned its memory
    at the install and waited for a gradient; the runtime also remembered bytes for
    64 steps that its worker had dropped at an apply.)"""
    sequence = [
        ("gradient",),
        ("view", ("n0",)),
        ("vote", "n1", True),
        ("gradient",),
        ("arrive", "n1", 0),
        ("peer_accept", "n1", ("n0", "n1")),
        ("peer_decided", "n1", ("n0", "n1")),
        ("ahead", "n1", 4),
        ("state",),
        ("ahead", "n1", 2),
        ("state_reset",),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert runtime.step() == sim.step() == 1
    prepares = [m for _, m in sim.commit_sends() if isinstance(m, msgs.Prepare)]
    assert prepares and prepares[-1].step == 1


def test_bytes_the_worker_dropped_at_an_apply_are_not_re_proposed_in_either_shell(tmp_path):
    """n0 commits step 0 (its last checkpoint: the disk is full from then on), then
    steps 1-6 by n1's decisions; its worker keeps steps 3-6 in memory (the pinned ones
    on disk only).  A fetch that breaks off falls back to step 0's checkpoint: step
    1's recorded value is not held, so neither shell re-proposes it.  (Session 17: the
    runtime remembered 64 steps of holds and began a round for bytes its worker no
    longer had.)"""
    decided_by_n1 = [
        ("gradient",),
        ("arrive", "n1", 0),
        ("peer_accept", "n1", ("n0", "n1")),
        ("peer_decided", "n1", ("n0", "n1")),
    ]
    sequence = [
        *HEALTHY_STEP,
        ("disk", True),
        *decided_by_n1 * 6,
        ("ahead", "n1", 2),
        ("state_reset",),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert runtime.step() == sim.step() == 1
    assert runtime.driver.step_node.held.steps() == sim.app.step_node.held.steps() == [3, 4, 5, 6]
    assert not [m for _, m in runtime.commit_sends()[-4:] if isinstance(m, msgs.Prepare)]


def test_a_pinned_aggregate_kept_on_disk_only_is_served_as_the_runtimes_worker_serves_it(
    tmp_path,
):
    """n0 accepted step 0's value, then applied steps 1-6: step 0's bytes left its
    memory and stayed on its disk, pinned by its acceptor record, so that a retry of
    step 0 after a fallback below it can still get them.  The runtime's worker serves
    such bytes from its store (``worker.serve_aggregate``); the simulator's node served
    only what it held in memory and answered ``NoAggregate``."""
    decided_by_n1 = [
        ("gradient",),
        ("arrive", "n1", 0),
        ("peer_accept", "n1", ("n0", "n1")),
        ("peer_decided", "n1", ("n0", "n1")),
    ]
    runtime, sim = asyncio.run(_run([*HEALTHY_STEP, *decided_by_n1 * 6], tmp_path, ()))
    assert runtime.step() == sim.step() == 7
    (pinned,) = [key for key in sim.disk.aggregates if key[0] == 0]
    assert pinned not in sim.app.step_node.held  # not in memory: on the disk only
    sim.app.receive(sim.t, "n1", msgs.AggregateRequest(sender="n1", step=0, value_fp=pinned[1]))
    to, reply = sim.sent[-1]
    assert to == "n1" and reply == AggregateBytes(0, pinned[1], ("n0", "n1", "n2"))


def test_a_pull_whose_source_leaves_the_view_asks_the_next_source_at_once(tmp_path):
    """n1 decides step 0 over contributions n0 lacks; n0 pulls the bytes from n1, and
    n1 leaves n0's view: both shells ask n2 now, not a fetch timeout later (the GPU
    run: a pull from a node paused 0.5 s after it waited out its 15 s timeout, and no
    step committed for 12.2 s).  And the step, decided, is no longer led: no gradient
    timer builds an aggregate nobody would propose."""
    sequence = [
        ("gradient",),
        ("peer_decided", "n1", ("n1", "n2")),
        ("view", ("n0", "n2")),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert runtime.fetch_requests == sim.fetch_requests
    assert [source for source, _, _ in sim.fetch_requests] == ["n1", "n2"]
    assert not runtime.driver.step_node.leader.leads() and not sim.app.step_node.leader.leads()
    assert runtime.driver.step_node.leader.next_deadline() is None


def test_a_peers_gradient_of_a_later_step_asks_it_for_the_decision_in_both_shells(tmp_path):
    """A node still at step 0 gets n1's gradient of step 1: n1 holds step 0's decision,
    and both shells have the commit core ask it (the GPU run: a laggard that waited for
    a commit message its peers could not send, 14.7 s without a commit)."""
    runtime, sim = asyncio.run(_run([("arrive", "n1", 1), ("arrive", "n1", 1)], tmp_path, ()))
    for node in (runtime, sim):
        asks = [(to, m) for to, m in node.sent if isinstance(m, msgs.DecisionRequest)]
        assert asks == [("n1", msgs.DecisionRequest(sender="n0", step=0))]


def test_a_refusal_before_a_restart_stays_in_both_shells_records(tmp_path):
    """n2 leaves (its removal commits at step 0), then its round for a later step is
    refused by n0's commit core (``commit_unknown-peer``), and n0 restarts.  Hypothesis
    drew this: the runtime's side of the test began a new list of drops at the restart
    and lost the refusal, the simulator's log kept it; both count a node's whole life."""
    sequence = [
        *[("gradient",)] * 11,
        ("restart",),
        ("arrive", OUTSIDER, 0),
        ("state",),
        ("view", (ME,)),
        ("leave_notice", "n2"),
        ("gradient",),
        ("vote", "n1", True),
        ("ahead", "n2", 2),
        ("restart",),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert (
        runtime.refusals()
        == sim.refusals()
        == [(nc.refusal_reason("commit", "unknown-peer"), "n2")]
    )


def test_state_bytes_that_come_before_their_offer_wait_for_it_in_both_shells(tmp_path):
    """n0 is removed (n1 confirms it), restarts as a joiner and asks n1 for the state;
    n1's offer names a configuration without n0, so the rejoin asks again, and the bytes
    of the refused offer come after.  The runtime handed them to its rejoin core, which
    refused them (``rejoin_order``); the simulator kept them for their offer.  Now both
    keep them (node_core.state_bytes_wait): no refusal on either side."""
    sequence = [
        *[("gradient",)] * 15,
        ("leave_confirmed", "n1"),
        ("restart",),
        ("ahead", "n1", 2),
        ("ahead", "n1", 2),
        ("state",),
    ]
    runtime, sim = asyncio.run(_run(sequence, tmp_path, ()))
    assert runtime.driver.enrolment.joining and sim.app.enrolment.joining
    assert _state_requests(runtime) == _state_requests(sim) == ["n1", "n1"]
    assert runtime.refusals() == sim.refusals() == []
