"""The control process of a node: the protocol cores on one asyncio loop.

It owns the control channel (heartbeats, gossip, votes), MQTT, the HTTP API and
the event log, and drives the worker process (training, bulk I/O, aggregation,
checkpoints) over a socketpair.  Every task lives in one TaskGroup: if any of
them fails -- including the worker channel when the worker dies -- the group
cancels the rest and the node exits as a whole, killing the worker on the way
(and the worker dies by itself if this process is SIGKILLed).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.reference_node.config import NodeConfig
from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol import messages as msgs
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol.errors import RemoteProtocolError
from swarmshake.reference_node.runtime import incarnation as incarnation_store
from swarmshake.reference_node.runtime import ipc
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.detector_driver import DetectorDriver
from swarmshake.reference_node.runtime.events import EventLog
from swarmshake.reference_node.runtime.frames import Channel, DropCounter, Frame
from swarmshake.reference_node.runtime.http_api import HttpApi, InferUnavailable
from swarmshake.reference_node.runtime.links import AddressBook, PeerAddress, PeerLinks
from swarmshake.reference_node.runtime.loop_watchdog import LoopWatchdog
from swarmshake.reference_node.runtime.membership_driver import (
    ConfigHistory,
    MembershipDriver,
    initial_configuration,
)
from swarmshake.reference_node.runtime.metrics import make_registry
from swarmshake.reference_node.runtime.mqtt import MqttAgent
from swarmshake.reference_node.runtime.mqtt_messages import (
    AddressBookUpdate,
    Announcement,
    Command,
    ForceCheckpoint,
    HoldBulk,
    Leave,
    SetByzantine,
    SetClock,
)
from swarmshake.reference_node.runtime.worker_start import (
    ForkedWorker,
    WorkerProcess,
    exec_worker,
)
from swarmshake.reference_node.training.host import cpu_flags, installed_torch_version

WORKER_START_TIMEOUT_S = 120.0  # importing torch on a loaded 2-core machine takes seconds
WORKER_PING_S = 5.0  # keeps the worker's silence deadline (30 s) from firing
MAX_PENDING_INFER = 64  # /infer requests waiting on the worker; more get a 503
TELEMETRY_S = 1.0
DROP_LOG_S = 1.0  # frame drops are logged as one aggregated event per second per reason
EXIT_WORKER_DIED = 3
# Returned by ``run`` when peers declared this node dead: DESIGN says it must rejoin
# with a new incarnation, so ``__main__`` starts a fresh control process (a new
# incarnation, state transfer from a live peer) in the same OS process.
EXIT_REJOIN = 75


def redacted(config: NodeConfig, voters: tuple[str, ...] = ()) -> dict[str, Any]:
    """The config as recorded in the run: secrets (run key, broker password) removed.
    ``voters``: the configuration this node starts with (the S3 checker's initial
    voters; a joiner is not among them)."""
    raw = msgspec.to_builtins(config)
    if voters:
        raw["voters"] = list(voters)
    if raw["network"].get("run_key_hex"):
        raw["network"]["run_key_hex"] = "<redacted>"
    if raw.get("mqtt") and raw["mqtt"].get("password"):
        raw["mqtt"]["password"] = "<redacted>"
    return raw


class NodeExit(Exception):
    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


class ControlProcess:
    def __init__(
        self,
        config: NodeConfig,
        config_path: Path,
        overrides: dict[str, Any],
        forked_worker: ForkedWorker | None = None,
    ):
        """``forked_worker``: a worker already forked (``worker_start.fork_worker``) and
        waiting for its init; None starts one by exec."""
        self.config = config
        self.config_path = config_path
        self.overrides = overrides
        self.node = config.node_id
        self.incarnation = incarnation_store.next_incarnation(config.data_dir)
        self.clock = NodeClock(config.clock.offset_s, config.clock.drift_ppm)
        self.events = EventLog(config.events_path, self.node, self.incarnation)
        # The configured membership: the newest configuration this node saw committed
        # (membership.json), else the config file's members.  A node outside it (a
        # joiner, or one that left) watches the members it would join.
        configs = ConfigHistory.load(
            config.data_dir,
            initial_configuration(config.node.members, self.node, config.node.join),
        )
        latest = configs.latest()
        self.members = tuple(sorted({*latest.members, self.node}))
        self.membership = MembershipDriver(
            node=self.node,
            incarnation=self.incarnation,
            configs=configs,
            events=self.events,
            now=self.clock.now,
            members_changed=self.members_changed,
            bugs=config.bug_set,
        )
        self.detector_started = False
        self.removal_answers = nc.RemovalAnswers(config.decisions())
        self.stop_code = 0
        self.run_key = config.run_key(config_path.parent)
        self.book = AddressBook(dict(config.peers))
        self._pending_drops: dict[tuple[str, str], int] = {}
        self.drops = DropCounter(on_drop=self._count_drop)
        self.links = PeerLinks(
            node_id=self.node,
            incarnation=self.incarnation,
            run_key=self.run_key,
            channel=Channel.CONTROL,
            listen_host=config.network.listen_host,
            listen_port=config.network.control_port,
            book=self.book,
            on_frame=self.on_control_frame,
            counter=self.drops,
            timeouts=config.link_timeouts(),
            seed=config.node.seed,
        )
        core = det.FailureDetector(
            node=self.node,
            members=self.members,
            seed=config.node.seed,
            incarnation=self.incarnation,
            config=config.detector,
            bugs=config.bug_set,
        )
        self.watchdog = LoopWatchdog(
            self.events.log, on_stall=lambda since, woke: self.detector.local_stall(woke - since)
        )
        self.detector = DetectorDriver(
            core,
            clock=self.clock,
            events=self.events,
            send=self.send_message,
            send_heartbeat=self.send_heartbeat,
            on_action=self._on_detector_action,
            stall_probe=self.watchdog.late_s,
        )
        self.registry = make_registry(self.status)
        self.http = HttpApi(
            host=config.network.listen_host,
            port=config.network.http_port,
            status=self.status,
            registry=self.registry,
            infer=self.infer,
            input_dim=config.training.input_dim,
        )
        self.mqtt: MqttAgent | None = None
        if config.mqtt is not None:
            self.mqtt = MqttAgent(
                config.mqtt,
                node_id=self.node,
                announcement=Announcement(node=self.node, incarnation=self.incarnation),
                on_command=self.on_command,
                on_address_book=self.on_address_book,
                on_announcement=self.on_announcement,
                run_key=self.run_key,
                on_drop=self.on_mqtt_drop,
                state_dir=config.data_dir,
                seed=config.node.seed,
            )
        self.worker_channel: ipc.IpcChannel | None = None
        self.forked_worker = forked_worker
        self.worker_process: WorkerProcess | None = None
        self.worker_ready: ipc.WorkerReady | None = None
        self.worker_report: ipc.WorkerReport | None = None
        # Set when this process must make way for a new incarnation.
        self.rejoin_reason: str | None = None
        self._infer_ids = itertools.count(1)
        self._infer_waiters: dict[int, asyncio.Future[ipc.InferResult]] = {}
        self.stopping = asyncio.Event()
        self.stop_reason = ""
        self.step_driver: Any = None  # set by run() (step_driver.StepDriver)
        self.started_mono = time.monotonic()
        self.is_ready = False

    # -- messages in and out -------------------------------------------------------------------

    def send_message(self, peer: str, message: object) -> None:
        if peer == self.node:
            return
        self.links.send_nowait(peer, msgs.encode_message(message))  # type: ignore[arg-type]

    def send_heartbeat(self, peer: str, message: object) -> None:
        if peer != self.node:
            payload = msgs.encode_message(message)  # type: ignore[arg-type]
            self.links.send_nowait(peer, payload, only_if_connected=True)

    def on_control_frame(self, frame: Frame) -> None:
        try:
            message = msgs.decode_message(frame.payload)
        except RemoteProtocolError as error:
            self.drops.drop(f"message_{error.reason}", frame.header.sender)
            return
        if message.sender != frame.header.sender:
            # Authenticated as one node, claiming to be another: out of our threat
            # model for honest members, so a bug or a confused peer.  Drop it.
            self.drops.drop("sender_mismatch", frame.header.sender)
            return
        try:
            self.dispatch(message)
        except RemoteProtocolError as error:
            self.drops.drop(f"rejected_{error.reason}", frame.header.sender)
            self.refused(frame.header.sender, error.reason)

    def refused(self, peer: str, reason: str) -> None:
        """A message of ``peer``'s was refused (``RemoteProtocolError.reason``): one
        from a node removed here is answered with its removal (node_core.RemovalAnswers;
        here, not in the step driver, so that it works before the worker is ready); any
        other non-member is heartbeated (node_core.heartbeats_stranger)."""
        configs = self.membership.configs
        step = self.removal_answers.refused(peer, reason, configs, self.clock.now())
        if step is not None:
            self.send_message(peer, msgs.LeaveConfirmed(sender=self.node, step=step))
        if nc.heartbeats_stranger(peer, reason) and self.detector_started:
            self.detector.stranger_heard(peer)

    def dispatch(self, message: msgs.Message) -> None:
        if isinstance(message, msgs.Heartbeat | msgs.Gossip) and not self.detector_started:
            # A joiner not yet added: a member's heartbeats mean it holds us as a
            # member now (it heartbeats its members, and flags those to strangers).
            heartbeat = isinstance(message, msgs.Heartbeat)
            if heartbeat and not message.stranger and self.step_driver is not None:
                self.step_driver.on_join_evidence(message.sender)
            return
        if isinstance(message, msgs.Heartbeat):
            if not message.stranger and self.step_driver is not None:
                # A joiner whose detector a member's traffic started still takes every
                # member's heartbeats for evidence: when the fetch from the first one
                # fails, the next comes from another (node_core.Enrolment.evidence).
                self.step_driver.on_join_evidence(message.sender)
            self.detector.on_heartbeat(message)
        elif isinstance(message, msgs.Gossip):
            self.detector.on_gossip(message)
        elif self.step_driver is not None:
            self.step_driver.on_message(message)

    def start_detector(self) -> None:
        """Heartbeats out, watches armed.  A member starts it at once; a joiner only
        once a member holds it as one (else it would watch peers that do not yet
        heartbeat it, and declare them dead)."""
        if not self.detector_started:
            self.detector_started = True
            self.detector.start()

    def members_changed(self, members: tuple[str, ...]) -> None:
        """A committed configuration change (or one installed with a state).  A
        detector not started yet (a joiner's) learns its members when it starts."""
        self.members = tuple(sorted(members))
        if self.detector_started:
            self.detector.members_changed(self.members)

    def _count_drop(self, peer: str, reason: str) -> None:
        key = (peer, reason)
        self._pending_drops[key] = self._pending_drops.get(key, 0) + 1

    def _on_detector_action(self, action: object) -> None:
        if isinstance(action, det.DeclaredAlive):
            # A peer back with a new incarnation (restarted, or refuted): redial now.
            # While it was down our link failed its dials and sits in a backoff of up
            # to a second; the restarted peer only waits its start-up grace (1 s) for
            # our heartbeats before it suspects us.
            self.links.link(action.peer).reconnect()
        if isinstance(action, det.SelfDeclaredDead):
            self.request_restart(f"declared dead by {action.declared_by}: rejoining")
        if isinstance(action, det.Refuted):
            # A restart must come back above every incarnation this process used.
            incarnation_store.store(self.config.data_dir, action.incarnation)
            # Events from now on carry the raised incarnation (as ``epoch`` follows
            # ViewChanged), in this process and in the worker's.
            self.events.incarnation = action.incarnation
            self.membership.incarnation = action.incarnation
            if self.worker_channel is not None:
                self.to_worker(ipc.SetIncarnation(incarnation=action.incarnation))
        if self.step_driver is not None:
            self.step_driver.on_detector_action(action)

    # -- worker --------------------------------------------------------------------------------

    async def start_worker(self) -> None:
        if self.forked_worker is not None:
            self.worker_process = self.forked_worker
            parent_sock = self.forked_worker.control_socket
        else:
            self.worker_process, parent_sock = await exec_worker(self.config.worker.nice)
        self.worker_channel = await ipc.IpcChannel.from_socket(parent_sock, ipc.FromWorker)
        peers = {
            peer: (address.host, address.bulk_port)
            for peer in self.book.peers()
            if (address := self.book.lookup(peer)) is not None
        }
        self.worker_channel.send(
            ipc.WorkerInit(
                config_toml_path=str(self.config_path.resolve()),
                overrides_json=json.dumps(self.overrides),
                incarnation=self.incarnation,
                bulk_port=self.config.network.bulk_port,
                peers=peers,
            )
        )
        await self.worker_channel.flush()
        try:
            ready = await self.worker_channel.receive(timeout_s=WORKER_START_TIMEOUT_S)
        except ipc.IpcError as error:
            raise NodeExit(EXIT_WORKER_DIED, f"worker did not start: {error}") from None
        if not isinstance(ready, ipc.WorkerReady):
            raise NodeExit(EXIT_WORKER_DIED, f"worker sent {type(ready).__name__} before ready")
        self.worker_ready = ready

    def to_worker(self, message: object) -> None:
        assert self.worker_channel is not None
        self.worker_channel.send(message)  # type: ignore[arg-type]

    async def worker_reader(self) -> None:
        assert self.worker_channel is not None
        while True:
            try:
                message = await self.worker_channel.receive(timeout_s=ipc.WORKER_SILENCE_S)
            except ipc.IpcError as error:
                status = await self._worker_exit_status()
                raise NodeExit(EXIT_WORKER_DIED, f"worker channel: {error} ({status})") from None
            if isinstance(message, ipc.WorkerReport):
                self.worker_report = message
            elif isinstance(message, ipc.InferResult):
                waiter = self._infer_waiters.pop(message.request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
            elif self.step_driver is not None:
                self.step_driver.on_worker(message)

    async def _worker_exit_status(self) -> str:
        """How the worker ended, for the node's exit message (it may still be exiting)."""
        process = self.worker_process
        if process is None:
            return "no worker process"
        try:
            async with asyncio.timeout(1.0):
                code = await process.wait()
        except TimeoutError:
            return f"worker pid {process.pid} still running"
        if code < 0:
            return f"worker pid {process.pid} killed by {signal.Signals(-code).name}"
        return f"worker pid {process.pid} exited with {code}"

    async def worker_pinger(self) -> None:
        assert self.worker_channel is not None
        while True:
            await asyncio.sleep(WORKER_PING_S)
            self.to_worker(ipc.Ping())
            try:
                await self.worker_channel.flush()
            except ipc.IpcError as error:
                raise NodeExit(EXIT_WORKER_DIED, f"worker channel: {error}") from None

    async def infer(self, rows: list[list[float]]) -> list[list[float]]:
        if len(self._infer_waiters) >= MAX_PENDING_INFER:
            raise InferUnavailable(f"{MAX_PENDING_INFER} requests already waiting on the worker")
        request_id = next(self._infer_ids)
        waiter: asyncio.Future[ipc.InferResult] = asyncio.get_running_loop().create_future()
        self._infer_waiters[request_id] = waiter
        try:
            self.to_worker(ipc.Infer(request_id=request_id, inputs=rows))
            result = await waiter  # the HTTP layer puts the deadline on this
        finally:
            self._infer_waiters.pop(request_id, None)
        if result.error:
            raise InferUnavailable(result.error)
        return result.outputs

    # -- MQTT ------------------------------------------------------------------------------------

    def on_command(self, command: Command) -> None:
        match command:
            case SetByzantine():
                self.to_worker(ipc.SetBehaviour(behaviour=command.behaviour))
            case ForceCheckpoint():
                if self.step_driver is not None:
                    self.step_driver.force_checkpoint()
                else:
                    self.to_worker(ipc.WriteCheckpoint())
            case SetClock():
                self.clock.set_skew(command.offset_s, command.drift_ppm)
                self.to_worker(ipc.SetClock(offset_s=command.offset_s, drift_ppm=command.drift_ppm))
            case Leave():
                self.leave(f"leave: {command.reason}")
            case HoldBulk():
                self.to_worker(ipc.HoldBulk(peers=list(command.peers)))

    def on_mqtt_drop(self, topic_kind: str, reason: str) -> None:
        """A command or address book refused (forged, unsigned, replayed, malformed):
        in the history, so a run's report shows someone tried to steer the node."""
        self.events.log(history.FrameDrop, peer="mqtt", reason=f"{topic_kind}:{reason}")

    def leave(self, reason: str) -> None:
        """A clean leave: removed from the configuration through a committed step
        (DESIGN), then stop.  Before the node is ready it just stops."""
        if self.step_driver is not None:
            self.step_driver.begin_leave(reason)
        else:
            self.request_stop(reason)

    def on_address_book(self, update: AddressBookUpdate) -> None:
        bulk: dict[str, tuple[str, int]] = {}
        for peer, address in update.peers.items():
            if peer == self.node:
                continue
            changed = self.book.lookup(peer) != address
            self.book.set_harness(peer, address)
            if changed:
                self.links.link(peer).reconnect()
                bulk[peer] = (address.host, address.bulk_port)
        if bulk:
            self.to_worker(ipc.UpdatePeers(peers=bulk))

    def on_announcement(self, announcement: Announcement) -> None:
        if announcement.address is None or (
            announcement.node not in self.members
            and announcement.node not in self.config.node.members
        ):
            return
        had = self.book.lookup(announcement.node)
        self.book.set_announced(announcement.node, announcement.address)
        now = self.book.lookup(announcement.node)
        if had is None and now is not None:
            self.links.link(announcement.node)
            self.to_worker(ipc.UpdatePeers(peers={announcement.node: (now.host, now.bulk_port)}))

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        report = self.worker_report
        driver = self.step_driver
        stats = self.links.stats
        return {
            "node": self.node,
            "incarnation": self.events.incarnation,
            "pid": os.getpid(),
            "worker_pid": self.worker_ready.worker_pid if self.worker_ready else 0,
            # Where the worker's state came from at start: initial, checkpoint, replica.
            "worker_source": self.worker_ready.source if self.worker_ready else "",
            "uptime_s": time.monotonic() - self.started_mono,
            "ready": self.is_ready,
            "step": driver.step if driver is not None else (report.step if report else -1),
            "steps_committed": driver.committed if driver is not None else 0,
            "param_fp": driver.param_fp
            if driver is not None
            else (report.param_fp if report else ""),
            "view": list(self.detector.core.alive_view()),
            "view_epoch": self.detector.core.view_epoch,
            "detector_status": dict(self.detector.core.status),
            "heartbeat_gaps": self.detector.gap_summary(),
            "heartbeat_send_lag_max_ms": 1000 * self.detector.send_lag_max_s,
            "frame_drops": {
                "control": dict(self.drops.counts),
                "bulk": dict(report.bulk_drops) if report else {},
            },
            "links": dict(stats.per_peer_connected),
            "link_stats": {
                "connects": stats.connects,
                "dial_failures": stats.dial_failures,
                "disconnects": stats.disconnects,
                "queue_dropped_oldest": stats.queue_dropped_oldest,
            },
            "mqtt": {
                "configured": self.mqtt is not None,
                "connected": bool(self.mqtt and self.mqtt.connected),
                "bad_payloads": dict(self.mqtt.stats.bad_payloads) if self.mqtt else {},
                "commands": self.mqtt.stats.commands if self.mqtt else 0,
                "address_books": self.mqtt.stats.address_books if self.mqtt else 0,
            },
            "worker": {
                "last_step_s": report.last_step_s if report else 0.0,
                "bulk_bytes_sent": report.bulk_bytes_sent if report else 0,
                "bulk_bytes_received": report.bulk_bytes_received if report else 0,
                # The worker's step when it counted those bytes (its report lags the
                # driver's step by up to WORKER_REPORT_S): bytes per step divide by it.
                "report_step": report.step if report else -1,
                "bulk_sends_coalesced": report.bulk_sends_coalesced if report else 0,
            },
            # Bytes written to and read from this node's sockets (frame headers, tags
            # and keepalives included), this incarnation: control here, bulk in the
            # worker's last report.
            "wire_bytes": {
                "control": {"sent": stats.bytes_sent, "received": stats.bytes_received},
                "bulk": {
                    "sent": report.bulk_bytes_sent if report else 0,
                    "received": report.bulk_bytes_received if report else 0,
                },
            },
            "clock": {"offset_s": self.clock.offset_s, "drift_ppm": self.clock.drift_ppm},
            "events": dict(self.events.counts),
            "commit": driver.status() if driver is not None else {},
        }

    async def telemetry_loop(self) -> None:
        while True:
            await asyncio.sleep(TELEMETRY_S)
            if self._pending_drops:
                pending, self._pending_drops = self._pending_drops, {}
                for (peer, reason), count in sorted(pending.items()):
                    self.events.log(
                        history.FrameDrop, peer=peer, reason=f"control:{reason}", count=count
                    )
            if self.mqtt is not None:
                status = self.status()
                self.mqtt.publish_telemetry(
                    {
                        k: status[k]
                        for k in (
                            "node",
                            "incarnation",
                            "step",
                            "steps_committed",
                            "param_fp",
                            "view",
                        )
                    }
                )

    # -- lifecycle -------------------------------------------------------------------------------

    def request_restart(self, reason: str) -> None:
        """End this process so that a new incarnation starts (``EXIT_REJOIN``; see
        ``__main__``): declared dead, or removed while it ran as a member."""
        if self.rejoin_reason is None:
            self.rejoin_reason = reason
            self.request_stop(reason)

    def request_stop(self, reason: str, code: int = 0) -> None:
        if self.stopping.is_set():
            return  # the first reason stands
        self.stop_reason = reason
        self.stop_code = code
        self.stopping.set()

    async def run(self) -> int:
        from swarmshake.reference_node.runtime.step_driver import StepDriver

        self.events.log(
            history.Start,
            seed=self.config.node.seed,
            git_commit=os.environ.get("SWARMSHAKE_GIT_COMMIT", ""),
            torch_version=installed_torch_version(),  # no torch import here
            threads=self.config.training.threads,
            cpu_flags=cpu_flags(),
            config=redacted(self.config, self.membership.configs.latest().voters),
        )
        if self.config.worker.control_nice:
            try:
                os.setpriority(os.PRIO_PROCESS, 0, self.config.worker.control_nice)
            except PermissionError:
                print(
                    f"node {self.node}: warning: cannot set control_nice="
                    f"{self.config.worker.control_nice} (needs CAP_SYS_NICE); running at default",
                    file=sys.stderr,
                )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop, signal.Signals(signum).name)
        code = 0
        try:
            async with asyncio.TaskGroup() as group:
                # Listeners and the detector first: heartbeats flow while the worker
                # (torch, model, checkpoint) is still starting, so a slow start is
                # not mistaken for a crash by peers that are already up.
                ready = asyncio.Event()
                group.create_task(self.links.serve(group, ready))
                http_ready = asyncio.Event()
                group.create_task(self.http.serve(group, http_ready))
                async with asyncio.timeout(10):
                    await ready.wait()
                    await http_ready.wait()
                if self.membership.is_member():
                    self.start_detector()
                group.create_task(self.detector.heartbeat_loop())
                group.create_task(self.detector.timer_loop())
                group.create_task(self.watchdog.run())
                starting = group.create_task(self.start_worker())
                stop_wait = group.create_task(self.stopping.wait())
                await asyncio.wait((starting, stop_wait), return_when=asyncio.FIRST_COMPLETED)
                if not starting.done():  # asked to stop while the worker was starting
                    starting.cancel()
                    raise NodeExit(0, f"{self.stop_reason} (before ready)")
                starting.result()
                assert self.worker_ready is not None
                self.step_driver = StepDriver(self)
                group.create_task(self.worker_reader())
                group.create_task(self.worker_pinger())
                group.create_task(self.telemetry_loop())
                if self.mqtt is not None:
                    host = self.config.network.advertise_host or self.config.network.listen_host
                    self.mqtt.announcement = Announcement(
                        node=self.node,
                        incarnation=self.incarnation,
                        address=PeerAddress(
                            host=host,
                            control_port=self.links.bound_port or 0,
                            bulk_port=self.worker_ready.bulk_port,
                        ),
                        http_port=self.http.bound_port or 0,
                    )
                    group.create_task(self.mqtt.run())
                self.events.log(history.Ready)
                # Everything imported and built at start-up lives as long as the
                # process: keep it out of the collector's full passes, which would
                # otherwise stall this loop past the suspicion floor (zygote.py).
                gc.freeze()
                self.is_ready = True
                self._write_ports()
                if self.step_driver is not None:
                    group.create_task(self.step_driver.run(group))
                await self.stopping.wait()
                if self.rejoin_reason is not None:
                    # Not a leave: no stop event, no leave gossip; the next
                    # incarnation announces itself when it starts.
                    raise NodeExit(EXIT_REJOIN, self.rejoin_reason)
                self.events.log(history.Stop, reason=self.stop_reason)
                if self.detector_started and self.membership.is_member():
                    self.detector.leave()
                    await asyncio.sleep(0.1)  # let the leave gossip go out
                raise NodeExit(self.stop_code, self.stop_reason)
        except* NodeExit as group:
            exit_ = group.exceptions[0]
            assert isinstance(exit_, NodeExit)
            if exit_.code:
                print(f"node {self.node}: exiting: {exit_.reason}", file=sys.stderr)
            code = exit_.code
        finally:
            await self._stop_worker()
            self._write_gaps()
            self.events.close()
        return code

    def _write_ports(self) -> None:
        """Where this node listens (for a launcher that asked for port 0)."""
        path = self.config.data_dir / "ports.json"
        path.write_text(
            json.dumps(
                {
                    "control": self.links.bound_port,
                    "bulk": self.worker_ready.bulk_port if self.worker_ready else 0,
                    "http": self.http.bound_port,
                    "pid": os.getpid(),
                    "incarnation": self.incarnation,
                }
            )
        )

    def _write_gaps(self) -> None:
        """Raw heartbeat gaps of this run (for the detection benchmark)."""
        path = self.config.data_dir / f"heartbeat_gaps.{self.incarnation}.json"
        with contextlib.suppress(OSError):
            path.write_text(
                json.dumps({peer: list(gaps) for peer, gaps in self.detector.gaps_s.items()})
            )

    async def _stop_worker(self) -> None:
        process = self.worker_process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(Exception):
            self.to_worker(ipc.Shutdown())
            assert self.worker_channel is not None
            await self.worker_channel.flush(timeout_s=1.0)
        try:
            async with asyncio.timeout(3.0):
                await process.wait()
        except TimeoutError:
            process.kill()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3.0):
                    await process.wait()
