"""Crash detection and heartbeat gaps of real node processes on loopback, no injected jitter.

``python -m swarmshake.reference_node.bench.detection --nodes 4 --kills 6 --json``

Starts a local cluster, waits for every node to be ready and settled, then
repeatedly SIGKILLs one node (round robin), measures when each live peer logs
``declare_dead`` for it (``t_mono`` of the event minus the host-monotonic time of
the kill: both are CLOCK_MONOTONIC of this host), restarts it and waits until it
is ready again.  Reports detection p50/p99/max over every (kill, observer) pair,
the first detection per kill, false positives (a ``suspect`` or ``declare_dead``
of a node that was up), and heartbeat gap quantiles from every node's /status.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.launcher import LocalCluster, run_dir_or_scratch

DETECTION_WAIT_S = 10.0  # far above the detector's bound; a miss is reported, not waited out


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "count": len(ordered),
        "p50_ms": 1000 * pick(0.5),
        "p99_ms": 1000 * pick(0.99),
        "max_ms": 1000 * ordered[-1],
    }


def events_of(run_dir: Path) -> list[history.EventBase]:
    collected: list[history.EventBase] = []
    for path in sorted((run_dir / "events").glob("*.jsonl")):
        collected.extend(history.read_events(path).events)
    return collected


def run(
    nodes: int,
    kills: int,
    settle_s: float,
    run_dir: Path,
    training: dict,
    step: dict,
    control_nice: int = 0,
) -> dict:
    names = [f"n{i + 1}" for i in range(nodes)]
    extra = {"worker": {"control_nice": control_nice}} if control_nice else None
    cluster = LocalCluster(run_dir, names, training=training, step=step, extra=extra)
    down: list[tuple[str, float, float]] = []  # (node, killed at, ready again at)
    detections: list[float] = []
    first: list[float] = []
    missed = 0
    cluster.start_all()
    try:
        cluster.wait_ready(timeout_s=300)
        time.sleep(settle_s)
        steady_from = time.monotonic()
        gaps_before_kills = {n: (cluster.status(n) or {}).get("heartbeat_gaps", {}) for n in names}
        for index in range(kills):
            victim = names[index % nodes]
            killed_at = time.monotonic()
            cluster.kill(victim, signal.SIGKILL)
            observers = [n for n in names if n != victim]
            deadline = time.monotonic() + DETECTION_WAIT_S
            seen: dict[str, float] = {}
            while time.monotonic() < deadline and len(seen) < len(observers):
                time.sleep(0.1)
                for event in events_of(run_dir):
                    if (
                        isinstance(event, history.DeclareDead)
                        and event.peer == victim
                        and event.node in observers
                        and event.t_mono >= killed_at
                        and event.node not in seen
                    ):
                        seen[event.node] = event.t_mono - killed_at
            missed += len(observers) - len(seen)
            detections.extend(seen.values())
            if seen:
                first.append(min(seen.values()))
            cluster.start(victim)
            cluster.wait_ready([victim], timeout_s=300)
            down.append((victim, killed_at, time.monotonic()))
            time.sleep(settle_s)
        statuses = {n: cluster.status(n) or {} for n in names}
    finally:
        cluster.stop_all()
    false_positives = {"suspect": 0, "declare_dead": 0}
    examples: list[str] = []
    for event in events_of(run_dir):
        if (
            not isinstance(event, history.Suspect | history.DeclareDead)
            or event.t_mono < steady_from
        ):
            continue
        if event.peer == event.node:
            continue
        was_down = any(
            node == event.peer and killed <= event.t_mono <= back for node, killed, back in down
        )
        if was_down:
            continue
        stop_at = max((b for _, _, b in down), default=steady_from)
        if event.t_mono > stop_at + settle_s:
            continue  # the final shutdown: peers leaving, not failures
        kind = "suspect" if isinstance(event, history.Suspect) else "declare_dead"
        false_positives[kind] += 1
        if len(examples) < 5:
            examples.append(
                f"{event.node} {kind} {event.peer} at {event.t_mono:.3f}: {getattr(event, 'reason', '')}"
            )
    gaps = {node: status.get("heartbeat_gaps", {}) for node, status in statuses.items()}
    worst = max((g["max_ms"] for per in gaps.values() for g in per.values()), default=0.0)
    return {
        "nodes": nodes,
        "kills": kills,
        "detection_all_observers": quantiles(detections),
        "detection_first_observer": quantiles(first),
        "missed_detections": missed,
        "false_positives": false_positives,
        "false_positive_examples": examples,
        "heartbeat_gap_max_ms": worst,
        "heartbeat_gaps_at_end": gaps,
        "heartbeat_gaps_before_kills": gaps_before_kills,
        "gradient_compute_s": {
            n: s.get("worker", {}).get("last_step_s") for n, s in statuses.items()
        },
        "step_time_median_s": {
            n: s.get("commit", {}).get("step_time_s_median_recent") for n, s in statuses.items()
        },
        "steps_committed": {n: s.get("steps_committed") for n, s in statuses.items()},
        "run_dir": str(run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--settle-s", type=float, default=4.0)
    parser.add_argument("--params", default="1M", help="model size (training config sized_for)")
    parser.add_argument("--run-dir", type=Path)
    parser.add_argument("--control-nice", type=int, default=0, help="e.g. -10 (needs root)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from swarmshake.reference_node.training.config import parse_parameter_count, sized_for

    training = {"hidden": sized_for(parse_parameter_count(args.params)).hidden}
    # Without --run-dir the run directory is scratch: removed once the figures are read.
    with run_dir_or_scratch(args.run_dir, "swarmshake-detect-") as run_dir:
        if run_dir.exists() and any(run_dir.iterdir()):
            shutil.rmtree(run_dir)
        result = run(
            args.nodes, args.kills, args.settle_s, run_dir, training, {}, args.control_nice
        )
    result["control_nice"] = args.control_nice
    print(
        json.dumps(
            result if args.json else {k: v for k, v in result.items() if "gaps_" not in k},
            indent=None if args.json else 2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
