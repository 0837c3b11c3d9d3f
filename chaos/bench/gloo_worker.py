"""One rank of the plain ``torch.distributed`` baseline (``bench overhead``).

Run as ``python -m swarmshake.chaos.bench.gloo_worker RANK WORLD PORT STEPS WARMUP
CONFIG_JSON OUT_JSON [NICE]``; ``NICE`` (default 0) lowers the rank's priority like
the node's worker process (``[worker] nice``).  Each rank trains the reference node's model with the
reference node's step math (``training.step``): its shard's gradient, a gloo
all-reduce (sum, then divided by the world size: the ``mean`` aggregation), the same
optimizer update.  No failure detector, no commit protocol, no fingerprints, no
events: what is left is the cost of training and exchanging gradients, which is
what fault tolerance is measured against.  Rank 0 writes the timing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time

import msgspec
import torch
import torch.distributed as dist

from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.model import FlatMLP
from swarmshake.reference_node.training.step import apply_committed, initial_state, local_gradient

COLLECTIVE_TIMEOUT_S = 60  # a rank that died leaves the others waiting; fail instead


def main(argv: list[str]) -> int:
    rank, world, port, steps, warmup = (int(value) for value in argv[:5])
    config = msgspec.json.decode(argv[5], type=TrainingConfig)
    out_path = argv[6]
    niceness = int(argv[7]) if len(argv) > 7 else 0
    if niceness:
        os.nice(niceness)  # the priority a node's training compute runs at
    torch.set_num_threads(config.threads)  # the same per-process CPU budget as a node's worker
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=dt.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    model = FlatMLP(config)
    state = initial_state(config)
    node = f"n{rank + 1}"
    started = started_mono = 0.0
    losses: list[float] = []
    for step in range(warmup + steps):
        if step == warmup:
            dist.barrier()
            started = time.perf_counter()
            started_mono = time.monotonic()
        gradient, loss = local_gradient(model, state.params, step, node)
        dist.all_reduce(gradient, op=dist.ReduceOp.SUM)
        gradient /= world
        apply_committed(config, state, step, gradient)
        losses.append(loss)
    dist.barrier()
    elapsed = time.perf_counter() - started
    ended_mono = time.monotonic()
    if rank == 0:
        with open(out_path, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "world": world,
                    "steps": steps,
                    "elapsed_s": elapsed,
                    "steps_per_s": steps / elapsed,
                    # The timed window on the host's monotonic clock (CPU accounting).
                    "started_mono": started_mono,
                    "ended_mono": ended_mono,
                    "parameters": model.parameter_count,
                    "first_loss": losses[0],
                    "last_loss": losses[-1],
                },
                handle,
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
