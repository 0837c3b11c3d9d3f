"""Entry point of the worker process: lowers its priority *before* importing torch.

Importing torch and building the model cost seconds of CPU; done at normal
priority by several workers at once on a small machine, they starve the control
processes' heartbeats (the false positives DESIGN.md's split exists to prevent).
So this module imports nothing heavy: it nices itself, arranges to die with its
parent, then hands over to ``worker.main``.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys

USAGE = "usage: python -m swarmshake.reference_node.runtime.worker_entry FD NICE"
# How long a thread holding the GIL keeps it while another waits (CPython's default:
# 5 ms).  The worker's event loop (bulk frames: Python work) and its compute thread
# (torch ops, each taking the GIL back between ops, and the hand-off of every result
# through the loop's self-pipe) take turns on it many times a step; at 5 ms a thread
# back from an op or a syscall queued behind the other's Python for up to a whole
# interval, on the step's critical path.  py-spy on a 4-node 1M-parameter run showed
# the compute thread's result hand-off (``_write_to_self``) at 15 % of its samples;
# at 0.5 ms the all-to-all path went from 7.6-8.0 to 11.2-12.0 steps/s on the 2-core
# machine, CPU per step unchanged (BENCHMARKS.md, session 7).
GIL_SWITCH_INTERVAL_S = 0.0005


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL us when the control process dies (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: EOF on the socketpair still ends the worker


def become_worker(fd: int, nice: int, control_pid: int) -> int:
    """Run the worker on socket ``fd`` (exec'd here, or forked by ``worker_start``)."""
    # A crash in native code (torch) then leaves a Python stack in the node's log
    # instead of a silent "worker channel closed" in the control process.
    faulthandler.enable()
    _die_with_parent()
    if os.getppid() != control_pid:
        return 3  # the parent died before PDEATHSIG was armed
    # Absolute, not relative: the control process may run at a negative niceness.
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    from swarmshake.reference_node.runtime.worker import run

    return run(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print(USAGE, file=sys.stderr)
        return 64
    return become_worker(int(argv[0]), int(argv[1]), control_pid=os.getppid())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
