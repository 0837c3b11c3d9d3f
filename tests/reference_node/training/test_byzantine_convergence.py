"""The issue's "must show", in process: one sign-flipped node out of four.

Median and trimmed mean still converge to within the convergence tolerance of
the fault-free baseline; plain mean does not converge.
"""

from __future__ import annotations

import math

import pytest

from swarmshake.reference_node.training.byzantine import ByzantineBehaviour, ByzantineSchedule
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.local_cluster import run_local_cluster
from swarmshake.verify.convergence import compare_curves

NODES = ["n1", "n2", "n3", "n4"]
STEPS = 300
SIGN_FLIP_N3 = ByzantineSchedule({"n3": [ByzantineBehaviour(mode="sign_flip", since_step=0)]})


def curve(
    config: TrainingConfig, schedule: ByzantineSchedule | None
) -> tuple[dict[int, float], str | None]:
    run = run_local_cluster(config, NODES, STEPS, byzantine=schedule, shared_replica=True)
    return dict(enumerate(run.mean_losses())), run.failure


@pytest.fixture(scope="module")
def baseline() -> dict[int, float]:
    losses, failure = curve(TrainingConfig(seed=7, hidden=[64, 64], batch_per_node=16), None)
    assert failure is None
    return losses


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_robust_rules_converge_despite_a_sign_flipped_node(
    rule: str, baseline: dict[int, float]
) -> None:
    config = TrainingConfig(
        seed=7, hidden=[64, 64], batch_per_node=16, aggregation=rule, byzantine_f=1
    )  # type: ignore[arg-type]
    losses, failure = curve(config, SIGN_FLIP_N3)
    assert failure is None
    result = compare_curves(losses, baseline)
    assert result.status == "valid", result.message
    assert result.final_loss < result.initial_loss / 3


def test_plain_mean_does_not_converge_with_a_sign_flipped_node(baseline: dict[int, float]) -> None:
    config = TrainingConfig(seed=7, hidden=[64, 64], batch_per_node=16, aggregation="mean")
    losses, failure = curve(config, SIGN_FLIP_N3)
    result = compare_curves(losses, baseline)
    assert result.status == "invalid", result.message
    # it diverges: the loss ends above where it started (or training broke down)
    assert (
        failure is not None
        or not math.isfinite(result.final_loss)
        or result.final_loss > result.initial_loss
    )
