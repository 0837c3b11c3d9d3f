"""Comparing two runs (or two benchmark results): what got slower, what changed verdict.

Runs are matched fault by fault in injection order (the same scenario run on two
versions injects the same faults); a detection, recovery or rejoin time that grew by
more than ``tolerance`` (relative) *and* ``floor_ms`` (absolute: below it, timer
and scheduler noise dominate) is a regression.  Benchmarks (``bench.json``) are
compared cell by cell on median and max.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from swarmshake.reports.bench_report import compare_cells
from swarmshake.reports.load_model import rewindow
from swarmshake.reports.recovery import measure_run
from swarmshake.reports.rundir import RunDir, RunDirError

DEFAULT_TOLERANCE = 0.2  # 20 % slower
DEFAULT_FLOOR_MS = 20.0  # and at least 20 ms slower


@dataclass(frozen=True)
class Change:
    what: str  # e.g. "fault 1 crash n3: recovery"
    before_ms: float | None
    after_ms: float | None
    regressed: bool

    def to_dict(self) -> dict[str, Any]:
        delta = (
            None
            if self.before_ms is None or self.after_ms is None
            else self.after_ms - self.before_ms
        )
        ratio = (
            None if delta is None or not self.before_ms else self.after_ms / self.before_ms  # type: ignore[operator]
        )
        return {**asdict(self), "delta_ms": delta, "ratio": ratio}


def _grew(before: float | None, after: float | None, tolerance: float, floor_ms: float) -> bool:
    if before is None:
        return False
    if after is None:
        return True  # measured before, missing now: it never recovered/detected
    return after - before > floor_ms and after > before * (1 + tolerance)


def _load_rows(new: RunDir, old: RunDir) -> list[dict[str, Any]]:
    """Load-under-chaos windows of both runs, matched by label (informational: client
    figures on a shared machine are too noisy to fail a build on)."""
    if new.load is None or old.load is None:
        return []
    # Both cut by today's windowing, so labels written by different versions still match.
    before = {w.label: w for w in rewindow(old.path, old.load).windows}
    rows = []
    for window in rewindow(new.path, new.load).windows:
        previous = before.get(window.label)
        if previous is None:
            continue
        rows.append(
            {
                "window": window.label,
                "availability_before": previous.availability,
                "availability_after": window.availability,
                "p99_ms_before": previous.latency_ms.p99,
                "p99_ms_after": window.latency_ms.p99,
            }
        )
    return rows


def compare_runs(
    new: RunDir,
    old: RunDir,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    floor_ms: float = DEFAULT_FLOOR_MS,
) -> dict[str, Any]:
    new_faults = measure_run(new.history, new.bounds).faults
    old_faults = measure_run(old.history, old.bounds).faults
    changes: list[Change] = []
    notes: list[str] = []
    if new.name != old.name:
        notes.append(f"different scenarios ({old.name} → {new.name}): faults matched by order")
    if len(new_faults) != len(old_faults):
        compared = min(len(new_faults), len(old_faults))
        notes.append(
            f"{len(old_faults)} faults before, {len(new_faults)} now: the first {compared} compared"
        )
    for number, (after, before) in enumerate(zip(new_faults, old_faults, strict=False), start=1):
        label = f"fault {number} {after.op} {','.join(after.victims)}".rstrip()
        if (after.op, after.victims) != (before.op, before.victims):
            label += f" (was {before.op} {','.join(before.victims)})"
        for name in ("detection_s", "recovery_s", "rejoin_s"):
            a, b = getattr(before, name), getattr(after, name)
            a_ms = None if a is None else a * 1000
            b_ms = None if b is None else b * 1000
            if a_ms is None and b_ms is None:
                continue
            changes.append(
                Change(
                    what=f"{label}: {name.removesuffix('_s')}",
                    before_ms=a_ms,
                    after_ms=b_ms,
                    regressed=_grew(a_ms, b_ms, tolerance, floor_ms),
                )
            )
    verdicts = []
    for name, result in new.verdict.results.items():
        previous = old.verdict.results.get(name)
        if previous is not None and previous.status != result.status:
            verdicts.append({"property": name, "before": previous.status, "after": result.status})
    regressions = [c for c in changes if c.regressed]
    newly_invalid = [v for v in verdicts if v["after"] == "invalid"]
    return {
        "kind": "runs",
        "new": str(new.path),
        "old": str(old.path),
        "tolerance": tolerance,
        "floor_ms": floor_ms,
        "fault_count": {"new": len(new_faults), "old": len(old_faults)},
        "changes": [c.to_dict() for c in changes],
        "verdict_changes": verdicts,
        "verdict": {"new": new.verdict.status, "old": old.verdict.status},
        "load": _load_rows(new, old),
        "notes": notes,
        "regressed": bool(regressions or newly_invalid),
    }


def read_bench(path: Path) -> dict[str, Any]:
    file = path / "bench.json" if path.is_dir() else path
    try:
        document = msgspec.json.decode(file.read_bytes())
    except (OSError, msgspec.DecodeError) as error:
        raise RunDirError(f"{file}: not a readable bench.json: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), dict):
        raise RunDirError(f"{file}: no 'results' mapping; is it a bench.json?")
    for fault, pooled in document["results"].items():
        cells = pooled.get("cells", []) if isinstance(pooled, dict) else None
        if not isinstance(cells, list) or not all(
            isinstance(c, dict) and {"backend", "nodes", "trials"} <= set(c) for c in cells
        ):
            raise RunDirError(
                f"{file}: results.{fault}: expected a mapping whose 'cells' each have backend, "
                "nodes and trials (docs/report-schemas.md)"
            )
    return document


def _cell_results(results: dict[str, Any]) -> dict[str, Any]:
    """``{"crash/local/4": cell summary}``: cells compare like with like (a matrix of
    two backends pools very different numbers under one fault)."""
    cells = {}
    for fault, pooled in results.items():
        for cell in pooled.get("cells", []):
            cells[f"{fault}/{cell['backend']}/{cell['nodes']}"] = cell
    return cells


def compare_benches(
    new: dict[str, Any],
    old: dict[str, Any],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    floor_ms: float = DEFAULT_FLOOR_MS,
) -> dict[str, Any]:
    new_cells, old_cells = _cell_results(new["results"]), _cell_results(old["results"])
    if set(new_cells) & set(old_cells):
        rows = compare_cells(old_cells, new_cells, tolerance=tolerance, floor_ms=floor_ms)
    else:  # documents without cells (older or hand-made): compare the pooled figures
        rows = compare_cells(old["results"], new["results"], tolerance=tolerance, floor_ms=floor_ms)
    notes = []
    only_old = sorted(set(old_cells) - set(new_cells))
    if only_old:
        notes.append(f"not measured now: {', '.join(only_old)}")
    return {
        "kind": "bench",
        "new": str(new.get("command", "")),
        "old": str(old.get("command", "")),
        "tolerance": tolerance,
        "floor_ms": floor_ms,
        "changes": [
            Change(
                what=f"{r['fault']}: {r['measure']}",
                before_ms=r["before"],
                after_ms=r["after"],
                regressed=r["regressed"],
            ).to_dict()
            for r in rows
        ],
        "verdict_changes": [],
        "load": [],
        "notes": notes,
        "regressed": any(r["regressed"] for r in rows),
    }


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def change_text(change: dict[str, Any]) -> str:
    """``+800 ms (×3.0)``, ``-12 ms``, ``never`` (measured before, missing now)."""
    if change["after_ms"] is None:
        return "never (measured before)"
    if change["before_ms"] is None:
        return "new"
    delta = change["delta_ms"]
    ratio = change.get("ratio")
    text = f"{delta:+.0f} ms"
    if ratio is not None and abs(delta) >= 1:
        text += f" (×{ratio:.2f})"
    return text


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def headline(comparison: dict[str, Any]) -> str:
    flagged = sum(1 for c in comparison["changes"] if c["regressed"])
    invalid = [v["property"] for v in comparison["verdict_changes"] if v["after"] == "invalid"]
    if not comparison["regressed"]:
        return f"no regression ({len(comparison['changes'])} figures compared)"
    parts = []
    if flagged:
        parts.append(f"{flagged} of {len(comparison['changes'])} figures slower")
    if invalid:
        parts.append(f"now violated: {', '.join(invalid)}")
    return "regression: " + "; ".join(parts)


def render_comparison(comparison: dict[str, Any]) -> str:
    """``compare.md``: the headline, every compared figure (regressions first), verdict
    and load changes; fits a CI job summary."""
    mark = "❌" if comparison["regressed"] else "✅"
    lines = [
        f"## {mark} Comparison: {headline(comparison)}",
        "",
        f"New `{comparison.get('new', '')}` against old `{comparison.get('old', '')}`. "
        f"Flagged when ≥ {comparison['tolerance'] * 100:.0f}% and ≥ "
        f"{comparison['floor_ms']:.0f} ms slower.",
        "",
    ]
    lines += [f"- {note}" for note in comparison.get("notes", [])]
    if comparison.get("notes"):
        lines.append("")
    lines += ["| what | before ms | after ms | change | |", "|---|---:|---:|---:|---|"]
    ordered = sorted(comparison["changes"], key=lambda c: not c["regressed"])
    for change in ordered:
        flag = "❌ slower" if change["regressed"] else ""
        lines.append(
            f"| {change['what']} | {_ms(change['before_ms'])} | {_ms(change['after_ms'])} | "
            f"{change_text(change)} | {flag} |"
        )
    if comparison["verdict_changes"]:
        lines += ["", "| property | before | after |", "|---|---|---|"]
        for verdict in comparison["verdict_changes"]:
            flag = " ❌" if verdict["after"] == "invalid" else ""
            lines.append(
                f"| {verdict['property']} | {verdict['before']} | {verdict['after']}{flag} |"
            )
    if comparison.get("load"):
        lines += [
            "",
            "Load under chaos (informational):",
            "",
            "| window | availability before | after | p99 ms before | after |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in comparison["load"]:
            lines.append(
                f"| {row['window']} | {_pct(row['availability_before'])} | "
                f"{_pct(row['availability_after'])} | {_ms(row['p99_ms_before'])} | "
                f"{_ms(row['p99_ms_after'])} |"
            )
    return "\n".join(lines) + "\n"


def print_comparison(comparison: dict[str, Any], file: IO[str]) -> None:
    """The comparison as a terminal table (colour only on a terminal, via rich)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file, highlight=False)
    style = "bold red" if comparison["regressed"] else "bold green"
    console.print(f"[{style}]{headline(comparison)}[/]")
    console.print(
        f"new {comparison.get('new', '')}\nold {comparison.get('old', '')}\n"
        f"flagged when ≥ {comparison['tolerance'] * 100:.0f}% and ≥ "
        f"{comparison['floor_ms']:.0f} ms slower",
        style="dim",
    )
    for note in comparison.get("notes", []):
        console.print(f"note: {note}", style="yellow")
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("what")
    table.add_column("before ms", justify="right")
    table.add_column("after ms", justify="right")
    table.add_column("change", justify="right")
    for change in sorted(comparison["changes"], key=lambda c: not c["regressed"]):
        table.add_row(
            change["what"],
            _ms(change["before_ms"]),
            _ms(change["after_ms"]),
            change_text(change) + ("  SLOWER" if change["regressed"] else ""),
            style="red" if change["regressed"] else None,
        )
    console.print(table)
    for verdict in comparison["verdict_changes"]:
        console.print(
            f"{verdict['property']}: {verdict['before']} → {verdict['after']}",
            style="red" if verdict["after"] == "invalid" else None,
        )
    for row in comparison.get("load", []):
        console.print(
            f"load {row['window']}: availability {_pct(row['availability_before'])} → "
            f"{_pct(row['availability_after'])}, p99 {_ms(row['p99_ms_before'])} → "
            f"{_ms(row['p99_ms_after'])} ms"
        )
