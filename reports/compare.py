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
from typing import Any

import msgspec

from swarmshake.reports.bench_report import compare_cells
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


def _grew(before: float | None, after: float | None, tolerance: float, floor_ms: float) -> bool:
    if before is None:
        return False
    if after is None:
        return True  # measured before, missing now: it never recovered/detected
    return after - before > floor_ms and after > before * (1 + tolerance)


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
        "changes": [asdict(c) for c in changes],
        "verdict_changes": verdicts,
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


def compare_benches(
    new: dict[str, Any],
    old: dict[str, Any],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    floor_ms: float = DEFAULT_FLOOR_MS,
) -> dict[str, Any]:
    rows = compare_cells(old["results"], new["results"], tolerance=tolerance, floor_ms=floor_ms)
    return {
        "kind": "bench",
        "tolerance": tolerance,
        "floor_ms": floor_ms,
        "changes": [
            {
                "what": f"{r['fault']}: {r['measure']}",
                "before_ms": r["before"],
                "after_ms": r["after"],
                "regressed": r["regressed"],
            }
            for r in rows
        ],
        "verdict_changes": [],
        "regressed": any(r["regressed"] for r in rows),
    }


def render_comparison(comparison: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:.0f}"

    head = "❌ regression" if comparison["regressed"] else "✅ no regression"
    lines = [
        f"## Comparison: {head}",
        "",
        f"Flagged when ≥ {comparison['tolerance'] * 100:.0f}% and ≥ {comparison['floor_ms']:.0f} ms slower.",
        "",
        "| what | before ms | after ms | |",
        "|---|---:|---:|---|",
    ]
    for change in comparison["changes"]:
        flag = "❌ slower" if change["regressed"] else ""
        lines.append(
            f"| {change['what']} | {ms(change['before_ms'])} | {ms(change['after_ms'])} | {flag} |"
        )
    for verdict in comparison["verdict_changes"]:
        lines.append(
            f"| {verdict['property']} verdict | {verdict['before']} | {verdict['after']} | |"
        )
    return "\n".join(lines) + "\n"
