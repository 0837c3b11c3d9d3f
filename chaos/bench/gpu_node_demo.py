"""End to end on one GPU: two training nodes whose S1 checks use the fingerprint kernel
and whose aggregation runs the robust-aggregation kernel.

``python -m swarmshake.chaos.bench.gpu_node_demo [--steps 8] [--params 1M] [--out DIR]``
(on the GPU machine: ``bash kernels/gpu_run.sh`` sets up the path; see
``kernels/gpu_node_demo.sh``).  Two parts, one table each, exit 0 only if every
check holds:

1. *In process*: two ``Replica`` objects (``reference_node.training``) with
   ``device="cuda"``, coordinate-median aggregation (``byzantine_f=0``, the most two
   nodes tolerate), each applying the aggregate to its own parameters.  Per step:
   both replicas' parameter fingerprints equal (S1), the fingerprint of the CUDA
   tensor equals the CPU fingerprint of the same bytes, parameters on the GPU; the
   CUDA kernels that ran are read from ``torch.profiler`` (``robust_kernel`` for the
   median, ``fingerprint_kernel`` for the fingerprints), not inferred.  Then
   ``verify.replay`` on the run's history: on the GPU it must be ``valid``; on the
   CPU ``valid`` or ``unknown`` (a device mismatch), never ``invalid``.
2. *Real nodes*: two node processes (``runtime.launcher.LocalCluster``: control
   process + niced worker each, TCP bulk links, Paxos commit) with the same
   training config, ``device = "cuda"`` passed through the ``[training]`` table.
   Per committed step: both nodes' ``commit.param_fp`` equal (S1) and equal to the
   in-process run's (the same bits, computed in other processes); each worker
   process holds GPU memory (``nvidia-smi``) and has mapped the kernels extension.

This script composes every part (it is a demo, not a library module), so it lives
with the harness's benchmarks, which may import everything, not in ``kernels/``
(which imports torch only); its imports of ``reference_node`` and ``verify`` are
made inside functions, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

KERNEL_NAMES = {"aggregation": "robust_kernel", "fingerprint": "fingerprint_kernel"}
MAX_STEPS = 200  # a demo: its log must stay readable
NODES = ["n1", "n2"]
NODE_START_TIMEOUT_S = 240.0  # two workers import torch and load the extension
STEP_TIMEOUT_S = 60.0  # per committed step of a ~1M-parameter model, generous


@dataclass
class Checks:
    failures: list[str] = field(default_factory=list)

    def require(self, condition: bool, what: str) -> None:
        if not condition:
            self.failures.append(what)


def cuda_kernels_in(action) -> tuple[object, set[str]]:  # noqa: ANN001
    """Run ``action`` under the profiler; its result and the names of the CUDA kernels
    that ran (what executed on the GPU, not what a dispatcher meant to do)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        result = action()
        torch.cuda.synchronize()
    names = {
        event.key
        for event in prof.key_averages()
        if getattr(event, "device_time_total", getattr(event, "cuda_time_total", 0)) > 0
    }
    return result, names


def ran(names: set[str], kernel: str) -> bool:
    return any(kernel in name for name in names)


def in_process(config, steps: int, checks: Checks, log) -> list[str]:  # noqa: ANN001
    """Part 1; returns the per-step parameter fingerprints."""
    from swarmshake.kernels import fingerprint_hex
    from swarmshake.reference_node.training.aggregation import aggregate
    from swarmshake.reference_node.training.local_cluster import LocalRun, StepRecord
    from swarmshake.reference_node.training.step import Replica
    from swarmshake.verify.replay import history_of_local_run, replay_history

    replicas = {node: Replica(config, node) for node in NODES}
    run = LocalRun(replicas=replicas)
    fps: list[str] = []
    log(
        f"{'step':>4} {'loss n1':>9} {'loss n2':>9} {'aggregate fp':>17} {'param fp n1':>17} "
        f"{'param fp n2':>17} {'S1':>3} {'cpu=gpu fp':>10} {'kernels that ran':<34} {'ms':>6}"
    )
    for step in range(steps):
        started = time.perf_counter()
        sent, losses = {}, {}
        for node, replica in replicas.items():
            result = replica.contribution()
            sent[node], losses[node] = result.gradient, result.loss
        combined, aggregation_kernels = cuda_kernels_in(lambda sent=sent: aggregate(config, sent))
        param_fps, fingerprint_kernels = cuda_kernels_in(
            lambda combined=combined, step=step: {
                node: replica.apply(step, combined) for node, replica in replicas.items()
            }
        )
        elapsed_ms = (time.perf_counter() - started) * 1000
        params = replicas["n1"].state.params
        cpu_fp = fingerprint_hex(params.cpu())
        same = len(set(param_fps.values())) == 1
        kernels = sorted(
            kind
            for kind, found in (
                ("robust_kernel", ran(aggregation_kernels, KERNEL_NAMES["aggregation"])),
                ("fingerprint_kernel", ran(fingerprint_kernels, KERNEL_NAMES["fingerprint"])),
            )
            if found
        )
        checks.require(params.is_cuda, f"step {step}: parameters are on {params.device}")
        checks.require(same, f"step {step}: replicas differ {param_fps}")
        checks.require(cpu_fp == param_fps["n1"], f"step {step}: CPU fp {cpu_fp} != GPU fp")
        checks.require(
            len(kernels) == 2, f"step {step}: CUDA kernels seen {sorted(aggregation_kernels)}"
        )
        value_fp = fingerprint_hex(combined)
        log(
            f"{step:>4} {losses['n1']:>9.5f} {losses['n2']:>9.5f} {value_fp:>17} "
            f"{param_fps['n1']:>17} {param_fps['n2']:>17} {'ok' if same else 'NO':>3} "
            f"{'ok' if cpu_fp == param_fps['n1'] else 'NO':>10} {','.join(kernels):<34} "
            f"{elapsed_ms:>6.1f}"
        )
        fps.append(param_fps["n1"])
        run.records.append(
            StepRecord(
                step=step,
                contributors=list(NODES),
                losses=losses,
                value_fp=value_fp,
                param_fps=param_fps,
            )
        )
    history = history_of_local_run(run, config)
    on_gpu = replay_history(history, device=config.device)
    on_cpu = replay_history(history, device="cpu")
    log(f"replay on {config.device}: {on_gpu.status} ({on_gpu.message[:150]})")
    log(
        f"replay on cpu: {on_cpu.status} (environment mismatches: "
        f"{on_cpu.environment_mismatches}) {on_cpu.message[:200]}"
    )
    checks.require(on_gpu.status == "valid", f"GPU replay is {on_gpu.status}")
    checks.require(on_cpu.status != "invalid", "CPU replay of a GPU run said invalid")
    return fps


def gpu_processes() -> dict[int, int]:
    """pid -> MiB of GPU memory, from nvidia-smi; empty where it cannot say."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    table = {}
    for line in out.splitlines():
        pid, _, memory = line.partition(",")
        if pid.strip().isdigit():
            table[int(pid)] = int("".join(ch for ch in memory if ch.isdigit()) or 0)
    return table


def mapped(pid: int, library: str) -> bool:
    """Whether process ``pid`` has mapped a file whose path holds ``library``."""
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def commits(run_dir: Path) -> dict[int, dict[str, str]]:
    from swarmshake.reference_node.protocol import history

    table: dict[int, dict[str, str]] = {}
    for path in (run_dir / "events").glob("*.jsonl"):
        for event in history.read_events(path).events:
            if isinstance(event, history.Commit):
                table.setdefault(event.step, {})[event.node] = event.param_fp
    return table


def real_nodes(training: dict, steps: int, expected: list[str], checks: Checks, log) -> None:  # noqa: ANN001
    """Part 2: two node processes on this GPU."""
    from swarmshake.reference_node.runtime.launcher import LocalCluster

    with tempfile.TemporaryDirectory(prefix="swarmshake-gpu-demo-") as folder:
        # No periodic checkpoints: writing one needs the state in host memory, which
        # reference_node/checkpoint.py does not yet copy (see the report).
        cluster = LocalCluster(
            Path(folder) / "run", NODES, training=training, step={"checkpoint_every": 0}
        )
        started = time.monotonic()
        cluster.start_all()
        try:
            cluster.wait_ready(timeout_s=NODE_START_TIMEOUT_S)
            log(f"2 nodes ready in {time.monotonic() - started:.1f} s")
            cluster.wait_for(
                lambda: all(
                    len(commits(cluster.run_dir).get(step, {})) == 2 for step in range(steps)
                ),
                STEP_TIMEOUT_S * steps,
                what=f"both nodes commit {steps} steps",
            )
            statuses = {node: cluster.status(node) or {} for node in NODES}
            gpu = gpu_processes()
            for node, status in statuses.items():
                pid = int(status.get("worker_pid", 0))
                on_gpu = gpu.get(pid)
                extension = mapped(pid, "swarmshake_kernels")
                driver = mapped(pid, "libcuda.so")  # mapped once a CUDA context exists
                log(
                    f"{node}: worker pid {pid}, GPU memory (nvidia-smi) {on_gpu} MiB, CUDA "
                    f"driver mapped: {driver}, kernels extension mapped: {extension}"
                )
                # nvidia-smi may list no processes inside a VM; the driver mapping says it.
                checks.require(
                    on_gpu is not None or (not gpu and driver),
                    f"{node}'s worker {pid} holds no GPU context",
                )
                checks.require(extension, f"{node}'s worker {pid} did not load the extension")
        finally:
            cluster.stop_all()
        table = commits(cluster.run_dir)
        log(f"{'step':>4} {'n1 param_fp':>17} {'n2 param_fp':>17} {'S1':>3} {'= in-process':>12}")
        for step in range(steps):
            by = table.get(step, {})
            same = len(by) == 2 and len(set(by.values())) == 1
            matches = same and by["n1"] == expected[step]
            log(
                f"{step:>4} {by.get('n1', '-'):>17} {by.get('n2', '-'):>17} "
                f"{'ok' if same else 'NO':>3} {'ok' if matches else 'NO':>12}"
            )
            checks.require(same, f"nodes: step {step} fingerprints {by}")
            checks.require(matches, f"nodes: step {step} differs from the in-process run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swarmshake.chaos.bench.gpu_node_demo")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--params", default="1M", help="model size (default 1M)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--skip-nodes", action="store_true", help="only the in-process part")
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= MAX_STEPS:
        parser.error(f"--steps must be in 1..{MAX_STEPS}")
    if not torch.cuda.is_available():
        print("gpu_node_demo: no CUDA device here; run it on the GPU machine", file=sys.stderr)
        return 2

    from swarmshake.kernels import _ext
    from swarmshake.reference_node.training.config import parse_parameter_count, sized_for
    from swarmshake.reference_node.training.environment import (
        configure_torch,
        environment_facts,
    )

    def log(line: str) -> None:
        print(line, flush=True)

    configure_torch(1)
    if _ext.get() is None:
        print(f"gpu_node_demo: kernels extension: {_ext.build_error()}", file=sys.stderr)
        return 2
    config = sized_for(
        parse_parameter_count(args.params),
        seed=7,
        device=args.device,
        aggregation="median",
        byzantine_f=0,
    )
    facts = environment_facts(config.seed, config.device)
    log(
        f"device: {facts.device}; torch {facts.torch_version}; {config.parameter_count()} "
        f"parameters; aggregation {config.aggregation} of 2 nodes; {args.steps} steps"
    )
    checks = Checks()
    log("\n## in process: 2 Replicas on the GPU")
    expected = in_process(config, args.steps, checks, log)
    if not args.skip_nodes:
        log("\n## real nodes: 2 node processes (LocalCluster) on the same GPU")
        real_nodes(config.to_dict(), args.steps, expected, checks, log)
    log("")
    for failure in checks.failures:
        log(f"FAILED: {failure}")
    log("all checks passed" if not checks.failures else f"{len(checks.failures)} checks failed")
    return 0 if not checks.failures else 1


if __name__ == "__main__":
    sys.exit(main())
