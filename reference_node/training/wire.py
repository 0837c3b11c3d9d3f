"""Gradients on the wire: fp32 as computed, or int8 blocks with error feedback.

``TrainingConfig.wire_dtype = "int8"`` sends each contribution as the block int8
quantization of ``kernels.quant`` (one fp32 scale per ``WIRE_BLOCK`` values): about
a quarter of the fp32 bytes.  Payload layout: ``numel`` int8 values, then
``ceil(numel / WIRE_BLOCK)`` fp32 scales (native byte order, as fp32 payloads are).

Every node must aggregate the same bits (S1 is checked on the parameters after
applying), so the sender does not keep its own exact gradient: it aggregates the
dequantization of what it sent, the very function every receiver runs on the same
bytes.  The quantization error is not lost: each node keeps it (``residual``) and
adds it to its next gradient before quantizing (error feedback, Seide et al. 2014;
Karimireddy et al. 2019), so the sum of what a node sent over many steps tracks the
sum of its gradients within one step's quantization error.

The residual is the node's private state: it is not checkpointed (a restarted node
starts with none) and not in the history, so ``verify.replay`` cannot recompute an
int8 run's contributions and says ``unknown`` for it.
"""

from __future__ import annotations

import torch

from swarmshake.kernels.quant import dequantize_int8, quantize_int8
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.device import resolve_device

# Values per scale: 256 keeps the scales' overhead at 4/256 = 1.6 % of the int8 bytes
# and a block's amax local enough that one outlier costs only its own block.
WIRE_BLOCK = 256


class WireError(ValueError):
    """A contribution payload that does not decode for this model and wire dtype."""


def scale_count(numel: int) -> int:
    return (numel + WIRE_BLOCK - 1) // WIRE_BLOCK


def payload_nbytes(config: TrainingConfig, numel: int) -> int:
    """Bytes of one contribution of ``numel`` parameters on the wire."""
    if config.wire_dtype == "int8":
        return numel + 4 * scale_count(numel)
    return 4 * numel


def decode(
    config: TrainingConfig, blob: bytes | bytearray | memoryview, numel: int
) -> torch.Tensor:
    """A received contribution as the fp32 tensor every node aggregates (CPU)."""
    if len(blob) != payload_nbytes(config, numel):
        raise WireError(
            f"{len(blob)} bytes, expected {payload_nbytes(config, numel)} "
            f"for {numel} parameters as {config.wire_dtype}"
        )
    if config.wire_dtype == "fp32":
        return torch.frombuffer(blob, dtype=torch.float32)
    q = torch.frombuffer(blob, dtype=torch.int8, count=numel)
    # Copied: at offset ``numel`` the scales need not be 4-byte aligned (a few KB).
    scales = torch.frombuffer(
        blob, dtype=torch.float32, offset=numel, count=scale_count(numel)
    ).clone()
    return dequantize_blocks(q, scales)


def dequantize_blocks(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``kernels.quant.dequantize_int8`` to fp32 on the CPU, bit for bit (the same one
    rounded fp32 product ``q * scale`` per value), ~10x faster: a block-shaped product
    instead of the reference's gather of one scale index per value (7-10 ms a 1M
    contribution, three of them a step on the worker's event loop)."""
    numel = q.numel()
    full = numel // WIRE_BLOCK * WIRE_BLOCK
    out = torch.empty(numel, dtype=torch.float32)
    blocks = full // WIRE_BLOCK
    torch.mul(
        q[:full].view(blocks, WIRE_BLOCK).to(torch.float32),
        scales[:blocks, None],
        out=out[:full].view(blocks, WIRE_BLOCK),
    )
    if full < numel:
        torch.mul(q[full:].to(torch.float32), scales[blocks], out=out[full:])
    return out


class WireEncoder:
    """One node's sending side: ``encode(gradient)`` gives the payload to send and the
    tensor this node aggregates as its own contribution (bit-equal to what every
    receiver decodes).  Keeps the error-feedback residual between steps."""

    def __init__(self, config: TrainingConfig):
        self.config = config
        self.residual: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget the residual (a state was installed: it belongs to other parameters)."""
        self.residual = None

    def encode(self, gradient: torch.Tensor) -> tuple[memoryview, torch.Tensor]:
        """``(payload, own)``.  On a GPU training device the int8 work runs there, in
        ``kernels.quant``'s CUDA kernels: the gradient (on the device already, or sent
        over once) is corrected and quantized on the GPU, only the int8 values and the
        scales come back to host memory (a quarter of the fp32 bytes), and the residual
        stays on the device.  The bytes are the CPU path's (the kernels agree with the
        torch reference bit for bit), and ``own`` is decoded from the payload on the
        CPU either way, the very bits every receiver decodes."""
        flat = gradient.reshape(-1)
        if self.config.wire_dtype == "fp32":
            return memoryview(flat.numpy()).cast("B"), flat
        device = resolve_device(self.config.device)
        work = flat.to(device)  # no copy on the CPU, or for a gradient on its GPU already
        corrected = work if self.residual is None else work + self.residual.to(device)
        q, scales = quantize_int8(corrected, WIRE_BLOCK)
        numel = flat.numel()
        payload = bytearray(payload_nbytes(self.config, numel))
        view = memoryview(payload)
        view[:numel] = memoryview(q.cpu().numpy()).cast("B")
        view[numel:] = memoryview(scales.cpu().numpy()).cast("B")
        # What a receiver computes from these bytes, bit for bit (the same function
        # on the same bytes): the sender aggregates exactly that.
        own = decode(self.config, payload, numel)
        # The residual against the same values: on a GPU the dequantization kernel
        # computes them there (one rounded product each, as ``decode`` does) rather
        # than sending ``own`` back over.
        sent = own if device.type == "cpu" else dequantize_int8(q, scales, numel, WIRE_BLOCK)
        # A non-finite block (a diverged or Byzantine gradient) is sent as NaN; its
        # error is not carried, or it would poison every later step of this node.
        residual = corrected - sent
        self.residual = torch.where(torch.isfinite(residual), residual, 0.0)
        return view, own


def shard_payload(
    config: TrainingConfig, payload: memoryview, numel: int, start: int, end: int
) -> memoryview:
    """The part of a whole contribution's ``payload`` that carries values
    ``[start, end)``, itself a payload of ``end - start`` values that ``decode``
    turns into exactly those values of the whole one (protocol.sharding cuts at
    multiples of ``WIRE_BLOCK``, so an int8 shard takes whole blocks and their
    scales).  fp32: a view, no copy; int8: a copy of the shard's bytes (a quarter of
    its fp32 size)."""
    if not 0 <= start <= end <= numel:
        raise WireError(f"shard [{start}, {end}) is not within {numel} values")
    if config.wire_dtype == "fp32":
        return payload[4 * start : 4 * end]
    if start == end:
        return memoryview(b"")  # an empty tail shard of a model smaller than its owners
    if start % WIRE_BLOCK != 0 or (end % WIRE_BLOCK != 0 and end != numel):
        raise WireError(
            f"an int8 shard must cover whole {WIRE_BLOCK}-value blocks: [{start}, {end})"
        )
    first_scale = start // WIRE_BLOCK
    scales = scale_count(end - start)
    piece = bytearray(payload_nbytes(config, end - start))
    piece[: end - start] = payload[start:end]
    offset = numel + 4 * first_scale
    piece[end - start :] = payload[offset : offset + 4 * scales]
    return memoryview(piece)
