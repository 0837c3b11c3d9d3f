"""CPU tests of the int8 block quantization reference and dispatch."""

import pytest
import torch

from swarmshake.kernels import dequantize_int8, quantize_int8
from swarmshake.kernels.quant import reference_quantize_int8


@pytest.mark.parametrize(
    "n, block", [(1, 256), (255, 256), (256, 256), (1000, 256), (1000, 7), (5000, 2048)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_roundtrip_error_within_half_step(n, block, dtype):
    x = (torch.randn(n, generator=torch.Generator().manual_seed(n + block)) * 3).to(dtype)
    q, s = quantize_int8(x, block)
    assert q.dtype == torch.int8 and q.shape == (n,) and s.dtype == torch.float32
    assert s.shape == ((n + block - 1) // block,)
    y = dequantize_int8(q, s, n, block, torch.float32)
    err = (y - x.float()).abs().reshape(-1)
    idx = torch.arange(n) // block
    assert torch.all(err <= s[idx] * 0.5 * (1 + 1e-5) + 1e-30)
    assert q.abs().max() <= 127
    assert dequantize_int8(q, s, n, block, dtype).dtype == dtype


def test_block_extremes_map_to_127():
    x = torch.tensor([0.5, -2.0, 1.0, 2.0])
    q, s = quantize_int8(x, 4)
    assert q.tolist() == [32, -127, 64, 127] and s.item() == pytest.approx(2.0 / 127)


def test_non_finite_block_dequantizes_to_nan_and_zero_block_to_zero():
    x = torch.randn(12)
    x[5] = float("nan")
    x[9] = float("inf")
    x[0:4] = 0.0
    q, s = quantize_int8(x, 4)
    assert s[0] == 0 and torch.isnan(s[1]) and torch.isnan(s[2])
    assert (q[4:] == 0).all()
    y = dequantize_int8(q, s, 12, 4)
    assert (y[:4] == 0).all() and torch.isnan(y[4:]).all()


def test_shapes_flatten_c_order():
    x = torch.randn(3, 5).T  # non-contiguous
    q, s = quantize_int8(x, 4)
    q2, s2 = quantize_int8(x.contiguous().reshape(-1), 4)
    assert torch.equal(q, q2) and torch.equal(s, s2)


def test_validation():
    with pytest.raises(TypeError):
        quantize_int8(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError):
        quantize_int8(torch.zeros(4), 0)
    q, s = quantize_int8(torch.zeros(10), 4)
    with pytest.raises(ValueError):
        dequantize_int8(q, s, 11, 4)
    with pytest.raises(ValueError):
        dequantize_int8(q, s[:2], 10, 4)
    with pytest.raises(TypeError):
        dequantize_int8(q.to(torch.int16), s, 10, 4)


def test_empty():
    q, s = quantize_int8(torch.zeros(0))
    assert q.numel() == 0 and s.numel() == 0
    assert dequantize_int8(q, s, 0).numel() == 0


def test_dispatch_cpu_is_reference():
    x = torch.randn(3000, generator=torch.Generator().manual_seed(9))
    q, s = quantize_int8(x, 256)
    q2, s2 = reference_quantize_int8(x, 256)
    assert torch.equal(q, q2) and torch.equal(s, s2)
