"""Measures how late an event loop wakes, and logs every stall as an event.

A node is alive in DESIGN's sense only while it handles events at least every
Δ_proc.  On a shared machine the control loop can stall (the host is overloaded,
the process is descheduled, a page fault on a cold file): a stalled monitor sees
its peers' heartbeats late, a stalled node sends its own late.  The detector's core
gets the same measurement (``LocalStall``) so it does not blame peers for its own
stall; the S4 checker reads the events to decide whether a run stayed in the
envelope.

The worker's loop (bulk links, shard exchange, gathers) has one too, logging
``worker_stall`` instead: the S4 checker does not read those (heartbeats and the
detector live in the control process), but a multi-second worker stall at 100M
parameters explains a late shard or a gather given up, and was invisible before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from swarmshake.reference_node.protocol import history

# Wake every 10 ms: a stall is measured to about that resolution, and 100 wakeups a
# second cost well under 1% of a core.
TICK_S = 0.010
# Report lateness beyond this.  Shorter stalls are normal scheduling noise on a busy
# host and far below any detection timeout (the suspicion floor is 160 ms).
REPORT_STALL_S = 0.040
# The worker's loop shares the GIL with its compute thread, so short waits are
# routine there; its own timers are 0.5 s and more (a gather's re-ask, a shard's
# INPUT_WAIT_S), and a stall shorter than this cannot make one fire late enough to
# matter.  Bounds the events a busy worker writes, too.
WORKER_REPORT_STALL_S = 0.200


class LoopWatchdog:
    """``log(event, stalled_ms=..., since_mono=...)`` writes a stall: the control
    process's ``EventLog.log`` with ``history.LoopStall``, or the worker's own log
    with ``history.WorkerStall`` (and ``report_stall_s`` of its own)."""

    def __init__(
        self,
        log: Callable[..., None],
        *,
        event: type[history.LoopStall] | type[history.WorkerStall] = history.LoopStall,
        report_stall_s: float = REPORT_STALL_S,
        now_mono: Callable[[], float] = time.monotonic,
        on_stall: Callable[[float, float], None] | None = None,
    ):
        self._log = log
        self._event = event
        self._report_stall_s = report_stall_s
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
            if late_s > self._report_stall_s:
                self.stalls += 1
                self.max_stall_s = max(self.max_stall_s, late_s)
                self._log(self._event, stalled_ms=round(1000 * late_s, 3), since_mono=expected)
                if self._on_stall is not None:
                    self._on_stall(expected, woke)
            expected = woke + TICK_S
