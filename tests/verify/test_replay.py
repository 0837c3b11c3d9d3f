from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from swarmshake.reference_node.protocol.history import Commit, History, Start, write_history
from swarmshake.reference_node.training.byzantine import ByzantineBehaviour, ByzantineSchedule
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.environment import configure_torch
from swarmshake.reference_node.training.local_cluster import LocalRun, run_local_cluster
from swarmshake.verify.replay import history_of_local_run as history_of
from swarmshake.verify.replay import replay_history

NODES = ["n1", "n2", "n3", "n4"]
STEPS = 30
CONFIG = TrainingConfig(seed=3, hidden=[48, 48], batch_per_node=8)


def n4_out_for_a_while(step: int) -> list[str]:
    return NODES[:3] if 10 <= step < 15 else NODES


@pytest.fixture(scope="module")
def run() -> LocalRun:
    configure_torch(1)
    return run_local_cluster(CONFIG, NODES, STEPS, contributors_at=n4_out_for_a_while)


@pytest.fixture(scope="module")
def history(run: LocalRun) -> History:
    return history_of(run, CONFIG)


def tampered(history: History, change) -> History:
    """A copy of ``history`` with ``change(event)`` applied to every commit event."""
    return History.from_events([change(e) if isinstance(e, Commit) else e for e in history.events])


def test_replay_of_a_four_node_log_is_bit_equal(
    run: LocalRun, history: History, tmp_path: Path
) -> None:
    # through the files a real run leaves, one JSONL per node
    for node in NODES:
        write_history(
            tmp_path / "events" / f"{node}.jsonl", [e for e in history.events if e.node == node]
        )
    result = replay_history(History.load(tmp_path))
    assert result.status == "valid", result.message
    assert result.steps_replayed == STEPS
    assert result.first_divergence is None
    assert result.final_param_fp == run.replicas["n1"].param_fingerprint()
    assert {check.node for check in result.replicas} == set(NODES)
    assert all(check.equal and check.last_step == STEPS - 1 for check in result.replicas)


@pytest.mark.parametrize(
    ("rule", "optimizer"), [("trimmed_mean", "sgd"), ("median", "adam"), ("krum", "sgd")]
)
def test_replay_recomputes_byzantine_contributions(rule: str, optimizer: str) -> None:
    nodes = NODES + (["n5"] if rule == "krum" else [])
    config = TrainingConfig(
        seed=4,
        hidden=[32],
        batch_per_node=8,
        aggregation=rule,
        optimizer=optimizer,
        learning_rate=0.01,  # type: ignore[arg-type]
    )
    schedule = ByzantineSchedule(
        {
            "n2": [ByzantineBehaviour(mode="sign_flip", since_step=2)],
            "n3": [
                ByzantineBehaviour(mode="stale", since_step=4),
                ByzantineBehaviour(mode="gaussian_noise", seed=9, since_step=9),
            ],
        }
    )
    run = run_local_cluster(config, nodes, 14, byzantine=schedule)
    assert run.failure is None
    result = replay_history(history_of(run, config, schedule))
    assert result.status == "valid", result.message
    # without the byzantine events the replay cannot reproduce the run, and says where
    plain = History.from_events(
        e
        for e in history_of(run, config, schedule).events
        if e.__struct_config__.tag != "byzantine"
    )
    missing = replay_history(plain)
    assert missing.status == "invalid" and missing.first_divergence is not None
    assert missing.first_divergence.what == "value_fp"
    # median/trimmed mean move with any contribution; Krum only once it selects differently
    assert (
        missing.first_divergence.step == 2 if rule != "krum" else missing.first_divergence.step >= 2
    )


def test_a_replica_that_diverged_is_named_with_its_first_step(history: History) -> None:
    def n2_diverges_at_17(event: Commit) -> Commit:
        if event.node == "n2" and event.step >= 17:
            return msgspec.structs.replace(event, param_fp=f"{event.step:016x}")
        return event

    result = replay_history(tampered(history, n2_diverges_at_17))
    assert result.status == "invalid"
    divergence = result.first_divergence
    assert divergence is not None
    assert (divergence.step, divergence.node, divergence.what) == (17, "n2", "param_fp")
    assert "step 17" in result.message
    assert [check.node for check in result.replicas if not check.equal] == ["n2"]


def test_an_altered_contributor_set_is_caught_at_its_step(history: History) -> None:
    def drop_n3_at_12(event: Commit) -> Commit:
        if event.step == 12:
            return msgspec.structs.replace(event, contributors=["n1", "n2", "n4"])
        return event

    result = replay_history(tampered(history, drop_n3_at_12))
    assert result.status == "invalid"
    assert result.first_divergence is not None
    assert (result.first_divergence.step, result.first_divergence.what) == (12, "value_fp")


def test_a_log_that_cannot_be_replayed_is_unknown(history: History) -> None:
    without_step_5 = History.from_events(
        e for e in history.events if not (isinstance(e, Commit) and e.step == 5)
    )
    result = replay_history(without_step_5)
    assert result.status == "unknown" and "step 5" in result.message

    def n1_disagrees(event: Commit) -> Commit:
        if event.node == "n1" and event.step == 3:
            return msgspec.structs.replace(event, contributors=["n1"])
        return event

    result = replay_history(tampered(history, n1_disagrees))
    assert result.status == "unknown" and "S1" in result.message

    no_config = History.from_events(
        msgspec.structs.replace(e, config={}) if isinstance(e, Start) else e for e in history.events
    )
    assert replay_history(no_config).status == "unknown"
    assert replay_history(no_config, CONFIG).status == "valid"
    assert replay_history(History(events=[]), CONFIG).status == "unknown"


def test_a_mismatch_from_another_environment_is_unknown_not_invalid(history: History) -> None:
    other_torch = History.from_events(
        msgspec.structs.replace(e, torch_version="0.0.1") if isinstance(e, Start) else e
        for e in history.events
    )
    assert replay_history(other_torch).status == "valid"  # matching bits need no promise

    def n2_diverges(event: Commit) -> Commit:
        return msgspec.structs.replace(event, param_fp="0" * 16) if event.node == "n2" else event

    result = replay_history(tampered(other_torch, n2_diverges))
    assert result.status == "unknown"
    assert any("torch_version" in item for item in result.environment_mismatches)
    assert result.first_divergence is not None and result.first_divergence.step == 0
