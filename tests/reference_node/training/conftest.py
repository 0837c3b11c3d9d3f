"""Shared fixtures: a small task that trains in seconds on one thread."""

from __future__ import annotations

import pytest

from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.environment import configure_torch

NODES = ["n1", "n2", "n3", "n4"]


@pytest.fixture(autouse=True)
def deterministic_torch() -> None:
    configure_torch(1)


@pytest.fixture
def small_config() -> TrainingConfig:
    """~6.8k parameters, 4 x 16 samples a step: 300 steps of 4 nodes take ~1 s."""
    return TrainingConfig(seed=7, hidden=[64, 64], batch_per_node=16)
