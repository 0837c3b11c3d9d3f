"""Keep the worker's freed memory mapped, so a step's tensors reuse pages.

A training step allocates the same large buffers every time (the gradient, three
received contributions, the aggregate, fingerprint temporaries).  glibc serves
requests above its mmap threshold (128 KiB, adapting up to 32 MiB) with fresh
``mmap``s and gives freed heap tops back to the kernel, so each step's buffers
are new pages, and a first touch costs ~5 us per 4 KiB page on this project's VM:
measured 500-900 page faults per step per worker for a 1M-parameter model, and a
40 MB gradient of a 10M model alone is 10k faults (~50 ms) a step.  With mmap off
and trimming pushed out of reach, freed blocks go back to malloc's free lists and
the next step's same-sized requests reuse them.  The cost: the worker's resident
memory stays at its peak (its working set is the same every step anyway).
glibc-only (``mallopt``); elsewhere nothing changes.

Only for models up to ``KEEP_FREED_MAX_MODEL_BYTES``.  Beyond, the heap stops being
a step's working set: a one-thread loop of 100M-parameter gradients and applies held
4.0-5.9 GB this way against 1.3 GB with glibc's defaults (large blocks mapped, and
unmapped when freed), at 1.4 against 2.8-3.1 s a step, the page faults this saves
(session 20).  Four such workers share a 24 GB machine in ``bench overhead --params
100M``, where one was killed for memory; memory a worker cannot give back is the
worse cost there.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
# Free memory at the heap top that is never given back: far above any worker's
# working set, below what a 32-bit int argument holds.
TRIM_THRESHOLD_BYTES = 1 << 30
# The largest model (fp32 bytes of its parameters) whose worker keeps freed memory:
# 16M parameters, whose kept heap stays under 1 GB a worker at the 10-15x the model
# measured at 100M (10M, 40 MB tensors, is the size the page faults were measured on).
KEEP_FREED_MAX_MODEL_BYTES = 64 << 20


def keeps_freed_memory_for(model_bytes: int) -> bool:
    """Whether a worker of a model of ``model_bytes`` should keep its freed memory."""
    return model_bytes <= KEEP_FREED_MAX_MODEL_BYTES


def keep_freed_memory() -> bool:
    """Tell glibc malloc to stop mmapping large blocks and trimming the heap; True if
    it accepted both settings (False on another libc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
