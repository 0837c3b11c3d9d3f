"""Deterministic 64-bit fingerprint of a tensor's bytes, the same on CPU and GPU.

Used by the node for S1 checks and replica validation (DESIGN.md: one fingerprint
function, defined here).

Definition. Take the tensor's bytes in C-contiguous order (``nbytes`` of them),
append zero bytes up to a multiple of 4, and read them as little-endian signed
32-bit words ``w[i]``, sign-extended to 64 bits. Cut the words into blocks of
``BLOCK_WORDS = 4096``: word i is in block ``b = i // 4096`` at lane ``j = i % 4096``.
With odd 64-bit keys ``T[j] = splitmix64(SEED_T + (j + 1) * GOLDEN) | 1`` and
``M[b] = splitmix64(SEED_M + (b + 1) * GOLDEN) | 1``::

    H = sum_i  M[b(i)] * T[j(i)] * w[i]          (mod 2**64)
    fingerprint = fmix64(H xor meta)

where ``meta`` is the first 8 bytes of BLAKE2b over ``"{dtype}|{shape}|{nbytes}"``
and ``fmix64`` is MurmurHash3's finalizer (a bijection of 64-bit words).

Why a bit flip always shows: changing any bits inside one word changes ``w[i]`` by
``delta`` with ``0 < |delta| < 2**32``, so H changes by ``M*T*delta``: an odd number
times ``2**s`` (s < 32), never 0 mod 2**64; xor and fmix64 are bijections. Changes
in several words collide with probability about 2**-64 for non-adversarial data
(this is not a cryptographic hash). dtype and shape enter through ``meta``, so the
zero padding cannot make ``[1, 2, 3]`` and ``[1, 2, 3, 0]`` collide.

The sum is a modular integer sum, so its order does not matter: the CUDA kernel
sums in any order and gets the same bits as the CPU path (numpy's vectorised uint64
multiply and row sums, ~5 GB/s per core, which meets "100M parameters in < 1 s").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import torch

__all__ = [
    "fingerprint",
    "fingerprint_hex",
    "fingerprint_tensors",
    "reference_fingerprint",
    "reference_fingerprint_sum",
    "BLOCK_WORDS",
]

BLOCK_WORDS = 4096
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SEED_T = 0x243F6A8885A308D3  # pi
SEED_M = 0x13198A2E03707344
SEED_COMBINE = 0xA4093822299F31D0

_CPU_CHUNK_BLOCKS = 64  # blocks per numpy matmul (256K words: the int64 copy stays in cache)


def _splitmix64_np(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def _keys(seed: int, n: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        idx = np.arange(1, n + 1, dtype=np.uint64)
        x = np.uint64(seed) + idx * np.uint64(GOLDEN)
        return _splitmix64_np(x) | np.uint64(1)


_T_KEYS = _keys(SEED_T, BLOCK_WORDS)
_M_CACHE = np.zeros(0, dtype=np.uint64)


def _m_keys(nblocks: int) -> np.ndarray:
    global _M_CACHE
    if _M_CACHE.size < nblocks:
        _M_CACHE = _keys(SEED_M, max(nblocks, 2 * _M_CACHE.size, 1024))
    return _M_CACHE[:nblocks]


def fmix64(h: int) -> int:
    """MurmurHash3's 64-bit finalizer (bijective)."""
    h &= MASK64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    h ^= h >> 33
    return h


def _meta(t: torch.Tensor) -> int:
    nbytes = t.numel() * t.element_size()
    text = f"{t.dtype}|{tuple(t.shape)}|{nbytes}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def _words_cpu(t: torch.Tensor) -> np.ndarray:
    """The tensor's bytes as int32 words (zero-padded to a multiple of 4), on the CPU."""
    flat = t.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    flat = flat.contiguous()
    b = flat.view(torch.uint8) if flat.numel() else torch.zeros(0, dtype=torch.uint8)
    nb = b.numel()
    if nb % 4:
        b = torch.cat([b, b.new_zeros(4 - nb % 4)])
    return b.numpy().view(np.int32)


def reference_fingerprint_sum(t: torch.Tensor) -> int:
    """H (the modular sum of the module docstring) computed on the CPU with numpy."""
    w = _words_cpu(t)
    n = w.size
    if n == 0:
        return 0
    nblocks = (n + BLOCK_WORDS - 1) // BLOCK_WORDS
    full = n // BLOCK_WORDS
    mk = _m_keys(nblocks)
    acc = np.uint64(0)
    with np.errstate(over="ignore"):
        if full:
            wf = w[: full * BLOCK_WORDS].reshape(full, BLOCK_WORDS)
            for s in range(0, full, _CPU_CHUNK_BLOCKS):
                chunk = wf[s : s + _CPU_CHUNK_BLOCKS].astype(np.int64).view(np.uint64)
                # In-place multiply then a row sum: numpy vectorises both, while its
                # integer matmul is a scalar loop (3.4x slower on 1M words).
                chunk *= _T_KEYS
                inner = chunk.sum(axis=1, dtype=np.uint64)
                acc += np.uint64(int((inner * mk[s : s + chunk.shape[0]]).sum(dtype=np.uint64)))
        rest = n - full * BLOCK_WORDS
        if rest:
            tail = w[full * BLOCK_WORDS :].astype(np.int64).view(np.uint64)
            inner = (tail * _T_KEYS[:rest]).sum(dtype=np.uint64)
            acc += inner * mk[full]
    return int(acc) & MASK64


def _finish(t: torch.Tensor, h: int) -> int:
    return fmix64(h ^ _meta(t))


def reference_fingerprint(t: torch.Tensor) -> int:
    """The fingerprint, always computed on the CPU (the definition)."""
    _check(t)
    return _finish(t, reference_fingerprint_sum(t))


def _check(t: object) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fingerprint takes a torch.Tensor, got {type(t).__name__}")


def _gpu_sums(tensors: list[torch.Tensor]) -> list[int]:
    """H for CUDA tensors through the kernel, one device->host copy for all of them."""
    from swarmshake.kernels import _ext

    ext = _ext.get()
    out = torch.zeros(len(tensors), dtype=torch.int64, device=tensors[0].device)
    for i, t in enumerate(tensors):
        flat = t.detach().reshape(-1).contiguous()
        if flat.numel() == 0:
            continue
        b = flat.view(torch.uint8)
        if b.numel() % 4 or b.data_ptr() % 16:
            pad = (-b.numel()) % 4
            b = torch.cat([b, b.new_zeros(pad)]) if pad else b.clone()
        ext.fingerprint_sum(b, out, i)
    return [int(v) & MASK64 for v in out.cpu().tolist()]


def _sums(tensors: list[torch.Tensor]) -> list[int]:
    from swarmshake.kernels._common import use_kernel

    res: list[int | None] = [None] * len(tensors)
    by_dev: dict[torch.device, list[int]] = {}
    for i, t in enumerate(tensors):
        _check(t)
        if use_kernel(t, None):
            by_dev.setdefault(t.device, []).append(i)
        else:
            res[i] = reference_fingerprint_sum(t)
    for idx in by_dev.values():
        for i, h in zip(idx, _gpu_sums([tensors[i] for i in idx]), strict=True):
            res[i] = h
    return res  # type: ignore[return-value]


def fingerprint(tensor: torch.Tensor) -> int:
    """64-bit fingerprint (unsigned int) of ``tensor``'s bytes, dtype and shape."""
    _check(tensor)
    return _finish(tensor, _sums([tensor])[0])


def fingerprint_hex(tensor: torch.Tensor) -> str:
    """:func:`fingerprint` as 16 lowercase hex digits."""
    return f"{fingerprint(tensor):016x}"


def combine(fps: Iterable[int]) -> int:
    """Fold per-tensor fingerprints in order; a change in any one always changes the result.

    ``h <- fmix64(h * GOLDEN + fp)``: for fixed other inputs each step is a bijection
    of its fp and of the previous h (GOLDEN is odd), then the count is mixed in.
    """
    h = SEED_COMBINE
    n = 0
    for fp in fps:
        h = fmix64((h * GOLDEN + (fp & MASK64)) & MASK64)
        n += 1
    return fmix64(h ^ n)


def fingerprint_tensors(tensors: Iterable[torch.Tensor]) -> str:
    """Hex fingerprint (16 digits) of a sequence of tensors, e.g. a model's state, in order."""
    ts = list(tensors)
    sums = _sums(ts)
    return f"{combine(_finish(t, h) for t, h in zip(ts, sums, strict=True)):016x}"
