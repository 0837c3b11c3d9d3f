from __future__ import annotations

import math

import pytest
import torch

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.training.aggregation import AggregationError, aggregate, all_finite
from swarmshake.reference_node.training.byzantine import ByzantineBehaviour, corrupt_gradient
from swarmshake.reference_node.training.config import TrainingConfig

RULES = ["mean", "median", "trimmed_mean", "krum", "multi_krum"]


def honest(count: int, size: int = 1000, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    center = torch.randn(size, generator=gen)
    return {f"n{i}": center + 0.1 * torch.randn(size, generator=gen) for i in range(1, count + 1)}


@pytest.mark.parametrize("rule", RULES)
def test_result_depends_on_the_contributor_set_not_its_order(rule: str) -> None:
    config = TrainingConfig(aggregation=rule, byzantine_f=1)  # type: ignore[arg-type]
    contributions = honest(5)
    forward = aggregate(config, contributions)
    backward = aggregate(config, dict(reversed(list(contributions.items()))))
    assert fingerprint_hex(forward) == fingerprint_hex(backward)


def test_mean_is_the_mean() -> None:
    contributions = honest(4)
    result = aggregate(TrainingConfig(aggregation="mean"), contributions)
    expected = torch.stack(list(contributions.values())).double().mean(0).float()
    assert torch.allclose(result, expected, atol=1e-6)


@pytest.mark.parametrize("rule", ["median", "trimmed_mean", "krum", "multi_krum"])
@pytest.mark.parametrize("mode", ["sign_flip", "scaled", "random_bits", "gaussian_noise"])
def test_robust_rules_stay_near_the_honest_mean_with_one_bad_node(rule: str, mode: str) -> None:
    config = TrainingConfig(aggregation=rule, byzantine_f=1)  # type: ignore[arg-type]
    contributions = honest(5)
    honest_mean = torch.stack(list(contributions.values())).mean(0)
    behaviour = ByzantineBehaviour(mode=mode, noise_std=100.0)  # type: ignore[arg-type]
    contributions["n3"] = corrupt_gradient(contributions["n3"], behaviour, step=4, node="n3")
    result = aggregate(config, contributions)
    assert torch.isfinite(result).all()
    # honest values spread 0.1 around the center; an attacker's pull would be ~10..1e38
    assert float((result - honest_mean).abs().max()) < 0.5


def test_mean_drops_non_finite_contributions_whole() -> None:
    contributions = honest(4)
    poisoned = contributions["n2"].clone()
    poisoned[17] = float("nan")
    contributions["n2"] = poisoned
    result = aggregate(TrainingConfig(aggregation="mean"), contributions)
    others = torch.stack([contributions[n] for n in ("n1", "n3", "n4")])
    assert torch.allclose(result, others.mean(0), atol=1e-6)


def test_all_non_finite_is_refused_not_applied() -> None:
    contributions = {name: torch.full((8,), float("inf")) for name in ("n1", "n2", "n3")}
    with pytest.raises(AggregationError, match="NaN or inf"):
        aggregate(TrainingConfig(aggregation="mean"), contributions)
    with pytest.raises(AggregationError, match="non-finite coordinates"):
        aggregate(TrainingConfig(aggregation="median", byzantine_f=1), contributions)


def test_krum_selects_an_honest_contribution() -> None:
    contributions = honest(5)
    contributions["n2"] = contributions["n2"] * -10
    result = aggregate(TrainingConfig(aggregation="krum", byzantine_f=1), contributions)
    assert any(torch.equal(result, contributions[n]) for n in ("n1", "n3", "n4", "n5"))


def test_too_few_contributors_for_krum_is_a_clear_error() -> None:
    with pytest.raises(AggregationError, match=r"4 contributors \(n1, n2, n3, n4\).*2f\+3=5"):
        aggregate(TrainingConfig(aggregation="krum", byzantine_f=1), honest(4))


def test_mismatched_shapes_are_refused() -> None:
    contributions = honest(3)
    contributions["n2"] = contributions["n2"][:10]
    with pytest.raises(AggregationError, match="n2"):
        aggregate(TrainingConfig(), contributions)


@pytest.mark.parametrize(
    ("value", "finite"),
    [
        (0.0, True),
        (-0.0, True),
        (3.4e38, True),
        (1e-45, True),
        (math.nan, False),
        (math.inf, False),
        (-math.inf, False),
    ],
)
@pytest.mark.parametrize("where", [0, 500, 262144 + 3, -1])
def test_all_finite(value: float, finite: bool, where: int) -> None:
    tensor = torch.ones(262144 * 2 + 10)  # three blocks of the check, the last short
    tensor[where] = value
    assert all_finite(tensor) is finite
    assert all_finite(tensor.reshape(2, -1)) is finite


def test_a_finite_sum_that_overflows_is_refused() -> None:
    huge = {name: torch.full((4,), 3.0e38) for name in ("n1", "n2")}
    with pytest.raises(AggregationError, match="non-finite coordinates"):
        aggregate(TrainingConfig(aggregation="mean"), huge)


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
@pytest.mark.parametrize("count", [3, 4, 5])
def test_the_cpu_blocks_give_the_bits_of_the_whole_stack(rule: str, count: int) -> None:
    """The CPU runs the coordinate-wise rules COORDINATE_BLOCK columns at a time: the
    aggregate must be the bits of the kernel over the whole stack, across block
    edges, a short last block, -0.0, and NaN / inf in some blocks only (a block's
    fast all-finite path beside another's slow one)."""
    from swarmshake import kernels
    from swarmshake.reference_node.training import aggregation

    size = 2 * aggregation.COORDINATE_BLOCK + 4099
    generator = torch.Generator().manual_seed(count)
    rows = [torch.randn(size, generator=generator) for _ in range(count)]
    rows[0][5] = float("nan")
    rows[1][aggregation.COORDINATE_BLOCK + 7] = float("inf")
    rows[-1][-1] = float("-inf")
    rows[0][:2000] = -0.0
    rows[1][:1000] = 0.0
    config = TrainingConfig(aggregation=rule, byzantine_f=1)
    blocked = aggregate(config, {f"n{i}": row for i, row in enumerate(rows)})
    whole = (
        kernels.coordinate_median(torch.stack(rows))
        if rule == "median"
        else kernels.trimmed_mean(torch.stack(rows), 1)
    )
    assert torch.equal(blocked.view(torch.int32), whole.view(torch.int32))
