"""Heartbeat streams, computed lazily (the reason 1,000 nodes fit in a minute).

The detector core *declares* its heartbeat stream (``HeartbeatPlan``: to whom, from
when, how often) instead of ticking a timer per heartbeat, so the simulator never puts
a heartbeat on the event heap.  A ``HeartbeatStream`` is one directed link's stream:
its sends are ``start + k · interval`` on the sender's clock, each arrival is drawn
from the link's own heartbeat RNG when the stream is *materialised*, and arrivals
are handed to the receiver's detector when the receiver next wakes, in runs of
``HeartbeatsArrived`` batches merged across senders in arrival order (the core
guarantees a batch equals its arrivals one by one).

Exactness rests on one rule: **materialise before anything that changes the stream
changes** — a fault on the link, the sender crashing, pausing, being throttled or
skewed, a new plan.  Then every send is drawn under the link state it was sent in,
whatever the order the simulator gets round to it.  Each stream has its own RNG, so
the draws of one link do not depend on when other links were materialised.
"""

from __future__ import annotations

import math
from collections import deque

from swarmshake.chaos.sim.clocks import NodeClock
from swarmshake.chaos.sim.network import Network
from swarmshake.reference_node.protocol.detector import (
    HEARTBEAT_SLOT_TOLERANCE_S,
    heartbeat_slot,
)

MAX_PENDING_ARRIVALS = 1_000_000  # a receiver paused for hours: bound memory, say so


class StreamOverflow(RuntimeError):
    """More undelivered heartbeats than ``MAX_PENDING_ARRIVALS`` on one link."""


class HeartbeatStream:
    __slots__ = (
        "sender",
        "receiver",
        "rng",
        "incarnation",
        "active",
        "start_local",
        "interval_local",
        "next_k",
        "t_base",
        "local_base",
        "rate",
        "pending",
        "last_arrival",
        "settled_at",
        "disturbed_at",
        "delivered_to",
        "worst_gap_s",
        "late_send",
        "stranger",
    )

    def __init__(self, sender: str, receiver: str, rng: object):
        self.sender = sender
        self.receiver = receiver
        self.rng = rng
        self.incarnation = 0
        self.active = False
        self.start_local = 0.0
        self.interval_local = 1.0
        self.next_k = 0
        self.t_base = 0.0
        self.local_base = 0.0
        self.rate = 1.0
        self.pending: deque[tuple[float, int]] = deque()
        self.last_arrival = -math.inf
        self.settled_at = math.inf
        self.disturbed_at = 0.0
        self.delivered_to = -math.inf  # arrivals up to this true time were handed over
        self.worst_gap_s = math.inf  # kept by the simulator (Simulation._refresh_worst_gaps)
        # A plan's first send when its start was already past (true time), else None.
        self.late_send: float | None = None
        # The sender heartbeats the receiver as a stranger (HeartbeatPlan.strangers):
        # flagged on the wire, no join evidence.
        self.stranger = False

    def _send_time(self, k: int) -> float:
        local = self.start_local + k * self.interval_local
        return self.t_base + (local - self.local_base) / self.rate

    def interval_true(self) -> float:
        return self.interval_local / self.rate

    def materialise(self, until: float, network: Network) -> None:
        """Draw the arrivals of every send at true time ≤ ``until``."""
        if not self.active:
            return
        sender, receiver = self.sender, self.receiver
        k = self.next_k
        send = self._send_time(k)
        late = self.late_send
        if late is not None:
            if late > until:
                return
            self.late_send = None
        elif send > until:
            return
        connected = network.connected(sender, receiver)
        sample = network.sample_delay
        rng = self.rng
        pending = self.pending
        last = self.last_arrival
        incarnation = self.incarnation
        if late is not None and connected:
            last = max(late + sample(sender, receiver, rng), last)
            pending.append((last, incarnation))
        while send <= until:
            if connected:
                arrival = send + sample(sender, receiver, rng)
                if arrival < last:
                    arrival = last  # FIFO: one TCP connection per direction
                last = arrival
                pending.append((arrival, incarnation))
            k += 1
            send = self._send_time(k)
        self.next_k = k
        self.last_arrival = last
        if len(pending) > MAX_PENDING_ARRIVALS:
            raise StreamOverflow(f"{sender}->{receiver}: {len(pending)} undelivered heartbeats")

    def plan(
        self,
        now: float,
        incarnation: int,
        start_local: float,
        interval_s: float,
        clock: NodeClock,
        network: Network,
        settle_s: float,
    ) -> None:
        """Replace the stream's schedule from ``now`` on (materialising the old one)."""
        self.materialise(now, network)
        self.active = True
        self.incarnation = incarnation
        self.start_local = start_local
        self.interval_local = interval_s
        self._rebase(now, clock)
        # The core's grid rule (detector.heartbeat_slot), as the runtime's loop: a
        # start already past (the core planned at an arrival's time, handled later)
        # sends once at once, then on the grid after now.
        self.next_k = 0
        self._catch_up(now, clock)
        self.disturbed(now, settle_s)

    def _catch_up(self, now: float, clock: NodeClock) -> None:
        """Apply the grid rule at ``now``: a slot already past is sent once, now."""
        local_now = clock.peek_local(now)
        send_now, next_k = heartbeat_slot(
            self.start_local, self.interval_local, self.next_k, local_now
        )
        self.late_send = None
        due_at = self.start_local + self.next_k * self.interval_local
        if send_now and due_at < local_now - HEARTBEAT_SLOT_TOLERANCE_S:
            self.late_send = now
            self.next_k = next_k
        # A slot exactly at now stays a grid slot (the same send, drawn the same way).

    def _rebase(self, now: float, clock: NodeClock) -> None:
        self.t_base = clock.t_base
        self.local_base = clock.local_base
        self.rate = clock.rate

    def reclock(self, now: float, clock: NodeClock, network: Network, settle_s: float) -> None:
        """The sender's clock changed at ``now``: later sends follow the new clock."""
        self.materialise(now, network)
        if self.active:
            local_now = clock.peek_local(now)
            self._rebase(now, clock)
            self.next_k = max(
                self.next_k, math.ceil((local_now - self.start_local) / self.interval_local - 1e-9)
            )
            self.disturbed(now, settle_s)

    def stop(self, now: float, network: Network, settle_s: float) -> None:
        """No sends after ``now`` (crash, pause, leave, or the receiver left the plan)."""
        self.materialise(now, network)
        self.active = False
        self.disturbed(now, settle_s)

    def resume(self, now: float, clock: NodeClock, settle_s: float) -> None:
        """Sends continue on the old schedule after a pause (a SIGSTOPped timer loop
        fires the missed tick once, then keeps its phase)."""
        self.active = True
        self._rebase(now, clock)
        self._catch_up(now, clock)
        self.disturbed(now, settle_s)

    def disturbed(self, now: float, settle_s: float) -> None:
        """Gaps are unpredictable until sends made after ``now`` have all arrived.

        A sender whose clock was stepped back (a healed drift or offset) holds, and
        sends nothing until its clock catches up: the unpredictable stretch then ends
        a settle time after its first send, not after ``now``."""
        start = now
        if self.active:
            start = max(now, self._send_time(self.next_k) - self.interval_true())
        self.settled_at = start + settle_s
        self.disturbed_at = now

    def take_due(self, now: float, read_at: float | None = None) -> list[tuple[float, int]]:
        """Pop the arrivals at or before ``now``; ``read_at`` stamps them later (a
        paused receiver reads its socket only when it resumes)."""
        pending = self.pending
        due: list[tuple[float, int]] = []
        while pending and pending[0][0] <= now:
            arrival, incarnation = pending.popleft()
            due.append((arrival if read_at is None or arrival >= read_at else read_at, incarnation))
        return due

    def drop_pending(self) -> None:
        """The receiver's process died: its socket buffers went with it."""
        self.pending.clear()
