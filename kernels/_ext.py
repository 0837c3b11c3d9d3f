"""Builds and loads the CUDA extension (``csrc/*.cu``) once per process.

CUDA C++ through ``torch.utils.cpp_extension.load`` rather than Triton: the
median/trimmed-mean kernel keeps each coordinate's k values in registers and sorts
them with an unrolled sorting network (a per-thread array indexed only by
compile-time constants), and bit-exactness needs explicit IEEE rounding
(``__fadd_rn``/``__fdiv_rn``, no FMA contraction); Triton expresses neither.

``get()`` returns the module, or None when there is no CUDA device, no compiler, or
the build failed (a warning says why, once); callers then use the torch reference.
The build directory is ``$SWARMSHAKE_KERNELS_BUILD`` or ``~/.cache/swarmshake/kernels``.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

_lock = threading.Lock()
_state: dict[str, object] = {}

SOURCES = [
    "ext.cpp",
    "robust_f32.cu",
    "robust_bf16.cu",
    "robust_f16.cu",
    "krum.cu",
    "fingerprint.cu",
    "quant.cu",
]


def build_error() -> str | None:
    """Why the extension is unavailable (None if it loaded or was never tried)."""
    return _state.get("error")  # type: ignore[return-value]


def get():
    if "mod" in _state:
        return _state["mod"]
    with _lock:
        if "mod" in _state:
            return _state["mod"]
        mod = None
        try:
            mod = _build()
        except Exception as exc:  # noqa: BLE001 - any build failure falls back to torch
            _state["error"] = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"swarmshake.kernels: CUDA extension unavailable, using torch references ({_state['error'][:500]})",
                RuntimeWarning,
                stacklevel=3,
            )
        _state["mod"] = mod
        return mod


def _build():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    from torch.utils.cpp_extension import load

    src = Path(__file__).parent / "csrc"
    build = Path(
        os.environ.get(
            "SWARMSHAKE_KERNELS_BUILD", Path.home() / ".cache" / "swarmshake" / "kernels"
        )
    )
    build.mkdir(parents=True, exist_ok=True)
    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    return load(
        name="swarmshake_kernels",
        sources=[str(src / s) for s in SOURCES],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "--fmad=false", "-lineinfo", "--expt-relaxed-constexpr"],
        build_directory=str(build),
        verbose=os.environ.get("SWARMSHAKE_KERNELS_VERBOSE") == "1",
    )
