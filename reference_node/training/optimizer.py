"""Deterministic optimizers over flat buffers: SGD with momentum and Adam.

Written as a few in-place vector ops (not ``torch.optim``) because the op order
*is* the contract: every replica and the replay apply exactly these ops, in this
order, in float32, so committed parameters are bit-identical.  Scalars (bias
corrections, step sizes) are computed in Python floats, the same everywhere.
"""

from __future__ import annotations

import math

import torch

from swarmshake.reference_node.training.config import TrainingConfig

BUFFER_NAMES: dict[str, tuple[str, ...]] = {
    "sgd": ("momentum",),
    "adam": ("exp_avg", "exp_avg_sq"),
}


def new_buffers(
    config: TrainingConfig, parameter_count: int, device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    return {
        name: torch.zeros(parameter_count, dtype=torch.float32, device=device)
        for name in BUFFER_NAMES[config.optimizer]
    }


def apply_update(
    config: TrainingConfig,
    params: torch.Tensor,
    buffers: dict[str, torch.Tensor],
    update_count: int,
    aggregate: torch.Tensor,
) -> None:
    """Apply one committed aggregate gradient to ``params`` in place.

    ``update_count`` is the number of updates applied before this one (Adam's bias
    correction); the caller increments it.
    """
    if aggregate.shape != params.shape or aggregate.dtype != params.dtype:
        raise ValueError(
            f"aggregate {aggregate.dtype} {tuple(aggregate.shape)} does not match "
            f"parameters {params.dtype} {tuple(params.shape)}"
        )
    if config.optimizer == "sgd":
        momentum = buffers["momentum"]
        momentum.mul_(config.momentum).add_(aggregate)
        params.add_(momentum, alpha=-config.learning_rate)
        return
    exp_avg, exp_avg_sq = buffers["exp_avg"], buffers["exp_avg_sq"]
    t = update_count + 1
    beta1, beta2 = config.adam_beta1, config.adam_beta2
    exp_avg.mul_(beta1).add_(aggregate, alpha=1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(aggregate, aggregate, value=1.0 - beta2)
    step_size = config.learning_rate / (1.0 - beta1**t)
    denominator = exp_avg_sq.sqrt().div_(math.sqrt(1.0 - beta2**t)).add_(config.adam_eps)
    params.addcdiv_(exp_avg, denominator, value=-step_size)
