"""The discrete-event loop: virtual time, node processes, messages, detector driving.

One heap of ``(t, seq, kind, node, gen, payload)``; ``seq`` breaks ties in insertion
order, so a run is a pure function of its seed and schedule (no dict-order or hash
dependence: every dict here is keyed by strings inserted in a seeded order and every
set that is iterated is sorted first).  ``gen`` is the process generation of the
node an entry is addressed to: a message or timer for a process that crashed is
dropped when popped, as a TCP connection to a dead process would be.

The detector is driven lazily (``streams.py``): a node's detector is woken only for
a real timer (``next_deadline(watches=False)``: suspicion timeouts, notice retries,
gossip rounds), for the watch deadline of a stream the simulator cannot vouch for
(its sender stopped, its link is cut or noisier than the suspicion floor allows, it
changed less than one worst-case delay ago, or the receiver's clock jumped), for a
gossip message, or for a fault that touches it.

Heartbeats are handed over lazily too.  A stream the simulator vouches for and
whose peer the core lets it hold back (``FailureDetector.lazy_watch_allowed``: the
peer is alive at the stream's incarnation with nothing pending about it, so its
arrivals can only refresh its watch statistics) is *lazy*: its arrivals are not even
drawn until they matter, and its watch is passed in ``Tick.vouched``.  A lazy
stream's backlog is handed over (merged in arrival order, as before) only when a
gossip item names its sender, when the node's clock or liveness changes (pause,
skew, resume), or when the stream stops being vouched for (then up to the node's
last wake-up, which leaves the watch exactly as eager delivery would).  Every other
stream is handed over before every wake-up.  So a gossip wave through 1,000 nodes
costs each node its gossip, not its heartbeats: what bounds a large run now is the
gossip itself (each churn event is gossiped to every node, ~20 receipts each) and
the per-wake cost of the driver and core.  The decisions are those of a simulator
that vouches for nothing (``SimConfig(lazy=False)``; tests/chaos/sim/
test_lazy_exactness.py); what a heartbeat makes a detector *send* leaves at the
node's next wake-up in both.

Node semantics: ``crash`` loses the process (its volatile state, its sockets);
``pause`` freezes it (no sends, no handling: messages and timers wait and are handled
in order at the resume, heartbeats read then are stamped with the resume time);
``clock_skew`` changes the node's injected clock (cores see local time; the history
records true time); ``cpu_throttle`` delays what it sends and handles.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

from swarmshake.chaos.sim.clocks import NodeClock
from swarmshake.chaos.sim.network import Network
from swarmshake.chaos.sim.recorder import Recorder
from swarmshake.chaos.sim.rng import RngStreams, derive_seed
from swarmshake.chaos.sim.streams import HeartbeatStream
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol.bugs import BugSet
from swarmshake.reference_node.protocol.detector import (
    DeclaredAlive,
    DeclaredDead,
    DetectorConfig,
    FailureDetector,
    GossipReceived,
    HeartbeatPlan,
    HeartbeatsArrived,
    LocalStall,
    MembersChanged,
    Refuted,
    SelfDeclaredDead,
    SendGossip,
    Started,
    StrangerHeard,
    Tick,
    ViewChanged,
)
from swarmshake.reference_node.protocol.detector import (
    LeaveRequested as DetectorLeave,
)
from swarmshake.reference_node.protocol.errors import RemoteProtocolError
from swarmshake.reference_node.protocol.history import (
    EventBase,
    FrameDrop,
    Start,
    Stop,
)
from swarmshake.reference_node.protocol.messages import Gossip
from swarmshake.reference_node.protocol.node_core import history_of

LOOK, MESSAGE, CALL, TIMER = range(4)
# A livelock guard: 1,000 nodes may legitimately act at one instant a few times each.
SAME_TIME_EVENTS_MAX = 200_000
ALIVE_LISTS_MAX = 256  # distinct views remembered for sharing; a wave has a handful


class SimulationStalled(RuntimeError):
    """Virtual time stopped advancing: a driver or core keeps scheduling work at now."""


SEED_MASK = (1 << 62) - 1  # the cores take a non-negative seed below 2**62
_TICK = Tick()


class NodeProcess:
    """One incarnation of a node: its cores and what the simulator tracks about it."""

    __slots__ = (
        "name",
        "gen",
        "incarnation",
        "up",
        "paused",
        "paused_since",
        "clock",
        "detector",
        "app",
        "next_look",
        "deferred",
        "slowness_s",
        "cpu_fraction",
        "started_at",
        "resumed_at",
        "lazy",
        "lazy_tick",
        "last_wake",
    )

    def __init__(self, name: str, gen: int, incarnation: int, clock: NodeClock):
        self.name = name
        self.gen = gen
        self.incarnation = incarnation
        self.up = True
        self.paused = False
        self.paused_since = 0.0
        self.clock = clock
        self.detector: FailureDetector | None = None
        self.app: Any = None  # the step-commit driver (app.py), None in detector-only runs
        self.next_look = math.inf
        self.deferred: list[tuple] = []  # heap entries that arrived while paused
        self.slowness_s = 0.0
        self.cpu_fraction = 1.0
        self.started_at = 0.0
        # Decisions a node makes on waking, or on a clock jump, happen then, never
        # earlier (a timer's ``at`` mapped through a jumped clock would lie).
        self.resumed_at = 0.0
        # Peers whose heartbeats are held back (see the module docstring), and the Tick
        # that vouches for their watches.
        self.lazy: tuple[str, ...] = ()
        self.lazy_tick = _TICK
        self.last_wake = 0.0  # the detector's last event: eager delivery reached here


class Simulation:
    """The cluster under simulation.  ``nemesis.py`` injects faults through the
    ``crash``/``restart``/``pause``/``resume``/``skew``/``throttle`` methods and
    ``network``; ``app.py`` drives the step-commit cores through ``send`` and ``timer``."""

    def __init__(
        self,
        *,
        nodes: int,
        seed: int,
        bugs: BugSet,
        network: Network,
        rngs: RngStreams,
        recorder: Recorder,
        detector_config: DetectorConfig | None = None,
        app_factory: Callable[[Simulation, NodeProcess], Any] | None = None,
        vouch: bool = True,
        names: tuple[str, ...] = (),
    ):
        # The default names sort in index order (n0..n9, or n000..n999); a suite's run
        # gives its own (n1..nN, the real backends' names), checked by SimConfig.
        width = len(str(nodes - 1))
        self.names: tuple[str, ...] = names or tuple(f"n{i:0{width}d}" for i in range(nodes))
        self.seed = seed
        self.core_seed = derive_seed(seed, "cores") & SEED_MASK
        self.bugs = bugs
        self.network = network
        self.rngs = rngs
        self.recorder = recorder
        self.detector_config = detector_config or DetectorConfig()
        self.app_factory = app_factory
        self.now = 0.0
        self._heap: list[tuple] = []
        self._seq = 0
        self.processes: dict[str, NodeProcess] = {}
        self.max_incarnation: dict[str, int] = {}
        self.generation: dict[str, int] = dict.fromkeys(self.names, 0)
        # Nodes whose checkpoint disk is full (disk_full): their checkpoint writes fail
        # until it is freed; the disk outlives the process, so a restart keeps it full.
        self.full_disks: set[str] = set()
        self.streams_to: dict[str, dict[str, HeartbeatStream]] = {n: {} for n in self.names}
        self.streams_from: dict[str, dict[str, HeartbeatStream]] = {n: {} for n in self.names}
        profile = network.profile
        self.floor_s = self.detector_config.suspicion_floor_s
        # vouch=False: trust no stream, wake for every watch deadline and deliver every
        # heartbeat before each event (slow; the reference the lazy path is checked by).
        self.eager = "eager-dead" in bugs or not vouch
        # Sends after a disturbance have all arrived after the worst delay plus a beat.
        self.settle_s = (
            profile.delay_ms + profile.jitter_ms
        ) / 1000 + self.detector_config.heartbeat_interval_s
        self.handled_events = 0
        # One list per distinct view, shared by the view_change events that log it
        # (read-only records): at 1,000 nodes every node logs the same ~1,000 names
        # after each churn event, which was most of a 600 s run's memory.
        self._alive_lists: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.config_extra: dict[str, Any] = {}

    # --- the loop -----------------------------------------------------------------------

    def push(self, t: float, kind: int, node: str, gen: int, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, node, gen, payload))

    def call_at(self, t: float, function: Callable[[], None]) -> None:
        """Run ``function`` at ``t`` (faults, heals, churn): a harness action, not a node's."""
        self.push(t, CALL, "", 0, function)

    def run(self, until: float) -> None:
        heap = self._heap
        pop = heapq.heappop
        processes = self.processes
        same_time = 0
        now = self.now  # only this loop moves the clock
        handled = 0
        try:
            while heap and heap[0][0] <= until:
                entry = pop(heap)
                t, _, kind, node, gen, payload = entry
                handled += 1
                if t == now:
                    same_time += 1
                    if same_time > SAME_TIME_EVENTS_MAX:
                        raise SimulationStalled(
                            f"{same_time} events at t={t}: virtual time does not advance "
                            f"(last: kind {kind} at {node or 'harness'})"
                        )
                else:
                    same_time = 0
                    now = self.now = t
                if kind == CALL:
                    payload()
                    continue
                proc = processes.get(node)
                if proc is None or not proc.up or proc.gen != gen:
                    continue  # addressed to a process that is gone
                if proc.paused:
                    proc.deferred.append(entry)
                    continue
                if kind == MESSAGE:
                    # _dispatch's MESSAGE branch, inlined: nine entries in ten are messages.
                    sender, message, sender_gen = payload
                    if sender_gen >= 0:
                        origin = processes.get(sender)
                        if origin is None or not origin.up or origin.gen != sender_gen:
                            if proc.app is not None:
                                proc.app.bulk_reset(t, sender, message)
                            continue
                    if isinstance(message, Gossip):
                        self._gossip(proc, t, sender, message)
                    elif proc.app is not None:
                        proc.app.receive(t, sender, message)
                else:
                    self._dispatch(proc, t, kind, payload)
        finally:
            self.handled_events += handled
        self.now = until

    def _gossip(self, proc: NodeProcess, t: float, sender: str, message: Gossip) -> None:
        """As the runtime's control process: a joiner not yet added drops gossip."""
        detector = proc.detector
        if detector is None or not detector.started:
            return
        self.detector_event(proc, t, GossipReceived(message=message))

    def _dispatch(self, proc: NodeProcess, t: float, kind: int, payload: Any) -> None:
        if kind == MESSAGE:  # the loop has its own copy of this branch
            sender, message, sender_gen = payload
            if sender_gen >= 0:
                origin = self.processes.get(sender)
                if origin is None or not origin.up or origin.gen != sender_gen:
                    # The bulk sender died mid-transfer: the receiver's connection
                    # resets (the runtime's worker reports the failed transfer).
                    if proc.app is not None:
                        proc.app.bulk_reset(t, sender, message)
                    return
            if isinstance(message, Gossip):
                self._gossip(proc, t, sender, message)
            elif proc.app is not None:
                proc.app.receive(t, sender, message)
        elif kind == LOOK:
            if t != proc.next_look:
                return  # superseded by an earlier wake-up
            proc.next_look = math.inf
            self.detector_event(proc, t, _TICK)  # becomes proc.lazy_tick after delivery
        elif kind == TIMER:
            if proc.app is not None:
                proc.app.timer(t, payload)

    def release(self) -> None:
        """Drop the run's state once it is over: the processes and their apps refer to
        each other and to the simulation, so without this the whole cluster (200,000
        objects at 1,000 nodes) waits for the cyclic collector, which then runs in
        the middle of whatever comes next (the next simulated run: +0.3-1.6 s).  The
        history lives in the recorder and survives."""
        for proc in self.processes.values():
            proc.app = None
            proc.detector = None
        self.processes.clear()
        self._heap.clear()
        self.streams_to.clear()
        self.streams_from.clear()
        self._alive_lists.clear()
        self.recorder.watchers.clear()

    # --- history ------------------------------------------------------------------------

    def log(
        self, cls: type[EventBase], proc: NodeProcess, t: float, **fields: Any
    ) -> EventBase | None:
        if not proc.up:
            return None  # killed mid-handler: a dead process writes nothing
        if "incarnation" not in fields:
            fields["incarnation"] = proc.incarnation
        recorder = self.recorder
        recorder.lamport += 1  # next_lamport, without the call (most events pass here)
        # Into the caller's keyword dict, built once: ``cls(t_wall=t, ..., **fields)``
        # would copy it into a second one (a third of the cost of logging).
        fields["t_wall"] = fields["t_mono"] = t
        fields["node"] = proc.name
        fields["lamport"] = recorder.lamport
        event = cls(**fields)
        recorder.log(event)
        return event

    # --- node lifecycle -------------------------------------------------------------------

    def start(self, name: str, t: float) -> NodeProcess:
        incarnation = nc.next_incarnation(self.max_incarnation.get(name, 0))
        self.max_incarnation[name] = incarnation
        self.generation[name] += 1
        old = self.processes.get(name)
        clock = old.clock if old is not None else NodeClock()  # a skew outlives a restart
        proc = NodeProcess(name, self.generation[name], incarnation, clock)
        proc.started_at = t
        if old is not None:
            proc.slowness_s = old.slowness_s
            proc.cpu_fraction = old.cpu_fraction
        self.processes[name] = proc
        if old is not None:
            # The old incarnation is gone for good (its heap entries are dropped by
            # generation): cut its app's reference cycle so it is freed now, not by
            # the cyclic collector, which run_simulation pauses during the loop.
            old.app = None
            old.detector = None
        for stream in self.streams_to[name].values():
            stream.materialise(t, self.network)
            stream.drop_pending()  # sent to the old process: its connections died with it
            stream.delivered_to = t
        # The app first: its disk says whom the node watches and whether it is a
        # member (a leaver that comes back joins again), as the runtime's start-up.
        app = self.app_factory(self, proc) if self.app_factory is not None else None
        members = app.detector_members() if app is not None else self.names
        voters = app.membership.configs.latest().voters if app is not None else self.names
        self.log(
            Start,
            proc,
            t,
            seed=self.seed,
            config={"voters": list(voters), "sim": True, **self.config_extra},
        )
        proc.detector = FailureDetector(
            node=name,
            members=members,
            seed=self.core_seed,
            incarnation=incarnation,
            config=self.detector_config,
            bugs=self.bugs,
        )
        if app is None or app.detector_starts_now():
            self.detector_event(proc, t, Started())
        if app is not None:
            proc.app = app
            app.start(t)
        return proc

    def start_detector(self, proc: NodeProcess, t: float) -> None:
        """A joiner's detector starts once a member holds it as one.  Heartbeats that
        reached it before are dropped, as the runtime's control process drops them."""
        detector = proc.detector
        if detector is None or detector.started or not proc.up:
            return
        self._take_arrivals(proc.name, t)
        self.detector_event(proc, t, Started())

    def _take_arrivals(self, receiver: str, t: float) -> list[tuple[float, str]]:
        """Every heartbeat that reached ``receiver`` by ``t``, taken off its streams
        (a detector not started yet gets none of them), as ``(arrival, sender)``."""
        arrivals: list[tuple[float, str]] = []
        for sender, stream in self.streams_to[receiver].items():
            stream.materialise(t, self.network)
            stream.delivered_to = t
            arrivals += [(arrival, sender) for arrival, _ in stream.take_due(t)]
        return arrivals

    def stranger_heard(self, proc: NodeProcess, t: float, peer: str) -> None:
        """A refused message made ``peer`` a stranger ``proc`` heartbeats (the runtime's
        ``DetectorDriver.stranger_heard``)."""
        detector = proc.detector
        if detector is not None and detector.started and proc.up:
            actions = detector.handle(StrangerHeard(peer=peer), proc.clock.local(t))
            self._apply_detector(proc, t, actions)

    def members_changed(self, proc: NodeProcess, t: float, members: tuple[str, ...]) -> None:
        """A committed configuration change, or one installed with a state."""
        detector = proc.detector
        if detector is not None and detector.started and proc.up:
            self.detector_event(proc, t, MembersChanged(members=tuple(members)))

    def leave(self, name: str, t: float, reason: str) -> bool:
        """The harness's ``leave`` command: a clean leave (``NodeApp.begin_leave``)."""
        proc = self.processes.get(name)
        if proc is None or not proc.up:
            return False
        if proc.app is None:
            # A detector-only simulation (no training, no configuration to leave):
            # the node announces ``left`` and stops.
            self._stop(name, proc.gen, t, reason)
        else:
            proc.app.begin_leave(t, reason)
        return True

    def stop(self, name: str, t: float, reason: str) -> None:
        """The node stops itself (removed after a clean leave, a leave or join that
        timed out): after the handler that decided it, ``stop`` is logged, a member
        announces ``left`` (the runtime's control process), and the process ends."""
        proc = self.processes.get(name)
        if proc is None:
            return
        gen = proc.gen
        self.call_at(t, lambda: self._stop(name, gen, t, reason))

    def restart_node(self, name: str, t: float, reason: str) -> None:
        """The node ends its process for a new incarnation (node_core.RestartAsJoiner:
        removed while it ran as a member), after the handler that decided it; as the
        runtime's ``EXIT_REJOIN``, nothing is logged but the next process's start."""
        proc = self.processes.get(name)
        if proc is None:
            return
        gen = proc.gen
        self.call_at(t, lambda: self._restart_if(name, gen, t))

    def _restart_if(self, name: str, gen: int, t: float) -> None:
        proc = self.processes.get(name)
        if proc is not None and proc.gen == gen:
            self._self_restart(name, t)

    def _stop(self, name: str, gen: int, t: float, reason: str) -> None:
        proc = self.processes.get(name)
        if proc is None or proc.gen != gen or not proc.up:
            return
        self.log(Stop, proc, t, reason=reason)
        detector = proc.detector
        member = proc.app is None or proc.app.membership.is_member()
        if detector is not None and detector.started and member:
            self.detector_event(proc, t, DetectorLeave())
        self.crash(name, t)

    def crash(self, name: str, t: float) -> bool:
        proc = self.processes.get(name)
        if proc is None or not proc.up:
            return False
        proc.up = False
        for stream in self.streams_from[name].values():
            stream.stop(t, self.network, self.settle_s)
            self._reschedule(stream.receiver, t)
        for stream in self.streams_to[name].values():
            stream.drop_pending()
        return True

    def pause(self, name: str, t: float) -> bool:
        proc = self.processes.get(name)
        if proc is None or not proc.up or proc.paused:
            return False
        self.detector_event(proc, t, None)  # read what arrived before the freeze
        proc.paused = True
        proc.paused_since = t
        for stream in self.streams_from[name].values():
            stream.stop(t, self.network, self.settle_s)
            self._reschedule(stream.receiver, t)
        return True

    def resume(self, name: str, t: float) -> bool:
        proc = self.processes.get(name)
        if proc is None or not proc.up or not proc.paused:
            return False
        proc.paused = False
        proc.resumed_at = t
        # A look that fell due in the pause waits in ``deferred``; forget it here, or
        # no later wake-up (all after it) would ever be scheduled again.
        proc.next_look = math.inf
        for receiver in proc.detector.heartbeat_targets if proc.detector else ():
            stream = self.streams_from[name].get(receiver)
            if stream is not None:
                stream.resume(t, proc.clock, self.settle_s)
                self._reschedule(receiver, t)
        deferred, proc.deferred = proc.deferred, []
        detector = proc.detector
        if detector is not None and detector.started:
            # As the runtime's driver does at a wake from a stall: the core hears of
            # it before any arrival read at the resume (Lifeguard's local health).
            stall = LocalStall(stalled_s=max(0.0, t - proc.paused_since))
            self._apply_detector(proc, t, detector.handle(stall, proc.clock.local(t)))
        self.detector_event(proc, t, None, read_at=t)
        for _, _, kind, _, gen, payload in deferred:
            if proc.up and not proc.paused and gen == proc.gen:
                self._dispatch_late(proc, t, kind, payload)
        return True

    def _dispatch_late(self, proc: NodeProcess, t: float, kind: int, payload: Any) -> None:
        if kind == LOOK:
            self.detector_event(proc, t, _TICK)
        else:
            self._dispatch(proc, t, kind, payload)

    def skew(self, name: str, t: float, offset_ms: float, drift_ppm: float) -> None:
        proc = self.processes.get(name)
        if proc is not None and proc.up and not proc.paused:
            # Arrivals so far are stamped with the old clock: hand them over first.
            self.detector_event(proc, t, None)
        clock = proc.clock if proc is not None else NodeClock()
        clock.local(t)  # the floor: the local clock never goes back
        clock.skew(t, offset_ms / 1000, drift_ppm)
        if proc is not None:
            proc.resumed_at = t  # decisions the jump triggers happen now, not "earlier"
        for stream in self.streams_from[name].values():
            stream.reclock(t, clock, self.network, self.settle_s)
            self._reschedule(stream.receiver, t)
        # Its own watches measure gaps on the new clock: a jump forward makes them
        # overdue at once, a faster rate stretches every gap.  Vouch for none of them
        # until arrivals on the new clock have come in.
        for stream in self.streams_to[name].values():
            stream.disturbed(t, self.settle_s)
        if proc is not None and proc.up:
            self._schedule_look(proc, t, streams_changed=True)
            if proc.app is not None:
                proc.app.clock_changed(t)

    def throttle(self, name: str, t: float, cpu_fraction: float) -> None:
        """A straggler: it handles and sends ``1/cpu_fraction`` times slower than the
        10 ms the simulator budgets for one unit of work."""
        extra = 0.0 if cpu_fraction >= 1.0 else 0.010 * (1.0 / cpu_fraction - 1.0)
        streams = list(self.streams_from[name].values())
        for stream in streams:
            stream.materialise(t, self.network)  # sends so far leave at the old speed
        self.network.set_slowness(name, extra)
        for stream in streams:
            stream.disturbed(t, self.settle_s + extra)
            self._reschedule(stream.receiver, t)
        proc = self.processes.get(name)
        if proc is not None:
            proc.slowness_s = extra
            proc.cpu_fraction = min(cpu_fraction, 1.0)

    # --- network ------------------------------------------------------------------------

    def before_network_change(self, t: float, links: set[tuple[str, str]] | None) -> None:
        """Materialise the heartbeat streams a network change is about to touch."""
        if links is None:
            streams = [s for by_sender in self.streams_from.values() for s in by_sender.values()]
        else:
            streams = [
                self.streams_from[a][b]
                for a, b in sorted(links)
                if b in self.streams_from.get(a, {})
            ]
        for stream in streams:
            stream.materialise(t, self.network)
            stream.disturbed(t, self.settle_s)

    def after_network_change(self, t: float, links: set[tuple[str, str]] | None) -> None:
        receivers = sorted({b for _, b in links}) if links is not None else self.names
        for receiver in receivers:
            self._reschedule(receiver, t)

    def send(
        self,
        proc: NodeProcess,
        t: float,
        to: str,
        message: Any,
        nbytes: int = 0,
        channel: str = "control",
    ) -> None:
        """Send ``message`` from ``proc`` to the current process of ``to``.

        A bulk transfer still in flight when its sender dies is lost (a large tensor
        is not through when the connection resets); a control message, a few hundred
        bytes, is already in the receiver's socket buffer."""
        if not proc.up:
            return  # killed mid-handler (an event-triggered crash): it sends nothing more
        arrival = self.network.arrival(proc.name, to, t, nbytes, channel)
        if arrival is None:
            return
        receiver = self.processes.get(to)
        if receiver is None or not receiver.up:
            return  # nobody listens: the dial fails
        sender_gen = proc.gen if channel == "bulk" else -1
        self._seq += 1  # push(), inlined: most heap entries are messages
        heapq.heappush(
            self._heap,
            (arrival, self._seq, MESSAGE, to, receiver.gen, (proc.name, message, sender_gen)),
        )

    def send_each_logged(
        self,
        proc: NodeProcess,
        t: float,
        peers: list[str],
        message: Any,
        nbytes: int,
        log_cls: type[EventBase],
        step: int,
    ) -> None:
        """To each of ``peers`` in turn: log ``log_cls(step=step, to=peer, nbytes=nbytes)``,
        then send ``message`` on the bulk channel.  A node's gradient fan-out, the most
        frequent pair of calls of a run (a tenth of it), with ``log`` and ``send``
        inlined: the same events, Lamport numbers, delay draws and heap entries as
        calling them for each peer.  A watcher may stop the process between two peers
        (a crash an agg_send triggered): nothing more is logged or sent then, as
        ``log`` and ``send`` check."""
        recorder = self.recorder
        arrival = self.network.arrival
        processes = self.processes
        heap = self._heap
        name = proc.name
        for peer in peers:
            if not proc.up:
                return
            recorder.lamport += 1
            recorder.log(
                log_cls(
                    t_wall=t,
                    t_mono=t,
                    node=name,
                    incarnation=proc.incarnation,
                    step=step,
                    lamport=recorder.lamport,
                    to=peer,
                    nbytes=nbytes,
                )
            )
            if not proc.up:
                return
            at = arrival(name, peer, t, nbytes, "bulk")
            if at is None:
                continue
            receiver = processes.get(peer)
            if receiver is None or not receiver.up:
                continue
            self._seq += 1
            heapq.heappush(
                heap, (at, self._seq, MESSAGE, peer, receiver.gen, (name, message, proc.gen))
            )

    def timer(self, proc: NodeProcess, t: float, payload: Any) -> None:
        now = self.now
        self._seq += 1  # push(), inlined
        heapq.heappush(
            self._heap,
            (
                (t if t >= now else now) + proc.slowness_s,
                self._seq,
                TIMER,
                proc.name,
                proc.gen,
                payload,
            ),
        )

    # --- the detector ---------------------------------------------------------------------

    def detector_event(
        self, proc: NodeProcess, t: float, event: Any, read_at: float | None = None
    ) -> None:
        """Deliver heartbeats up to ``t``, then ``event`` (None: only the heartbeats).

        Held-back (lazy) streams are delivered only when ``event`` is None (a pause,
        skew or resume: the clock or liveness changes) or names their sender in a
        gossip item; a timer look vouches for their watches instead."""
        detector = proc.detector
        if detector is None:
            return
        clock = proc.clock
        local = clock.local(t)
        proc.last_wake = t
        if detector.started:
            lazy = proc.lazy
            if lazy:
                if event is None:
                    lazy = ()
                elif type(event) is GossipReceived:
                    named = {item.subject for item in event.message.items}
                    if not named.isdisjoint(lazy):
                        lazy = tuple(peer for peer in lazy if peer not in named)
                if lazy is not proc.lazy:
                    proc.lazy = lazy
                    proc.lazy_tick = Tick(vouched=lazy) if lazy else _TICK
            self._deliver_heartbeats(proc, detector, t, local, read_at, lazy)
            if event is _TICK:
                event = proc.lazy_tick
        if event is not None:
            try:
                actions = detector.handle(event, local)
            except RemoteProtocolError as error:
                # Only a peer's gossip can be refused (one from a non-member: a removed
                # node's last words): a dropped frame, as the runtime counts it.
                sender = getattr(getattr(event, "message", None), "sender", "?")
                self.log(FrameDrop, proc, t, peer=sender, reason=f"rejected_{error.reason}")
                if proc.app is not None:
                    proc.app.refused(t, sender, error.reason)
            else:
                self._apply_detector(proc, t, actions)
        self._schedule_look(proc, t)

    def _deliver_heartbeats(
        self,
        proc: NodeProcess,
        detector: FailureDetector,
        t: float,
        local: float,
        read_at: float | None,
        lazy: tuple[str, ...],
        only: str | None = None,
        upto: float | None = None,
    ) -> None:
        """Hand every heartbeat that reached ``proc`` by ``t`` to its detector, merged
        across senders in arrival order, except those of the ``lazy`` senders.

        The core fires the timers about a batch's peer due before each arrival (as
        one-by-one delivery would), so per-sender batches are only exact in arrival
        order: a run of consecutive arrivals from one sender is one batch.  A lazy
        sender's backlog, when it comes, is merged the same way; it commutes with the
        others' batches because nothing but its arrivals touches its watch meanwhile
        (``FailureDetector.lazy_watch_allowed``).  ``upto``: hand over only arrivals up
        to then (still performing what they cause at ``t``); ``only``: one sender."""
        upto = t if upto is None else upto
        incoming = self.streams_to[proc.name]
        if only is None and len(lazy) == len(incoming):
            return  # every incoming stream is held back (lazy peers all have streams)
        due_lists = []
        network = self.network
        for sender, stream in incoming.items() if only is None else ((only, incoming[only]),):
            if lazy and sender in lazy:
                continue
            stream.materialise(upto, network)
            stream.delivered_to = upto
            due = stream.take_due(upto)
            if due:
                due_lists.append([(arrival, sender, incarnation) for arrival, incarnation in due])
        if not due_lists:
            return
        merged = due_lists[0] if len(due_lists) == 1 else sorted(x for d in due_lists for x in d)
        clock = proc.clock
        identity = clock.identity
        floor = clock.peek_local(read_at) if read_at is not None else None
        start = 0
        total = len(merged)
        for index in range(1, total + 1):
            if (
                index < total
                and merged[index][1] == merged[start][1]
                and merged[index][2] == merged[start][2]
            ):
                continue
            run = merged[start:index]
            if run[0][1] not in detector.status:
                # A heartbeat still in flight from a node removed from the configuration
                # (or not yet added here): dropped, as the runtime drops it, and a
                # removed node is told so (the runtime's refusal of a non-member), any
                # other is heartbeated back (NodeApp.refused).
                if proc.app is not None:
                    proc.app.refused(t, run[0][1], "unknown-peer")
                start = index
                continue
            times = (
                tuple(a for a, _, _ in run) if identity else tuple(clock.map(a) for a, _, _ in run)
            )
            if floor is not None:
                times = tuple(x if x >= floor else floor for x in times)
            batch = HeartbeatsArrived(peer=run[0][1], incarnation=run[0][2], arrival_times=times)
            self._apply_detector(proc, t, detector.handle(batch, local))
            start = index

    def _apply_detector(self, proc: NodeProcess, t: float, actions: list) -> None:
        clock = proc.clock
        for action in actions:
            if not proc.up:
                # Crashed mid-list (a triggered crash fires while an action of this list
                # is logged): the rest of the list is lost (DRIVERS.md rule 2).  A heart-
                # beat plan performed after the crash restarted the dead node's stream,
                # and its peers never suspected it (explore, 3 nodes, seed 1: L1).
                return
            if isinstance(action, HeartbeatPlan):
                self._plan(proc, t, action)
                continue
            at = getattr(action, "at", t)
            # A timer decided inside a batch happened at its own time, unless the node
            # was frozen then: a paused node decides when it wakes.
            when = min(t, clock.true_time(at)) if not clock.identity else min(t, at)
            if when < proc.resumed_at:
                when = proc.resumed_at
            if isinstance(action, SendGossip):
                for peer in action.to:
                    self.send(proc, t, peer, action.message)
                continue
            if isinstance(action, (Refuted, SelfDeclaredDead)):
                # The process's incarnation rises before the event is stamped with it.
                if isinstance(action, Refuted):
                    proc.incarnation = action.incarnation
                self.max_incarnation[proc.name] = max(
                    self.max_incarnation.get(proc.name, 0), action.incarnation
                )
            mapped = history_of(action, node=proc.name)
            if mapped is not None:
                cls, fields = mapped
                if isinstance(action, ViewChanged):
                    # One object per distinct view, shared by every event that logs
                    # it (a 1000-name view per event was most of a run's memory).
                    alive = self._alive_lists.get(action.alive)
                    if alive is None:
                        if len(self._alive_lists) >= ALIVE_LISTS_MAX:
                            self._alive_lists.clear()
                        alive = self._alive_lists[action.alive] = action.alive
                    fields["alive"] = alive
                self.log(cls, proc, when, **fields)
            if proc.app is not None:
                if isinstance(action, DeclaredDead):
                    proc.app.peer_dead(t, action.peer)
                elif isinstance(action, DeclaredAlive):
                    proc.app.peer_alive(t, action.peer)
                elif isinstance(action, ViewChanged):
                    proc.app.view_changed(t, action.alive)
            if isinstance(action, SelfDeclaredDead):
                # DESIGN: a node declared dead must rejoin with a new incarnation.
                name = proc.name
                self.call_at(t, lambda name=name, t=t: self._self_restart(name, t))

    def _self_restart(self, name: str, t: float) -> None:
        proc = self.processes.get(name)
        if proc is not None and proc.up and not proc.paused:
            self.crash(name, t)
            self.start(name, t)

    def _plan(self, proc: NodeProcess, t: float, plan: HeartbeatPlan) -> None:
        streams = self.streams_from[proc.name]
        targets = set(plan.to)
        for receiver in sorted(set(streams) - targets):
            streams[receiver].stop(t, self.network, self.settle_s)
            self._reschedule(receiver, t)
        for receiver in plan.to:
            stream = streams.get(receiver)
            if stream is None:
                stream = HeartbeatStream(
                    proc.name, receiver, self.rngs.get("heartbeat", proc.name, receiver)
                )
                streams[receiver] = stream
                self.streams_to[receiver][proc.name] = stream
            stream.plan(
                t,
                plan.incarnation,
                plan.start_at,
                plan.interval_s,
                proc.clock,
                self.network,
                self.settle_s,
            )
            stream.stranger = receiver in plan.strangers
            self._reschedule(receiver, t)
            target = self.processes.get(receiver)
            if target is not None and target.detector is not None and not target.detector.started:
                # A joiner waiting to be added: the first heartbeats from a member are
                # its evidence (the runtime's control process hands them to the step
                # driver).  Looked for once they have surely arrived, if no link cut.
                gen = target.gen
                self.call_at(t + self.settle_s, lambda r=receiver, g=gen: self._join_look(r, g))

    def _join_look(self, receiver: str, gen: int) -> None:
        proc = self.processes.get(receiver)
        if proc is None or proc.gen != gen or not proc.up or proc.paused or proc.app is None:
            return
        if proc.detector is None or proc.detector.started:
            return
        t = self.now
        streams = self.streams_to[receiver]
        # Heartbeats to a stranger are flagged (Heartbeat.stranger): no evidence.
        arrivals = [a for a in self._take_arrivals(receiver, t) if not streams[a[1]].stranger]
        if arrivals:
            proc.app.join_evidence(t, [sender for _, sender in sorted(arrivals)])

    def heartbeat_evidence(self, receiver: str, t: float) -> list[str]:
        """The senders whose heartbeats reach ``receiver`` now, unflagged (not to a
        stranger), on a connected link and settled: a heartbeat of each has arrived
        within its interval, as the runtime's dispatch would have seen (sorted: the
        last is the one a joiner's enrolment keeps)."""
        network = self.network
        return sorted(
            sender
            for sender, stream in self.streams_to[receiver].items()
            if stream.active
            and not stream.stranger
            and t >= stream.settled_at
            and network.connected(sender, receiver)
        )

    def _healthy(self, stream: HeartbeatStream, t: float, receiver_rate: float = 1.0) -> bool:
        """Can the simulator vouch that this stream's gaps stay within the suspicion
        floor (so its watch can never time out) without looking?  Gaps are measured
        on the receiver's clock, which runs at ``receiver_rate``."""
        return (
            not self.eager
            and t >= stream.settled_at
            and stream.worst_gap_s * receiver_rate <= self.floor_s
        )

    def _refresh_worst_gaps(self, receiver: str) -> None:
        """Recompute the worst arrival gap of every stream to ``receiver`` (true
        seconds; inf when stopped or cut): done on every change of a stream or of
        the network, which all end in ``_reschedule`` of the receivers they touch,
        rather than on every look."""
        network = self.network
        for stream in self.streams_to[receiver].values():
            if stream.active and network.connected(stream.sender, receiver):
                low, high = network.delay_bounds(stream.sender, receiver)
                stream.worst_gap_s = stream.interval_true() + (high - low)
            else:
                stream.worst_gap_s = math.inf

    def _reschedule(self, name: str, t: float) -> None:
        self._refresh_worst_gaps(name)
        proc = self.processes.get(name)
        if proc is not None and proc.up and not proc.paused:
            self._schedule_look(proc, t, streams_changed=True)

    def _schedule_look(self, proc: NodeProcess, t: float, streams_changed: bool = False) -> None:
        detector = proc.detector
        if detector is None or not detector.started:
            return
        # Watches of streams the simulator vouches for are left out: their arrivals
        # keep them fresh and are delivered at the next wake-up, or later still for a
        # lazy stream (the module docstring).
        wake = detector.next_deadline(watches=False)
        old_lazy = proc.lazy
        if not streams_changed and old_lazy and detector.targets == old_lazy:
            # Every watch is held back (the steady state), and nothing that could end
            # that happened: no stream or network change (those come through
            # _reschedule, or skew), no gossip naming a peer (it leaves proc.lazy).
            self._look_at(proc, t, wake)
            return
        incoming = self.streams_to[proc.name]
        lazy: list[str] = []
        settling = math.inf
        rate = proc.clock.rate
        for peer in detector.targets:
            stream = incoming.get(peer)
            healthy = stream is not None and self._healthy(stream, t, rate)
            if healthy:
                # The core's word holds until an event names the peer, and such an
                # event takes it out of proc.lazy first (detector_event).
                if peer in old_lazy:
                    lazy.append(peer)
                    continue
                # Held back only from a moment when everything up to now was delivered,
                # so the backlog is all from the healthy stretch.
                if stream.delivered_to >= t and detector.lazy_watch_allowed(
                    peer, stream.incarnation
                ):
                    lazy.append(peer)
                    continue
            if peer in old_lazy and stream.delivered_to < proc.last_wake:
                # No longer held back: hand over the backlog up to the last wake-up,
                # which leaves the watch exactly as eager delivery would have (its
                # arrivals change nothing else); the rest comes at the next wake-up.
                self._deliver_heartbeats(
                    proc,
                    detector,
                    t,
                    proc.clock.peek_local(t),
                    None,
                    (),
                    only=peer,
                    upto=proc.last_wake,
                )
            if healthy:
                continue
            deadline = detector.deadline_for(peer)
            if deadline is not None and (wake is None or deadline < wake):
                wake = deadline
            # A stream that is settling becomes trustworthy at settled_at (true time): look then.
            if stream is not None and stream.active and t < stream.settled_at < settling:
                settling = stream.settled_at
        lazy_peers = tuple(lazy)
        if lazy_peers != old_lazy:
            proc.lazy = lazy_peers
            proc.lazy_tick = Tick(vouched=lazy_peers) if lazy_peers else _TICK
        self._look_at(proc, t, wake, settling)

    def _look_at(
        self, proc: NodeProcess, t: float, wake: float | None, settling: float = math.inf
    ) -> None:
        """Wake ``proc`` at local time ``wake`` or true time ``settling``, whichever
        is first (and not before ``t``), unless an earlier look is pending."""
        at = None if wake is None else (wake if proc.clock.identity else proc.clock.true_time(wake))
        if settling < math.inf and (at is None or settling < at):
            at = settling
        if at is None:
            return
        at = max(at, t)
        if at < proc.next_look:
            proc.next_look = at
            self.push(at, LOOK, proc.name, proc.gen)
