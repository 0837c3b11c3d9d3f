"""Derivation of every random stream from the run seed.

Each stream (teacher weights, initial parameters, the shard of one node at one
step, a Byzantine node's noise) gets its own 63-bit seed hashed from the run seed
and the stream's name, so any one of them can be recomputed anywhere without
replaying the others, and two streams never share a generator.
"""

from __future__ import annotations

import hashlib

import torch


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed for the stream named by ``parts`` (strings and integers)."""
    text = ":".join(["swarmshake", str(seed), *(str(part) for part in parts)])
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, *parts: object) -> torch.Generator:
    """A CPU generator for one named stream (CPU so the bits do not depend on a device)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(seed, *parts))
    return gen
