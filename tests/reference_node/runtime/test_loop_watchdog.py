"""The loop watchdogs: a stall of the control loop is a ``loop_stall`` (S4 reads it), a
stall of the worker's loop a ``worker_stall`` (S4 does not: the detector and the
heartbeats live in the control process), each past its own threshold."""

from __future__ import annotations

import asyncio
import time

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.loop_watchdog import (
    REPORT_STALL_S,
    WORKER_REPORT_STALL_S,
    LoopWatchdog,
)


def stalls_logged(watchdog_of, block_s: float) -> list[tuple[type, dict]]:
    """Run a watchdog, block its loop for ``block_s`` once, and return what it logged."""
    logged: list[tuple[type, dict]] = []

    async def scenario() -> None:
        watchdog = watchdog_of(lambda event, **fields: logged.append((event, fields)))
        task = asyncio.create_task(watchdog.run())
        await asyncio.sleep(0.05)
        time.sleep(block_s)  # noqa: ASYNC251 - the stall itself: the loop handles nothing
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(scenario())
    return logged


def test_a_control_loop_stall_is_a_loop_stall() -> None:
    logged = stalls_logged(lambda log: LoopWatchdog(log), REPORT_STALL_S + 0.1)
    [(event, fields)] = logged
    assert event is history.LoopStall
    assert fields["stalled_ms"] >= 1000 * REPORT_STALL_S


def test_a_worker_stall_is_logged_past_its_own_threshold_only() -> None:
    def worker(log):
        return LoopWatchdog(log, event=history.WorkerStall, report_stall_s=WORKER_REPORT_STALL_S)

    # A wait the control loop would report is routine for the worker (GIL hand-offs).
    assert stalls_logged(worker, REPORT_STALL_S + 0.05) == []
    [(event, fields)] = stalls_logged(worker, WORKER_REPORT_STALL_S + 0.1)
    assert event is history.WorkerStall
    assert fields["stalled_ms"] >= 1000 * WORKER_REPORT_STALL_S
    # Its events are history events of their own kind, not S4's loop stalls.
    assert "worker_stall" in history.EVENT_KINDS
