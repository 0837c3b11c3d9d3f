"""CPU tests of the fingerprint: its pinned definition, bit-flip sensitivity, speed."""

import time

import numpy as np
import pytest
import torch

from swarmshake.kernels import fingerprint, fingerprint_hex, fingerprint_tensors
from swarmshake.kernels.fingerprint import (
    BLOCK_WORDS,
    reference_fingerprint,
    reference_fingerprint_sum,
)

MASK = (1 << 64) - 1


def _splitmix(x):
    z = x & MASK
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _slow_sum(t: torch.Tensor) -> int:
    """The definition, word by word in Python ints."""
    b = bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist()) if t.numel() else b""
    b += b"\0" * (-len(b) % 4)
    h = 0
    for i in range(len(b) // 4):
        w = int.from_bytes(b[4 * i : 4 * i + 4], "little", signed=True)
        j, blk = i % BLOCK_WORDS, i // BLOCK_WORDS
        tk = _splitmix(0x243F6A8885A308D3 + (j + 1) * 0x9E3779B97F4A7C15) | 1
        mk = _splitmix(0x13198A2E03707344 + (blk + 1) * 0x9E3779B97F4A7C15) | 1
        h = (h + mk * tk * w) & MASK
    return h


@pytest.mark.parametrize("n", [0, 1, 3, 4095, 4096, 4097, 9000])
def test_vectorised_sum_matches_definition(n):
    t = torch.randn(n, generator=torch.Generator().manual_seed(n))
    assert reference_fingerprint_sum(t) == _slow_sum(t)


def test_odd_byte_counts():
    t = torch.arange(7, dtype=torch.int8)
    assert reference_fingerprint_sum(t) == _slow_sum(t)
    h = torch.randn(5).to(torch.bfloat16)
    assert reference_fingerprint_sum(h) == _slow_sum(h)


def test_pinned_values():
    """The definition is frozen: these values must never change (S1 across versions)."""
    assert fingerprint_hex(torch.arange(10, dtype=torch.float32)) == PINNED_ARANGE
    assert fingerprint_hex(torch.zeros(0)) == PINNED_EMPTY
    assert (
        fingerprint_tensors([torch.ones(3), torch.zeros(2, 2, dtype=torch.bfloat16)])
        == PINNED_TENSORS
    )


PINNED_ARANGE = "8b6fef671ac95108"
PINNED_EMPTY = "c86d9bb386d0b629"
PINNED_TENSORS = "5013005e201c4224"


def test_every_single_bit_flip_changes_it():
    t = torch.randn(64, generator=torch.Generator().manual_seed(0))
    base = fingerprint(t)
    raw = t.view(torch.int32).clone()
    for i in range(raw.numel()):
        for bit in range(32):
            r = raw.clone()
            r[i] ^= torch.tensor(1 << bit if bit < 31 else -(1 << 31), dtype=torch.int32)
            assert fingerprint(r.view(torch.float32)) != base, (i, bit)


def test_bit_flip_in_large_tensor_each_block_lane():
    t = torch.randn(3 * BLOCK_WORDS + 5, generator=torch.Generator().manual_seed(1))
    base = fingerprint(t)
    rng = np.random.default_rng(0)
    for i in rng.integers(0, t.numel(), 50):
        r = t.clone().view(torch.int32)
        r[int(i)] ^= 1 << int(rng.integers(0, 31))
        assert fingerprint(r.view(torch.float32)) != base


def test_dtype_shape_and_layout():
    t = torch.arange(12, dtype=torch.float32)
    fps = {
        fingerprint(t),
        fingerprint(t.reshape(3, 4)),
        fingerprint(t.view(torch.int32)),
        fingerprint(torch.cat([t, torch.zeros(1)])),
    }
    assert len(fps) == 4
    m = torch.randn(5, 6)
    assert fingerprint(m.T) == fingerprint(m.T.contiguous())  # C-contiguous order of the values
    assert fingerprint(m.T) != fingerprint(m)


def test_any_dtype_and_determinism():
    for t in [
        torch.ones(3, dtype=torch.bool),
        torch.arange(5, dtype=torch.int64),
        torch.randn(4, dtype=torch.complex64),
        torch.randn(7).to(torch.float16),
    ]:
        assert fingerprint(t) == fingerprint(t.clone()) == reference_fingerprint(t)
        assert 0 <= fingerprint(t) < 2**64 and len(fingerprint_hex(t)) == 16


def test_combination_is_order_sensitive():
    a, b = torch.ones(3), torch.zeros(3)
    assert fingerprint_tensors([a, b]) != fingerprint_tensors([b, a])
    assert fingerprint_tensors([a]) != fingerprint_tensors([a, a])
    assert fingerprint_tensors(iter([a, b])) == fingerprint_tensors([a, b])
    assert len(fingerprint_tensors([])) == 16


def test_speed_cpu():
    model = torch.nn.Sequential(*[torch.nn.Linear(250, 250) for _ in range(16)])  # ~1M params
    params = list(model.state_dict().values())
    fingerprint_tensors(params)
    t0 = time.perf_counter()
    fingerprint_tensors(params)
    assert time.perf_counter() - t0 < 0.1  # a few ms in practice
    big = torch.randn(10_000_000)
    t0 = time.perf_counter()
    fingerprint(big)
    assert time.perf_counter() - t0 < 1.0  # ~20 ms: 100M parameters well under 1 s
