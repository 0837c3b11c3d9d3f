"""Durable small-file writes: temp file, fsync, rename, fsync folder.

One function for every file a node must find whole after a crash (incarnation,
acceptor records and their floor, checkpoint replicas).  Torch-free: the control
process imports it and never loads torch.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(folder: Path, name: str, data: bytes | bytearray) -> Path:
    """Temp file, fsync, rename, fsync folder: a crash leaves the old file or the new."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / name
    temporary = folder / f".{name}.tmp.{os.getpid()}"
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return final
