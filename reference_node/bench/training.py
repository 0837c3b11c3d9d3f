"""Timings of the training hot paths, printed as one JSON document.

``python -m swarmshake.reference_node.bench.training [--params 1M] [--big 100M]
[--repeats 5]`` measures, on the current thread settings (one thread unless
``--threads``):

- the step of the ``--params`` model: local gradient (forward + backward on one
  node's shard), mean aggregation of 4 contributions, optimizer apply;
- the parameter fingerprint of the ``--params`` and ``--big`` models;
- checkpoint write (with fsync) and read (with verification) of the ``--big``
  model's state, and the in-memory stream/reassemble path rejoin uses: hashed into
  a fresh buffer, and "live" (unhashed, into a kept buffer; parameters still
  fingerprinted on both ends).

Medians of ``--repeats`` runs, in milliseconds and GB/s (1 GB = 1e9 bytes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.checkpoint import (
    StateAssembler,
    read_checkpoint,
    state_chunks,
    write_checkpoint,
)
from swarmshake.reference_node.training.aggregation import aggregate
from swarmshake.reference_node.training.config import parse_parameter_count, sized_for
from swarmshake.reference_node.training.environment import configure_torch, environment_facts
from swarmshake.reference_node.training.step import Replica, apply_committed, local_gradient

MAX_REPEATS = 100  # a benchmark, not a soak test


def median_ms(action: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(samples)


def measure_small(params: int, repeats: int) -> dict[str, object]:
    """One node's step of the small model: gradient, 4-way mean, SGD apply."""
    nodes = ["n1", "n2", "n3", "n4"]
    config = sized_for(params)
    replica = Replica(config, "n1")
    state = replica.state
    gradients = {node: local_gradient(replica.model, state.params, 0, node)[0] for node in nodes}
    facts = environment_facts(config.seed)

    def one_step() -> None:
        gradient, _ = local_gradient(replica.model, state.params, state.step, "n1")
        combined = aggregate(config, {**gradients, "n1": gradient})
        apply_committed(config, state, state.step, combined)

    return {
        "torch_version": facts.torch_version,
        "threads": facts.threads,
        "small_params": config.parameter_count(),
        "batch_per_node": config.batch_per_node,
        "gradient_ms": median_ms(
            lambda: local_gradient(replica.model, state.params, 0, "n1"), repeats
        ),
        "aggregate_mean_4_ms": median_ms(lambda: aggregate(config, gradients), repeats),
        "apply_sgd_ms": median_ms(
            lambda: apply_committed(config, state, state.step, gradients["n2"]), repeats
        ),
        "step_ms": median_ms(one_step, repeats),
        "fingerprint_small_ms": median_ms(lambda: fingerprint_hex(state.params), repeats),
    }


def measure_big(params: int, repeats: int) -> dict[str, object]:
    """Fingerprint, checkpoint write/read and stream/reassemble of the big model's state."""
    config = sized_for(params)
    state = Replica(config, "n1").state
    payload = 4 * state.params.numel() * (1 + len(state.buffers))
    result: dict[str, object] = {
        "big_params": config.parameter_count(),
        "fingerprint_big_ms": median_ms(lambda: fingerprint_hex(state.params), repeats),
    }
    with tempfile.TemporaryDirectory(prefix="swarmshake-bench-") as folder:
        write_ms = median_ms(lambda: write_checkpoint(folder, state, keep=1), repeats)
        path = write_checkpoint(folder, state, keep=1).path
        read_ms = median_ms(lambda: read_checkpoint(path), repeats)

    def stream() -> None:
        assembler = StateAssembler()
        for chunk in state_chunks(state):
            assembler.feed(chunk)
        assembler.finish()

    stream_ms = median_ms(stream, repeats)
    landing = torch.zeros(payload, dtype=torch.uint8)  # paged in once, as a node would keep it

    def stream_live() -> None:
        """A live transfer: frames already authenticated, bytes land in a kept buffer."""
        assembler = StateAssembler(require_payload_hash=False, payload_buffer=landing)
        for chunk in state_chunks(state, hash_payload=False):
            assembler.feed(chunk)
        assembler.finish()

    live_ms = median_ms(stream_live, repeats)
    result.update(
        checkpoint_payload_bytes=payload,
        checkpoint_write_ms=write_ms,
        checkpoint_write_gbps=payload / write_ms / 1e6,
        checkpoint_read_ms=read_ms,
        checkpoint_read_gbps=payload / read_ms / 1e6,
        stream_reassemble_ms=stream_ms,
        stream_reassemble_gbps=payload / stream_ms / 1e6,
        stream_live_ms=live_ms,
        stream_live_gbps=payload / live_ms / 1e6,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swarmshake.reference_node.bench.training")
    parser.add_argument("--params", default="1M", help="small model size (default 1M)")
    parser.add_argument("--big", default="100M", help="large model size (default 100M)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must be in 1..{MAX_REPEATS}")
    try:
        params, big = parse_parameter_count(args.params), parse_parameter_count(args.big)
        configure_torch(args.threads)
    except ValueError as error:
        parser.error(str(error))
    print(
        json.dumps(
            {**measure_small(params, args.repeats), **measure_big(big, args.repeats)}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
