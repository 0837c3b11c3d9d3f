"""``swarmshake bench recovery``: the matrix run, its aggregation and its files.

For every cell (system × fault type × cluster size × backend) it runs ``trials`` scenarios
(``matrix.trial_scenario``), measures each run's history with
``swarmshake.reports.recovery.measure_run`` and summarises the cell.  Writes
the formats a run directory has: ``bench.json`` (schema in docs/report-schemas.md),
``report.html``, ``junit.xml`` and ``summary.md`` into the output folder, next to one
run directory per trial.  With several systems (``--system reference,torchft``) it
also writes the side-by-side comparison (:func:`side_by_side`): ``side_by_side.json``,
``side_by_side.md`` and ``side_by_side.svg``.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.chaos.bench.judged import TrialVerdict, judge_run
from swarmshake.chaos.bench.matrix import (
    DEFAULT_SETUP,
    FAULT_TYPES,
    Cell,
    Timing,
    TrialSetup,
    model_description,
    trial_scenario,
)
from swarmshake.chaos.bench.stats import summarize_ms
from swarmshake.chaos.bench.trials import (
    BackendUnavailable,
    TrialRunner,
    default_runner,
    unsupported_ops,
)
from swarmshake.chaos.scenario import Cluster
from swarmshake.chaos.systems import DEFAULT_SYSTEM
from swarmshake.reference_node.protocol.history import History, HistoryError
from swarmshake.reports.recovery import FaultMeasurement, measure_run
from swarmshake.reports.series import loop_stalls

SCHEMA = "swarmshake.bench.recovery/1"
MAX_TRIALS_PER_CELL = 10_000  # a p99 needs 100; beyond 10k a run is a soak test, not a bench
MAX_RECORDED_ERRORS = 200  # a broken backend fails every trial; the first few say why


@dataclass
class CellResult:
    cell: Cell
    trials: int = 0
    faults: list[FaultMeasurement] = field(default_factory=list)
    false_positives: int = 0
    # Control loops that woke late (history.LoopStall): many mean the machine was
    # overloaded and the cell's times and false positives say more about it than the node.
    loop_stalls: int = 0
    run_dirs: list[str] = field(default_factory=list)
    failed_trials: int = 0
    skipped: str = ""  # why the cell was not run (the backend cannot inject its fault)
    # The run's commit rate before its first fault (steps/s), per measured trial.
    steady_rates: list[float | None] = field(default_factory=list)
    # Each measured trial's verdict, in the order of ``faults``: (status, violated).
    verdicts: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    # Trials whose history broke a safety property (judged.FIGURES_VOID): run, not
    # measured; each with its run, the properties and their findings.
    unsafe: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        detection = [f.detection_s for f in self.faults if f.detection_s is not None]
        recovery = [f.recovery_s for f in self.faults if f.recovery_s is not None]
        rejoin = [f.rejoin_s for f in self.faults if f.rejoin_s is not None]
        rejoin_ready = [
            f.rejoin_from_ready_s for f in self.faults if f.rejoin_from_ready_s is not None
        ]
        rejoin_restart = [
            f.rejoin_from_restart_s for f in self.faults if f.rejoin_from_restart_s is not None
        ]
        kept = [f.throughput_kept for f in self.faults if f.throughput_kept is not None]
        return {
            "system": self.cell.system,
            "backend": self.cell.backend,
            "nodes": self.cell.nodes,
            "trials": self.trials,
            "failed_trials": self.failed_trials,
            "unsafe_trials": len(self.unsafe),
            "unsafe": list(self.unsafe),
            # The measured trials' verdicts: an invalid one broke a bound the figures
            # measure (L1-L3) or declared a live node dead (S4), and is in them.
            "verdicts": {
                status: sum(1 for s, _ in self.verdicts if s == status)
                for status in ("valid", "invalid", "unknown")
            },
            "detection_ms": summarize_ms(detection, self.trials),
            "recovery_ms": summarize_ms(recovery, self.trials),
            "rejoin_ms": summarize_ms(rejoin, self.trials),
            "rejoin_from_ready_ms": summarize_ms(rejoin_ready, self.trials),
            "rejoin_from_restart_ms": summarize_ms(rejoin_restart, self.trials),
            "throughput_kept": round(statistics.median(kept), 4) if kept else None,
            "false_positives": self.false_positives,
            "loop_stalls": self.loop_stalls,
            "run_dirs": self.run_dirs,
            "skipped": self.skipped,
            # Every measured trial's figures (seconds) and why a missing one is missing:
            # the side-by-side table and its tests are built from these.
            "per_trial": [self._trial(i) for i in range(len(self.faults))],
        }

    def _trial(self, position: int) -> dict[str, Any]:
        fault = self.faults[position]
        run_dir = self.run_dirs[position] if position < len(self.run_dirs) else ""
        rates = self.steady_rates
        return {
            "run_dir": Path(run_dir).name,
            "detection_s": fault.detection_s,
            "recovery_s": fault.recovery_s,
            "rejoin_s": fault.rejoin_s,
            "rejoin_from_restart_s": fault.rejoin_from_restart_s,
            "throughput_kept": fault.throughput_kept,
            "steady_steps_per_s": rates[position] if position < len(rates) else None,
            "verdict": self.verdicts[position][0] if position < len(self.verdicts) else None,
            "violated": list(self.verdicts[position][1]) if position < len(self.verdicts) else [],
            "why": dict(fault.why),
        }


def pooled(cells: Sequence[CellResult]) -> dict[str, Any]:
    """One fault type over all its cells: the shape ``--json`` prints per fault."""
    merged = CellResult(cell=cells[0].cell)
    for result in cells:
        merged.trials += result.trials
        merged.failed_trials += result.failed_trials
        merged.unsafe += result.unsafe
        merged.verdicts += result.verdicts
        merged.faults += result.faults
        merged.false_positives += result.false_positives
        merged.loop_stalls += result.loop_stalls
    summary = merged.summary()
    return {
        "detection_ms": summary["detection_ms"],
        "recovery_ms": summary["recovery_ms"],
        "rejoin_ms": summary["rejoin_ms"],
        "rejoin_from_ready_ms": summary["rejoin_from_ready_ms"],
        "throughput_kept": summary["throughput_kept"],
        "false_positives": summary["false_positives"],
        "loop_stalls": summary["loop_stalls"],
        "trials": summary["trials"],
        "failed_trials": summary["failed_trials"],
        "unsafe_trials": summary["unsafe_trials"],
        "verdicts": summary["verdicts"],
        "cells": [c.summary() for c in cells],
    }


class TrialNotRun(RuntimeError):
    """The run ended before its fault was injected (no steady state, an abort)."""


class UnsafeTrial(RuntimeError):
    """The trial's history broke a safety property: its figures are not a recovery's."""

    def __init__(self, run_dir: Path, verdict: TrialVerdict):
        super().__init__(
            f"{run_dir.name}: unsafe ({', '.join(verdict.unsafe())}): {verdict.message}"
        )
        self.run_dir = run_dir
        self.verdict = verdict


def measure_trial(
    run_dir: Path,
) -> tuple[FaultMeasurement, int, int, float | None, TrialVerdict]:
    """The trial's fault (its first inject), the run's false positives, loop stalls,
    steady commit rate (steps/s before the fault) and verdict; :class:`UnsafeTrial`
    when its history breaks a safety property (chaos/bench/judged.py says why)."""
    history = History.load(run_dir)
    verdict = judge_run(run_dir, history)
    if verdict.unsafe():
        raise UnsafeTrial(run_dir, verdict)
    measurement = measure_run(history)
    if not measurement.faults:
        reason = ""
        run_record = run_dir / "run.json"  # the harness's outcome, when it wrote one
        if run_record.is_file():
            try:
                reason = str(msgspec.json.decode(run_record.read_bytes()).get("message", ""))
            except (msgspec.DecodeError, AttributeError):
                reason = "run.json unreadable"
        raise TrialNotRun(
            f"no fault was injected in {run_dir.name}" + (f": {reason}" if reason else "")
        )
    return (
        measurement.faults[0],
        measurement.false_positives,
        len(loop_stalls(history)),
        measurement.steady_commits_per_s,
        verdict,
    )


def run_matrix(
    cells: Sequence[Cell],
    trials: int,
    out: Path,
    *,
    timing: Timing,
    seed: int = 0,
    setup: TrialSetup = DEFAULT_SETUP,
    runner: TrialRunner = default_runner,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> tuple[list[CellResult], list[dict[str, Any]]]:
    """Run every trial of every cell; returns the results and the trial errors.

    A backend that is unavailable stops the run (every trial would fail the same way);
    a trial that fails for another reason is recorded and the matrix goes on.
    """
    if not 1 <= trials <= MAX_TRIALS_PER_CELL:
        raise ValueError(f"trials = {trials} must lie in [1, {MAX_TRIALS_PER_CELL}]")
    results: list[CellResult] = []
    errors: list[dict[str, Any]] = []
    for cell in cells:
        result = CellResult(cell=cell)
        try:
            missing = unsupported_ops(trial_scenario(cell, 0, seed, timing, setup), cell.backend)
        except ValueError as error:
            # The system cannot take this fault (Scenario._check_system says why): a
            # cell that is not run, like one the backend cannot inject.
            missing, result.skipped = [], str(error)
            progress(f"{cell.key}: skipped: {result.skipped}")
            results.append(result)
            continue
        if missing:
            # Not a failed trial: this backend cannot inject the fault at all.
            result.skipped = f"{cell.backend} cannot inject {', '.join(missing)}"
            progress(f"{cell.key}: skipped: {result.skipped}")
            results.append(result)
            continue
        for trial in range(trials):
            scenario = trial_scenario(cell, trial, seed, timing, setup)
            started = time.monotonic()
            try:
                run_dir = runner(scenario, cell.backend, out / "runs")
                fault, false_positives, stalls, steady_rate, verdict = measure_trial(run_dir)
            except BackendUnavailable:
                raise
            except UnsafeTrial as unsafe:
                result.unsafe.append(
                    {
                        "run_dir": str(unsafe.run_dir),
                        "violated": list(unsafe.verdict.unsafe()),
                        "message": unsafe.verdict.message,
                    }
                )
                progress(f"{cell.key} trial {trial}: UNSAFE, not measured: {unsafe}")
                continue
            except (
                OSError,
                HistoryError,
                RuntimeError,
                ValueError,
            ) as error:  # judged.UnjudgedRun too
                result.failed_trials += 1
                if len(errors) < MAX_RECORDED_ERRORS:
                    errors.append(
                        {
                            "cell": cell.key,
                            "trial": trial,
                            "error": f"{type(error).__name__}: {error}",
                        }
                    )
                progress(f"{cell.key} trial {trial}: failed: {error}")
                continue
            result.trials += 1
            result.run_dirs.append(str(run_dir))
            result.false_positives += false_positives
            result.loop_stalls += stalls
            result.faults.append(fault)
            result.steady_rates.append(steady_rate)
            result.verdicts.append((verdict.status, verdict.violated))
            progress(
                f"{cell.key} trial {trial}: detection {_ms(fault.detection_s)} "
                f"recovery {_ms(fault.recovery_s)} rejoin {_ms(fault.rejoin_s)} "
                f"history {verdict.status}"
                f"{' (' + ', '.join(verdict.violated) + ')' if verdict.violated else ''} "
                f"({time.monotonic() - started:.1f}s)"
            )
        results.append(result)
    return results, errors


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f}ms"


def results_by_fault(results: Sequence[CellResult]) -> dict[str, Any]:
    """Pooled per fault type; another system's cells under ``system/fault`` (a pool
    over systems would mix what the side-by-side keeps apart, and the goals judged on
    ``results[fault]`` are the reference node's)."""
    by_fault: dict[str, list[CellResult]] = {}
    for result in results:
        system = result.cell.system
        key = result.cell.fault if system == DEFAULT_SYSTEM else f"{system}/{result.cell.fault}"
        by_fault.setdefault(key, []).append(result)
    return {fault: pooled(cells) for fault, cells in by_fault.items()}


def bench_document(
    results: Sequence[CellResult],
    errors: Sequence[dict[str, Any]],
    *,
    command: str,
    quick: bool,
    seed: int,
    timing: Timing,
    setup: TrialSetup = DEFAULT_SETUP,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "command": command,
        "created": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "quick": quick,
        "seed": seed,
        "backends": sorted({r.cell.backend for r in results}),
        # system -> the options its trials ran with (matrix.BENCH_SYSTEM_OPTIONS and
        # --system-option)
        "systems": {
            system: setup.system_options(system)
            for system in dict.fromkeys(r.cell.system for r in results)
        },
        "model": model_description(Cluster(model=setup.model, training=dict(setup.training))),
        # --training's fields over the preset's, and --links (cluster.links)
        "training": dict(setup.training),
        "links": setup.links,
        "timing": {
            "fault_window_s": list(timing.fault_window_s),
            "hold_s": timing.hold_s,
            "duration_s": timing.duration_s,
            "quiesce_s": timing.quiesce_s,
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_1m": os.getloadavg()[0],  # wall-clock figures need the machine's load
        },
        "results": results_by_fault(results),
        "errors": list(errors),
    }


def write_bench_files(document: dict[str, Any], out: Path) -> list[Path]:
    # Imported here: the HTML renderer pulls in matplotlib, which --json alone never needs.
    from swarmshake.reports.bench_report import (
        render_bench_html,
        render_bench_junit,
        render_bench_markdown,
    )

    out.mkdir(parents=True, exist_ok=True)
    # The names a run directory uses, so CI steps that publish a run publish a bench too.
    paths = [out / "bench.json", out / "report.html", out / "summary.md", out / "junit.xml"]
    paths[0].write_bytes(msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n")
    paths[1].write_text(render_bench_html(document), encoding="utf-8")
    paths[2].write_text(render_bench_markdown(document), encoding="utf-8")
    paths[3].write_bytes(render_bench_junit(document))
    return paths


def merge_documents(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several ``bench.json`` documents of one sitting as one: their cells side by side
    (a fault run in two calls keeps both calls' cells), every call's command kept."""
    merged: dict[str, Any] = dict(documents[0])
    results: dict[str, Any] = {}
    systems: dict[str, Any] = {}
    for document in documents:
        systems.update(document.get("systems", {}))
        for key, pooled_cells in document.get("results", {}).items():
            entry = results.setdefault(key, {"cells": []})
            entry["cells"] = entry["cells"] + list(pooled_cells.get("cells", []))
    merged["results"] = results
    merged["systems"] = systems
    merged["command"] = " ; ".join(str(d.get("command", "")) for d in documents)
    merged["calls"] = [
        {
            "command": d.get("command", ""),
            "created": d.get("created", ""),
            "load_average_1m": (d.get("environment") or {}).get("load_average_1m"),
        }
        for d in documents
    ]
    merged["errors"] = [e for d in documents for e in d.get("errors", [])]
    return merged


def write_side_by_side_files(
    document: dict[str, Any], out: Path, *, reference: str = "reference"
) -> list[Path]:
    """``side_by_side.json``, ``.md`` and ``.svg`` (``reports/side_by_side.py``)."""
    from swarmshake.reports.side_by_side import render_markdown, render_svg, side_by_side

    out.mkdir(parents=True, exist_ok=True)
    table = side_by_side(document, reference=reference)
    paths = [out / "side_by_side.json", out / "side_by_side.md", out / "side_by_side.svg"]
    paths[0].write_bytes(msgspec.json.format(msgspec.json.encode(table), indent=2) + b"\n")
    paths[1].write_text(render_markdown(table), encoding="utf-8")
    paths[2].write_text(render_svg(table), encoding="utf-8")
    return paths


def cells_for(
    faults: Sequence[str],
    sizes: Sequence[int],
    backends: Sequence[str],
    systems: Sequence[str] = ("reference",),
) -> list[Cell]:
    """Every cell, ordered so that one fault's cells of every system run back to back
    (the side-by-side compares them under the same machine load)."""
    unknown = sorted(set(faults) - set(FAULT_TYPES))
    if unknown:
        raise ValueError(f"unknown fault type(s) {unknown}; choose from {', '.join(FAULT_TYPES)}")
    return [
        Cell(fault, size, backend, system)
        for backend in backends
        for fault in faults
        for size in sizes
        for system in systems
    ]
