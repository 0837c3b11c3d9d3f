"""The benchmarks' CPU accounting: a busy child's CPU is counted, an idle one's is not."""

from __future__ import annotations

import subprocess
import sys
import time

from swarmshake.chaos.bench.cpu_usage import CpuSampler, descendants_cpu_s

BUSY_S = 0.6


def test_a_busy_child_is_charged_and_an_idle_one_is_not() -> None:
    spin = (
        f"import time\nend = time.process_time() + {BUSY_S}\nwhile time.process_time() < end: pass"
    )
    with CpuSampler(interval_s=0.05) as sampler:
        idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
        busy = subprocess.Popen([sys.executable, "-c", spin])
        start = time.monotonic()
        busy.wait(timeout=60)
        time.sleep(0.2)  # a sample after the busy child's last CPU
        end = time.monotonic()
        live = descendants_cpu_s(sampler.root)
        idle.kill()
        idle.wait()
    assert idle.pid in live and live[idle.pid] < 0.5  # interpreter start-up only
    covered = sampler.window_cpu_s(start, end)
    assert covered is not None
    cpu_s, seconds = covered
    # The spin's CPU (less what it burned before the first sample in the window) plus
    # the idle child's start-up: at least most of BUSY_S, never more than the two.
    assert 0.5 * BUSY_S <= cpu_s <= BUSY_S + 1.0
    assert 0 < seconds <= end - start
    assert sampler.window_cpu_s(end + 10, end + 20) is None  # no samples there
