"""int8 on the wire with a GPU training device: the quantization runs in the CUDA
kernels on the real path and sends the CPU path's bytes.  Run on the H100 machine
(``scripts/gpu_chaos_run.sh`` or ``python3 -m pytest -m gpu``); skipped without CUDA.
"""

from __future__ import annotations

import pytest
import torch

from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.step import Replica
from swarmshake.reference_node.training.wire import WIRE_BLOCK, WireEncoder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (GPU tests run on the H100 machine)",
    ),
]

# Not a multiple of WIRE_BLOCK: the short last block goes through both paths too.
NUMEL = 40 * WIRE_BLOCK + 77


def configs() -> tuple[TrainingConfig, TrainingConfig]:
    cpu = TrainingConfig(seed=3, hidden=[16], wire_dtype="int8")
    return cpu, TrainingConfig(seed=3, hidden=[16], wire_dtype="int8", device="cuda")


def gradients(steps: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    out = [torch.randn(NUMEL, generator=generator) * 10 ** (i % 3) for i in range(steps)]
    if steps > 1:
        out[1][WIRE_BLOCK : 2 * WIRE_BLOCK] = float("nan")  # a non-finite block: sent as NaN
    return out


def test_gpu_encoding_sends_the_cpu_bytes_and_keeps_the_same_residual() -> None:
    cpu_config, gpu_config = configs()
    on_cpu, on_gpu = WireEncoder(cpu_config), WireEncoder(gpu_config)
    for step, gradient in enumerate(gradients(4)):
        cpu_payload, cpu_own = on_cpu.encode(gradient)
        gpu_payload, gpu_own = on_gpu.encode(gradient.cuda())
        assert bytes(gpu_payload) == bytes(cpu_payload), step
        assert gpu_own.device.type == "cpu"
        assert torch.equal(gpu_own.view(torch.int32), cpu_own.view(torch.int32)), step
        assert on_gpu.residual is not None and on_gpu.residual.is_cuda
        assert torch.equal(
            on_gpu.residual.cpu().view(torch.int32), on_cpu.residual.view(torch.int32)
        )


def test_gpu_encoding_runs_the_quantization_kernels() -> None:
    from torch.profiler import ProfilerActivity, profile

    _, gpu_config = configs()
    encoder = WireEncoder(gpu_config)
    encoder.encode(gradients(1)[0].cuda())  # the first call builds / loads the extension
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        encoder.encode(gradients(1)[0].cuda())
        torch.cuda.synchronize()
    names = " ".join(event.key for event in prof.key_averages())
    assert "quant_kernel" in names
    assert "dequant_kernel" in names


def test_an_honest_int8_contribution_stays_on_the_gpu_and_fp32_comes_to_the_host() -> None:
    _, gpu_config = configs()
    assert Replica(gpu_config, "n1").contribution().gradient.is_cuda
    fp32 = TrainingConfig(seed=3, hidden=[16], device="cuda")
    assert Replica(fp32, "n1").contribution().gradient.device.type == "cpu"
