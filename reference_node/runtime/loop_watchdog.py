"""Measures how late the control event loop wakes, and logs every stall as an event.

A node is alive in DESIGN's sense only while it handles events at least every
Δ_proc.  On a shared machine the control loop can stall (the host is overloaded,
the process is descheduled, a page fault on a cold file): a stalled monitor sees
its peers' heartbeats late, a stalled node sends its own late.  The detector's core
gets the same measurement (``LocalStall``) so it does not blame peers for its own
stall; the S4 checker reads the events to decide whether a run stayed in the
envelope.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.events import EventLog

# Wake every 10 ms: a stall is measured to about that resolution, and 100 wakeups a
# second cost well under 1% of a core.
TICK_S = 0.010
# Report lateness beyond this.  Shorter stalls are normal scheduling noise on a busy
# host and far below any detection timeout (the suspicion floor is 160 ms).
REPORT_STALL_S = 0.040


class LoopWatchdog:
    def __init__(
        self,
        events: EventLog,
        *,
        now_mono: Callable[[], float] = time.monotonic,
        on_stall: Callable[[float, float], None] | None = None,
    ):
        self.events = events
        self._now = now_mono
        self._on_stall = on_stall
        self.stalls = 0
        self.max_stall_s = 0.0
        self._expected: float | None = None  # when the next wake is due

    def late_s(self) -> float:
        """How late the watchdog's next wake is right now: a stall in progress that
        it has not measured yet (0 while the loop runs on time, or before it starts)."""
        if self._expected is None:
            return 0.0
        return max(0.0, self._now() - self._expected)

    async def run(self) -> None:
        expected = self._now() + TICK_S
        while True:
            self._expected = expected
            await asyncio.sleep(max(0.0, expected - self._now()))
            woke = self._now()
            late_s = woke - expected
            if late_s > REPORT_STALL_S:
                self.stalls += 1
                self.max_stall_s = max(self.max_stall_s, late_s)
                self.events.log(
                    history.LoopStall, stalled_ms=round(1000 * late_s, 3), since_mono=expected
                )
                if self._on_stall is not None:
                    self._on_stall(expected, woke)
            expected = woke + TICK_S
