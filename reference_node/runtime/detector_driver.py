"""Asyncio driver of the failure-detector core: heartbeats out, arrivals in, timers.

Turns ``HeartbeatPlan`` into a periodic send task, ``SendGossip`` into control
frames, ``Suspected``/``DeclaredDead``/... into history events (logged before
anything else is done about them), received ``Heartbeat``/``Gossip`` messages into
core events, and the core's ``next_deadline()`` into a ``Tick``.

It also measures what the recovery benchmark reports: every heartbeat gap per
peer (bounded window) and event-loop lag of the heartbeat sender.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable

from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol.messages import Gossip, Heartbeat
from swarmshake.reference_node.protocol.node_core import history_of
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.events import EventLog

# Heartbeat gaps kept per peer for /status and the benchmark: 20k gaps is over 15
# minutes at 50 ms, and bounds memory to a few hundred KB per peer.
GAP_WINDOW = 20_000
# With no detector timer pending, re-check this often anyway (a bound, not a poll
# the core depends on: every event that may move the deadline wakes the task).
IDLE_RECHECK_S = 1.0
# Event-loop iterations given to pending socket reads before a timer fires: one to
# poll the sockets, one for the reader task to parse, one for its handler.
PENDING_IO_YIELDS = 3


class DetectorDriver:
    def __init__(
        self,
        core: det.FailureDetector,
        *,
        clock: NodeClock,
        events: EventLog,
        send: Callable[[str, object], None],
        send_heartbeat: Callable[[str, object], None],
        on_action: Callable[[object], None] | None = None,
        stall_probe: Callable[[], float] | None = None,
    ):
        self.core = core
        self.clock = clock
        self.events = events
        self._send = send
        self._send_heartbeat = send_heartbeat
        self._on_action = on_action
        # How late the loop watchdog's wake is now (0 while it runs on time): a stall
        # it has not reported yet, checked before an arrival reaches the core.
        self._stall_probe = stall_probe
        self.plan: det.HeartbeatPlan | None = None
        self._plan_changed = asyncio.Event()
        self._wake = asyncio.Event()
        self.heartbeat_seq = 0
        self.gaps_s: dict[str, collections.deque[float]] = {}
        self._last_arrival: dict[str, tuple[int, float]] = {}
        self.send_lag_max_s = 0.0
        self.heartbeats_sent = 0
        self.stall_holds = 0  # stalls reported to the core

    # -- inputs ------------------------------------------------------------------------------

    def start(self) -> None:
        self.apply(self.core.handle(det.Started(), self.clock.now()))

    def _report_unseen_stall(self) -> None:
        """At a wake from a stall the socket readers may run before the watchdog: tell
        the core first, or the arrival fires every watch that fell due meanwhile."""
        if self._stall_probe is not None:
            self.local_stall(self._stall_probe())

    def on_heartbeat(self, message: Heartbeat) -> None:
        self._report_unseen_stall()
        host_now = self.clock.host_now()
        previous = self._last_arrival.get(message.sender)
        # Gaps are measured within one incarnation: the silence of a crash and
        # restart is detection's business, not a heartbeat gap.
        if previous is not None and previous[0] == message.incarnation:
            self.gaps_s.setdefault(message.sender, collections.deque(maxlen=GAP_WINDOW)).append(
                host_now - previous[1]
            )
        self._last_arrival[message.sender] = (message.incarnation, host_now)
        # Every heartbeat goes to the core, as the simulator hands them over: one from a
        # peer held dead is answered with its death (it was cut off: it restarts), one
        # from a newer incarnation brings the restarted peer back, one from a member
        # this node does not watch teaches nothing (the core ignores it), and a
        # non-member's is refused (unknown-peer), which the control process answers
        # with its removal (node_core.RemovalAnswers).  Filtering here was a decision in
        # the shell: until issue 12's agreement work found it, the runtime dropped a
        # dead peer's heartbeats and never told a cut-off node it was dead.
        event = det.HeartbeatsArrived(
            peer=message.sender, incarnation=message.incarnation, arrival_times=(self.clock.now(),)
        )
        self.apply(self.core.handle(event, self.clock.now()))

    def stranger_heard(self, peer: str) -> None:
        """``peer``'s message was refused as a non-member's
        (node_core.heartbeats_stranger): heartbeat it, flagged ("Strangers")."""
        self.apply(self.core.handle(det.StrangerHeard(peer=peer), self.clock.now()))

    def on_gossip(self, message: Gossip) -> None:
        self._report_unseen_stall()
        self.apply(self.core.handle(det.GossipReceived(message=message), self.clock.now()))

    def members_changed(self, members: tuple[str, ...]) -> None:
        self.apply(self.core.handle(det.MembersChanged(members=members), self.clock.now()))

    def leave(self) -> None:
        self.apply(self.core.handle(det.LeaveRequested(), self.clock.now()))

    def local_stall(self, stalled_s: float) -> None:
        """This node's loop did not run for ``stalled_s`` (the watchdog saw it wake
        late): the core decides what that excuses (``LocalStall``: Lifeguard's local
        health; on a starved host every process stalls together, and the peers'
        heartbeats come once *they* run again, after our wake).  Every report goes to
        the core, which ignores scheduling noise (``stall_min_s``), as the simulator
        reports a pause."""
        if stalled_s < self.core.config.stall_min_s:
            return  # the core ignores it too; no need to wake the loops
        self.stall_holds += 1
        self.apply(self.core.handle(det.LocalStall(stalled_s=stalled_s), self.clock.now()))

    # -- actions -----------------------------------------------------------------------------

    def apply(self, actions: list) -> None:
        for action in actions:
            match action:
                case det.HeartbeatPlan():
                    self.plan = action
                    self._plan_changed.set()
                case det.SendGossip():
                    for peer in action.to:
                        self._send(peer, action.message)
                case _:
                    mapped = history_of(action, node=self.core.node)
                    if mapped is not None:
                        self.events.log(mapped[0], **mapped[1])
            if self._on_action is not None:
                self._on_action(action)
        self._wake.set()

    # -- tasks -------------------------------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        """Send heartbeats on the plan's grid (node time), never bunching after a stall."""
        while True:
            plan = self.plan
            if plan is None or not plan.to:
                self._plan_changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_RECHECK_S):
                        await self._plan_changed.wait()
                continue
            self._plan_changed.clear()
            due = 0  # the plan's next slot (det.heartbeat_slot: the grid rule)
            while self.plan is plan:
                now = self.clock.now()
                send_now, next_due = det.heartbeat_slot(plan.start_at, plan.interval_s, due, now)
                if not send_now:
                    next_at = plan.start_at + due * plan.interval_s
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.clock.host_delay_s(next_at - now)):
                            await self._plan_changed.wait()
                    continue
                self.send_lag_max_s = max(
                    self.send_lag_max_s, now - (plan.start_at + due * plan.interval_s)
                )
                self.heartbeat_seq += 1
                message = Heartbeat(
                    sender=self.core.node, incarnation=plan.incarnation, seq=self.heartbeat_seq
                )
                to_stranger = message
                if plan.strangers:  # rare: a node behind its configuration
                    to_stranger = Heartbeat(
                        sender=self.core.node,
                        incarnation=plan.incarnation,
                        seq=self.heartbeat_seq,
                        stranger=True,
                    )
                for peer in plan.to:
                    self._send_heartbeat(peer, to_stranger if peer in plan.strangers else message)
                self.heartbeats_sent += 1
                due = next_due

    async def timer_loop(self) -> None:
        while True:
            deadline = self.core.next_deadline()
            now = self.clock.now()
            if deadline is not None and deadline <= now:
                # Deliver arrivals before timers (DRIVERS.md): if this loop was stalled,
                # heartbeats that reached the socket meanwhile are still unread, and a
                # Tick first would blame the peers for our own stall.  A few loop
                # iterations let the readers run (select, then the reader task).
                for _ in range(PENDING_IO_YIELDS):
                    await asyncio.sleep(0)
                deadline = self.core.next_deadline()
                now = self.clock.now()
                if deadline is not None and deadline <= now:
                    self.apply(self.core.handle(det.Tick(), now))
                continue
            delay = (
                IDLE_RECHECK_S
                if deadline is None
                else min(IDLE_RECHECK_S, self.clock.host_delay_s(deadline - now))
            )
            self._wake.clear()
            woken = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
                    woken = True
            if not woken:
                # This loop's own lateness is a stall measurement too (it may run
                # before the watchdog after a stall).
                self.local_stall(self.clock.now() - now - delay)

    # -- measurements -----------------------------------------------------------------------

    def gap_summary(self) -> dict[str, dict[str, float]]:
        summary = {}
        for peer, gaps in self.gaps_s.items():
            if not gaps:
                continue
            ordered = sorted(gaps)
            summary[peer] = {
                "count": len(ordered),
                "p50_ms": 1000 * ordered[len(ordered) // 2],
                "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                "max_ms": 1000 * ordered[-1],
            }
        return summary
