"""Stopping a server the harness started (Toxiproxy, Mosquitto): politely, then for sure."""

from __future__ import annotations

import asyncio
import signal
import subprocess

STOP_GRACE_S = 3.0  # both servers exit within milliseconds of SIGTERM when healthy


async def stop_child(
    process: subprocess.Popen[bytes] | None, grace_s: float = STOP_GRACE_S
) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; returns once the process is reaped."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(process.wait, grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        await asyncio.to_thread(process.wait)
