"""Byzantine gradient behaviours a node can be switched into.

Each behaviour turns the honest gradient of ``(step, node)`` into what a faulty or
malicious node sends, as a pure function of the behaviour's parameters, the step
and the node: a replay that knows the schedule (``byzantine`` history events)
recomputes the same bits.

- ``sign_flip``: ``-magnitude * g``.  A plain ``-g`` barely hurts a mean with an
  honest majority (it moves ``(n - 2f)/n`` of the honest way), so the default
  magnitude of 10 makes one flipped node out of four reverse a plain mean, the
  classic attack robust rules exist for.
- ``scaled``: ``magnitude * g`` (an inflated but well-aligned gradient).
- ``gaussian_noise``: ``g + N(0, noise_std^2)``, seeded by ``(seed, node, step)``.
- ``stale``: the node's honest gradient of ``since_step`` sent again at every later
  step (a node that stopped applying updates).  The caller keeps that gradient.
- ``random_bits``: uniformly random 32-bit patterns read as float32 (NaN, inf and
  huge values included), seeded by ``(seed, node, step)``.
"""

from __future__ import annotations

import torch

from swarmshake.reference_node.training.behaviour import (  # re-exported: the old names
    BYZANTINE_MODES,
    ByzantineBehaviour,
    ByzantineMode,
)
from swarmshake.reference_node.training.seeds import generator

__all__ = [
    "BYZANTINE_MODES",
    "ByzantineBehaviour",
    "ByzantineMode",
    "ByzantineSchedule",
    "corrupt_gradient",
]


def corrupt_gradient(
    honest: torch.Tensor,
    behaviour: ByzantineBehaviour,
    *,
    step: int,
    node: str,
    stale_gradient: torch.Tensor | None = None,
) -> torch.Tensor:
    """What a node in ``behaviour`` sends at ``step`` instead of ``honest`` (a new tensor)."""
    mode = behaviour.mode
    if mode == "honest" or step < behaviour.since_step:
        return honest.clone()
    if mode == "sign_flip":
        return honest * (-behaviour.magnitude)
    if mode == "scaled":
        return honest * behaviour.magnitude
    if mode == "gaussian_noise":
        gen = generator(behaviour.seed, "byzantine-noise", node, step)
        noise = torch.randn(honest.shape, generator=gen, dtype=honest.dtype)
        return honest + noise * behaviour.noise_std
    if mode == "stale":
        if stale_gradient is None:
            raise ValueError(f"stale behaviour at step {step} needs the gradient of since_step")
        return stale_gradient.clone()
    if mode == "random_bits":
        gen = generator(behaviour.seed, "byzantine-bits", node, step)
        bits = torch.randint(-(2**31), 2**31, honest.shape, generator=gen, dtype=torch.int64).to(
            torch.int32
        )
        return bits.view(torch.float32).clone()
    raise ValueError(f"unknown byzantine mode {mode!r}; known: {', '.join(BYZANTINE_MODES)}")


class ByzantineSchedule:
    """When each node switches behaviour: the node's worker, the in-process cluster and
    the replay all switch at the same step boundaries (a behaviour's ``since_step``)."""

    def __init__(self, switches: dict[str, list[ByzantineBehaviour]] | None = None):
        self._switches: dict[str, dict[int, ByzantineBehaviour]] = {}
        for node, behaviours in (switches or {}).items():
            for behaviour in behaviours:
                self.add(node, behaviour)

    def add(self, node: str, behaviour: ByzantineBehaviour) -> None:
        by_step = self._switches.setdefault(node, {})
        if behaviour.since_step in by_step and by_step[behaviour.since_step] != behaviour:
            raise ValueError(
                f"{node} has two different behaviours switched on at step {behaviour.since_step}"
            )
        by_step[behaviour.since_step] = behaviour

    def nodes(self) -> list[str]:
        return sorted(self._switches)

    def switch_at(self, node: str, step: int) -> ByzantineBehaviour | None:
        """The behaviour ``node`` switches to at the start of ``step``, if any."""
        return self._switches.get(node, {}).get(step)
