"""The training device option on a machine without a GPU (what CI checks): the config
field, its validation and the way it reaches a node's worker, host/device hand-offs
that must be no-ops on the CPU, and replay's answer for a run from another device."""

from __future__ import annotations

import msgspec
import pytest
import torch

from swarmshake.reference_node import config as node_config
from swarmshake.reference_node.protocol.history import Commit, History, Start
from swarmshake.reference_node.training.aggregation import aggregate
from swarmshake.reference_node.training.config import TrainingConfig, TrainingConfigError
from swarmshake.reference_node.training.device import (
    DeviceUnavailableError,
    device_fact,
    resolve_device,
)
from swarmshake.reference_node.training.environment import configure_torch, environment_facts
from swarmshake.reference_node.training.local_cluster import run_local_cluster
from swarmshake.reference_node.training.state import TrainingState
from swarmshake.reference_node.training.step import Replica
from swarmshake.verify.replay import history_of_local_run, replay_history

NODES = ["n1", "n2", "n3"]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "mps", "CPU", " cpu", "cuda:1234"])
def test_config_rejects_unsupported_device_names(device: str) -> None:
    with pytest.raises(TrainingConfigError, match="device"):
        TrainingConfig(device=device)


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:7"])
def test_config_accepts_cpu_and_cuda_names(device: str) -> None:
    assert TrainingConfig(device=device).device == device


def test_device_reaches_the_worker_through_the_node_config() -> None:
    """The worker builds its Replica from NodeConfig.training: a [training] device in
    the node's TOML (what LocalCluster writes) is what the Replica gets."""
    raw = {
        "node": {"id": "n1", "members": ["n1"], "run_dir": "runs/x"},
        "network": {"run_key_hex": "00" * 16},
        "training": {"device": "cuda:1"},
    }
    assert node_config.from_dict(raw).training.device == "cuda:1"
    raw["training"] = {"device": "tpu"}
    with pytest.raises(node_config.ConfigError, match="device"):
        node_config.from_dict(raw)


@no_cuda
def test_cuda_without_a_gpu_fails_with_the_fix() -> None:
    with pytest.raises(DeviceUnavailableError, match='use device = "cpu"'):
        resolve_device("cuda")
    with pytest.raises(DeviceUnavailableError):
        Replica(TrainingConfig(device="cuda:0", hidden=[8]), "n1")


def test_explicit_cpu_is_the_default_and_trains_the_same_bits(small_config) -> None:  # noqa: ANN001
    explicit = msgspec.structs.replace(small_config, device="cpu")
    assert TrainingConfig().device == "cpu"
    first = run_local_cluster(small_config, NODES, 5)
    second = run_local_cluster(explicit, NODES, 5)
    assert [r.param_fps for r in first.records] == [r.param_fps for r in second.records]
    assert all(r.state.params.device.type == "cpu" for r in second.replicas.values())


def test_contributions_and_aggregates_come_back_in_host_memory_without_a_copy(
    small_config,  # noqa: ANN001
) -> None:
    replica = Replica(small_config, "n1")
    sent = replica.contribution().gradient
    assert sent.device.type == "cpu"
    combined = aggregate(small_config, {"n1": sent, "n2": sent.clone()})
    assert combined.device.type == "cpu"
    assert combined.data_ptr() != sent.data_ptr()  # a new tensor, not a view of a row
    state = replica.state
    assert state.to(torch.device("cpu")) is state  # already there: no copy


def test_state_refuses_tensors_on_two_devices() -> None:
    params = torch.zeros(4)
    with pytest.raises(ValueError, match="momentum is on meta"):
        TrainingState(
            step=0,
            params=params,
            optimizer="sgd",
            buffers={"momentum": torch.zeros(4, device="meta")},
        )


def test_device_is_an_environment_fact() -> None:
    configure_torch(1)
    facts = environment_facts(seed=1)
    assert facts.device == device_fact("cpu") == "cpu"
    gpu = msgspec.structs.replace(
        facts, device="cuda NVIDIA H100 80GB HBM3 sm_90 cuda-runtime 13.0"
    )
    assert facts.mismatches(gpu) == ["device"]


def _gpu_run_history(tamper_step: int | None) -> History:
    """A CPU-computed run whose start events say it trained on ``cuda`` (as a GPU run's
    would), with one node's parameter fingerprint changed at ``tamper_step``."""
    config = TrainingConfig(seed=5, hidden=[16, 16], batch_per_node=8)
    run = run_local_cluster(config, NODES, 6)
    history = history_of_local_run(run, config)
    events = []
    for event in history.events:
        if isinstance(event, Start):
            event = msgspec.structs.replace(
                event, config={"training": {**config.to_dict(), "device": "cuda"}}
            )
        if isinstance(event, Commit) and event.step == tamper_step and event.node == "n2":
            event = msgspec.structs.replace(event, param_fp="0" * 16)
        events.append(event)
    return History.from_events(events)


def test_replay_of_a_gpu_run_on_the_cpu_says_unknown_not_invalid() -> None:
    result = replay_history(_gpu_run_history(tamper_step=3))
    assert result.status == "unknown", result.message
    assert any(m.endswith(": device") for m in result.environment_mismatches)
    assert "step 3" in result.message


def test_replay_of_a_gpu_run_whose_bits_match_is_still_valid() -> None:
    result = replay_history(_gpu_run_history(tamper_step=None))
    assert result.status == "valid", result.message


def test_replay_of_a_cpu_run_with_a_wrong_fingerprint_is_invalid() -> None:
    config = TrainingConfig(seed=5, hidden=[16, 16], batch_per_node=8)
    history = history_of_local_run(run_local_cluster(config, NODES, 6), config)
    bad = History.from_events(
        [
            msgspec.structs.replace(e, param_fp="0" * 16)
            if isinstance(e, Commit) and e.step == 3 and e.node == "n2"
            else e
            for e in history.events
        ]
    )
    result = replay_history(bad)
    assert result.status == "invalid", result.message
    assert result.environment_mismatches == []
