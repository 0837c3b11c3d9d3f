"""Deterministic synthetic data: a fixed-seed teacher network labels Gaussian inputs.

No download, any size, and the shard of node ``node`` at step ``step`` depends only
on ``(seed, step, node)``: a replay, a rejoining node or a checker recomputes it
bit-for-bit without seeing any other shard.  The teacher is small and its shape
does not follow the student's, so a 1M and a 100M student learn the same task.
"""

from __future__ import annotations

import functools

import torch

from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.seeds import generator


class Teacher:
    """``y = W2 tanh(W1 x + b1)``, weights drawn once from the run seed."""

    def __init__(self, seed: int, input_dim: int, hidden: int, output_dim: int):
        gen = generator(seed, "teacher")
        # Scales chosen so tanh works in its curved range and targets have unit-ish
        # variance: the task is neither linear nor saturated.
        self.w1 = torch.randn(hidden, input_dim, generator=gen) * (2.0 / input_dim**0.5)
        self.b1 = torch.randn(hidden, generator=gen) * 0.5
        self.w2 = torch.randn(output_dim, hidden, generator=gen) * (1.0 / hidden**0.5)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(torch.nn.functional.linear(inputs, self.w1, self.b1))
        return torch.nn.functional.linear(hidden, self.w2)


@functools.lru_cache(maxsize=8)  # a process trains one config; a few for tests and replay
def teacher_for(seed: int, input_dim: int, hidden: int, output_dim: int) -> Teacher:
    return Teacher(seed, input_dim, hidden, output_dim)


def shard(config: TrainingConfig, step: int, node: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs [batch, in], targets [batch, out])`` of ``node`` at ``step``, float32."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if not node:
        raise ValueError("node id must be a non-empty string")
    gen = generator(config.seed, "shard", step, node)
    inputs = torch.randn(config.batch_per_node, config.input_dim, generator=gen)
    teacher = teacher_for(config.seed, config.input_dim, config.teacher_hidden, config.output_dim)
    with torch.no_grad():
        targets = teacher(inputs)
    return inputs, targets


def evaluation_set(config: TrainingConfig, size: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """A held-out set (its own stream, never a training shard) for loss reports."""
    if not 1 <= size <= 1 << 20:
        raise ValueError(f"evaluation size must be in 1..{1 << 20}, got {size}")
    gen = generator(config.seed, "evaluation")
    inputs = torch.randn(size, config.input_dim, generator=gen)
    teacher = teacher_for(config.seed, config.input_dim, config.teacher_hidden, config.output_dim)
    with torch.no_grad():
        targets = teacher(inputs)
    return inputs, targets
