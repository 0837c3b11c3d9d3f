"""Abstract training: a deterministic small integer vector per (node, step).

The simulator measures the protocol, not the ML (issue 3), so a node's "gradient"
for a step is ``VECTOR_LEN`` integers drawn from BLAKE2b of (seed, step, node) and
the aggregate is their sum over the committed contributors in sorted order.  Integer
arithmetic is exact, so every replica that applies the same committed steps holds
bitwise-identical parameters, and one that skips or repeats a step does not — what
S1 compares.  No torch here: the simulator must run thousands of nodes on one core.
"""

from __future__ import annotations

import functools
import hashlib
import struct

VECTOR_LEN = 4
_PACK = struct.Struct(f"<{VECTOR_LEN}q")
_MODULUS = 1 << 61  # keep parameters inside int64 whatever the run length


def gradient(seed: int, step: int, node: str) -> tuple[int, ...]:
    digest = hashlib.blake2b(f"{seed}:{step}:{node}".encode(), digest_size=8 * VECTOR_LEN).digest()
    return tuple(
        int.from_bytes(digest[i : i + 8], "little") % 2001 - 1000 for i in range(0, len(digest), 8)
    )


def aggregate(seed: int, step: int, contributors: list[str] | tuple[str, ...]) -> tuple[int, ...]:
    return _aggregate(seed, step, tuple(sorted(contributors)))


# Every node aggregates the same committed set of a step (and a proposer once more):
# remembering the last few steps' sums saves ~90% of the hashing, which was a fifth
# of a 10-node run.  Bounded: 16 steps' worth of distinct sets at a few per step.
@functools.lru_cache(maxsize=64)
def _aggregate(seed: int, step: int, contributors: tuple[str, ...]) -> tuple[int, ...]:
    total = [0] * VECTOR_LEN
    for node in contributors:
        for index, value in enumerate(gradient(seed, step, node)):
            total[index] += value
    return tuple(total)


def fingerprint(vector: tuple[int, ...]) -> str:
    return hashlib.blake2b(_PACK.pack(*vector), digest_size=16).hexdigest()


def apply(params: tuple[int, ...], update: tuple[int, ...]) -> tuple[int, ...]:
    return tuple((p + u) % _MODULUS for p, u in zip(params, update, strict=True))


INITIAL_PARAMS: tuple[int, ...] = (0,) * VECTOR_LEN
INITIAL_FP = fingerprint(INITIAL_PARAMS)
