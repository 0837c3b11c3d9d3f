"""``report.html`` (from ``bench.html.j2``) and ``summary.md`` from a recovery benchmark's ``bench.json``.

The HTML is self-contained like ``report.html`` (inline SVG, CSP ``default-src
'none'``); the Markdown is the table BENCHMARKS.md and CI job summaries hold.  Each
goal of the reference node (issue 8) is judged against the figure it names; where a
cell has fewer than 100 trials, p99 is not reported and the goal is judged on the
maximum instead (stricter), and the table says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from swarmshake.reports import plots

MEASURES = (("detection_ms", "detection"), ("recovery_ms", "recovery"), ("rejoin_ms", "rejoin"))


@dataclass(frozen=True)
class Goal:
    text: str
    fault: str
    measure: str
    statistic: str  # p99 | max
    limit_ms: float


GOALS: tuple[Goal, ...] = (
    Goal("crash detection p99 ≤ 300 ms", "crash", "detection_ms", "p99", 300.0),
    Goal("recovery (fault → next commit) p99 ≤ 500 ms", "crash", "recovery_ms", "p99", 500.0),
    Goal("no recovery cliff: max ≤ 2 s", "crash_in_aggregation", "recovery_ms", "max", 2000.0),
    Goal("rejoin ≤ 3 s from restart", "restart", "rejoin_ms", "max", 3000.0),
    Goal("rejoin ≤ 0.5 s from ready", "restart", "rejoin_from_ready_ms", "max", 500.0),
)


def judge_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for goal in GOALS:
        cell = results.get(goal.fault)
        figure = None
        used = goal.statistic
        if cell is not None:
            summary = cell.get(goal.measure) or {}
            figure = summary.get(goal.statistic)
            if figure is None and goal.statistic == "p99":
                figure, used = summary.get("max"), "max (fewer than 100 trials)"
        rows.append(
            {
                "goal": goal.text,
                "fault": goal.fault,
                "statistic": used,
                "measured_ms": figure,
                "met": None if figure is None else figure <= goal.limit_ms,
            }
        )
    false_positives = sum(int(c.get("false_positives", 0)) for c in results.values())
    rows.append(
        {
            "goal": "zero false positives",
            "fault": "all",
            "statistic": "count",
            "measured_ms": None,
            "measured": false_positives,
            "met": false_positives == 0 if results else None,
        }
    )
    return rows


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def _triple(summary: dict[str, Any] | None, trials: int) -> str:
    """``min / p50 / max`` (and ``p99`` where there are enough trials); ``(n/trials)``
    when some trials did not measure the figure (a detection or recovery that never
    came within the run), so a median of the lucky trials is not read as the whole."""
    if not summary or summary.get("n", 0) == 0:
        return "—"
    text = f"{_fmt(summary['min'])} / {_fmt(summary['p50'])} / {_fmt(summary['max'])}"
    if summary.get("p99") is not None:
        text += f" (p99 {_fmt(summary['p99'])})"
    if summary["n"] < trials:
        text += f" ({summary['n']}/{trials})"
    return text


def _kept(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def matrix_rows(document: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for fault, pooled in document.get("results", {}).items():
        for cell in pooled.get("cells", []):
            rows.append(
                {
                    "fault": fault,
                    "backend": str(cell["backend"]),
                    "nodes": str(cell["nodes"]),
                    "trials": str(cell["trials"]),
                    "detection": _triple(cell.get("detection_ms"), cell["trials"]),
                    "recovery": _triple(cell.get("recovery_ms"), cell["trials"]),
                    "rejoin": _triple(cell.get("rejoin_ms"), cell["trials"]),
                    "kept": _kept(cell.get("throughput_kept")),
                    "false_positives": str(cell.get("false_positives", 0)),
                    # absent from documents written before the field existed
                    "loop_stalls": str(cell["loop_stalls"]) if "loop_stalls" in cell else "—",
                    "skipped": str(cell.get("skipped", "")),
                }
            )
    return rows


def unsafe_trials(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every trial whose history broke a safety property (chaos/bench/judged.py: left
    out of the figures), with its cell."""
    found = []
    for fault, pooled in document.get("results", {}).items():
        for cell in pooled.get("cells", []):
            cell_key = f"{fault}/{cell.get('backend', '?')}/{cell.get('nodes', '?')}"
            for entry in cell.get("unsafe", []):
                found.append({"cell": cell_key, **entry})
    return found


def render_bench_markdown(document: dict[str, Any]) -> str:
    lines = [
        "## Recovery benchmark",
        "",
        f"`{document.get('command', 'swarmshake bench recovery')}` · {document.get('created', '')} · "
        f"{document.get('environment', {}).get('cpus', '?')} CPUs",
        "",
        "Times in ms as min / median / max over the cell's trials (p99 only with ≥ 100 trials). "
        "Loop stalls: node control loops that woke > 40 ms late; many mean an overloaded "
        "machine, whose times and false positives say little about the node.",
        "",
        "| fault | backend | nodes | trials | detection | recovery | rejoin | throughput kept | false positives | loop stalls |",
        "|---|---|---:|---:|---|---|---|---:|---:|---:|",
    ]
    for row in matrix_rows(document):
        if row["skipped"]:
            lines.append(
                f"| {row['fault']} | {row['backend']} | {row['nodes']} | — | skipped: {row['skipped']} | | | | | |"
            )
            continue
        lines.append(
            f"| {row['fault']} | {row['backend']} | {row['nodes']} | {row['trials']} | {row['detection']} | "
            f"{row['recovery']} | {row['rejoin']} | {row['kept']} | {row['false_positives']} | "
            f"{row['loop_stalls']} |"
        )
    lines += ["", "| goal | judged on | measured | met |", "|---|---|---:|---|"]
    for goal in judge_goals(document.get("results", {})):
        measured = goal.get("measured", _fmt(goal["measured_ms"]))
        met = {True: "✅", False: "❌", None: "not measured"}[goal["met"]]
        lines.append(
            f"| {goal['goal']} | {goal['fault']}: {goal['statistic']} | {measured} | {met} |"
        )
    errors = document.get("errors", [])
    if errors:
        lines += [
            "",
            f"{len(errors)} trial(s) failed; first: `{errors[0]['cell']}`: {errors[0]['error']}",
        ]
    unsafe = unsafe_trials(document)
    if unsafe:
        lines += [
            "",
            f"**{len(unsafe)} trial(s) broke a safety property** (left out of the figures):",
        ]
        lines += [
            f"- `{u['cell']}` `{Path(u['run_dir']).name}`: {', '.join(u['violated'])}: {u['message']}"
            for u in unsafe
        ]
    return "\n".join(lines) + "\n"


def ranges_svg(results: dict[str, Any]) -> str:
    """Per fault type, detection/recovery/rejoin as min–max bars with a median dot."""
    import matplotlib.pyplot as plt

    faults = list(results)
    with plt.rc_context(plots.RC_PARAMS):
        figure, axes = plt.subplots(
            1,
            len(MEASURES),
            figsize=(plots.WIDTH_IN, 0.8 + 0.35 * max(len(faults), 1)),
            sharey=True,
        )
        for axis, (key, title) in zip(axes, MEASURES, strict=True):
            for row, fault in enumerate(faults):
                summary = results[fault].get(key) or {}
                if not summary.get("n"):
                    continue
                line = axis.hlines(row, summary["min"], summary["max"], color="#1e88e5", lw=3)
                line.set_gid(f"range-{key}-{fault}")
                axis.plot([summary["p50"]], [row], "o", color="#0d47a1", ms=4)
            axis.set_title(f"{title} (ms)")
            axis.set_yticks(range(len(faults)), faults)
            axis.set_xlim(left=0)
            axis.grid(axis="x", color="#eeeeee")
        return plots.to_svg(figure)


_TEMPLATE = jinja2.Environment(
    loader=jinja2.PackageLoader("swarmshake.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_bench_html(document: dict[str, Any]) -> str:
    results = document.get("results", {})
    environment = document.get("environment") or {}
    header = {
        "command": document.get("command", "swarmshake bench recovery"),
        "created": document.get("created", ""),
        "backends": ", ".join(document.get("backends", [])) or "—",
        "cpus": environment.get("cpus", "?"),
        "seed": document.get("seed", "—"),
    }
    return _TEMPLATE.get_template("bench.html.j2").render(
        header=header,
        rows=matrix_rows(document),
        goals=judge_goals(results),
        fmt=_fmt,
        ranges_svg=ranges_svg(results) if results else "",
        errors=document.get("errors", []),
        unsafe=unsafe_trials(document),
    )


def compare_cells(
    old: dict[str, Any], new: dict[str, Any], *, tolerance: float = 0.2, floor_ms: float = 20.0
) -> list[dict[str, Any]]:
    """Regressions between two bench results: a median or max that grew by more than
    ``tolerance`` (relative) and ``floor_ms`` (absolute, below which timer noise rules)."""
    rows: list[dict[str, Any]] = []
    for fault in sorted(set(old) & set(new)):
        for key, _title in MEASURES:
            before = old[fault].get(key) or {}
            after = new[fault].get(key) or {}
            for statistic in ("p50", "max"):
                a, b = before.get(statistic), after.get(statistic)
                if a is None or b is None:
                    continue
                regressed = b - a > floor_ms and b > a * (1 + tolerance)
                rows.append(
                    {
                        "fault": fault,
                        "measure": f"{key} {statistic}",
                        "before": a,
                        "after": b,
                        "regressed": regressed,
                    }
                )
    return rows


def render_bench_junit(document: dict[str, Any]) -> bytes:
    """``junit.xml`` of a benchmark: one test case per goal (missed: a failure, not
    measured: skipped) and one per cell with failed trials (an error)."""
    import xml.etree.ElementTree as ET

    suite = ET.Element("testsuite", name="recovery-benchmark")
    failures = errors = skipped = 0
    for goal in judge_goals(document.get("results", {})):
        case = ET.SubElement(
            suite, "testcase", classname="swarmshake.bench.recovery", name=goal["goal"], time="0"
        )
        measured = goal.get("measured", goal["measured_ms"])
        if goal["met"] is None:
            ET.SubElement(case, "skipped", message=f"not measured ({goal['fault']})")
            skipped += 1
        elif not goal["met"]:
            ET.SubElement(
                case,
                "failure",
                type="goal",
                message=f"{goal['fault']} {goal['statistic']}: {measured}",
            )
            failures += 1
    for fault, pooled in document.get("results", {}).items():
        for cell in pooled.get("cells", []):
            if cell.get("unsafe_trials"):
                name = f"{fault}/{cell['backend']}/{cell['nodes']} safety"
                case = ET.SubElement(
                    suite, "testcase", classname="swarmshake.bench.recovery", name=name, time="0"
                )
                broken = sorted({p for u in cell.get("unsafe", []) for p in u["violated"]})
                ET.SubElement(
                    case,
                    "failure",
                    type="unsafe",
                    message=f"{cell['unsafe_trials']} trial(s) broke {', '.join(broken)}",
                )
                failures += 1
            if cell.get("failed_trials"):
                name = f"{fault}/{cell['backend']}/{cell['nodes']} trials"
                case = ET.SubElement(
                    suite, "testcase", classname="swarmshake.bench.recovery", name=name, time="0"
                )
                ET.SubElement(
                    case, "error", type="trial", message=f"{cell['failed_trials']} trial(s) failed"
                )
                errors += 1
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="swarmshake-bench")
    root.append(suite)
    for key in ("tests", "failures", "errors"):
        root.set(key, suite.get(key, "0"))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
