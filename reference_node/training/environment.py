"""Torch determinism settings and the environment facts bit-exact replay depends on.

DESIGN: bit-exact replay is promised only where torch version, thread count and
CPU flags match.  Matrix products split their reductions by thread count and pick
SIMD code paths (and FMA) by CPU features, so those facts are recorded with the
run (the ``start`` event) and compared before a replay claims anything.
"""

from __future__ import annotations

import platform

import msgspec
import torch

from swarmshake.reference_node.training.host import CPUINFO_PATH, cpu_flags

__all__ = ["CPUINFO_PATH", "EnvironmentFacts", "configure_torch", "cpu_flags", "environment_facts"]


class EnvironmentFacts(msgspec.Struct, kw_only=True, frozen=True):
    seed: int
    torch_version: str
    threads: int
    cpu_flags: str  # space-separated, sorted, from the first processor in /proc/cpuinfo
    machine: str
    deterministic: bool

    def mismatches(self, other: EnvironmentFacts) -> list[str]:
        """Names of the facts that differ and break the bit-exact replay promise."""
        fields = ("seed", "torch_version", "threads", "cpu_flags", "machine", "deterministic")
        return [name for name in fields if getattr(self, name) != getattr(other, name)]


def configure_torch(threads: int = 1) -> None:
    """Apply the settings every training process (node worker, replay) runs under.

    One intra-op thread per node by default: nodes share the machine's cores, and a
    fixed thread count keeps reduction order (hence bits) the same in replay.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


def environment_facts(seed: int) -> EnvironmentFacts:
    return EnvironmentFacts(
        seed=seed,
        torch_version=str(torch.__version__),  # a str subclass that msgspec cannot encode
        threads=torch.get_num_threads(),
        cpu_flags=cpu_flags(),
        machine=platform.machine(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
    )
