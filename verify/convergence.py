"""Convergence: a run's final loss against a fault-free baseline of the same task.

The baseline trains the same config (seed, model, optimizer, aggregation) with the
same nodes, hence the same global batch (nodes x ``batch_per_node``) and the same
shards, for the same number of steps, every node contributing every step, in one
process (``training.local_cluster``).  The loss at step ``s`` is the mean over the
contributing nodes' ``train_step`` losses (each on its own shard, before the
update); the *final loss* is the mean of that curve over the last ``window`` steps,
which averages out the shard-to-shard noise of single steps.

Tolerance, and why: a run passes when ``final <= baseline * (1 + relative) +
absolute``.  Only "worse than the baseline" fails: converging faster is not a
training failure, and a fault-free run reproduces the baseline curve bit for bit
(same shards, same ops), so the slack exists only for what faults legitimately
change: steps committed with fewer contributors (a smaller global batch for a
while) and robust rules that step off the mean under attack.  Measured on the CI
task (hidden [64, 64], 4 nodes, 16 samples each, 300 steps, window 20, seeds
0-5), those legitimate changes raised the final loss by at most 16%: one of four
nodes missing for the second half +0.6..3.3%, median instead of mean +0.7..1.8%,
median or trimmed mean with one sign-flipped node +14.3..15.7%.  A broken run
(one sign-flipped node under plain mean) ended 1e9..1e30 times the baseline or
non-finite.  ``relative = 0.25`` sits between the
two with margin on both sides; ``absolute = 1e-3`` keeps a near-zero baseline from
making the test a bit-equality test.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

from swarmshake.reference_node.protocol.history import Commit, History, TrainStep
from swarmshake.reference_node.training.aggregation import AggregationError
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.environment import configure_torch
from swarmshake.reference_node.training.local_cluster import run_local_cluster

Status = Literal["valid", "invalid", "unknown"]
# Baseline steps run in this process; beyond this the check is a benchmark, not a test.
MAX_BASELINE_STEPS = 100_000


class ConvergenceTolerance(msgspec.Struct, kw_only=True, frozen=True):
    relative: float = 0.25
    absolute: float = 1e-3
    window: int = 20  # steps averaged into the final loss

    def __post_init__(self) -> None:
        if not (self.relative >= 0 and self.absolute >= 0 and self.window >= 1):
            raise ValueError("tolerance needs relative >= 0, absolute >= 0 and window >= 1")

    def bound(self, baseline: float) -> float:
        return baseline * (1.0 + self.relative) + self.absolute


class ConvergenceResult(msgspec.Struct, kw_only=True):
    status: Status
    message: str
    final_loss: float = math.nan
    baseline_final_loss: float = math.nan
    bound: float = math.nan
    initial_loss: float = math.nan
    steps: int = 0
    nodes: list[str] = []


def final_loss(curve: Mapping[int, float], window: int) -> float:
    """Mean of the curve over its last ``window`` steps (NaN if any of them is not finite)."""
    if not curve:
        raise ValueError("empty loss curve")
    steps = sorted(curve)[-window:]
    values = [curve[step] for step in steps]
    if not all(math.isfinite(value) for value in values):
        return math.nan
    return sum(values) / len(values)


def losses_from_history(history: History) -> dict[int, float]:
    """Per step, the mean ``train_step`` loss of the nodes that step committed from.

    Steps without commit events use every node's logged loss (a run cut short).
    """
    contributors: dict[int, set[str]] = {}
    for event in history.of_kind(Commit):
        assert isinstance(event, Commit)
        contributors.setdefault(event.step, set(event.contributors))
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for event in history.of_kind(TrainStep):
        assert isinstance(event, TrainStep)
        # JSON has no NaN/inf: msgspec writes a non-finite loss as null (a diverged node)
        loss = math.nan if event.loss is None else event.loss
        by_step[event.step][event.node] = loss  # the latest incarnation's wins
    curve = {}
    for step, losses in by_step.items():
        chosen = contributors.get(step)
        values = [loss for node, loss in losses.items() if chosen is None or node in chosen]
        if values:
            curve[step] = sum(values) / len(values)
    return curve


def baseline_curve(config: TrainingConfig, nodes: Iterable[str], steps: int) -> dict[int, float]:
    """The fault-free loss curve: every node contributing every step."""
    if not 1 <= steps <= MAX_BASELINE_STEPS:
        raise ValueError(f"baseline steps must be in 1..{MAX_BASELINE_STEPS}, got {steps}")
    configure_torch(config.threads)
    names = sorted(set(nodes))
    config.check_cluster(len(names))
    run = run_local_cluster(config, names, steps, shared_replica=True)
    return dict(enumerate(run.mean_losses()))


def compare_curves(
    run: Mapping[int, float],
    baseline: Mapping[int, float],
    tolerance: ConvergenceTolerance | None = None,
    *,
    nodes: list[str] | None = None,
) -> ConvergenceResult:
    tolerance = tolerance or ConvergenceTolerance()
    if not run or not baseline:
        return ConvergenceResult(status="unknown", message="no losses to compare")
    run_final = final_loss(run, tolerance.window)
    base_final = final_loss(baseline, tolerance.window)
    initial = run[min(run)]
    bound = tolerance.bound(base_final)
    common = dict(
        final_loss=run_final,
        baseline_final_loss=base_final,
        bound=bound,
        initial_loss=initial,
        steps=max(run) + 1,
        nodes=nodes or [],
    )
    if not math.isfinite(base_final):
        return ConvergenceResult(status="unknown", message="the baseline itself diverged", **common)
    if math.isfinite(run_final) and run_final <= bound:
        return ConvergenceResult(
            status="valid",
            message=(
                f"final loss {run_final:.6g} within {bound:.6g} (baseline {base_final:.6g}, "
                f"relative {tolerance.relative}, absolute {tolerance.absolute}, "
                f"last {tolerance.window} steps)"
            ),
            **common,
        )
    return ConvergenceResult(
        status="invalid",
        message=(
            f"final loss {run_final:.6g} exceeds {bound:.6g} (baseline {base_final:.6g}; "
            f"initial loss {initial:.6g})"
        ),
        **common,
    )


def check_history_convergence(
    history: History,
    config: TrainingConfig,
    tolerance: ConvergenceTolerance | None = None,
    *,
    nodes: list[str] | None = None,
) -> ConvergenceResult:
    """Convergence of a recorded run; never raises for a bad history (that is ``unknown``).

    ``nodes`` is the configured membership (default: every node that logged a loss).
    """
    run = losses_from_history(history)
    if not run:
        return ConvergenceResult(status="unknown", message="the history has no train_step events")
    names = nodes or sorted({e.node for e in history.of_kind(TrainStep)})
    try:
        baseline = baseline_curve(config, names, max(run) + 1)
    except (ValueError, AggregationError) as error:
        return ConvergenceResult(status="unknown", message=f"baseline could not run: {error}")
    return compare_curves(run, baseline, tolerance, nodes=names)
