from __future__ import annotations

import torch

from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.data import evaluation_set, shard, teacher_for


def test_a_shard_is_recomputed_bit_for_bit_in_any_order(small_config: TrainingConfig) -> None:
    first_x, first_y = shard(small_config, 5, "n2")
    shard(small_config, 6, "n3")  # other streams drawn in between change nothing
    teacher_for.cache_clear()  # nor does rebuilding the teacher
    again_x, again_y = shard(small_config, 5, "n2")
    assert torch.equal(first_x, again_x) and torch.equal(first_y, again_y)


def test_shards_differ_by_step_node_and_seed(small_config: TrainingConfig) -> None:
    base, _ = shard(small_config, 5, "n2")
    other_step, _ = shard(small_config, 6, "n2")
    other_node, _ = shard(small_config, 5, "n3")
    other_seed, _ = shard(TrainingConfig(seed=8, hidden=[64, 64], batch_per_node=16), 5, "n2")
    for other in (other_step, other_node, other_seed):
        assert not torch.equal(base, other)


def test_shard_shapes_and_teacher_targets(small_config: TrainingConfig) -> None:
    inputs, targets = shard(small_config, 0, "n1")
    assert inputs.shape == (16, small_config.input_dim)
    assert targets.shape == (16, small_config.output_dim)
    assert inputs.dtype == targets.dtype == torch.float32
    # the labels are a non-trivial function of the inputs: not constant, unit-ish scale
    assert 0.05 < float(targets.std()) < 5.0


def test_evaluation_set_is_not_a_training_shard(small_config: TrainingConfig) -> None:
    eval_x, _ = evaluation_set(small_config, size=16)
    assert not torch.equal(eval_x, shard(small_config, 0, "n1")[0])
