"""The math of one training step, shared by the node's worker, the replay and tests.

Step ``s`` of a run, the contract every replica and ``verify.replay`` follow:

1. every replica holds the same parameters ``P_s`` (float32, flat);
2. each contributor ``c`` computes the gradient of the mean squared error on its
   shard ``(seed, s, c)`` at ``P_s`` (``local_gradient``), and sends it, or what
   its Byzantine behaviour makes of it (``ContributionSource``);
3. the committed contributor set, sorted by node id, is stacked and aggregated
   (``aggregation.aggregate``); ``value_fp`` is the aggregate's fingerprint;
4. every replica applies the aggregate with the optimizer (``apply_committed``)
   giving ``P_{s+1}``; ``param_fp`` is its fingerprint.

No step reads anything but its inputs, so recomputing it anywhere with the same
torch version, thread count and CPU flags gives the same bits.

On ``config.device = "cuda"`` the parameters, optimizer buffers, the shard's
forward/backward and the aggregation run on the GPU (``device.py``); the same
promise holds per GPU model (``environment.py``).  A contribution is handed back
in host memory (it goes on the wire), and ``apply_committed`` takes an aggregate
from either memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.training.byzantine import ByzantineBehaviour, corrupt_gradient
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.data import shard
from swarmshake.reference_node.training.device import resolve_device
from swarmshake.reference_node.training.model import FlatMLP
from swarmshake.reference_node.training.optimizer import apply_update, new_buffers
from swarmshake.reference_node.training.state import TrainingState


@dataclass(frozen=True)
class LocalGradient:
    # Flat float32: what the node sends, in host memory; on a GPU an honest gradient
    # under int8 wire stays on the device, where ``wire.WireEncoder`` quantizes it.
    gradient: torch.Tensor
    loss: float  # the honest loss on the node's shard, before the update
    samples: int


def initial_state(config: TrainingConfig) -> TrainingState:
    """Step 0 of the run, on ``config.device``."""
    device = resolve_device(config.device)
    model = FlatMLP(config)
    params = model.initial_parameters(device)
    return TrainingState(
        step=0,
        params=params,
        optimizer=config.optimizer,
        buffers=new_buffers(config, model.parameter_count, device),
    )


def local_gradient(
    model: FlatMLP, params: torch.Tensor, step: int, node: str
) -> tuple[torch.Tensor, float]:
    """``(flat gradient, loss)`` of ``node``'s shard at ``step`` evaluated at ``params``,
    the gradient on ``params``' device."""
    inputs, targets = shard(model.config, step, node)
    targets = targets.to(params.device)  # drawn on the CPU: the same bits everywhere
    leaf = params.detach().requires_grad_(True)  # shares storage, no copy
    loss = model.loss(leaf, inputs, targets)
    (gradient,) = torch.autograd.grad(loss, leaf)
    return gradient.contiguous(), float(loss.detach())


def apply_committed(
    config: TrainingConfig, state: TrainingState, step: int, aggregate: torch.Tensor
) -> str:
    """Apply the committed aggregate of ``step`` to ``state``; returns the new ``param_fp``."""
    if step != state.step:
        raise ValueError(f"cannot apply step {step} to a state at step {state.step}")
    if state.optimizer != config.optimizer:
        raise ValueError(
            f"state holds {state.optimizer!r} buffers, config says {config.optimizer!r}"
        )
    # An aggregate arrives in host memory (built here, or fetched from a peer).
    aggregate = aggregate.to(state.params.device)
    apply_update(config, state.params, state.buffers, state.update_count, aggregate)
    state.update_count += 1
    state.step += 1
    return fingerprint_hex(state.params)


class ContributionSource:
    """What one node sends each step: its honest gradient, or its Byzantine version.

    Holds the one piece of memory a behaviour needs (the stale gradient), so the
    node's worker and the replay produce the same contribution from the same calls.
    """

    def __init__(self, model: FlatMLP, node: str):
        self.model = model
        self.node = node
        self.behaviour = ByzantineBehaviour()
        self._stale_gradient: torch.Tensor | None = None

    def set_behaviour(self, behaviour: ByzantineBehaviour) -> None:
        self.behaviour = behaviour
        self._stale_gradient = None

    def observe(self, params: torch.Tensor, step: int) -> None:
        """Called at every step boundary, contributor or not: a stale node freezes the
        honest gradient of ``since_step`` here, whether or not it was committed."""
        behaviour = self.behaviour
        if (
            behaviour.mode == "stale"
            and step == behaviour.since_step
            and self._stale_gradient is None
        ):
            gradient, _ = local_gradient(self.model, params, step, self.node)
            self._stale_gradient = gradient.cpu()

    def contribution(self, params: torch.Tensor, step: int) -> LocalGradient:
        self.observe(params, step)
        gradient, loss = local_gradient(self.model, params, step, self.node)
        if self.behaviour.is_honest() and self.model.config.wire_dtype == "int8":
            # Quantized on the device (wire.WireEncoder): only the int8 bytes come over.
            return LocalGradient(
                gradient=gradient, loss=loss, samples=self.model.config.batch_per_node
            )
        # To host memory once here, in the compute thread: the worker sends these
        # bytes, and a Byzantine behaviour draws its noise on the CPU.  (A no-op on
        # the CPU.)
        honest = gradient.cpu()
        sent = honest
        if not self.behaviour.is_honest():
            sent = corrupt_gradient(
                honest,
                self.behaviour,
                step=step,
                node=self.node,
                stale_gradient=self._stale_gradient,
            )
        return LocalGradient(gradient=sent, loss=loss, samples=self.model.config.batch_per_node)


class Replica:
    """One node's training state and step API (what the worker process drives)."""

    def __init__(self, config: TrainingConfig, node: str, state: TrainingState | None = None):
        self.config = config
        self.node = node
        self.model = FlatMLP(config)
        self.device = resolve_device(config.device)
        # A state from a checkpoint or a peer arrives in host memory.
        self.state = state.to(self.device) if state is not None else initial_state(config)
        if self.state.params.numel() != self.model.parameter_count:
            raise ValueError(
                f"state has {self.state.params.numel()} parameters, the configured model "
                f"{self.model.parameter_count}"
            )
        self.source = ContributionSource(self.model, node)

    @property
    def step(self) -> int:
        return self.state.step

    def set_behaviour(self, behaviour: ByzantineBehaviour) -> None:
        """Switch behaviour at the current step boundary; the node logs a ``byzantine``
        event with ``since_step`` so the replay switches at the same boundary."""
        if behaviour.since_step != self.state.step:
            raise ValueError(
                f"behaviour since_step={behaviour.since_step} must be the replica's current "
                f"step {self.state.step} (a switch takes effect at a step boundary)"
            )
        self.source.set_behaviour(behaviour)

    def contribution(self) -> LocalGradient:
        """The gradient this node sends for its current step."""
        return self.source.contribution(self.state.params, self.state.step)

    def apply(self, step: int, aggregate: torch.Tensor) -> str:
        """Apply a committed aggregate; returns ``param_fp``."""
        self.source.observe(self.state.params, step)
        return apply_committed(self.config, self.state, step, aggregate)

    def param_fingerprint(self) -> str:
        return self.state.param_fingerprint()
