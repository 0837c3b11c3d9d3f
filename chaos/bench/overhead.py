"""``swarmshake bench overhead``: steady-state cost of fault tolerance, one run each.

- **baseline**: ``WORLD`` processes on loopback training the reference node's model
  with plain ``torch.distributed`` gloo all-reduce (``gloo_worker``);
- **swarmshake**: the same model (the same ``TrainingConfig``: widths, batch, seed,
  optimizer), cluster size and data on the local backend with no faults (the
  harness, ``chaos/runner``), its steady commit rate read from the history
  (``reports.recovery.measure_run``).

``overhead = 1 - swarmshake steps/s / baseline steps/s`` (the share of throughput
lost) and ``overhead_pct = 100 * (swarmshake step time / gloo step time - 1)`` (the
issue's figure: how much longer a step takes).  Both sides run one torch thread per
process (``TrainingConfig.threads``) on the same machine; a per-node CPU quota (a
cgroup per node) would need the local backend to place its processes, which it
does not, so the budget is "one compute thread per node" on both sides.

Model size.  The figure answers "what does fault tolerance cost a training job", so
the model must make a step cost what training costs: the issue sizes models from
~1M parameters (CI) to >= 100M (benchmarks).  A 6.8k-parameter model (the old
default) computes a step in ~0.1 ms, so its figure is the protocol's fixed
per-step latency (consensus round trips, events) divided by almost nothing: 300-400 %
whatever the implementation.  Defaults: ``--quick`` 1M parameters (the CI model:
a step is ~5-10 ms of compute and a 4 MB gradient per node), the full run 10M
(~50 ms and 40 MB: large enough that compute and gradient traffic dominate, small
enough that 4 nodes on a 2-core machine reach steady state within the run).
``--params 100M`` runs the benchmark size where memory and time allow.  If the
harness cannot run here, the swarmshake side is reported as not measured with the
reason; the baseline is still measured.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.chaos.bench.cpu_usage import CpuSampler
from swarmshake.chaos.bench.judged import judge_run
from swarmshake.chaos.commands._args import (
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
    bench_flags,
)
from swarmshake.reference_node.config import WorkerSection
from swarmshake.reference_node.training.config import (
    TrainingConfig,
    TrainingConfigError,
    parse_parameter_count,
    sized_for,
)

BASELINE_TIMEOUT_S = 600  # the whole baseline; a hung gloo rendezvous must not hang CI
MAX_WORLD = 16  # processes on one machine; beyond this the machine, not gloo, is measured
MODEL_HIDDEN = {"tiny": [64, 64], "small": [256, 256], "medium": [512, 512, 512, 512]}
QUICK_PARAMS = "1M"  # the CI model (see the module docstring)
FULL_PARAMS = "10M"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu_per_step(sampler: CpuSampler, start: float, end: float, steps: int) -> float | None:
    covered = sampler.window_cpu_s(start, end)
    if covered is None or covered[1] <= 0 or steps < 1:
        return None
    cpu_s, seconds = covered
    # The samples cover part of the window: scale the steps to the covered part.
    return cpu_s / (steps * seconds / (end - start))


def gloo_baseline(
    config: TrainingConfig, world: int, steps: int, warmup: int = 5, nice: int = 0
) -> dict[str, Any]:
    """Steps per second of plain gloo data parallelism (rank 0's timing), and the CPU
    seconds all ranks spent per timed step."""
    port = _free_port()
    encoded = msgspec.json.encode(config).decode()
    with tempfile.TemporaryDirectory(prefix="swarmshake-gloo-") as scratch:
        out = Path(scratch) / "rank0.json"
        with CpuSampler() as sampler:
            processes = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "swarmshake.chaos.bench.gloo_worker",
                        str(rank),
                        str(world),
                        str(port),
                        str(steps),
                        str(warmup),
                        encoded,
                        str(out),
                        str(nice),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for rank in range(world)
            ]
            failures = []
            for rank, process in enumerate(processes):
                try:
                    _, stderr = process.communicate(timeout=BASELINE_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    for other in processes:
                        other.kill()
                    raise RuntimeError(
                        f"gloo baseline rank {rank} did not finish in {BASELINE_TIMEOUT_S}s"
                    ) from None
                if process.returncode != 0:
                    failures.append(
                        f"rank {rank} exited {process.returncode}: {stderr.strip()[-400:]}"
                    )
        if failures:
            raise RuntimeError("; ".join(failures))
        result = json.loads(out.read_text())
        result["nice"] = nice
        result["cpu_s_per_step"] = _cpu_per_step(
            sampler, result["started_mono"], result["ended_mono"], steps
        )
        return result


WIRE_POLL_S = 0.5  # the worker reports its bulk counters every 0.5 s (ipc.WORKER_REPORT_S)
WIRE_WARMUP_STEPS = 5  # counted from here: start-up's state requests and first dials excluded


class WireSampler(threading.Thread):
    """Reads every node's ``/status`` while the run goes, keeping each node's first
    sample past the warm-up and its latest: the bytes its sockets carried between
    them (``wire_bytes``: counted by the link layer as it writes and reads, frame
    headers, tags and keepalives included) over the steps it applied meanwhile.
    Bounded: one poll of every node per ``WIRE_POLL_S`` until stopped."""

    def __init__(self, out: Path, started_wall_s: float):
        super().__init__(daemon=True, name="wire-sampler")
        self._out = out
        self._started_wall_s = started_wall_s
        self._halt = threading.Event()
        self.first: dict[str, dict[str, Any]] = {}
        self.last: dict[str, dict[str, Any]] = {}

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5.0)

    def _ports(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for path in self._out.glob("*/nodes/*/ports.json"):
            try:
                if path.stat().st_mtime < self._started_wall_s:
                    continue  # a node of an earlier run in the same folder
                found[path.parent.name] = int(json.loads(path.read_text())["http"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written, or gone: the next poll reads it
        return found

    def run(self) -> None:
        while not self._halt.wait(WIRE_POLL_S):
            for node, port in self._ports().items():
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/status", timeout=WIRE_POLL_S
                    ) as response:
                        status = json.loads(response.read())
                except (OSError, ValueError, urllib.error.URLError):
                    continue  # stopping, or busy: this poll skips it
                wire = status.get("wire_bytes")
                step = status.get("worker", {}).get("report_step", -1)
                if not wire or step < WIRE_WARMUP_STEPS:
                    continue
                sample = {
                    "incarnation": status.get("incarnation"),
                    "steps_committed": status.get("steps_committed", 0),
                    "report_step": step,
                    "wire_bytes": wire,
                }
                first = self.first.setdefault(node, sample)
                if first["incarnation"] == sample["incarnation"]:
                    self.last[node] = sample

    def per_step(self) -> dict[str, Any]:
        """Bytes per node per step, sent and received, control and bulk, measured."""
        nodes: dict[str, dict[str, float]] = {}
        for node, first in sorted(self.first.items()):
            last = self.last.get(node, first)
            # Bulk counters come with the worker's step; control with the driver's.
            bulk_steps = last["report_step"] - first["report_step"]
            control_steps = last["steps_committed"] - first["steps_committed"]
            if bulk_steps < 1 or control_steps < 1:
                continue
            row: dict[str, float] = {}
            for channel, steps in (("control", control_steps), ("bulk", bulk_steps)):
                for direction in ("sent", "received"):
                    moved = last["wire_bytes"][channel][direction]
                    moved -= first["wire_bytes"][channel][direction]
                    row[f"{channel}_{direction}"] = round(moved / steps, 1)
            row["sent"] = row["control_sent"] + row["bulk_sent"]
            row["received"] = row["control_received"] + row["bulk_received"]
            row["steps"] = bulk_steps
            nodes[node] = row
        if not nodes:
            return {"not_measured": "no node reported two samples past the warm-up"}
        keys = [key for key in next(iter(nodes.values())) if key != "steps"]
        mean = {key: round(sum(row[key] for row in nodes.values()) / len(nodes), 1) for key in keys}
        return {"nodes": nodes, "mean": mean}


def run_aborted(history: Any) -> str | None:
    """Why the harness aborted the run before steady state, or None if it reached it."""
    from swarmshake.reference_node.protocol.history import RunMark

    marks = [event for event in history.events if isinstance(event, RunMark)]
    if any(mark.mark == "steady_state" for mark in marks):
        return None
    for mark in marks:
        if mark.mark == "incident" and mark.data.get("kind") == "aborted":
            return str(mark.data.get("reason", "aborted"))[:300]
    return "no steady_state mark in the harness's events"


# A node may end the run this many steps behind the newest commit and still count as
# training to the end: the harness stops every node at once, and a node applies a
# step ~1 step after the first commit of it (it fetches the aggregate it lacked).
END_LAG_STEPS_MAX = 2


def nodes_lost(history: Any) -> list[str]:
    """The nodes that stopped committing before the run ended (a worker killed for
    memory after steady state, a node that crashed and never came back): the steady
    rate is then not the cluster's.  Each as "name (last step k of K)"."""
    from swarmshake.reference_node.protocol.history import HARNESS, Commit, Start

    started: set[str] = set()
    last: dict[str, int] = {}
    for event in history.events:
        if isinstance(event, Start) and event.node != HARNESS:
            started.add(event.node)
        elif isinstance(event, Commit):
            last[event.node] = max(last.get(event.node, -1), event.step)
    newest = max(last.values(), default=-1)
    return [
        f"{node} (last step {last.get(node, -1)} of {newest})"
        for node in sorted(started)
        if last.get(node, -1) < newest - END_LAG_STEPS_MAX
    ]


def steady_window(history: Any) -> tuple[float, float, int] | None:
    """The node side's measured window: from the first commit of the first step
    committed after the harness's steady_state mark to the first commit of the last
    step, as (start t_mono, end t_mono, steps in between); None with fewer than two.

    gloo's baseline times its steps after 5 warm-up steps; the node's warm-up is its
    run up to steady state (every node past step 2), which at 100M parameters was a
    fifth of the window (its first steps pay first-touch allocations, and the commit
    core has no reply latency to pace its retries by yet)."""
    from swarmshake.reference_node.protocol.history import Commit, RunMark

    mark = next(
        (e.t_mono for e in history.events if isinstance(e, RunMark) and e.mark == "steady_state"),
        None,
    )
    if mark is None:
        return None
    first_commit: dict[int, float] = {}
    for event in history.events:
        if isinstance(event, Commit):
            first_commit[event.step] = min(first_commit.get(event.step, event.t_mono), event.t_mono)
    times = sorted(t for t in first_commit.values() if t >= mark)
    if len(times) < 2:
        return None
    return times[0], times[-1], len(times) - 1


def steady_state_timeout_s(baseline_step_s: float) -> float:
    """How long the node run may take to reach steady state (every node past step 2):
    the harness's 60 s, or, for a model whose plain gloo step alone takes seconds
    (100M parameters on 2 cores: ~7 s), time for start-up and three steps at up to
    five times gloo's step (the node measured 3.6x at 100M), capped at the
    scenario's hour."""
    return min(3600.0, max(60.0, 30.0 + 3 * 5 * baseline_step_s))


def swarmshake_steady_rate(
    config: TrainingConfig, world: int, duration_s: float, out: Path, baseline_step_s: float = 0.0
) -> dict[str, Any]:
    """Steady commits per second of a fault-free local run (the harness)."""
    from swarmshake.chaos import runner
    from swarmshake.chaos.scenario import Cluster, Scenario, SteadyState, resolve
    from swarmshake.reference_node.protocol.history import DeclareDead, History
    from swarmshake.reports.recovery import measure_run

    # Every field of the baseline's config, so both sides train the same model on
    # the same data (shards derive from (seed, step, node id), nodes n1..nN).
    training = msgspec.to_builtins(config)
    scenario = resolve(
        Scenario(
            name=f"bench-overhead-{world}",
            seed=config.seed,
            # Direct links: gloo's ranks talk to each other without a proxy in
            # between, so the node must too (Toxiproxy's copy of every gradient byte
            # is the harness's cost, not the node's: ~60 ms of CPU per 1M-model step).
            cluster=Cluster(nodes=world, backend="local", training=training, links="direct"),
            duration_s=duration_s,
            quiesce_s=0.0,
            steady_state=SteadyState(timeout_s=steady_state_timeout_s(baseline_step_s)),
        )
    )
    wire = WireSampler(out, time.time() - 1.0)
    wire.start()
    try:
        with CpuSampler() as sampler:
            result = runner.run_blocking(
                scenario, runner.RunOptions(out=out, quiet=True, verify=False, reports=False)
            )
    finally:
        wire.stop()
    history = History.load(result.run_dir)
    aborted = run_aborted(history)
    if aborted is not None:
        # A rate from a run that never reached steady state (a node killed for memory
        # at 100M, the others training on) is not the cluster's: say why instead.
        raise RuntimeError(f"the run never reached steady state: {aborted}")
    verdict = judge_run(result.run_dir, history)
    if verdict.unsafe():
        # A rate of a run whose nodes committed different values, or split, is not a
        # training rate (chaos/bench/judged.py): say what broke instead.
        raise RuntimeError(
            f"the run broke {', '.join(verdict.unsafe())}: {verdict.message} ({result.run_dir})"
        )
    lost = nodes_lost(history)
    if lost:
        # The survivors' rate is not the cluster's (a node can die after steady state
        # too, and the harness does not abort then): say which node stopped instead.
        raise RuntimeError(f"nodes stopped committing before the end: {', '.join(lost)}")
    whole_run = measure_run(history).steady_commits_per_s
    window = steady_window(history)
    if window is None:
        raise RuntimeError(
            f"fewer than two steps committed after steady state ({result.status}: {result.message})"
        )
    start, end, intervals = window
    # CPU over the same window, every process the harness started (nodes' control
    # and worker processes, the broker).
    return {
        "steps_per_s": intervals / (end - start),
        # From the first commit on, the warm-up included (the figure before session 21).
        "steps_per_s_whole_run": whole_run,
        "cpu_s_per_step": _cpu_per_step(sampler, start, end, intervals),
        "worker_nice": WorkerSection().nice,
        # Measured on the sockets (WireSampler), not computed from the model size.
        "wire_bytes_per_node_per_step": wire.per_step(),
        # A fault-free run declares no one dead: each one is a false positive that
        # cost the cluster a removal or a rejoin, so the rate says how many it paid.
        "declarations": sum(isinstance(event, DeclareDead) for event in history.events),
        "run_dir": str(result.run_dir),
        # The history as `swarmshake verify` judges it (chaos/bench/judged.py).
        "status": verdict.status,
        "violated": list(verdict.violated),
    }


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="swarmshake bench overhead",
        description=__doc__.splitlines()[0],
        epilog=f"--quick: {QUICK_PARAMS} params, 50 steps, a 10 s run",
        parents=[bench_flags()],
    )
    parser.add_argument("--world", type=int, default=4, help="processes / nodes (default 4)")
    parser.add_argument(
        "--params",
        help=f"model size, e.g. 1M, 10M, 100M (default {FULL_PARAMS}, {QUICK_PARAMS} with --quick)",
    )
    parser.add_argument(
        "--model", choices=sorted(MODEL_HIDDEN), help="a scenario model size instead of --params"
    )
    parser.add_argument("--steps", type=int, help="timed baseline steps (default 40, 50 quick)")
    parser.add_argument(
        "--duration", type=float, help="swarmshake fault-free run, s (default 40, 10 quick)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--baseline-nice",
        type=int,
        default=WorkerSection().nice,
        help="niceness of the gloo ranks (default: the node worker's, where its training runs)",
    )
    parser.add_argument("--baseline-only", action="store_true", help="skip the swarmshake run")
    parser.add_argument(
        "--wire-dtype",
        choices=["fp32", "int8"],
        default="fp32",
        help="the nodes' contributions on the wire (training.wire_dtype; gloo stays fp32)",
    )
    parser.add_argument(
        "--aggregation",
        choices=["mean", "median", "trimmed_mean", "krum", "multi_krum"],
        default="mean",
        help="the nodes' aggregation rule (training.aggregation; gloo always averages)",
    )
    parser.add_argument(
        "--aggregation-path",
        choices=["sharded", "all_to_all", "both"],
        default="both",
        help="how the nodes' contributions travel (training.aggregation_path); "
        "both: one run of each after the one baseline, side by side (default)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench-overhead"))
    return parser


def _compare(document: dict[str, Any], base: float, side: dict[str, Any]) -> None:
    """The figures of one swarmshake run against the baseline, into ``side``."""
    swarm = side.get("steps_per_s")
    side["overhead"] = None if swarm is None else round(1.0 - swarm / base, 4)
    # The figure (goal <= 10): extra step time of swarmshake over gloo, in %.
    side["overhead_pct"] = None if swarm is None else round(100.0 * (base / swarm - 1.0), 2)
    side["step_time_ms"] = None if swarm is None else round(1000.0 / swarm, 3)
    base_cpu = document["baseline"].get("cpu_s_per_step")
    swarm_cpu = side.get("cpu_s_per_step")
    side["cpu_overhead_pct"] = (
        None if not (base_cpu and swarm_cpu) else round(100.0 * (swarm_cpu / base_cpu - 1.0), 2)
    )


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.steps is None:
        # 10M-parameter steps take ~10x a 1M one: fewer timed steps, a longer run,
        # so both sides time a few dozen steps.
        args.steps = 50 if args.quick else 40
    if args.duration is None:
        args.duration = 10.0 if args.quick else 40.0
    if not 2 <= args.world <= MAX_WORLD:
        raise UsageError(f"--world {args.world}: must lie in [2, {MAX_WORLD}]")
    if not 1 <= args.steps <= 100_000:
        raise UsageError(f"--steps {args.steps}: must lie in [1, 100000]")
    if args.model and args.params:
        raise UsageError("give --params or --model, not both")
    try:
        if args.model:
            config = TrainingConfig(seed=args.seed, hidden=MODEL_HIDDEN[args.model], threads=1)
        else:
            count = parse_parameter_count(
                args.params or (QUICK_PARAMS if args.quick else FULL_PARAMS)
            )
            config = sized_for(count, seed=args.seed, threads=1)
    except TrainingConfigError as error:
        raise UsageError(f"--params {args.params!r}: {error}") from None
    document: dict[str, Any] = {
        "world": args.world,
        "model": args.model or f"mlp{config.hidden}",
        "parameters": config.parameter_count(),
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],  # wall-clock rates need the machine's load
    }
    try:
        document["baseline"] = gloo_baseline(
            config, args.world, args.steps, nice=args.baseline_nice
        )
    except RuntimeError as error:
        print(f"swarmshake bench overhead: baseline failed: {error}", file=sys.stderr)
        return EXIT_UNKNOWN
    paths = (
        ["sharded", "all_to_all"] if args.aggregation_path == "both" else [args.aggregation_path]
    )
    document["aggregation"] = args.aggregation
    document["paths"] = {}
    base = document["baseline"]["steps_per_s"]
    for path in paths:
        if args.baseline_only:
            side: dict[str, Any] = {"not_measured": "--baseline-only"}
        else:
            try:
                nodes_config = msgspec.structs.replace(
                    config,
                    wire_dtype=args.wire_dtype,
                    aggregation=args.aggregation,
                    aggregation_path=path,
                )
                side = swarmshake_steady_rate(
                    nodes_config,
                    args.world,
                    args.duration,
                    args.out / path,
                    1.0 / base if base else 0.0,
                )
                side["wire_dtype"] = args.wire_dtype
            except Exception as error:  # noqa: BLE001 - any harness failure: say what, keep the baseline
                side = {"not_measured": f"{type(error).__name__}: {error}"}
        _compare(document, base, side)
        document["paths"][path] = side
    # The first path's run is the headline (sharded when both ran).
    document["swarmshake"] = document["paths"][paths[0]]
    document["swarmshake"]["aggregation_path"] = paths[0]
    swarm = document["swarmshake"].get("steps_per_s")
    document["overhead"] = None if swarm is None else round(1.0 - swarm / base, 4)
    # The figure (goal <= 10): extra step time of swarmshake over gloo, in %.
    document["overhead_pct"] = None if swarm is None else round(100.0 * (base / swarm - 1.0), 2)
    document["step_time_ms"] = {
        "gloo": round(1000.0 / base, 3),
        "swarmshake": None if swarm is None else round(1000.0 / swarm, 3),
    }
    # The same comparison in CPU spent per step (every process of each side): on a
    # machine other jobs share, far steadier than the wall-clock figure above.
    base_cpu = document["baseline"].get("cpu_s_per_step")
    swarm_cpu = document["swarmshake"].get("cpu_s_per_step")
    document["cpu_ms_per_step"] = {
        "gloo": None if base_cpu is None else round(1000.0 * base_cpu, 3),
        "swarmshake": None if swarm_cpu is None else round(1000.0 * swarm_cpu, 3),
    }
    document["cpu_overhead_pct"] = (
        None if not (base_cpu and swarm_cpu) else round(100.0 * (swarm_cpu / base_cpu - 1.0), 2)
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overhead.json").write_text(json.dumps(document, indent=2) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        texts = []
        for path, side in document["paths"].items():
            rate = side.get("steps_per_s")
            # 3 significant digits: a 100M model trains at 0.05 steps/s.
            texts.append(
                f"{path}: {rate:.3g} steps/s, overhead {side['overhead_pct']} %, "
                f"{side['declarations']} declarations"
                if rate
                else f"{path}: {side['not_measured']}"
            )
        print(
            f"gloo all-reduce ({args.world} processes): {base:.3g} steps/s; swarmshake "
            f"({args.aggregation}): {'; '.join(texts)}",
            file=sys.stderr,
        )
    measured = all(side.get("steps_per_s") is not None for side in document["paths"].values())
    return EXIT_VALID if measured or args.baseline_only else EXIT_UNKNOWN
