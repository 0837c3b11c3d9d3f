"""Torch determinism settings and the environment facts bit-exact replay depends on.

DESIGN: bit-exact replay is promised only where torch version, thread count and
CPU flags match.  Matrix products split their reductions by thread count and pick
SIMD code paths (and FMA) by CPU features, so those facts are recorded with the
run (the ``start`` event) and compared before a replay claims anything.

On a GPU the same holds per GPU model and CUDA runtime, under the settings
``configure_torch`` applies: deterministic algorithms (cuBLAS with a fixed
workspace, ``CUBLAS_WORKSPACE_CONFIG=:4096:8``, so its split-K reductions do not
depend on stream scheduling), no TF32 (fp32 matmuls round as fp32), no cuDNN
autotuning.  With those, two runs on the same GPU model give the same bits (the
nodes of one run on one GPU are compared step by step).  A GPU's matmuls sum in
another order than the CPU's, so a CPU replay of a GPU run is *not* promised
bit-exact: the device is an environment fact, and ``verify.replay`` answers
``unknown`` rather than ``invalid`` when it differs.  The fingerprint is the
exception: the same bytes give the same fingerprint on either device (kernels).
"""

from __future__ import annotations

import os
import platform
import sys

import msgspec
import torch

from swarmshake.reference_node.training.device import device_fact
from swarmshake.reference_node.training.host import CPUINFO_PATH, cpu_flags

__all__ = ["CPUINFO_PATH", "EnvironmentFacts", "configure_torch", "cpu_flags", "environment_facts"]


class EnvironmentFacts(msgspec.Struct, kw_only=True, frozen=True):
    seed: int
    torch_version: str
    threads: int
    cpu_flags: str  # space-separated, sorted, from the first processor in /proc/cpuinfo
    machine: str
    deterministic: bool
    # "cpu", or the GPU model, compute capability and CUDA runtime (device.device_fact).
    device: str = "cpu"

    def mismatches(self, other: EnvironmentFacts) -> list[str]:
        """Names of the facts that differ and break the bit-exact replay promise."""
        fields = (
            "seed",
            "torch_version",
            "threads",
            "cpu_flags",
            "machine",
            "deterministic",
            "device",
        )
        return [name for name in fields if getattr(self, name) != getattr(other, name)]


# cuBLAS reads this when it creates a handle; deterministic algorithms refuse cuBLAS
# calls without it.  Set before the first CUDA op of the process (configure_torch is
# the first thing a worker and a replay do); an operator's own value is kept.
CUBLAS_WORKSPACE = ":4096:8"


def configure_torch(threads: int = 1) -> None:
    """Apply the settings every training process (node worker, replay) runs under.

    One intra-op thread per node by default: nodes share the machine's cores, and a
    fixed thread count keeps reduction order (hence bits) the same in replay.  The
    GPU settings (module docstring) are applied too; they cost nothing without one.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    _use_deterministic_algorithms()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False


def _use_deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True)``, without its start-up cost when
    nothing needs it.

    The public call also sets ``torch._inductor.config.deterministic``, and importing
    that module pulls in ~900 modules: 1.6 s of CPU per process, which is most of a
    Docker node's start after ``import torch`` (each container is a fresh process).
    The inductor flag only affects code compiled by ``torch.compile``, which no
    training process here uses; the eager-mode switch is the C flag below.  So: the
    public call when inductor is already imported (a zygote preloaded it, free) or
    the private entry point is gone in some torch; otherwise the C flag alone,
    checked through the public getter.
    """
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if "torch._inductor.config" in sys.modules or set_flag is None:
        torch.use_deterministic_algorithms(True)
    else:
        set_flag(True, warn_only=False)
    if not torch.are_deterministic_algorithms_enabled():
        raise RuntimeError("torch refused deterministic algorithms; bit-exact replay needs them")


def environment_facts(seed: int, device: str = "cpu") -> EnvironmentFacts:
    """The facts of this process for a run on ``device`` (a ``TrainingConfig.device``)."""
    return EnvironmentFacts(
        seed=seed,
        torch_version=str(torch.__version__),  # a str subclass that msgspec cannot encode
        threads=torch.get_num_threads(),
        cpu_flags=cpu_flags(),
        machine=platform.machine(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        device=device_fact(device),
    )
