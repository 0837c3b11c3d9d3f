"""The training device: resolving ``TrainingConfig.device`` and naming it for replay.

``cpu`` is the default and what CI runs.  ``cuda``/``cuda:N`` put parameters,
optimizer buffers, each step's data and the aggregation on that GPU, where
``swarmshake.kernels`` dispatches the robust rules and the fingerprint to their
CUDA kernels.  What stays in host memory, and why:

- random streams are drawn on the CPU (``seeds.py``) and copied over, so a shard's
  bits do not depend on the device;
- what goes on the wire (a node's contribution, a step's aggregate) is handed back
  in host memory: it is sent over TCP, fingerprinted and committed, served to
  peers; the arithmetic on it runs on the device.

The determinism settings for a GPU are in ``environment.configure_torch``.
"""

from __future__ import annotations

import torch

from swarmshake.reference_node.training.config import TrainingConfigError


class DeviceUnavailableError(TrainingConfigError):
    """The configured training device does not exist on this machine."""


def resolve_device(name: str) -> torch.device:
    """``TrainingConfig.device`` as a ``torch.device`` that exists here, or a clear error."""
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise DeviceUnavailableError(
            f'training config field "device": {name!r} is not "cpu", "cuda" or "cuda:N"'
        )
    if device.type == "cpu":
        return device
    if not torch.cuda.is_available():
        raise DeviceUnavailableError(
            f'training config field "device": {name!r} asks for a GPU but torch '
            f'{torch.__version__} sees no CUDA device here; use device = "cpu"'
        )
    count = torch.cuda.device_count()
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= count:
        raise DeviceUnavailableError(
            f'training config field "device": {name!r} but this machine has {count} CUDA '
            f"device(s) (cuda:0..cuda:{count - 1})"
        )
    return torch.device("cuda", index)


def device_fact(name: str) -> str:
    """What bit-exact replay must match about the device: "cpu", or the GPU model,
    its compute capability and the CUDA runtime (cuBLAS picks kernels by those).
    The index is left out: two identical GPUs compute the same bits."""
    device = resolve_device(name)
    if device.type == "cpu":
        return "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return (
        f"cuda {torch.cuda.get_device_name(device)} sm_{major}{minor} "
        f"cuda-runtime {torch.version.cuda}"
    )


def device_kind(fact: str) -> str:
    """ "cpu" or "cuda" from a device fact or a config's device string."""
    return "cuda" if fact.startswith("cuda") else "cpu"
