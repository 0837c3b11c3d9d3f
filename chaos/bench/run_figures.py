"""The figures of one chaos run that its summary does not print: per fault, the
throughput kept beside detection / recovery / rejoin, the raw commit rate inside each
fault window and in the fault-free stretches before and after the faults (the report's
"throughput kept" divides by the stretch before the first fault, which holds the
slow first steps, and is capped at 1), and every state transfer's rate (a rejoining
node's ``rejoin_begin`` to its ``rejoin_done``, bytes over time).

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
from swarmshake.reports.series import fault_windows, run_origin
from swarmshake.verify.history import step_commits


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


@dataclass(frozen=True)
class WindowRate:
    op: str
    start_s: float  # since the run's first event
    end_s: float
    new_steps: int  # steps first committed inside the window
    steps_per_s: float | None


def first_commit_times(history: History) -> list[float]:
    """Seconds since the run's first event at which each new highest step first
    committed (what ``measure_run``'s rates count)."""
    origin = run_origin(history)
    rises, top = [], -1
    for view in step_commits(history):
        if view.step > top:
            top = view.step
            rises.append(view.t_mono - origin)
    return rises


def _count(rises: list[float], low: float, high: float) -> int:
    return sum(1 for t in rises if low < t <= high)


def window_rates(history: History) -> tuple[list[WindowRate], float | None, float | None]:
    """Each fault window's commit rate, and the rates before the first inject and
    after the last heal (each from its first commit to its last: ``None`` under two)."""
    rises = first_commit_times(history)
    windows = [w for w in fault_windows(history) if w.op not in ("heal", "resume")]
    rates = [
        WindowRate(
            op=w.op,
            start_s=w.start,
            end_s=w.end,
            new_steps=_count(rises, w.start, w.end),
            steps_per_s=_count(rises, w.start, w.end) / (w.end - w.start)
            if w.end > w.start
            else None,
        )
        for w in windows
    ]

    def stretch(times: list[float]) -> float | None:
        if len(times) < 2 or times[-1] <= times[0]:
            return None
        return (len(times) - 1) / (times[-1] - times[0])

    if not windows:
        return rates, stretch(rises), None
    first, last = min(w.start for w in windows), max(w.end for w in windows)
    return (
        rates,
        stretch([t for t in rises if t <= first]),
        stretch([t for t in rises if t > last]),
    )


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.0f}"


def figures_markdown(run_dir: Path) -> tuple[str, dict]:
    run = load_run_dir(run_dir, write_verdict=False)
    measurement = measure_run(run.history, run.bounds)
    transfers = state_transfers(run.history)
    gaps = step_seconds(run.history)
    rates, before, after = window_rates(run.history)
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
        "commit rate, fault-free: before the first fault "
        + ("—" if before is None else f"{before:.3f}")
        + " steps/s, after the last heal "
        + ("—" if after is None else f"{after:.3f}")
        + " steps/s",
        "",
        "| fault window | s | new steps | steps/s | ÷ rate after the last heal |",
        "|---|---:|---:|---:|---:|",
    ]
    for rate in rates:
        per_s = "—" if rate.steps_per_s is None else f"{rate.steps_per_s:.3f}"
        kept = "—" if rate.steps_per_s is None or not after else f"{rate.steps_per_s / after:.2f}"
        lines.append(
            f"| {rate.op} {rate.start_s:.1f}–{rate.end_s:.1f} | {rate.end_s - rate.start_s:.1f} "
            f"| {rate.new_steps} | {per_s} | {kept} |"
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
        "window_rates": [asdict(r) for r in rates],
        "fault_free_steps_per_s": {"before_first_fault": before, "after_last_heal": after},
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
