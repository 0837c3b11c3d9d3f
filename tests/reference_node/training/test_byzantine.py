from __future__ import annotations

import pytest
import torch

from swarmshake.reference_node.training.byzantine import (
    BYZANTINE_MODES,
    ByzantineBehaviour,
    ByzantineSchedule,
    corrupt_gradient,
)
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.step import Replica, local_gradient

GRADIENT = torch.linspace(-1, 1, 4096)


def test_sign_flip_and_scaled() -> None:
    flipped = corrupt_gradient(
        GRADIENT, ByzantineBehaviour(mode="sign_flip", magnitude=3.0), step=0, node="n1"
    )
    scaled = corrupt_gradient(
        GRADIENT, ByzantineBehaviour(mode="scaled", magnitude=3.0), step=0, node="n1"
    )
    assert torch.equal(flipped, GRADIENT * -3.0)
    assert torch.equal(scaled, GRADIENT * 3.0)


@pytest.mark.parametrize("mode", ["gaussian_noise", "random_bits"])
def test_random_modes_are_reproducible_and_vary_by_step_node_and_seed(mode: str) -> None:
    behaviour = ByzantineBehaviour(mode=mode, seed=5)  # type: ignore[arg-type]
    first = corrupt_gradient(GRADIENT, behaviour, step=3, node="n1")
    again = corrupt_gradient(GRADIENT, behaviour, step=3, node="n1")
    assert torch.equal(first.view(torch.int32), again.view(torch.int32))  # NaN-safe equality
    for step, node, seed in ((4, "n1", 5), (3, "n2", 5), (3, "n1", 6)):
        other = corrupt_gradient(
            GRADIENT, ByzantineBehaviour(mode=mode, seed=seed), step=step, node=node
        )  # type: ignore[arg-type]
        assert not torch.equal(first.view(torch.int32), other.view(torch.int32))


def test_gaussian_noise_has_the_configured_spread() -> None:
    noisy = corrupt_gradient(
        torch.zeros(100_000),
        ByzantineBehaviour(mode="gaussian_noise", noise_std=2.0),
        step=0,
        node="n1",
    )
    assert float(noisy.std()) == pytest.approx(2.0, rel=0.02)


def test_random_bits_produce_non_finite_values() -> None:
    bits = corrupt_gradient(
        torch.zeros(100_000), ByzantineBehaviour(mode="random_bits"), step=0, node="n1"
    )
    assert not torch.isfinite(bits).all()


def test_honest_before_since_step() -> None:
    behaviour = ByzantineBehaviour(mode="sign_flip", since_step=10)
    assert torch.equal(corrupt_gradient(GRADIENT, behaviour, step=9, node="n1"), GRADIENT)


def test_stale_node_keeps_sending_the_gradient_of_its_switch_step() -> None:
    config = TrainingConfig(seed=1, hidden=[16], batch_per_node=8)
    replica = Replica(config, "n1")
    replica.apply(0, replica.contribution().gradient)
    replica.set_behaviour(ByzantineBehaviour(mode="stale", since_step=1))
    frozen, _ = local_gradient(replica.model, replica.state.params, 1, "n1")
    for _ in range(3):
        sent = replica.contribution()
        assert torch.equal(sent.gradient, frozen)
        replica.apply(replica.step, sent.gradient)


def test_switching_off_the_step_boundary_is_refused() -> None:
    replica = Replica(TrainingConfig(hidden=[8]), "n1")
    with pytest.raises(ValueError, match="current step 0"):
        replica.set_behaviour(ByzantineBehaviour(mode="sign_flip", since_step=3))


def test_schedule_rejects_two_behaviours_at_one_step() -> None:
    schedule = ByzantineSchedule({"n1": [ByzantineBehaviour(mode="scaled", since_step=2)]})
    assert schedule.switch_at("n1", 2) == ByzantineBehaviour(mode="scaled", since_step=2)
    assert schedule.switch_at("n1", 3) is None
    with pytest.raises(ValueError, match="two different behaviours"):
        schedule.add("n1", ByzantineBehaviour(mode="sign_flip", since_step=2))


def test_every_mode_is_known_and_bad_parameters_are_refused() -> None:
    assert set(BYZANTINE_MODES) == {
        "honest",
        "sign_flip",
        "scaled",
        "gaussian_noise",
        "stale",
        "random_bits",
    }
    with pytest.raises(ValueError, match="noise_std"):
        ByzantineBehaviour(mode="gaussian_noise", noise_std=-1.0)
