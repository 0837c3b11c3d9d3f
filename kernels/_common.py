"""Argument checks and the CUDA/reference dispatch rule shared by every op.

Dispatch: an op runs its CUDA kernel when the input is a CUDA tensor of a dtype the
kernel supports and the extension built (``kernels/_ext.py``); everywhere else it
runs the plain torch reference of the same module, which is the definition of the
op.  ``SWARMSHAKE_KERNELS=torch`` forces the reference everywhere (for A/B runs).
"""

from __future__ import annotations

import os

import torch

#: dtypes the CUDA kernels of the aggregation ops take (others use the reference).
KERNEL_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def forced_reference() -> bool:
    """True when ``SWARMSHAKE_KERNELS=torch`` asks for the torch references only."""
    return os.environ.get("SWARMSHAKE_KERNELS", "").strip().lower() in ("torch", "reference", "ref")


def use_kernel(
    t: torch.Tensor, dtypes: tuple[torch.dtype, ...] | None = KERNEL_FLOAT_DTYPES
) -> bool:
    """Whether ``t`` goes to the CUDA kernel: a CUDA tensor, a supported dtype, a built extension."""
    if not t.is_cuda or forced_reference():
        return False
    if dtypes is not None and t.dtype not in dtypes:
        return False
    from swarmshake.kernels import _ext

    return _ext.get() is not None


def check_stacked(stacked: object, name: str = "stacked") -> torch.Tensor:
    """Validate a ``[k, *shape]`` stack of k peer tensors of a floating dtype.

    Returns it viewed as ``[k, d]`` (contiguous); the caller reshapes results to
    ``stacked.shape[1:]``.
    """
    if not isinstance(stacked, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape [k, d], got {type(stacked).__name__}"
        )
    if stacked.dim() < 2:
        raise ValueError(
            f"{name} must have shape [k, d] (k peer tensors stacked on dim 0), got shape {tuple(stacked.shape)}"
        )
    if stacked.shape[0] < 1:
        raise ValueError(f"{name} needs k >= 1 peer tensors, got k = {stacked.shape[0]}")
    if not stacked.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {stacked.dtype}")
    return stacked.reshape(stacked.shape[0], -1).contiguous()


def check_int(value: object, name: str) -> int:
    """Accept a Python int (not bool) or a 0-d integer tensor; return it as an int."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
            return int(value)
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype order statistics and sums are computed in: fp64 for fp64, fp32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32
