"""CPU tests of the coordinate-median and trimmed-mean references and dispatch."""

import pytest
import torch

from swarmshake.kernels import coordinate_median, trimmed_mean
from swarmshake.kernels.median import (
    SORT_NETWORK_K_MAX,
    _sort_rows,
    reference_coordinate_median,
    reference_trimmed_mean,
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def _brute_median(col: list[float]) -> float:
    fin = sorted(v for v in col if v == v and abs(v) != float("inf"))
    n = len(fin)
    if n == 0:
        return float("nan")
    lo, hi = (n - 1) // 2, n // 2
    if lo == hi:
        return fin[lo]
    a = torch.tensor(fin[lo], dtype=torch.float32)
    b = torch.tensor(fin[hi], dtype=torch.float32)
    return float(a * 0.5 + b * 0.5)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 8, 15, 16, 33])
def test_median_matches_brute_force(k):
    g = torch.Generator().manual_seed(k)
    x = torch.randn(k, 37, generator=g)
    got = reference_coordinate_median(x)
    want = torch.tensor([_brute_median(x[:, c].tolist()) for c in range(37)])
    assert torch.equal(got, want)


@pytest.mark.parametrize("k", [1, 3, 5, 7, 31])
def test_median_odd_k_is_torch_median(k):
    x = torch.randn(k, 100, generator=torch.Generator().manual_seed(1))
    assert torch.equal(coordinate_median(x), x.median(dim=0).values)


def test_median_even_k_averages_two_middles():
    x = torch.tensor([[1.0], [4.0], [2.0], [10.0]])
    assert coordinate_median(x).item() == 3.0  # torch.median would say 2.0
    big = torch.tensor([[3e38], [3.2e38]])  # (a + b) / 2 would overflow
    assert torch.isfinite(coordinate_median(big)).all()


def test_median_non_finite_excluded():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor(
        [[1.0, nan, nan, inf, -0.0], [nan, 2.0, nan, -inf, -0.0], [3.0, 4.0, nan, 5.0, 0.0]]
    )
    got = coordinate_median(x)
    assert got[0].item() == 2.0  # {1, 3} -> 2
    assert got[1].item() == 3.0  # {2, 4}
    assert torch.isnan(got[2])  # no finite value
    assert got[3].item() == 5.0
    assert got[4].item() == 0.0 and not torch.signbit(got[4])  # -0 is read as +0


@pytest.mark.parametrize("dtype", DTYPES)
def test_median_dtypes_and_shape(dtype):
    x = torch.randn(6, 3, 5, 7, generator=torch.Generator().manual_seed(2)).to(dtype)
    got = coordinate_median(x)
    assert got.dtype == dtype and got.shape == (3, 5, 7)
    s = x.to(torch.float64).sort(dim=0).values
    want = (s[2] + s[3]) / 2
    assert torch.allclose(
        got.to(torch.float64), want, rtol=1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-6
    )


def test_median_empty_d():
    assert coordinate_median(torch.zeros(3, 0)).shape == (0,)


@pytest.mark.parametrize(
    "bad, exc",
    [
        (torch.zeros(5), ValueError),
        (torch.zeros(0, 4), ValueError),
        (torch.zeros(3, 4, dtype=torch.int64), TypeError),
        ([[1.0]], TypeError),
    ],
)
def test_median_validation(bad, exc):
    with pytest.raises(exc):
        coordinate_median(bad)


def _brute_trimmed(col, trim):
    fin = sorted(v for v in col if v == v and abs(v) != float("inf"))
    n = len(fin)
    if n == 0:
        return float("nan")
    te = min(trim, (n - 1) // 2)
    kept = fin[te : n - te]
    acc = torch.zeros((), dtype=torch.float32)
    for v in kept:
        acc = acc + torch.tensor(v, dtype=torch.float32)
    return float(acc / torch.tensor(float(len(kept)), dtype=torch.float32))


@pytest.mark.parametrize(
    "k, trim", [(1, 0), (3, 1), (4, 1), (7, 0), (7, 3), (10, 2), (17, 8), (40, 5)]
)
def test_trimmed_matches_brute_force(k, trim):
    x = torch.randn(k, 29, generator=torch.Generator().manual_seed(k * 7 + trim))
    got = reference_trimmed_mean(x, trim)
    want = torch.tensor([_brute_trimmed(x[:, c].tolist(), trim) for c in range(29)])
    assert torch.equal(got, want)


def test_trimmed_trim0_is_mean_and_max_trim_is_median_for_odd_k():
    x = torch.randn(9, 50, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(trimmed_mean(x, 0), x.mean(0), rtol=1e-5, atol=1e-6)
    assert torch.equal(trimmed_mean(x, 4), coordinate_median(x))


def test_trimmed_non_finite_counts_as_outlier_and_shrinks_trim():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor(
        [[1.0, 1.0, nan], [2.0, nan, nan], [3.0, inf, nan], [100.0, 2.0, 5.0], [-50.0, 3.0, nan]]
    )
    got = trimmed_mean(x, 1)
    assert got[0].item() == 2.0  # drop -50 and 100
    assert got[1].item() == 2.0  # finite {1, 2, 3}: te = 1 -> {2}
    assert got[2].item() == 5.0  # one finite value: te = 0
    assert torch.isnan(trimmed_mean(torch.full((3, 2), nan), 1)).all()


def test_trimmed_validation():
    with pytest.raises(ValueError, match="2 \\* trim < k"):
        trimmed_mean(torch.zeros(4, 3), 2)
    with pytest.raises(ValueError):
        trimmed_mean(torch.zeros(4, 3), -1)
    with pytest.raises(TypeError):
        trimmed_mean(torch.zeros(4, 3), 1.0)


def test_dispatch_cpu_uses_reference():
    x = torch.randn(6, 1000, generator=torch.Generator().manual_seed(4))
    assert torch.equal(coordinate_median(x), reference_coordinate_median(x))
    assert torch.equal(trimmed_mean(x, 2), reference_trimmed_mean(x, 2))


# -- the sorting network (median._sort_rows) --------------------------------------------------


@pytest.mark.parametrize("k", range(1, 15))
def test_sort_network_sorts_every_0_1_input(k):
    # The 0-1 principle: a comparator network that sorts every 0-1 input sorts all.
    columns = torch.arange(1 << k)
    v = ((columns.unsqueeze(0) >> torch.arange(k).unsqueeze(1)) & 1).to(torch.float32)
    assert torch.equal(torch.stack(_sort_rows(v)), torch.sort(v, dim=0).values)


def _sort_based_median(stacked):
    """The reference as it was before the sorting network: torch.sort along dim 0."""
    x2 = stacked.reshape(stacked.shape[0], -1)
    v = x2.to(torch.float64 if x2.dtype == torch.float64 else torch.float32) + 0.0
    finite = torch.isfinite(v)
    v = torch.where(finite, v, torch.full_like(v, float("inf")))
    s, n = torch.sort(v, dim=0).values, finite.sum(dim=0)
    lo, hi = torch.clamp(n - 1, min=0) // 2, n // 2
    a = s.gather(0, lo.unsqueeze(0)).squeeze(0)
    b = s.gather(0, hi.unsqueeze(0)).squeeze(0)
    res = torch.where(lo == hi, a, a * 0.5 + b * 0.5)
    res = torch.where(n == 0, torch.full_like(res, float("nan")), res)
    return res.to(stacked.dtype).reshape(stacked.shape[1:])


@pytest.mark.parametrize("k", [2, 3, 4, 5, 9, 16, SORT_NETWORK_K_MAX, SORT_NETWORK_K_MAX + 1])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("non_finite", [False, True])
def test_median_bits_equal_the_sort_based_definition(k, dtype, non_finite):
    g = torch.Generator().manual_seed(k)
    # Few distinct values: ties everywhere, and -0.0 beside +0.0.
    x = torch.randint(-3, 4, (k, 501), generator=g).to(torch.float32) * 0.5
    x[torch.rand(k, 501, generator=g) < 0.2] = -0.0
    if non_finite:
        for value, share in ((float("nan"), 0.1), (float("inf"), 0.05), (float("-inf"), 0.05)):
            x[torch.rand(k, 501, generator=g) < share] = value
        x[:, 0] = float("nan")  # a column with no finite value
    x = x.to(dtype)
    got, want = reference_coordinate_median(x), _sort_based_median(x)
    assert got.dtype == want.dtype
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    assert torch.equal(got.view(bits), want.view(bits))  # NaNs and zeros' signs too


@pytest.mark.parametrize("k, trim", [(4, 1), (5, 2), (9, 2)])
def test_trimmed_with_non_finite_matches_brute_force(k, trim):
    g = torch.Generator().manual_seed(k)
    x = torch.randn(k, 61, generator=g)
    x[torch.rand(k, 61, generator=g) < 0.2] = float("nan")
    x[torch.rand(k, 61, generator=g) < 0.1] = float("inf")
    got = reference_trimmed_mean(x, trim)
    want = torch.tensor([_brute_trimmed(x[:, c].tolist(), trim) for c in range(61)])
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~got.isnan()], want[~want.isnan()])
