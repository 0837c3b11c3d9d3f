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


def _sorted_finite(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1-2: upcast, canonical zero, non-finite -> +inf (sorts last); sorted copy and n."""
    v = x2.to(compute_dtype(x2.dtype)) + 0.0  # a copy; -0.0 + 0.0 == +0.0
    finite = torch.isfinite(v)
    v = torch.where(finite, v, torch.full_like(v, float("inf")))
    s = torch.sort(v, dim=0).values
    n = finite.sum(dim=0)
    return s, n


def reference_coordinate_median(stacked: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median (module docstring: even k averages the two middles)."""
    x2 = check_stacked(stacked)
    out_shape = stacked.shape[1:]
    s, n = _sorted_finite(x2)
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
    s, n = _sorted_finite(x2)
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
