"""The Byzantine behaviour a node can be switched into, as a torch-free struct.

The control process decodes it from harness commands (MQTT) and forwards it to the
worker over IPC; it must not import torch to do so (DESIGN: the control process
stays small so node restarts do not starve the other nodes' control loops).  The
gradient math lives in ``byzantine.py``, which re-exports these names.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

ByzantineMode = Literal["honest", "sign_flip", "scaled", "gaussian_noise", "stale", "random_bits"]
BYZANTINE_MODES: tuple[str, ...] = ByzantineMode.__args__  # type: ignore[attr-defined]


class ByzantineBehaviour(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    mode: ByzantineMode = "honest"
    seed: int = 0
    magnitude: float = 10.0
    noise_std: float = 1.0
    since_step: int = 0  # the first step the behaviour applies to

    def __post_init__(self) -> None:
        if not math.isfinite(self.magnitude):
            raise ValueError(f"byzantine magnitude must be finite, got {self.magnitude}")
        if not (math.isfinite(self.noise_std) and self.noise_std >= 0):
            raise ValueError(f"byzantine noise_std must be finite and >= 0, got {self.noise_std}")
        if self.since_step < 0:
            raise ValueError(f"byzantine since_step must be >= 0, got {self.since_step}")

    def is_honest(self) -> bool:
        return self.mode == "honest"
