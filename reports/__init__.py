"""Reports for runs and benchmarks: self-contained HTML with plots, JSON
(``verdict.json``, ``bench.json``), JUnit XML and Markdown summaries, and the
recovery-time benchmark tables.

The harness calls :func:`write_run_reports` after every run; ``swarmshake report``
calls it to regenerate.  Schemas: ``docs/report-schemas.md``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from swarmshake.reports.html import write_html
from swarmshake.reports.junit import write_junit
from swarmshake.reports.load_model import LoadResults, rewindow
from swarmshake.reports.recovery import measure_run
from swarmshake.reports.rundir import RunDir, RunDirError, load_run_dir
from swarmshake.reports.summary import write_summary

__all__ = ["RunDir", "RunDirError", "load_run_dir", "write_run_reports"]


def write_run_reports(run_dir: str | Path) -> None:
    """Write ``report.html``, ``junit.xml``, ``summary.md`` (and ``verdict.json`` when
    ``swarmshake verify`` has not) into ``run_dir``; a run with load under chaos gets
    its per-window figures (``load.json``) under ``verdict.json``'s ``load`` key too.
    Raises :class:`RunDirError` naming the file when the run directory is unreadable."""
    run = load_run_dir(run_dir)
    if run.load is not None:
        try:
            run.load = rewindow(run.path, run.load)
        except ValueError as error:  # a corrupt requests.jsonl: name it, like any input
            raise RunDirError(str(error)) from None
        (run.path / "load.json").write_bytes(
            msgspec.json.format(msgspec.json.encode(run.load), indent=2)
        )
    measurement = measure_run(run.history, run.bounds)
    write_html(run, measurement)
    write_junit(run)
    write_summary(run, measurement)
    if run.load is not None:
        add_load_to_verdict(run.path / "verdict.json", run.load)


def add_load_to_verdict(path: Path, load: LoadResults) -> None:
    """Put load figures beside the verdict, where CI reads a run's outcome.  The key is
    the reports' addition to ``swarmshake verify``'s file (its reader ignores unknown
    keys; a rerun of ``verify`` drops it and ``swarmshake report`` puts it back)."""
    try:
        document = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as error:
        raise RunDirError(f"{path}: cannot add load figures: {error}") from None
    if not isinstance(document, dict):
        raise RunDirError(f"{path}: expected a JSON object; rerun `swarmshake verify`")
    document["load"] = msgspec.to_builtins(load)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(document), indent=2))
