"""GPU tests: every CUDA kernel against its torch reference (computed on the CPU).

Bit-exact for median, trimmed mean, fingerprint, quantization and dequantization
(NaN payloads aside: a NaN result is only checked to be NaN); Krum within its
documented relative tolerance (kernels/krum.py). Run on the H100 machine:
``python3 -m pytest -m gpu tests/kernels``.
"""

import pytest
import torch

from swarmshake.kernels import (
    coordinate_median,
    dequantize_int8,
    fingerprint,
    fingerprint_tensors,
    krum_distances,
    krum_select,
    quantize_int8,
    trimmed_mean,
)
from swarmshake.kernels.fingerprint import reference_fingerprint
from swarmshake.kernels.krum import reference_krum_distances
from swarmshake.kernels.median import reference_coordinate_median, reference_trimmed_mean
from swarmshake.kernels.quant import reference_dequantize_int8, reference_quantize_int8

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (GPU tests run on the H100 machine)",
    ),
]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
KS = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 48, 63, 64]


@pytest.fixture(scope="module", autouse=True)
def ext():
    from swarmshake.kernels import _ext

    mod = _ext.get()
    assert mod is not None, f"CUDA extension did not build: {_ext.build_error()}"
    return mod


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    got, want = got.cpu(), want.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    gn, wn = torch.isnan(got), torch.isnan(want)
    assert torch.equal(gn, wn), "NaN positions differ"
    g, w = got[~gn], want[~wn]
    if g.dtype.itemsize == 4:
        assert torch.equal(g.view(torch.int32), w.view(torch.int32)), (g - w).abs().max()
    else:
        assert torch.equal(g.view(torch.int16), w.view(torch.int16)), (
            (g.float() - w.float()).abs().max()
        )


def _nasty(k: int, d: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(k, d, generator=g)
    x[:, ::7] = torch.round(x[:, ::7])  # ties
    x[:, 3::11] = 0.0
    x[::2, 3::11] = -0.0
    m = torch.rand(k, d, generator=g)
    x[m < 0.03] = float("nan")
    x[(m > 0.03) & (m < 0.05)] = float("inf")
    x[(m > 0.05) & (m < 0.06)] = float("-inf")
    x[:, 5] = float("nan")  # a coordinate with no finite value
    x[: k // 2 + 1, 6] = float("nan")
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize(
    "d", [7, 1000, 65_537]
)  # odd d: scalar kernel; even d: packed 16-bit kernel
def test_median_bit_exact(k, d, dtype):
    x = _nasty(k, d, dtype, seed=k * 1000 + d)
    _same(coordinate_median(x.cuda()), reference_coordinate_median(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize(
    "d", [7, 1000, 65_537]
)  # odd d: scalar kernel; even d: packed 16-bit kernel
def test_trimmed_mean_bit_exact(k, d, dtype):
    x = _nasty(k, d, dtype, seed=k * 77 + d)
    for trim in sorted({0, 1, (k - 1) // 4, (k - 1) // 2}):
        if 2 * trim < k:
            _same(trimmed_mean(x.cuda(), trim), reference_trimmed_mean(x, trim))


def test_median_large_and_shaped():
    x = torch.randn(16, 3, 1_000_003, generator=torch.Generator().manual_seed(5))
    got = coordinate_median(x.cuda())
    assert got.shape == (3, 1_000_003)
    _same(got, reference_coordinate_median(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 9, 16, 24, 32, 33, 40, 64])
@pytest.mark.parametrize("d", [1, 127, 129, 300_001])
def test_krum_distances_within_tolerance(k, d, dtype):
    g = torch.Generator().manual_seed(k * 31 + d)
    x = (torch.randn(1, d, generator=g) + 0.01 * torch.randn(k, d, generator=g)).to(dtype)
    got = krum_distances(x.cuda()).cpu()
    want = reference_krum_distances(x)
    assert got.dtype == torch.float64 and got.shape == (k, k)
    assert torch.equal(got, got.T) and torch.all(got.diagonal() == 0)
    assert torch.allclose(got, want, rtol=1e-4, atol=0), (
        (got - want).abs() / want.clamp_min(1e-300)
    ).max()


def test_krum_deterministic_non_finite_and_selection():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(1, 2_000_000, generator=g) + 1e-3 * torch.randn(12, 2_000_000, generator=g)
    x[10] *= 1000
    x[11, 12345] = float("nan")
    xc = x.cuda()
    a, b = krum_distances(xc), krum_distances(xc)
    assert torch.equal(a, b)  # run to run
    assert torch.isinf(a[11, :11]).all() and a[11, 11] == 0
    assert torch.equal(krum_select(xc, 2, 4), krum_select(x, 2, 4))


@pytest.mark.parametrize(
    "t",
    [
        torch.zeros(0),
        torch.arange(1, dtype=torch.int8),
        torch.arange(7, dtype=torch.int8),
        torch.randn(5).to(torch.bfloat16),
        torch.randn(4095),
        torch.randn(4096),
        torch.randn(4097, 3),
        torch.randn(3_000_001).to(torch.float16),
        torch.arange(12345, dtype=torch.int64),
        torch.ones(33, dtype=torch.bool),
    ],
    ids=lambda t: f"{t.dtype}-{tuple(t.shape)}",
)
def test_fingerprint_same_on_gpu(t):
    assert fingerprint(t.cuda()) == reference_fingerprint(t)


def test_fingerprint_views_and_many():
    base = torch.randn(10_001)
    view = base.cuda()[3:]  # storage offset: misaligned for 16-byte loads
    assert fingerprint(view) == reference_fingerprint(base[3:])
    m = torch.randn(40, 50)
    assert fingerprint(m.cuda().T) == reference_fingerprint(m.T)
    ts = [torch.randn(i * 97 + 1) for i in range(50)]
    assert fingerprint_tensors([t.cuda() for t in ts]) == fingerprint_tensors(ts)
    big = torch.randn(50_000_000)
    r = big.view(torch.int32).clone()
    r[49_999_999] ^= 1
    assert fingerprint(big.cuda()) == reference_fingerprint(big)
    assert fingerprint(r.view(torch.float32).cuda()) != fingerprint(big.cuda())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block", [1, 7, 32, 100, 256, 1000, 1024, 4096])
@pytest.mark.parametrize("n", [1, 255, 100_003])
def test_quant_bit_exact(n, block, dtype):
    g = torch.Generator().manual_seed(n + block)
    x = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g) * 3)
    if n > 1000:
        x[500] = float("nan")
        x[5000] = float("inf")
        x[20000 : 20000 + 2 * block] = 0.0
        x[40000 : 40000 + 2 * block] = 1e-44  # amax / 127 underflows
    x = x.to(dtype)
    q, s = quantize_int8(x.cuda(), block)
    q2, s2 = reference_quantize_int8(x, block)
    assert torch.equal(q.cpu(), q2)
    _same(s, s2)
    for out in DTYPES:
        _same(
            dequantize_int8(q, s, n, block, out), reference_dequantize_int8(q2, s2, n, block, out)
        )
