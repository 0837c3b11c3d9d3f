"""The recovery benchmark's systems side by side: ``side_by_side.{json,md,svg}``.

Built from ``bench.json`` alone (each cell's ``per_trial`` figures, measured from the
run's neutral history by ``reports.recovery.measure_run``), so the table can be
rebuilt from a recorded benchmark.  Per fault cell (fault type, backend, cluster
size) and system: detection, recovery and rejoin as median and max over the trials
that measured them (``n/trials`` when some did not), throughput kept as median and
worst (the fault window's commit rate over the steady rate before the fault), the
steady rate itself, and each median's ratio to the reference system's.  A figure no
trial measured is "—" with the reason the measurement gave (``FaultMeasurement.why``)
as a numbered note under the table: never a number nobody measured.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from swarmshake.reports import plots

# (column, per-trial field, the field's name in a trial's ``why``).  Rejoin is timed
# from the harness's restart command, the one clock every system shares (a
# TorchElastic worker logs its start only once its group has re-formed).
TIME_FIGURES = (
    ("detection", "detection_s", "detection"),
    ("recovery", "recovery_s", "recovery"),
    ("rejoin", "rejoin_from_restart_s", "rejoin_from_restart"),
)
SCHEMA = "swarmshake.bench.side_by_side/1"


def _times(trials: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(t[key]) for t in trials if t.get(key) is not None]


def _reason(trials: Sequence[dict[str, Any]], figure: str) -> str:
    """The most common reason the trials give for ``figure`` missing (with its count)."""
    reasons = Counter(str(t.get("why", {}).get(figure, "")) for t in trials)
    reasons.pop("", None)
    if not reasons:
        return "not measured"
    text, count = reasons.most_common(1)[0]
    return text if count == len(trials) else f"{text} ({count} of {len(trials)} trials)"


def _figure(trials: Sequence[dict[str, Any]], figure: str, key: str) -> dict[str, Any]:
    values = _times(trials, key)
    entry: dict[str, Any] = {"n": len(values), "trials": len(trials)}
    if values:
        entry["median_ms"] = round(statistics.median(values) * 1000.0, 1)
        entry["max_ms"] = round(max(values) * 1000.0, 1)
    if len(values) < len(trials):
        entry["missing"] = _reason([t for t in trials if t.get(key) is None], figure)
    return entry


def _kept(trials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    values = _times(trials, "throughput_kept")
    entry: dict[str, Any] = {"n": len(values), "trials": len(trials)}
    if values:
        entry["median"] = round(statistics.median(values), 4)
        entry["worst"] = round(min(values), 4)
    if len(values) < len(trials):
        missing = [t for t in trials if t.get("throughput_kept") is None]
        entry["missing"] = _reason(missing, "throughput_kept")
    rates = _times(trials, "steady_steps_per_s")
    entry["steady_steps_per_s"] = round(statistics.median(rates), 3) if rates else None
    return entry


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference <= 0:
        return None
    return round(value / reference, 2)


def side_by_side(document: dict[str, Any], reference: str = "reference") -> dict[str, Any]:
    """``{"cells": [{fault, backend, nodes, systems: {name: figures}}], ...}`` from a
    ``bench.json`` document; ratios are to ``reference``'s medians in the same cell."""
    cells: dict[tuple[str, str, int], dict[str, Any]] = {}
    for key, pooled in document.get("results", {}).items():
        fault = key.split("/", 1)[1] if "/" in key else key
        for cell in pooled.get("cells", []):
            system = str(cell.get("system", "reference"))
            where = (fault, str(cell["backend"]), int(cell["nodes"]))
            entry = cells.setdefault(
                where, {"fault": fault, "backend": where[1], "nodes": where[2], "systems": {}}
            )
            trials = list(cell.get("per_trial", []))
            figures: dict[str, Any] = {
                "trials": int(cell.get("trials", 0)),
                "failed_trials": int(cell.get("failed_trials", 0)),
                "skipped": str(cell.get("skipped", "")),
            }
            for name, field, why_key in TIME_FIGURES:
                figures[name] = _figure(trials, why_key, field)
            figures["throughput_kept"] = _kept(trials)
            entry["systems"][system] = figures
    for entry in cells.values():
        base = entry["systems"].get(reference)
        for figures in entry["systems"].values():
            for name, _field, _why in TIME_FIGURES:
                mine = figures[name].get("median_ms")
                theirs = base[name].get("median_ms") if base else None
                figures[name]["ratio_to_reference"] = _ratio(mine, theirs)
            kept = figures["throughput_kept"].get("median")
            base_kept = base["throughput_kept"].get("median") if base else None
            figures["throughput_kept"]["ratio_to_reference"] = _ratio(kept, base_kept)
    return {
        "schema": SCHEMA,
        "command": document.get("command", ""),
        "created": document.get("created", ""),
        "reference": reference,
        "model": document.get("model"),
        "systems": document.get("systems", {}),
        "environment": document.get("environment", {}),
        "calls": document.get("calls", []),
        "timing": document.get("timing", {}),
        "cells": [cells[key] for key in sorted(cells)],
    }


class _Notes:
    """Numbered reasons under a table: the same reason gets the same number."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _time_cell(figure: dict[str, Any], notes: _Notes) -> str:
    if figure["n"] == 0:
        return f"— {notes.mark(figure.get('missing', 'not measured'))}"
    text = f"{_ms(figure['median_ms'])} / {_ms(figure['max_ms'])}"
    if figure["n"] < figure["trials"]:
        text += f" ({figure['n']}/{figure['trials']} {notes.mark(figure['missing'])})"
    return text


def _ratio_text(value: float | None) -> str:
    return "—" if value is None else f"×{value:.2f}"


def _kept_cell(kept: dict[str, Any], notes: _Notes) -> str:
    if kept["n"] == 0:
        return f"— {notes.mark(kept.get('missing', 'not measured'))}"
    text = f"{kept['median'] * 100:.0f}% ({kept['worst'] * 100:.0f}%)"
    if kept["n"] < kept["trials"]:
        text += f" ({kept['n']}/{kept['trials']} {notes.mark(kept['missing'])})"
    return text


def model_line(model: dict[str, Any] | None) -> str:
    if not model:
        return "model: not recorded"
    layers = "→".join(str(w) for w in model.get("layers", []))
    return (
        f"model: `{model.get('preset', '?')}` MLP {layers}, {model.get('parameters', 0):,} "
        f"parameters, batch {model.get('batch_per_node', '?')} a node, on every system"
    )


def render_markdown(table: dict[str, Any]) -> str:
    """The side-by-side as Markdown (what BENCHMARKS.md and a CI summary hold)."""
    reference = table.get("reference", "reference")
    environment = table.get("environment") or {}
    calls = table.get("calls") or [
        {
            "command": table.get("command", ""),
            "created": table.get("created", ""),
            "load_average_1m": environment.get("load_average_1m"),
        }
    ]
    lines = ["## Recovery side by side", ""]
    for call in calls:
        load = call.get("load_average_1m")
        load_text = "?" if load is None else f"{float(load):.1f}"
        lines.append(
            f"- `{call.get('command', '')}` · {call.get('created', '')} · "
            f"{environment.get('cpus', '?')} CPUs, 1-min load {load_text} at the end"
        )
    lines += [
        "",
        model_line(table.get("model")) + ".",
        "",
        "Times in ms as median / max over the trials that measured them (`n/trials` when "
        "some did not); × = the median over the reference's median "
        f"(`{reference}`). Detection: fault → every survivor declared the victim dead "
        "(reference) or left it out of its group (membership). Recovery: fault → first "
        "new step committed without the victim (or after the heal). Rejoin: the harness's "
        "restart → the victim holds the majority's parameter fingerprint. Throughput kept: the commit rate during the fault window over "
        "the steady rate before the fault, median (worst). Steady: steps/s before the fault.",
        "",
        "| fault | system | trials | detection | × | recovery | × | rejoin | × "
        "| throughput kept | × | steady steps/s |",
        "|---|---|---:|---|---:|---|---:|---|---:|---|---:|---:|",
    ]
    notes = _Notes()
    for cell in table.get("cells", []):
        label = f"{cell['fault']} ({cell['backend']}, {cell['nodes']} nodes)"
        for system, figures in cell["systems"].items():
            if figures["skipped"] or not figures["trials"]:
                why = figures["skipped"] or (
                    f"all {figures['failed_trials']} trials failed"
                    if figures["failed_trials"]
                    else "no trial ran"
                )
                lines.append(f"| {label} | {system} | 0 | — {notes.mark(why)} | | | | | | | | |")
                continue
            trials = str(figures["trials"])
            if figures["failed_trials"]:
                trials += f" (+{figures['failed_trials']} failed)"
            row = [label, system, trials]
            for name, _field, _why in TIME_FIGURES:
                row.append(_time_cell(figures[name], notes))
                row.append(_ratio_text(figures[name].get("ratio_to_reference")))
            kept = figures["throughput_kept"]
            row.append(_kept_cell(kept, notes))
            row.append(_ratio_text(kept.get("ratio_to_reference")))
            steady = kept.get("steady_steps_per_s")
            row.append("—" if steady is None else f"{steady:.2f}")
            lines.append("| " + " | ".join(row) + " |")
    if notes.texts:
        lines.append("")
        lines += [f"[{i}] {text}" for i, text in enumerate(notes.texts, 1)]
    options = table.get("systems") or {}
    if options:
        lines.append("")
        lines.append(
            "Systems: "
            + "; ".join(
                f"`{name}` {', '.join(f'{k}={v}' for k, v in sorted(opts.items())) or 'defaults'}"
                for name, opts in options.items()
            )
            + "."
        )
    return "\n".join(lines) + "\n"


SYSTEM_COLOURS = ("#1e88e5", "#e53935", "#43a047", "#8e24aa", "#fb8c00", "#00897b")


def render_svg(table: dict[str, Any]) -> str:
    """Per figure, one row per fault cell and a bar per system: median (bar) and max
    (whisker), in seconds; a figure no trial measured has no bar."""
    import matplotlib.pyplot as plt

    cells = table.get("cells", [])
    systems: list[str] = []
    for cell in cells:
        systems += [s for s in cell["systems"] if s not in systems]
    height = 0.3 * max(len(systems), 1)
    with plt.rc_context(plots.RC_PARAMS):
        figure, axes = plt.subplots(
            1,
            len(TIME_FIGURES),
            figsize=(plots.WIDTH_IN, 1.0 + 0.35 * max(len(cells), 1) * max(len(systems), 1)),
            sharey=True,
        )
        for axis, (name, _field, _why) in zip(axes, TIME_FIGURES, strict=True):
            for row, cell in enumerate(cells):
                for position, system in enumerate(systems):
                    figures = cell["systems"].get(system)
                    entry = figures.get(name) if figures else None
                    if not entry or not entry.get("n"):
                        continue
                    y = row + (position - (len(systems) - 1) / 2) * height
                    colour = SYSTEM_COLOURS[position % len(SYSTEM_COLOURS)]
                    bar = axis.barh(
                        y, entry["median_ms"] / 1000.0, height=height * 0.9, color=colour
                    )
                    bar.patches[0].set_gid(f"bar-{name}-{cell['fault']}-{system}")
                    axis.hlines(
                        y, entry["median_ms"] / 1000.0, entry["max_ms"] / 1000.0, color="#212121"
                    )
            axis.set_title(f"{name} (s): median, max")
            axis.set_yticks(range(len(cells)), [c["fault"] for c in cells])
            axis.set_xlim(left=0)
            axis.grid(axis="x", color="#eeeeee")
        handles = [
            plt.Rectangle((0, 0), 1, 1, color=SYSTEM_COLOURS[i % len(SYSTEM_COLOURS)])
            for i in range(len(systems))
        ]
        figure.legend(handles, systems, loc="upper right", ncols=len(systems) or 1)
        return plots.to_svg(figure)
