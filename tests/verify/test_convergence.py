from __future__ import annotations

import math

import pytest

from swarmshake.reference_node.protocol.history import History, TrainStep
from swarmshake.reference_node.training.byzantine import ByzantineBehaviour, ByzantineSchedule
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.environment import configure_torch
from swarmshake.reference_node.training.local_cluster import run_local_cluster
from swarmshake.verify.convergence import (
    ConvergenceTolerance,
    check_history_convergence,
    compare_curves,
    final_loss,
    losses_from_history,
)
from swarmshake.verify.replay import history_of_local_run

NODES = ["n1", "n2", "n3", "n4"]
CONFIG = TrainingConfig(seed=5, hidden=[64, 64], batch_per_node=16)
STEPS = 200


@pytest.fixture(autouse=True)
def deterministic_torch() -> None:
    configure_torch(1)


def test_a_fault_free_run_reproduces_the_baseline() -> None:
    run = run_local_cluster(CONFIG, NODES, STEPS)
    result = check_history_convergence(history_of_local_run(run, CONFIG), CONFIG)
    assert result.status == "valid", result.message
    assert result.final_loss == pytest.approx(result.baseline_final_loss, rel=1e-12)
    assert result.final_loss < result.initial_loss / 3
    assert result.nodes == NODES and result.steps == STEPS


def test_a_node_missing_for_half_the_run_is_within_tolerance() -> None:
    run = run_local_cluster(
        CONFIG, NODES, STEPS, contributors_at=lambda s: NODES if s < 100 else NODES[:3]
    )
    result = check_history_convergence(history_of_local_run(run, CONFIG), CONFIG)
    assert result.status == "valid", result.message


def test_a_run_poisoned_by_a_sign_flipped_node_under_mean_fails() -> None:
    schedule = ByzantineSchedule({"n2": [ByzantineBehaviour(mode="sign_flip", since_step=50)]})
    run = run_local_cluster(CONFIG, NODES, STEPS, byzantine=schedule)
    history = history_of_local_run(run, CONFIG, schedule)
    result = check_history_convergence(history, CONFIG)
    assert result.status == "invalid", result.message
    assert "exceeds" in result.message


def test_a_run_that_stopped_learning_fails() -> None:
    # the run's nodes never applied anything: their loss curve stays at the start
    frozen = TrainingConfig(seed=5, hidden=[64, 64], batch_per_node=16, learning_rate=1e-9)
    run = run_local_cluster(frozen, NODES, STEPS)
    history = history_of_local_run(run, frozen)
    result = check_history_convergence(history, CONFIG)
    assert result.status == "invalid"
    assert result.final_loss > 2 * result.bound


def test_losses_come_from_the_committed_contributors() -> None:
    run = run_local_cluster(CONFIG, NODES, 3, contributors_at=lambda s: ["n1", "n2"])
    curve = losses_from_history(history_of_local_run(run, CONFIG))
    for record in run.records:
        expected = (record.losses["n1"] + record.losses["n2"]) / 2
        assert curve[record.step] == pytest.approx(expected)


def test_tolerance_bound_and_window() -> None:
    tolerance = ConvergenceTolerance(relative=0.25, absolute=0.001, window=2)
    baseline = {0: 1.0, 1: 0.5, 2: 0.2, 3: 0.2}
    inside = {0: 1.0, 1: 0.5, 2: 0.25, 3: 0.25}
    outside = {0: 1.0, 1: 0.5, 2: 0.26, 3: 0.26}
    assert compare_curves(inside, baseline, tolerance).status == "valid"
    assert compare_curves(outside, baseline, tolerance).status == "invalid"
    assert final_loss({0: 1.0, 1: math.inf}, 1) != final_loss({0: 1.0, 1: math.inf}, 1)  # NaN
    assert compare_curves({0: 1.0, 1: math.nan}, baseline, tolerance).status == "invalid"
    assert compare_curves({}, baseline).status == "unknown"
    with pytest.raises(ValueError, match="window"):
        ConvergenceTolerance(window=0)


def test_no_losses_is_unknown() -> None:
    assert check_history_convergence(History(events=[]), CONFIG).status == "unknown"
    lone = History.from_events([TrainStep(t_wall=0, t_mono=0, node="n1", step=0, loss=1.0)])
    bad_config = TrainingConfig(aggregation="krum")  # one node cannot run Krum
    assert check_history_convergence(lone, bad_config).status == "unknown"
