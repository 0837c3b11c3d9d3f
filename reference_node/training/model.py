"""The student MLP, its parameters held in one flat contiguous float32 buffer.

One buffer makes the state cheap to fingerprint, stream, checkpoint and update
(the optimizer is a handful of vector ops): each layer's weight and bias are
views into it, and autograd on the flat leaf yields one flat gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as functional

from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.seeds import generator

DTYPE = torch.float32


class FlatMLP:
    """ReLU MLP ``in -> hidden... -> out`` whose parameters live in one flat buffer.

    Layout, layer by layer: weight ``[fan_out, fan_in]`` row-major, then bias.
    """

    def __init__(self, config: TrainingConfig):
        self.config = config
        self.layers: list[tuple[int, int, int]] = []  # (offset, fan_in, fan_out)
        offset = 0
        for fan_in, fan_out in config.layer_dims():
            self.layers.append((offset, fan_in, fan_out))
            offset += fan_in * fan_out + fan_out
        self.parameter_count = offset

    def initial_parameters(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """Deterministic initialisation from the run seed (torch.nn.Linear's uniform rule),
        drawn on the CPU (the same bits for every device) and copied to ``device``."""
        flat = torch.empty(self.parameter_count, dtype=DTYPE)
        gen = generator(self.config.seed, "init")
        for offset, fan_in, fan_out in self.layers:
            bound = 1.0 / fan_in**0.5
            size = fan_in * fan_out + fan_out
            flat[offset : offset + size].uniform_(-bound, bound, generator=gen)
        return flat.to(device)

    def forward(self, flat: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        if flat.shape != (self.parameter_count,) or flat.dtype != DTYPE:
            raise ValueError(
                f"parameters must be a flat {DTYPE} tensor of {self.parameter_count} "
                f"elements, got {flat.dtype} {tuple(flat.shape)}"
            )
        # Inputs arrive in host memory (data shards, inference requests).
        activations = inputs.to(flat.device)
        last = len(self.layers) - 1
        for index, (offset, fan_in, fan_out) in enumerate(self.layers):
            weight = flat[offset : offset + fan_in * fan_out].view(fan_out, fan_in)
            bias = flat[offset + fan_in * fan_out : offset + fan_in * fan_out + fan_out]
            activations = functional.linear(activations, weight, bias)
            if index != last:
                activations = functional.relu(activations)
        return activations

    def loss(self, flat: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean squared error over the batch and outputs."""
        return functional.mse_loss(self.forward(flat, inputs), targets)
