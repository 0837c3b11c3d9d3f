"""A replica's whole training state: flat parameters, optimizer buffers, counters.

This is what a checkpoint stores and what rejoin state transfer streams.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from swarmshake.kernels import fingerprint_hex


@dataclass
class TrainingState:
    """``step`` is the next step to run: the state holds steps ``0..step-1`` applied."""

    step: int
    params: torch.Tensor  # flat, contiguous, float32
    optimizer: str  # "sgd" | "adam"
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    update_count: int = 0  # updates applied (Adam's bias correction)

    def __post_init__(self) -> None:
        if self.step < 0 or self.update_count < 0:
            raise ValueError(
                f"step and update_count must be >= 0, got {self.step}, {self.update_count}"
            )
        for name, tensor in {"params": self.params, **self.buffers}.items():
            if tensor.dtype != torch.float32 or tensor.dim() != 1 or not tensor.is_contiguous():
                raise ValueError(
                    f"{name} must be a flat contiguous float32 tensor, got "
                    f"{tensor.dtype} {tuple(tensor.shape)}"
                )
            if tensor.numel() != self.params.numel():
                raise ValueError(
                    f"{name} has {tensor.numel()} elements, params {self.params.numel()}"
                )
            if tensor.device != self.params.device:
                raise ValueError(f"{name} is on {tensor.device}, params on {self.params.device}")

    def param_fingerprint(self) -> str:
        return fingerprint_hex(self.params)

    @property
    def device(self) -> torch.device:
        return self.params.device

    def to(self, device: torch.device | str) -> TrainingState:
        """This state with every tensor on ``device`` (itself if already there).

        A checkpoint or a rejoin transfer arrives in host memory; a GPU replica moves
        it over once, bytes unchanged (the fingerprint stays the same)."""
        device = torch.device(device)
        if self.params.device == device:
            return self
        return TrainingState(
            step=self.step,
            params=self.params.to(device),
            optimizer=self.optimizer,
            buffers={name: tensor.to(device) for name, tensor in self.buffers.items()},
            update_count=self.update_count,
        )

    def storage_elements(self) -> int:
        """Elements of one flat tensor holding params and buffers (``clone_into``)."""
        return self.params.numel() * (1 + len(self.buffers))

    def clone_into(self, storage: torch.Tensor) -> TrainingState:
        """A copy whose tensors are views of ``storage`` (flat float32 on this state's
        device, ``storage_elements()`` long): a snapshot that reuses memory already
        mapped instead of allocating (and first-touching) a new state each time."""
        count = self.params.numel()
        if (
            storage.dtype != torch.float32
            or storage.dim() != 1
            or storage.numel() != self.storage_elements()
            or storage.device != self.params.device
        ):
            raise ValueError(
                f"storage must be a flat float32 tensor of {self.storage_elements()} elements "
                f"on {self.params.device}, got {storage.dtype} {tuple(storage.shape)} "
                f"on {storage.device}"
            )
        params = storage[:count]
        params.copy_(self.params)
        buffers = {}
        for index, (name, tensor) in enumerate(self.buffers.items(), start=1):
            buffers[name] = storage[count * index : count * (index + 1)]
            buffers[name].copy_(tensor)
        return TrainingState(
            step=self.step,
            params=params,
            optimizer=self.optimizer,
            buffers=buffers,
            update_count=self.update_count,
        )

    def clone(self) -> TrainingState:
        return TrainingState(
            step=self.step,
            params=self.params.clone(),
            optimizer=self.optimizer,
            buffers={name: tensor.clone() for name, tensor in self.buffers.items()},
            update_count=self.update_count,
        )
