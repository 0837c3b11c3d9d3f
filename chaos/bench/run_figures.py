"""The figures of one chaos run that its summary does not print: per fault, the
throughput kept beside detection / recovery / rejoin, and every state transfer's
rate (a rejoining node's ``rejoin_begin`` to its ``rejoin_done``, bytes over time).

``python -m swarmshake.chaos.bench.run_figures RUN_DIR [--json OUT]`` prints a
Markdown table of each; ``scripts/gpu_chaos_run.sh`` runs it on the GPU chaos run.
Everything is read from the run's history (``reports.recovery.measure_run`` for the
fault figures), so the numbers are the run report's own.  Exit 0 when it printed,
64 when the run directory is unusable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from swarmshake.reference_node.protocol.history import (
    Commit,
    History,
    RejoinBegin,
    RejoinDone,
)
from swarmshake.reports.recovery import measure_run
from swarmshake.reports.rundir import RunDirError, load_run_dir


@dataclass(frozen=True)
class StateTransfer:
    node: str
    incarnation: int
    source: str  # a peer, or "checkpoint"
    step: int  # the step whose state was installed
    nbytes: int
    seconds: float
    megabytes_per_s: float | None  # None when nothing was transferred (nbytes 0)


def state_transfers(history: History) -> list[StateTransfer]:
    """Each ``rejoin_done`` paired with the latest ``rejoin_begin`` of the same node
    and incarnation before it."""
    begun: dict[tuple[str, int], RejoinBegin] = {}
    transfers: list[StateTransfer] = []
    for event in history.events:
        key = (event.node, event.incarnation)
        if isinstance(event, RejoinBegin):
            begun[key] = event
        elif isinstance(event, RejoinDone) and key in begun:
            begin = begun.pop(key)
            seconds = max(0.0, event.t_mono - begin.t_mono)
            rate = event.nbytes / 1e6 / seconds if event.nbytes and seconds > 0 else None
            transfers.append(
                StateTransfer(
                    node=event.node,
                    incarnation=event.incarnation,
                    source=event.source,
                    step=event.step,
                    nbytes=event.nbytes,
                    seconds=seconds,
                    megabytes_per_s=rate,
                )
            )
    return transfers


def step_seconds(history: History) -> list[float]:
    """Seconds between consecutive first commits of successive steps (any node)."""
    first: dict[int, float] = {}
    for event in history.events:
        if isinstance(event, Commit) and event.step not in first:
            first[event.step] = event.t_mono
    steps = sorted(first)
    return [first[b] - first[a] for a, b in zip(steps, steps[1:], strict=False) if b == a + 1]


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.0f}"


def figures_markdown(run_dir: Path) -> tuple[str, dict]:
    run = load_run_dir(run_dir, write_verdict=False)
    measurement = measure_run(run.history, run.bounds)
    transfers = state_transfers(run.history)
    gaps = step_seconds(run.history)
    lines = [
        "steady commit rate before the first fault: "
        + (
            "—"
            if measurement.steady_commits_per_s is None
            else f"{measurement.steady_commits_per_s:.3f} steps/s"
        ),
        f"step time (first commit to the next step's), median of {len(gaps)}: "
        + ("—" if not gaps else f"{statistics.median(gaps):.2f} s"),
        "",
        "| fault | victims | at s | detection ms | recovery ms | rejoin ms | throughput kept |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for fault in measurement.faults:
        kept = "—" if fault.throughput_kept is None else f"{fault.throughput_kept:.2f}"
        lines.append(
            f"| {fault.op} | {','.join(fault.victims) or '—'} | {fault.inject_t:.1f} "
            f"| {_ms(fault.detection_s)} | {_ms(fault.recovery_s)} | {_ms(fault.rejoin_s)} "
            f"| {kept} |"
        )
    lines += [
        "",
        "| node | incarnation | source | step | MB | s | MB/s |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for t in transfers:
        rate = "—" if t.megabytes_per_s is None else f"{t.megabytes_per_s:.0f}"
        lines.append(
            f"| {t.node} | {t.incarnation} | {t.source} | {t.step} | {t.nbytes / 1e6:.1f} "
            f"| {t.seconds:.3f} | {rate} |"
        )
    data = {
        "measurement": measurement.to_dict(),
        "state_transfers": [asdict(t) for t in transfers],
        "step_seconds": gaps,
    }
    return "\n".join(lines) + "\n", data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        text, data = figures_markdown(args.run_dir)
    except RunDirError as error:
        print(f"run_figures: {error}", file=sys.stderr)
        return 64
    print(text, end="")
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
