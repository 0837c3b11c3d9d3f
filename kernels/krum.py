"""Krum and multi-Krum (Blanchard et al., 2017) over k stacked peer tensors.

``D[i, j] = sum_c (x[i, c] - x[j, c])**2`` is accumulated directly from the
differences, never through the Gram form ``|a|^2 + |b|^2 - 2 a.b``, which cancels
catastrophically when honest gradients are nearly equal. Every summand is >= 0, so
the sum has no cancellation: the relative error of an n-term fp32 sum is at most
about ``n * 2**-24``.

- Reference: differences and sums in fp64 (exact differences of fp32 inputs).
- CUDA kernel (``csrc/krum.cu``): differences and running sums in fp32; each
  fp32 partial sums at most ``4 * ceil(d / (C * grid))`` squares (about 1000 at
  d = 32M, k = 32; 80 at k = 4), then the per-warp partials are added in fp64 in a
  fixed order, so results are identical run to run. Worst-case relative error is
  about ``(terms + 2) * 2**-24`` (6e-5 at d = 32M); measured against the fp64
  reference at d = 32M: <= 6e-8 (fp32 inputs), 5e-7 (bf16). Documented tolerance,
  as the GPU tests check it: relative 1e-4.

Non-finite values: a peer holding any NaN or +-inf is an outlier, at distance
``+inf`` from every other peer (``D[i, j] = inf``); a sum that overflows reads
``+inf`` as well. The diagonal is 0. Distances are returned as fp64 ``[k, k]``.

Scores: ``score[i]`` is the sum of the ``k - f - 2`` smallest ``D[i, j]`` over
``j != i`` (fp64, ascending order). ``krum_select(stacked, f, m)`` returns the
indices of the m lowest scores, ties broken by the lower index (multi-Krum as one
selection over the scores; m = 1 is Krum).
Krum needs ``k >= 2f + 3`` and ``1 <= m <= k - f``.
"""

from __future__ import annotations

import torch

from swarmshake.kernels._common import check_int, check_stacked, use_kernel

__all__ = [
    "krum_distances",
    "krum_scores",
    "krum_select",
    "reference_krum_distances",
    "scores_from_distances",
]

_REF_CHUNK = 1 << 18  # coordinates per chunk in the reference (bounds its memory)


def _finalize(d: torch.Tensor, bad: torch.Tensor | None = None) -> torch.Tensor:
    d = torch.where(torch.isfinite(d), d, torch.full_like(d, float("inf")))
    if bad is not None and bool(bad.any()):
        d[bad, :] = float("inf")
        d[:, bad] = float("inf")
    d.fill_diagonal_(0.0)
    return d


def reference_krum_distances(stacked: torch.Tensor) -> torch.Tensor:
    """Pairwise squared L2 distances ``[k, k]`` in fp64, from direct differences."""
    x2 = check_stacked(stacked)
    k, dlen = x2.shape
    out = torch.zeros(k, k, dtype=torch.float64, device=x2.device)
    bad = ~torch.isfinite(x2).all(dim=1)
    for c0 in range(0, dlen, _REF_CHUNK):
        x = x2[:, c0 : c0 + _REF_CHUNK].to(torch.float64)
        for i in range(k):
            out[i] += ((x - x[i]) ** 2).sum(dim=1)
    return _finalize(out, bad)


def krum_distances(stacked: torch.Tensor) -> torch.Tensor:
    """Pairwise squared L2 distances ``[k, k]`` (fp64); CUDA kernel on CUDA tensors."""
    x2 = check_stacked(stacked)
    if use_kernel(x2) and x2.shape[0] <= 64 and x2.shape[1] > 0:
        from swarmshake.kernels import _ext

        return _ext.get().krum_distances(x2)  # already finalised (inf for non-finite, diagonal 0)
    return reference_krum_distances(stacked)


def _check_f(f: object, k: int) -> int:
    f = check_int(f, "f")
    if f < 0:
        raise ValueError(f"f must be >= 0, got {f}")
    if k < 2 * f + 3:
        raise ValueError(
            f"Krum needs k >= 2f + 3 peers, got k = {k}, f = {f} (needs k >= {2 * f + 3})"
        )
    return f


def scores_from_distances(dist: torch.Tensor, f: int) -> torch.Tensor:
    """Krum scores from a ``[k, k]`` distance matrix: sum of the k - f - 2 nearest others."""
    if dist.dim() != 2 or dist.shape[0] != dist.shape[1]:
        raise ValueError(f"dist must be a square [k, k] matrix, got shape {tuple(dist.shape)}")
    k = dist.shape[0]
    f = _check_f(f, k)
    d = dist.to(torch.float64).cpu()
    eye = torch.eye(k, dtype=torch.bool)
    others = d[~eye].reshape(k, k - 1)
    nearest = torch.sort(others, dim=1).values[:, : k - f - 2]
    score = torch.zeros(k, dtype=torch.float64)
    for j in range(nearest.shape[1]):  # fixed ascending order
        score = score + nearest[:, j]
    return score


def krum_scores(stacked: torch.Tensor, f: int) -> torch.Tensor:
    """Krum score of each of the k peers (fp64, on the CPU), lower is more central."""
    x2 = check_stacked(stacked)
    _check_f(f, x2.shape[0])
    return scores_from_distances(krum_distances(stacked), f)


def krum_select(stacked: torch.Tensor, f: int, m: int = 1) -> torch.Tensor:
    """Indices (int64, CPU) of the m peers with the lowest Krum scores, ties by index."""
    x2 = check_stacked(stacked)
    k = x2.shape[0]
    f = _check_f(f, k)
    m = check_int(m, "m")
    if not 1 <= m <= k - f:
        raise ValueError(f"multi-Krum needs 1 <= m <= k - f = {k - f}, got m = {m}")
    scores = krum_scores(stacked, f)
    order = torch.sort(scores, stable=True).indices
    return order[:m].clone()
