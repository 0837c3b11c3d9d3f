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
_WORDS = struct.Struct(f"<{VECTOR_LEN}Q")  # the digest as little-endian unsigned words
_MODULUS = 1 << 61  # keep parameters inside int64 whatever the run length


def gradient(seed: int, step: int, node: str) -> tuple[int, ...]:
    digest = hashlib.blake2b(f"{seed}:{step}:{node}".encode(), digest_size=8 * VECTOR_LEN).digest()
    return tuple([word % 2001 - 1000 for word in _WORDS.unpack(digest)])


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
    return _fingerprint(tuple(vector))


def apply(params: tuple[int, ...], update: tuple[int, ...]) -> tuple[int, ...]:
    return _apply(tuple(params), tuple(update))


# Every replica applies the same update to the same parameters and fingerprints the
# result (ten nodes: ten times each step); remembering the last few is exact (pure
# functions of their arguments) and saves nine tenths of the work.
@functools.lru_cache(maxsize=256)
def _fingerprint(vector: tuple[int, ...]) -> str:
    return hashlib.blake2b(_PACK.pack(*vector), digest_size=16).hexdigest()


@functools.lru_cache(maxsize=64)
def _apply(params: tuple[int, ...], update: tuple[int, ...]) -> tuple[int, ...]:
    return tuple((p + u) % _MODULUS for p, u in zip(params, update, strict=True))


INITIAL_PARAMS: tuple[int, ...] = (0,) * VECTOR_LEN
INITIAL_FP = fingerprint(INITIAL_PARAMS)
