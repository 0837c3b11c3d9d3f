"""Seeded random streams, one per purpose, all derived from one master seed.

TigerBeetle's rule: one seed drives everything.  Each purpose (link latency of one
link, churn, partition groupings, training data) gets its own ``random.Random`` so
adding a draw in one place does not shift every other draw, and a shrunk schedule
replays the same network.  Seeds are derived with BLAKE2b over the purpose's name,
never with ``hash()``, whose value for strings changes with ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
import random


def derive_seed(master_seed: int, *purpose: object) -> int:
    text = "\x1f".join([str(master_seed), *map(str, purpose)]).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


class RngStreams:
    """``streams.get("latency", "n1", "n2")`` is the same stream every time it is asked for."""

    __slots__ = ("master_seed", "_streams")

    def __init__(self, master_seed: int):
        self.master_seed = master_seed
        self._streams: dict[tuple[object, ...], random.Random] = {}

    def get(self, *purpose: object) -> random.Random:
        stream = self._streams.get(purpose)
        if stream is None:
            stream = random.Random(derive_seed(self.master_seed, *purpose))
            self._streams[purpose] = stream
        return stream
