"""Training on a GPU (``device="cuda"``): run on the H100 machine with
``python3 -m pytest -m gpu tests/reference_node/training``; skipped without CUDA.

Two replicas on one GPU must agree bit for bit each step (S1), the fingerprint of a
CUDA tensor must equal the CPU fingerprint of the same bytes, the aggregation must
run the robust-aggregation CUDA kernel (seen in the profiler, not inferred), and a
GPU run must replay ``valid`` on the GPU and never ``invalid`` on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.training.aggregation import aggregate
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.local_cluster import run_local_cluster
from swarmshake.reference_node.training.step import Replica, initial_state
from swarmshake.verify.replay import history_of_local_run, replay_history

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (GPU tests run on the H100 machine)",
    ),
]

NODES = ["n1", "n2"]


@pytest.fixture
def gpu_config() -> TrainingConfig:
    return TrainingConfig(
        seed=7,
        hidden=[256, 256],
        batch_per_node=16,
        device="cuda",
        aggregation="median",
        byzantine_f=0,
    )


def cuda_kernel_names(action) -> set[str]:  # noqa: ANN001
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        action()
        torch.cuda.synchronize()
    return {event.key for event in prof.key_averages()}


def test_two_gpu_replicas_agree_every_step_and_match_cpu_fingerprints(gpu_config) -> None:  # noqa: ANN001
    run = run_local_cluster(gpu_config, NODES, 5)
    assert run.failure is None
    for record in run.records:
        assert len(set(record.param_fps.values())) == 1, record
    for replica in run.replicas.values():
        params = replica.state.params
        assert params.is_cuda
        assert all(buffer.is_cuda for buffer in replica.state.buffers.values())
        assert fingerprint_hex(params) == fingerprint_hex(params.cpu())
    assert run.records[-1].param_fps["n1"] == fingerprint_hex(run.replicas["n1"].state.params)


def test_initial_parameters_are_the_cpu_bits_on_the_gpu(gpu_config) -> None:  # noqa: ANN001
    import msgspec

    cpu = initial_state(msgspec.structs.replace(gpu_config, device="cpu"))
    gpu = initial_state(gpu_config)
    assert gpu.params.is_cuda
    assert gpu.param_fingerprint() == cpu.param_fingerprint()


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_aggregation_runs_the_cuda_kernel(gpu_config, rule: str) -> None:  # noqa: ANN001
    import msgspec

    config = msgspec.structs.replace(gpu_config, aggregation=rule)
    replicas = [Replica(config, node) for node in ("n1", "n2", "n3")]
    sent = {r.node: r.contribution().gradient for r in replicas}
    names = cuda_kernel_names(lambda: aggregate(config, sent))
    assert any("robust_kernel" in name for name in names), sorted(names)
    on_cpu = aggregate(msgspec.structs.replace(config, device="cpu"), sent)
    # The kernel is bit-exact against the reference (kernels' own tests).
    assert fingerprint_hex(aggregate(config, sent)) == fingerprint_hex(on_cpu)


def test_state_from_host_memory_moves_to_the_gpu_unchanged(gpu_config) -> None:  # noqa: ANN001
    import msgspec

    host = initial_state(msgspec.structs.replace(gpu_config, device="cpu"))
    replica = Replica(gpu_config, "n1", state=host)
    assert replica.state.params.is_cuda
    assert replica.param_fingerprint() == host.param_fingerprint()
    names = cuda_kernel_names(replica.param_fingerprint)
    assert any("fingerprint_kernel" in name for name in names), sorted(names)


def test_gpu_run_replays_valid_on_the_gpu_and_never_invalid_on_the_cpu(gpu_config) -> None:  # noqa: ANN001
    run = run_local_cluster(gpu_config, NODES, 4)
    history = history_of_local_run(run, gpu_config)
    assert replay_history(history, device="cuda").status == "valid"
    assert replay_history(history, device="cpu").status in ("valid", "unknown")
