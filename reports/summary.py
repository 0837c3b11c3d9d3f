"""``summary.md``: a run in a few lines of GitHub-flavoured Markdown.

Written to fit a CI job summary (``$GITHUB_STEP_SUMMARY`` accepts 1 MiB per step):
the verdict per property, the detection/recovery figures, the harness's incidents
(a fault that never fired, a load that did not start), load under chaos when it
ran, and the command that reproduces the run.  Tables are capped, never the verdict.
"""

from __future__ import annotations

from swarmshake.reports.html import (
    MAX_INCIDENTS_SHOWN,
    PROPERTY_NAMES,
    distribution_samples_ms,
    fmt_ms,
    harness_incidents,
    reproduce_command,
)
from swarmshake.reports.recovery import RunMeasurement
from swarmshake.reports.rundir import RunDir
from swarmshake.reports.series import (
    fault_windows,
    loop_stalls,
    run_duration_s,
    stall_in_own_pause,
)

MAX_FAULT_ROWS = 30  # a summary is read in a browser tab; the report holds every fault
MAX_SUMMARY_BYTES = 1 << 20  # GitHub's job-summary limit per step
STATUS_MARK = {"valid": "✅", "invalid": "❌", "unknown": "⚠️"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def render_summary(run: RunDir, measurement: RunMeasurement) -> str:
    verdict = run.verdict
    lines = [
        f"## {STATUS_MARK[run.status]} swarmshake: {_cell(run.name)} — **{run.status}**",
        "",
        f"{len(run.history.nodes())} nodes · {run_duration_s(run.history):.1f} s · "
        f"{verdict.events} events · seed `{run.seed if run.seed is not None else 'not recorded'}`",
        "",
        "| property | status | finding |",
        "|---|---|---|",
    ]
    for name, result in verdict.results.items():
        label = f"{name} {PROPERTY_NAMES.get(name, '')}".strip()
        lines.append(
            f"| {label} | {STATUS_MARK[result.status]} {result.status} | {_cell(result.message)} |"
        )
    samples = distribution_samples_ms(measurement)
    if any(samples.values()):
        lines += ["", "| measure | n | min ms | median ms | max ms |", "|---|---:|---:|---:|---:|"]
        for name, values in samples.items():
            ordered = sorted(values)
            if ordered:
                lines.append(
                    f"| {name} | {len(ordered)} | {ordered[0]:.0f} | "
                    f"{ordered[len(ordered) // 2]:.0f} | {ordered[-1]:.0f} |"
                )
    lines.append("")
    lines.append(f"False positives: **{measurement.false_positives}**")
    incidents = harness_incidents(run)
    if incidents:
        lines += ["", f"Harness incidents: **{len(incidents)}**", ""]
        shown = incidents[:MAX_INCIDENTS_SHOWN]
        lines += [f"- {_cell(kind)} at {t:.1f} s: {_cell(text)}" for kind, t, text in shown]
        if len(incidents) > len(shown):
            lines.append(f"- … {len(incidents) - len(shown)} more in events/harness.jsonl")
    windows = fault_windows(run.history)
    stalls = loop_stalls(run.history)
    overload = [s for s in stalls if not stall_in_own_pause(s, windows)]
    if overload:
        worst = max(overload, key=lambda s: s.stalled_ms)
        lines.append(
            f"\nControl-loop stalls: **{len(overload)}** (worst {worst.stalled_ms:.0f} ms on "
            f"{_cell(worst.node)}): the machine or a node was overloaded; timing figures "
            "from this run are suspect."
        )
    if len(overload) < len(stalls):
        lines.append(
            f"\nControl-loop stalls of a paused node during its own pause fault: "
            f"{len(stalls) - len(overload)} (the fault itself, not overload)."
        )
    if measurement.faults:
        lines += [
            "",
            "| fault | at s | detection ms | recovery ms | rejoin ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for fault in measurement.faults[:MAX_FAULT_ROWS]:
            victims = ",".join(fault.victims)
            lines.append(
                f"| {_cell(fault.op)} {_cell(victims)} | {fault.inject_t:.2f} | "
                f"{fmt_ms(fault.detection_s)} | {fmt_ms(fault.recovery_s)} | {fmt_ms(fault.rejoin_s)} |"
            )
        if len(measurement.faults) > MAX_FAULT_ROWS:
            lines.append(
                f"| … {len(measurement.faults) - MAX_FAULT_ROWS} more in report.html | | | | |"
            )
        missing = [
            f"- {_cell(fault.op)} at {fault.inject_t:.2f} s: {name}: {_cell(fault.why[name])}"
            for fault in measurement.faults[:MAX_FAULT_ROWS]
            for name in ("detection", "recovery", "rejoin")
            if name in fault.why
        ]
        if missing:
            lines += ["", "Why a figure is —:", *missing]
    if run.load is not None:
        lines += [
            "",
            f"Load under chaos: {run.load.users} users, {run.load.requests} requests, "
            f"{run.load.errors} errors.",
            "",
            "| window | from s | to s | requests | availability | p50 ms | p95 ms | p99 ms | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for window in run.load.windows[:MAX_FAULT_ROWS]:
            availability = (
                "—" if window.availability is None else f"{window.availability * 100:.1f}%"
            )
            latency = window.latency_ms
            errors = ", ".join(f"{kind}: {count}" for kind, count in window.errors_by_kind.items())
            lines.append(
                f"| {_cell(window.label)} | {window.start_s:.1f} | {window.end_s:.1f} | "
                f"{window.requests} | {availability} | {_ms(latency.p50)} | {_ms(latency.p95)} | "
                f"{_ms(latency.p99)} | {_cell(errors) or '—'} |"
            )
        if len(run.load.windows) > MAX_FAULT_ROWS:
            lines.append(
                f"| … {len(run.load.windows) - MAX_FAULT_ROWS} more windows in report.html "
                "| | | | | | | | |"
            )
    lines += ["", "Reproduce:", "", "```sh", reproduce_command(run), "```", ""]
    text = "\n".join(lines)
    return text if len(text.encode()) <= MAX_SUMMARY_BYTES else text[: MAX_SUMMARY_BYTES // 2]


def write_summary(run: RunDir, measurement: RunMeasurement) -> None:
    (run.path / "summary.md").write_text(render_summary(run, measurement), encoding="utf-8")
