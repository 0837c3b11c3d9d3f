"""CPU seconds used by this process's descendants over a time window (Linux /proc).

``bench overhead`` compares step times on a machine other jobs share; a step's
wall time then depends on how much CPU the scheduler hands each side, but the CPU
a side spends per step (user + system, every process and thread it started) is
its cost and moves far less with the load.  A background thread samples the
cumulative CPU time of every descendant every ``interval_s``; the cost of a window
``[start, end]`` (host ``CLOCK_MONOTONIC``, what the events' ``t_mono`` use) is the
difference of the samples taken closest inside it, per process, summed.  A process
that exits keeps its last sample, so its CPU up to then still counts (a node that
stops after the window is unaffected).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Samples kept: at the default 0.25 s a 10-minute benchmark is 2400; beyond that
# the oldest are dropped (a window that old is not asked for).
MAX_SAMPLES = 4096


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None  # exited between the listing and the read
    # The command name (field 2) may hold spaces and parentheses: split after it.
    return text.rsplit(")", 1)[1].split()


def descendants_cpu_s(root: int) -> dict[int, float]:
    """Cumulative CPU seconds (user + system) of every live descendant of ``root``."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None:
            continue
        # After the name: state, ppid, ... utime is field 14, stime 15 (1-based).
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S
    result: dict[int, float] = {}
    for pid, seconds in cpu.items():
        ancestor, hops = parents.get(pid), 0
        while ancestor and ancestor != root and hops < 64:  # 64: deeper is a cycle
            ancestor, hops = parents.get(ancestor), hops + 1
        if ancestor == root:
            result[pid] = seconds
    return result


@dataclass
class CpuSampler:
    """Samples the descendants' CPU in a daemon thread while used as a context manager."""

    interval_s: float = 0.25
    root: int = field(default_factory=os.getpid)
    times: list[float] = field(default_factory=list)
    samples: list[dict[int, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> CpuSampler:
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            sample = descendants_cpu_s(self.root)
            self.times.append(now)
            self.samples.append(sample)
            if len(self.times) > MAX_SAMPLES:
                del self.times[0], self.samples[0]
            self._stop.wait(self.interval_s)

    def window_cpu_s(self, start: float, end: float) -> tuple[float, float] | None:
        """``(cpu seconds, window seconds actually covered)`` between the first sample
        at or after ``start`` and the last at or before ``end``; None if fewer than two
        samples fall inside."""
        first = bisect.bisect_left(self.times, start)
        last = bisect.bisect_right(self.times, end) - 1
        if last <= first:
            return None
        latest: dict[int, float] = {}
        for sample in self.samples[: last + 1]:
            latest.update(sample)  # a process that exited keeps its last value
        earliest: dict[int, float] = {}
        for sample in self.samples[: first + 1]:
            earliest.update(sample)
        total = sum(seconds - earliest.get(pid, 0.0) for pid, seconds in latest.items())
        return total, self.times[last] - self.times[first]
