"""``report.html``: one self-contained page (inline SVG, CSS and a few lines of JS).

Jinja2 (autoescaping on) fills ``templates/report.html.j2``; every value from the run
is escaped, the SVG figures come from :mod:`swarmshake.reports.plots` and are the
only markup passed through.  A Content-Security-Policy of ``default-src 'none'``
makes the page unable to fetch anything, so it opens the same offline and in CI
artifact viewers.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2
import msgspec

from swarmshake.reference_node.protocol.history import EventBase, RunMark, Start
from swarmshake.reports import plots
from swarmshake.reports.recovery import RunMeasurement, measure_run
from swarmshake.reports.rundir import RunDir
from swarmshake.reports.series import (
    commit_rate,
    fault_windows,
    loop_stalls,
    loss_curve,
    node_lanes,
    run_duration_s,
    run_origin,
    step_at,
)

# Events that tell the story of a run; the routine ones (per-step votes, sends,
# training) appear in the table only when cited as evidence.
TABLE_KINDS = frozenset(
    {
        "start",
        "ready",
        "stop",
        "suspect",
        "refute",
        "declare_dead",
        "declare_alive",
        "view_change",
        "config_change",
        "byzantine",
        "rejoin_begin",
        "rejoin_done",
        "checkpoint_skip",
        "checkpoint_fail",
        "frame_drop",
        "fault",
        "run_mark",
        "loop_stall",
        "worker_stall",
    }
)
MAX_TABLE_ROWS = 5000  # keeps the page under a few MB at 1,000 nodes; evidence is always kept
MAX_DETAILS_CHARS = 240  # a table cell, not a dump
MAX_EVIDENCE_LINKS = 6  # per property in the verdict table; all of them stay in verdict.json
BASE_FIELDS = frozenset(
    {"t_wall", "t_mono", "node", "incarnation", "epoch", "step", "lamport", "kind"}
)
PROPERTY_NAMES = {
    "S1": "agreement",
    "S2": "durability",
    "S3": "no split brain",
    "S4": "detector accuracy",
    "L1": "completeness",
    "L2": "progress",
    "L3": "rejoin",
}

_environment = jinja2.Environment(
    loader=jinja2.PackageLoader("swarmshake.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,  # a missing value is a bug here, not an empty cell
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True)
class TableRow:
    index: int
    t: str
    node: str
    kind: str
    step: str
    details: str


def _details(event: EventBase) -> str:
    fields = {
        name: value
        for name, value in msgspec.structs.asdict(event).items()
        if name not in BASE_FIELDS
    }
    if event.incarnation:
        fields["incarnation"] = event.incarnation
    text = msgspec.json.encode(fields).decode()
    return text if len(text) <= MAX_DETAILS_CHARS else text[: MAX_DETAILS_CHARS - 1] + "…"


def table_rows(run: RunDir) -> tuple[list[TableRow], bool]:
    """The events table: story events plus every cited event, capped (evidence first)."""
    cited = {ref.index for result in run.verdict.results.values() for ref in result.evidence}
    events = run.history.events
    origin = run_origin(run.history)
    chosen = [i for i in sorted(cited) if 0 <= i < len(events)]
    room = MAX_TABLE_ROWS - len(chosen)
    story = [
        i for i, e in enumerate(events) if e.__struct_config__.tag in TABLE_KINDS and i not in cited
    ]
    cut = len(story) > room
    indices = sorted(chosen + story[: max(room, 0)])
    rows = [
        TableRow(
            index=i,
            t=f"{events[i].t_mono - origin:.3f}",
            node=events[i].node,
            kind=str(events[i].__struct_config__.tag),
            step=str(events[i].step) if events[i].step >= 0 else "",
            details=_details(events[i]),
        )
        for i in indices
    ]
    return rows, cut


def fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f}"


def _ms_value(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def distribution_samples_ms(measurement: RunMeasurement) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"detection": [], "recovery": [], "rejoin": []}
    for fault in measurement.faults:
        for name, value in (
            ("detection", fault.detection_s),
            ("recovery", fault.recovery_s),
            ("rejoin", fault.rejoin_s),
        ):
            if value is not None:
                samples[name].append(value * 1000)
    return samples


def reproduce_command(run: RunDir) -> str:
    scenario = run.path / "scenario.yaml"
    cluster = run.scenario.get("cluster")
    backend = run.scenario.get("backend") or (
        cluster.get("backend") if isinstance(cluster, dict) else None
    )
    if run.scenario.get("backend") == "sim":
        # ``swarmshake sim``'s run directory records its config; its faults: section is a
        # schedule.  (A suite run on the simulator names it as cluster.backend: sim, and
        # its scenario.yaml repeats it through ``swarmshake run`` like any suite.)
        config = run.scenario.get("config") or {}
        parts = ["swarmshake", "sim"]
        if isinstance(config, dict) and "nodes" in config:
            parts += ["--nodes", str(config["nodes"])]
        if isinstance(config, dict) and "duration_s" in config:
            parts += ["--duration", f"{config['duration_s']}s"]
        if run.seed is not None:
            parts += ["--seed", str(run.seed)]
        if run.scenario.get("faults"):
            parts += ["--faults", str(scenario)]
        return shlex.join(parts)
    parts = ["swarmshake", "run", str(scenario)]
    if isinstance(backend, str):
        parts += ["--backend", backend]
    if run.seed is not None:
        parts += ["--seed", str(run.seed)]
    return shlex.join(parts)


def environment_rows(run: RunDir) -> list[tuple[str, str]]:
    starts = list(run.history.of_kind(Start))
    rows: list[tuple[str, str]] = [("run directory", str(run.path))]
    if starts:
        first = starts[0]
        for label, value in (
            ("git commit", first.git_commit),
            ("torch", first.torch_version),
            ("threads", str(first.threads)),
            ("cpu flags", first.cpu_flags),
        ):
            if value:
                rows.append((label, value))
    return rows


# What a reader must know about each harness incident (chaos/runner.py logs them as
# ``run_mark`` events, mark "incident"): a verdict over a run that did not do what its
# scenario says is no verdict on that scenario.
INCIDENT_MEANINGS = {
    "faults_never_fired": "scenario entries that never fired: the run did not test them, "
    "so a valid verdict makes the run unknown",
    "fault_skipped": "a fault the backend could not apply: the run did not test it, "
    "so a valid verdict makes the run unknown",
    "load_failed": "the load did not start: the run went on without it",
    "checks_unavailable": "a check could not run",
    "node_status_saved": "the run aborted: each running node's own status page (what it "
    "waited for) was kept in the file named, before the cluster went down",
}
MAX_INCIDENTS_SHOWN = 20  # a run logs a handful; a flood must not bury the verdict


def harness_incidents(run: RunDir) -> list[tuple[str, float, str]]:
    """``(kind, seconds into the run, what it says and means)`` of every harness
    incident; the reports show the first ``MAX_INCIDENTS_SHOWN`` and count them all."""
    origin = run_origin(run.history)
    incidents = []
    for event in run.history.of_kind(RunMark):
        if not isinstance(event, RunMark) or event.mark != "incident":
            continue
        data = dict(event.data)
        kind = str(data.pop("kind", "incident"))
        details = ", ".join(f"{key} {value}" for key, value in data.items())
        text = "; ".join(p for p in (details, INCIDENT_MEANINGS.get(kind, "")) if p)
        incidents.append((kind, event.t_mono - origin, text))
    return incidents


def render_html(run: RunDir, measurement: RunMeasurement | None = None) -> str:
    history = run.history
    measurement = measurement or measure_run(history, run.bounds)
    duration = run_duration_s(history)
    windows = fault_windows(history)
    lanes = node_lanes(history)
    stalls = loop_stalls(history)
    fault_steps = [(max(step_at(history, w.start), 0), w.label) for w in windows]
    baseline_loss = loss_curve(run.baseline) if run.baseline is not None else None
    bin_s, rates = commit_rate(history)
    samples = distribution_samples_ms(measurement)
    by_index = {w.inject_index: w for w in windows}
    fault_rows = []
    for fault in measurement.faults:
        window = by_index.get(fault.inject_index)
        fault_rows.append(
            {
                "index": fault.inject_index,
                "label": window.label if window else fault.op,
                "inject": f"{fault.inject_t:.2f}",
                "heal": f"{window.end:.2f}" if window and window.healed else "—",
                "detection": fmt_ms(fault.detection_s),
                "recovery": fmt_ms(fault.recovery_s),
                "rejoin": fmt_ms(fault.rejoin_s),
                "kept": _pct(fault.throughput_kept),
            }
        )
    distribution_rows = []
    for name, values in samples.items():
        ordered = sorted(values)
        distribution_rows.append(
            {
                "name": f"{name} (ms)",
                "n": len(ordered),
                "min": f"{ordered[0]:.0f}" if ordered else "—",
                "p50": f"{ordered[len(ordered) // 2]:.0f}" if ordered else "—",
                "max": f"{ordered[-1]:.0f}" if ordered else "—",
            }
        )
    rows, table_cut = table_rows(run)
    nodes = history.nodes()
    steady = measurement.steady_commits_per_s
    template = _environment.get_template("report.html.j2")
    return template.render(
        title=run.name,
        run_id=run.path.name,
        verdict=run.verdict,
        run_status=run.status,
        property_names=PROPERTY_NAMES,
        max_evidence_links=MAX_EVIDENCE_LINKS,
        nodes=nodes,
        duration_s=duration,
        seed=run.seed,
        lanes_cut=len(nodes) > plots.MAX_LANES,
        lanes_shown=min(len(nodes), plots.MAX_LANES),
        timeline_svg=plots.timeline_svg(lanes, windows, duration, stalls),
        stall_count=len(stalls),
        fault_rows=fault_rows,
        loss_svg=plots.loss_svg(loss_curve(history), baseline_loss, fault_steps),
        has_baseline=baseline_loss is not None,
        commit_rate_svg=plots.commit_rate_svg(bin_s, rates, windows),
        distributions_svg=plots.distributions_svg(samples),
        distribution_rows=distribution_rows,
        false_positives=measurement.false_positives,
        incidents=harness_incidents(run),
        max_incidents_shown=MAX_INCIDENTS_SHOWN,
        steady_rate=f"{steady:.1f} steps/s" if steady else "not measurable",
        load=run.load,
        pct=_pct,
        ms=_ms_value,
        reproduce_command=reproduce_command(run),
        environment=environment_rows(run),
        shrunk_schedule=run.shrunk_schedule,
        scenario_text=run.scenario_text,
        table_rows=rows,
        table_cut=table_cut,
    )


def write_html(run: RunDir, measurement: RunMeasurement | None = None) -> Path:
    path = run.path / "report.html"
    path.write_text(render_html(run, measurement), encoding="utf-8")
    return path
