"""Which CUDA kernels a training step runs, and their share of it, under torch.profiler.

``python -m swarmshake.chaos.bench.gpu_profile [--model large] [--nodes 5]
[--steps 2] [--out DIR]`` (``scripts/gpu_chaos_run.sh`` runs it on the device
machine).  The step is the node's own path, function for function, as
``reference_node/training/local_cluster.py`` composes it: every replica's
``Replica.contribution()``, its ``WireEncoder.encode()`` (int8 with error feedback
when ``wire_dtype = "int8"``), ``aggregation.aggregate()`` over what the wire
carried, and every replica's ``Replica.apply()`` (which fingerprints the new
parameters).  Only the sockets are missing: a real node's bulk transfer is measured
by the chaos run itself.

For each robust rule (median, trimmed mean, Krum) one warm-up step, then ``--steps``
profiled steps.  Reported per rule: the step's wall time, the CUDA time of every
kernel (top 30), and the share of the step's wall time spent in the project's own
kernels (``robust_kernel``, ``krum_kernel``, ``fingerprint_kernel``,
``quant_kernel``, ``dequant_kernel``), each said present or absent as the profiler
saw it, not as a dispatcher meant it.  Exit 0 when it ran; the table is the result.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch

OWN_KERNELS = (
    "robust_kernel",
    "krum_kernel",
    "fingerprint_kernel",
    "quant_kernel",
    "dequant_kernel",
)
RULES = ("median", "trimmed_mean", "krum")
MAX_NODES = 16  # replicas share one GPU here; 16 of 100M parameters fill ~26 GB
MAX_STEPS = 20  # a profile, not a training run
TOP_KERNELS = 30


def is_own_kernel(kernel: str, key: str) -> bool:
    """Whether the profiler's ``key`` names ``kernel`` or one of its variants
    (``quant_kernel_vec``), as an identifier: ``dequant_kernel`` is not a
    ``quant_kernel``, and the ``aten::`` ops that launched a kernel are not it."""
    if key.startswith("aten::"):
        return False
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(kernel)}(?![A-Za-z0-9])", key) is not None


def device_time_us(event) -> float:  # noqa: ANN001
    return float(getattr(event, "device_time_total", getattr(event, "cuda_time_total", 0.0)))


def on_gpu(event) -> bool:  # noqa: ANN001
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def profile_rule(rule: str, args: argparse.Namespace, log) -> dict:  # noqa: ANN001
    from torch.profiler import ProfilerActivity, profile

    from swarmshake.chaos.scenario import MODEL_SIZES
    from swarmshake.reference_node.training.aggregation import aggregate
    from swarmshake.reference_node.training.config import TrainingConfig
    from swarmshake.reference_node.training.step import Replica
    from swarmshake.reference_node.training.wire import WireEncoder

    config = TrainingConfig(
        hidden=MODEL_SIZES[args.model],
        device=args.device,
        aggregation=rule,
        byzantine_f=1,
        wire_dtype=args.wire_dtype,
    )
    names = [f"n{i + 1}" for i in range(args.nodes)]
    replicas = {name: Replica(config, name) for name in names}
    encoders = {name: WireEncoder(config) for name in names}
    cuda = config.device.startswith("cuda")

    def step(index: int) -> None:
        sent = {}
        for name in names:
            result = replicas[name].contribution()
            sent[name] = encoders[name].encode(result.gradient)[1]
        combined = aggregate(config, sent)
        for name in names:
            replicas[name].apply(index, combined)
        if cuda:
            torch.cuda.synchronize()

    step(0)  # warm-up: allocator, cuBLAS handles, the extension's first launch
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for index in range(1, args.steps + 1):
            step(index)
        wall_us = (time.perf_counter() - started) * 1e6
    events = [e for e in prof.key_averages() if device_time_us(e) > 0]
    events.sort(key=device_time_us, reverse=True)
    # What ran on the GPU (kernels, copies), not the CPU ops that launched it: an
    # aten:: op's device time is its kernels' again.
    gpu_us = sum(device_time_us(e) for e in events if on_gpu(e))
    own = {}
    for kernel in OWN_KERNELS:
        matching = [e for e in events if is_own_kernel(kernel, e.key)]
        us = sum(device_time_us(e) for e in matching)
        own[kernel] = {
            "ran": bool(matching),
            "cuda_us": us,
            "calls": sum(e.count for e in matching),
        }
    per_step_us = wall_us / args.steps
    own_us = sum(v["cuda_us"] for v in own.values()) / args.steps
    result = {
        "rule": rule,
        "parameters": config.parameter_count(),
        "nodes": args.nodes,
        "wire_dtype": args.wire_dtype,
        "step_wall_ms": per_step_us / 1000,
        "cuda_kernel_ms_per_step": gpu_us / args.steps / 1000,
        "own_kernels_ms_per_step": own_us / 1000,
        "own_kernels_share_of_step": own_us / per_step_us if per_step_us else 0.0,
        "cuda_share_of_step": (gpu_us / args.steps) / per_step_us if per_step_us else 0.0,
        "own_kernels": own,
        "top_kernels": [
            {"name": e.key[:120], "calls": e.count, "cuda_us": device_time_us(e)}
            for e in events[:TOP_KERNELS]
        ],
    }
    log(f"## {rule}: {config.parameter_count():,} parameters, {args.nodes} replicas, "
        f"wire {args.wire_dtype}, {args.steps} profiled steps")  # fmt: skip
    log(f"step wall {result['step_wall_ms']:.1f} ms; CUDA kernels "
        f"{result['cuda_kernel_ms_per_step']:.2f} ms/step "
        f"({100 * result['cuda_share_of_step']:.1f} %); own kernels "
        f"{result['own_kernels_ms_per_step']:.2f} ms/step "
        f"({100 * result['own_kernels_share_of_step']:.2f} % of the step)")  # fmt: skip
    for kernel, seen in own.items():
        log(f"  {kernel:<20} {'ran' if seen['ran'] else 'did not run':<12} "
            f"calls {seen['calls']:>4}  cuda {seen['cuda_us'] / 1000:9.3f} ms")  # fmt: skip
    log(f"  {'kernel':<90} {'calls':>6} {'cuda ms':>9}")
    for row in result["top_kernels"]:
        log(f"  {row['name'][:90]:<90} {row['calls']:>6} {row['cuda_us'] / 1000:>9.3f}")
    replicas.clear()  # free the GPU memory before the next rule
    encoders.clear()
    if cuda:
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    from swarmshake.chaos.scenario import MODEL_SIZES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODEL_SIZES), default="large")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--wire-dtype", choices=("fp32", "int8"), default="int8")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rules = [r for r in args.rules.split(",") if r]
    if not 3 <= args.nodes <= MAX_NODES or not 1 <= args.steps <= MAX_STEPS:
        print(f"--nodes in 3..{MAX_NODES} (byzantine_f = 1), --steps in 1..{MAX_STEPS}")
        return 64
    if not rules or set(rules) - set(RULES):
        print(f"--rules: a comma-separated subset of {', '.join(RULES)}")
        return 64
    if args.rules == ",".join(RULES) and args.nodes < 5:
        print("krum with byzantine_f = 1 needs at least 5 replicas (n >= 2f + 3)")
        return 64
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print("--device cuda but torch sees no GPU here")
            return 64
        log(f"card: {torch.cuda.get_device_name()}; torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}")  # fmt: skip
    results = [profile_rule(rule, args, log) for rule in rules]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_profile.json").write_text(json.dumps(results, indent=1))
        (args.out / "gpu_profile.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
