from __future__ import annotations

import time

import pytest
import torch

from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.data import evaluation_set, shard
from swarmshake.reference_node.training.environment import configure_torch, environment_facts
from swarmshake.reference_node.training.local_cluster import run_local_cluster
from swarmshake.reference_node.training.model import FlatMLP
from swarmshake.reference_node.training.step import Replica, initial_state

NODES = ["n1", "n2", "n3", "n4"]


def evaluation_loss(config: TrainingConfig, params: torch.Tensor) -> float:
    inputs, targets = evaluation_set(config, size=512)
    with torch.no_grad():
        return float(FlatMLP(config).loss(params, inputs, targets))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_baseline_training_converges_in_seconds(optimizer: str) -> None:
    rate = 0.05 if optimizer == "sgd" else 0.003
    config = TrainingConfig(
        seed=7, hidden=[64, 64], batch_per_node=16, optimizer=optimizer, learning_rate=rate
    )  # type: ignore[arg-type]
    start = time.perf_counter()
    run = run_local_cluster(config, NODES, 300, shared_replica=True)
    elapsed_s = time.perf_counter() - start
    assert run.failure is None
    losses = run.mean_losses()
    state = run.replicas["n1"].state
    initial = evaluation_loss(config, initial_state(config).params)
    final = evaluation_loss(config, state.params)
    # held-out loss falls to under a third, and so does the training curve
    assert final < initial / 3, (initial, final)
    assert sum(losses[-20:]) / 20 < losses[0] / 3
    assert elapsed_s < 30


def test_gradient_is_flat_float32_and_matches_autograd_on_a_module(
    small_config: TrainingConfig,
) -> None:
    replica = Replica(small_config, "n1")
    result = replica.contribution()
    count = small_config.parameter_count()
    assert result.gradient.shape == (count,) and result.gradient.dtype == torch.float32
    assert result.gradient.is_contiguous()
    # the same network as torch.nn modules gives the same gradient (the flat layout is right)
    layers = []
    for fan_in, fan_out in small_config.layer_dims():
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    module = torch.nn.Sequential(*layers[:-1])
    torch.nn.utils.vector_to_parameters(replica.state.params.clone(), module.parameters())
    inputs, targets = shard(small_config, 0, "n1")
    loss = torch.nn.functional.mse_loss(module(inputs), targets)
    loss.backward()
    expected = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
    assert torch.allclose(result.gradient, expected, rtol=1e-5, atol=1e-7)
    assert result.loss == pytest.approx(float(loss.detach()), rel=1e-6)


def test_apply_checks_the_step_and_returns_the_new_fingerprint(
    small_config: TrainingConfig,
) -> None:
    replica = Replica(small_config, "n1")
    before = replica.param_fingerprint()
    gradient = replica.contribution().gradient
    with pytest.raises(ValueError, match="cannot apply step 1 to a state at step 0"):
        replica.apply(1, gradient)
    after = replica.apply(0, gradient)
    assert after != before and after == replica.param_fingerprint()
    assert replica.step == 1


def test_separate_replicas_stay_bit_identical(small_config: TrainingConfig) -> None:
    run = run_local_cluster(small_config, NODES, 30)
    for record in run.records:
        assert len(set(record.param_fps.values())) == 1, record.step
    reference = run.replicas["n1"].state
    for node in NODES[1:]:
        state = run.replicas[node].state
        assert torch.equal(state.params, reference.params)
        assert torch.equal(state.buffers["momentum"], reference.buffers["momentum"])


def test_two_runs_give_the_same_bits(small_config: TrainingConfig) -> None:
    first = run_local_cluster(small_config, NODES, 20, shared_replica=True)
    second = run_local_cluster(small_config, NODES, 20, shared_replica=True)
    assert [r.param_fps for r in first.records] == [r.param_fps for r in second.records]


def test_environment_facts_record_what_replay_needs() -> None:
    configure_torch(1)
    facts = environment_facts(seed=11)
    assert facts.seed == 11
    assert facts.torch_version == torch.__version__
    assert facts.threads == 1
    assert facts.deterministic
    assert "sse2" in facts.cpu_flags.split() or facts.machine != "x86_64"
    assert facts.mismatches(facts) == []
