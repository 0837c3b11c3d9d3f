"""Coordinate-wise median and trimmed mean over k stacked peer tensors.

Definitions (the torch references below are the definition; the CUDA kernel in
``csrc/robust.cu`` matches them bit for bit):

Per coordinate c, take the k values ``x[0, c] .. x[k-1, c]``:

1. Upcast to the compute dtype (fp32 for fp32/bf16/fp16, fp64 for fp64) and turn
   ``-0.0`` into ``+0.0`` (so the result never depends on how zeros were ordered).
2. **Non-finite values are outliers and are excluded**: NaN, +inf and -inf are
   dropped. Let ``n`` be the number of finite values left and ``v[0] <= .. <= v[n-1]``
   those values sorted.
3. ``n == 0`` (every peer non-finite at c): the result is NaN.

Median: ``lo = (n - 1) // 2``, ``hi = n // 2``. Odd n: ``v[lo]`` (an input value).
Even n: ``v[lo] * 0.5 + v[hi] * 0.5`` in the compute dtype (each product exact
except for subnormals, then one rounded add: it cannot overflow, unlike
``(a + b) / 2``). torch.median returns the lower middle ``v[lo]``; ours averages.

Trimmed mean with ``trim = t``: ``te = min(t, (n - 1) // 2)`` (the trim shrinks only
when non-finite values left fewer than ``2t + 1`` finite ones), keep
``v[te] .. v[n-1-te]``, sum them in ascending order starting from ``+0.0``, one
rounded add at a time in the compute dtype, and divide once by their count.

The result is rounded (round-to-nearest-even) to the input dtype and has shape
``stacked.shape[1:]``.
"""

from __future__ import annotations

import functools

import torch

from swarmshake.kernels._common import check_int, check_stacked, compute_dtype, use_kernel

__all__ = [
    "coordinate_median",
    "trimmed_mean",
    "reference_coordinate_median",
    "reference_trimmed_mean",
]


def _check_trim(trim: object, k: int) -> int:
    trim = check_int(trim, "trim")
    if trim < 0:
        raise ValueError(f"trim must be >= 0, got {trim}")
    if 2 * trim >= k:
        raise ValueError(
            f"trimmed_mean needs 2 * trim < k (something must be left), got trim = {trim}, k = {k}"
        )
    return trim


# Up to this many peers the columns are sorted by a sorting network of element-wise
# min/max over whole rows, beyond it by torch.sort.  torch.sort along dim 0 sorts
# each column of k values on its own: 19 ms for k = 4 and d = 250k on this CPU (one
# thread), the network 2 ms; still 8x faster at k = 64 (110 vs 884 ms).
SORT_NETWORK_K_MAX = 64


@functools.cache
def _sort_network(k: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort for any ``k``: compare-exchange pairs (i < j), in
    order (k = 4: 5 pairs; 8: 19; 16: 63).  tests/kernels check it sorts every 0-1
    input up to k = 14, which by the 0-1 principle proves it sorts any input."""
    pairs = []
    p = 1
    while p < k:
        step = p
        while step >= 1:
            for j in range(step % p, k - step, 2 * step):
                for i in range(min(step, k - j - step)):
                    if (i + j) // (2 * p) == (i + j + step) // (2 * p):
                        pairs.append((i + j, i + j + step))
            step //= 2
        p *= 2
    return tuple(pairs)


def _sort_rows(v: torch.Tensor) -> list[torch.Tensor]:
    """The k rows of ``v`` ([k, d], no NaN) sorted per column, as a list of rows.

    The same bits as ``torch.sort(v, dim=0)``: min and max return one of their
    inputs, and equal values are the same bits here (no NaN; -0.0 was made +0.0)."""
    k = v.shape[0]
    if k > SORT_NETWORK_K_MAX:
        return list(torch.sort(v, dim=0).values.unbind(0))
    rows = list(v.unbind(0))
    for i, j in _sort_network(k):
        rows[i], rows[j] = torch.minimum(rows[i], rows[j]), torch.maximum(rows[i], rows[j])
    return rows


def _sorted_finite(x2: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Steps 1-2: upcast, canonical zero, non-finite -> +inf (sorts last); the sorted
    rows and n per column, or None for n when every value is finite (n == k)."""
    v = x2.to(compute_dtype(x2.dtype)) + 0.0  # a copy; -0.0 + 0.0 == +0.0
    # x - x is 0 for a finite x and NaN for NaN or +-inf, and a NaN survives the sum:
    # ~70x cheaper than isfinite().all() here (training.aggregation.all_finite).
    if bool((v - v).sum() == 0):
        return _sort_rows(v), None
    finite = torch.isfinite(v)
    v = torch.where(finite, v, torch.full_like(v, float("inf")))
    return _sort_rows(v), finite.sum(dim=0)


def reference_coordinate_median(stacked: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median (module docstring: even k averages the two middles)."""
    x2 = check_stacked(stacked)
    out_shape = stacked.shape[1:]
    rows, n = _sorted_finite(x2)
    if n is None:
        # Every value finite: n == k in every column, so lo and hi are the same for
        # all of them; the general path below with those constants (the same ops).
        k = len(rows)
        lo, hi = (k - 1) // 2, k // 2
        res = rows[lo] if lo == hi else rows[lo] * 0.5 + rows[hi] * 0.5
        return res.to(stacked.dtype).reshape(out_shape)
    s = torch.stack(rows)
    lo = torch.clamp(n - 1, min=0) // 2
    hi = n // 2
    a = s.gather(0, lo.unsqueeze(0)).squeeze(0)
    b = s.gather(0, hi.unsqueeze(0)).squeeze(0)
    mid = a * 0.5 + b * 0.5
    res = torch.where(lo == hi, a, mid)
    res = torch.where(n == 0, torch.full_like(res, float("nan")), res)
    return res.to(stacked.dtype).reshape(out_shape)


def reference_trimmed_mean(stacked: torch.Tensor, trim: int) -> torch.Tensor:
    """Coordinate-wise trimmed mean: drop ``trim`` lowest and highest finite values."""
    x2 = check_stacked(stacked)
    k = x2.shape[0]
    trim = _check_trim(trim, k)
    out_shape = stacked.shape[1:]
    rows, n = _sorted_finite(x2)
    if n is None:
        n = torch.full((x2.shape[1],), k, dtype=torch.int64, device=x2.device)
    s = torch.stack(rows)
    te = torch.minimum(torch.full_like(n, trim), torch.clamp(n - 1, min=0) // 2)
    lo = te
    hi = n - 1 - te
    acc = torch.zeros(s.shape[1], dtype=s.dtype, device=s.device)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    for i in range(k):  # fixed, ascending summation order
        keep = (lo <= i) & (i <= hi)
        acc = acc + torch.where(keep, s[i], zero)
    cnt = (hi - lo + 1).to(s.dtype)
    res = acc / cnt
    res = torch.where(n == 0, torch.full_like(res, float("nan")), res)
    return res.to(stacked.dtype).reshape(out_shape)


def coordinate_median(stacked: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median of ``stacked`` ([k, d] -> [d]); CUDA kernel on CUDA tensors.

    See the module docstring for the exact definition (non-finite values excluded,
    even count -> ``lo * 0.5 + hi * 0.5``, all non-finite -> NaN).
    """
    x2 = check_stacked(stacked)
    if use_kernel(x2) and x2.shape[0] <= 64:
        from swarmshake.kernels import _ext

        return _ext.get().robust_reduce(x2, 0, 0).reshape(stacked.shape[1:])
    return reference_coordinate_median(stacked)


def trimmed_mean(stacked: torch.Tensor, trim: int) -> torch.Tensor:
    """Coordinate-wise trimmed mean dropping ``trim`` lowest and ``trim`` highest values.

    See the module docstring for the exact definition and summation order.
    """
    x2 = check_stacked(stacked)
    trim = _check_trim(trim, x2.shape[0])
    if use_kernel(x2) and x2.shape[0] <= 64:
        from swarmshake.kernels import _ext

        return _ext.get().robust_reduce(x2, 1, trim).reshape(stacked.shape[1:])
    return reference_trimmed_mean(stacked, trim)
