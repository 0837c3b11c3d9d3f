"""Int8 block quantization with one fp32 scale per block (error feedback is the caller's).

The tensor is flattened (C-contiguous) and cut into blocks of ``block`` elements
(the last one may be shorter). Per block, in fp32 (bf16/fp16 upcast exactly):

- ``amax = max |x|`` over the block; ``scale = amax / 127`` (one rounded division).
- If the block holds any NaN or +-inf: ``scale = NaN`` and every ``q = 0``; the block
  dequantizes to all-NaN, so a receiver's robust aggregation treats it as outliers.
- If ``scale == 0`` (all zeros, or amax/127 underflows): ``scale = 0``, ``q = 0``.
- Else ``q = clamp(round_half_even(x / scale), -127, 127)`` (one rounded division).

``dequantize_int8`` computes ``q * scale`` in fp32 (one rounded product) and rounds
to ``dtype``. Kernel and reference agree bit for bit.
"""

from __future__ import annotations

import torch

from swarmshake.kernels._common import KERNEL_FLOAT_DTYPES, check_int, use_kernel

__all__ = [
    "quantize_int8",
    "dequantize_int8",
    "reference_quantize_int8",
    "reference_dequantize_int8",
]


def _check_block(block: object) -> int:
    block = check_int(block, "block")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    return block


def _check_x(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"quantize_int8 takes a floating-point tensor, got dtype {x.dtype}")
    return x.reshape(-1).contiguous()


def reference_quantize_int8(x: torch.Tensor, block: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference: ``(q int8 [numel], scales fp32 [ceil(numel / block)])``."""
    flat = _check_x(x)
    block = _check_block(block)
    n = flat.numel()
    nb = (n + block - 1) // block
    v = flat.to(torch.float32)
    pad = nb * block - n
    if pad:
        v = torch.cat([v, v.new_zeros(pad)])
    v = v.reshape(nb, block)
    finite = torch.isfinite(v).all(dim=1)
    amax = (
        torch.where(torch.isfinite(v), v.abs(), torch.zeros_like(v)).amax(dim=1)
        if nb
        else v.new_zeros(0)
    )
    # a tensor divisor, not a Python scalar: torch on CUDA turns x / scalar into x * (1 / scalar)
    scale = amax / torch.full_like(amax, 127.0)
    ok = finite & (scale != 0)
    safe = torch.where(ok, scale, torch.ones_like(scale))
    q = torch.round(v / safe[:, None]).clamp_(-127, 127)
    q = torch.where(ok[:, None], q, torch.zeros_like(q))
    scale = torch.where(finite, scale, torch.full_like(scale, float("nan")))
    q = q.to(torch.int8).reshape(-1)[:n]
    return q, scale


def reference_dequantize_int8(
    q: torch.Tensor,
    scales: torch.Tensor,
    numel: int,
    block: int = 256,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Torch reference: ``q * scale`` per block in fp32, rounded to ``dtype``; shape [numel]."""
    q, scales, numel, block = _check_deq(q, scales, numel, block)
    idx = torch.arange(numel, device=q.device) // block
    out = q[:numel].to(torch.float32) * scales.to(torch.float32)[idx]
    return out.to(dtype)


def _check_deq(q, scales, numel, block):
    block = _check_block(block)
    numel = check_int(numel, "numel")
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8:
        raise TypeError("q must be an int8 tensor (from quantize_int8)")
    if not isinstance(scales, torch.Tensor) or scales.dtype != torch.float32:
        raise TypeError("scales must be an fp32 tensor (from quantize_int8)")
    q = q.reshape(-1).contiguous()
    scales = scales.reshape(-1).contiguous()
    nb = (numel + block - 1) // block
    if numel < 0 or q.numel() < numel:
        raise ValueError(f"numel = {numel} does not fit q of {q.numel()} elements")
    if scales.numel() < nb:
        raise ValueError(
            f"{numel} elements in blocks of {block} need {nb} scales, got {scales.numel()}"
        )
    return q, scales, numel, block


def quantize_int8(x: torch.Tensor, block: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Int8 block quantization (module docstring); CUDA kernel on CUDA tensors.

    Returns ``(q, scales)``: q int8 of ``x.numel()`` elements (flat), scales fp32 of
    ``ceil(numel / block)``.
    """
    flat = _check_x(x)
    block = _check_block(block)
    if use_kernel(flat) and flat.numel() > 0:
        from swarmshake.kernels import _ext

        q, s = _ext.get().quantize_int8(flat, block)
        return q, s
    return reference_quantize_int8(x, block)


def dequantize_int8(
    q: torch.Tensor,
    scales: torch.Tensor,
    numel: int,
    block: int = 256,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Inverse of :func:`quantize_int8`: flat tensor of ``numel`` elements of ``dtype``."""
    q, scales, numel, block = _check_deq(q, scales, numel, block)
    if numel > 0 and dtype in KERNEL_FLOAT_DTYPES and use_kernel(q, None):
        from swarmshake.kernels import _ext

        return _ext.get().dequantize_int8(q, scales, numel, block, _DTYPE_CODE[dtype])
    return reference_dequantize_int8(q, scales, numel, block, dtype)


_DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
