"""Reports for runs and benchmarks: self-contained HTML with plots, JSON
(``verdict.json``, ``bench.json``), JUnit XML and Markdown summaries, and the
recovery-time benchmark tables.

The harness calls :func:`write_run_reports` after every run; ``swarmshake report``
calls it to regenerate.  Schemas: ``docs/report-schemas.md``.
"""

from __future__ import annotations

from pathlib import Path

from swarmshake.reports.html import write_html
from swarmshake.reports.junit import write_junit
from swarmshake.reports.recovery import measure_run
from swarmshake.reports.rundir import RunDir, RunDirError, load_run_dir
from swarmshake.reports.summary import write_summary

__all__ = ["RunDir", "RunDirError", "load_run_dir", "write_run_reports"]


def write_run_reports(run_dir: str | Path) -> None:
    """Write ``report.html``, ``junit.xml``, ``summary.md`` (and ``verdict.json`` when
    ``swarmshake verify`` has not) into ``run_dir``.  Raises :class:`RunDirError`
    naming the file when the run directory is unreadable."""
    run = load_run_dir(run_dir)
    measurement = measure_run(run.history, run.bounds)
    write_html(run, measurement)
    write_junit(run)
    write_summary(run, measurement)
