"""An explore run's result on disk: the shrunk schedule beside the run that shows it.

``swarmshake explore`` (simulator or real backend) ends a search that found a
violation with one run directory (DESIGN: "Run directory") holding the history of
the shrunk schedule's failing run and ``shrunk.yaml``, the scenario file that replays
it.  The reports read ``shrunk.yaml`` from there (``reports/rundir.py``) and show it
in ``report.html``; :func:`write_shrunk` writes it and regenerates the reports, so
the page that explains the violation also says how to reproduce it.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

from swarmshake.reports import write_run_reports

SHRUNK_FILE = "shrunk.yaml"
MAX_SHRUNK_BYTES = 1 << 20  # the reports refuse larger text files (reports/rundir.py)


def new_sim_run_dir(out: Path, seed: int) -> Path:
    """A fresh ``out/<UTC stamp>-explore-sim-s<seed>-<hex>`` (created), like the runner's ids."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = out / f"{stamp}-explore-sim-s{seed}-{secrets.token_hex(2)}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def write_shrunk(run_dir: Path, scenario_text: str) -> Path:
    """Write ``run_dir/shrunk.yaml`` and regenerate the run's reports; returns the file."""
    data = scenario_text.encode()
    if len(data) > MAX_SHRUNK_BYTES:
        raise ValueError(
            f"shrunk schedule of {len(data)} bytes is over {MAX_SHRUNK_BYTES}: not a shrunk one"
        )
    path = run_dir / SHRUNK_FILE
    path.write_bytes(data)
    write_run_reports(run_dir)
    return path


def point_latest(out: Path, run_dir: Path) -> None:
    """``out/latest`` -> ``run_dir``, the runner's way (imported here only on a violation:
    the runner pulls in every backend, which a clean simulator search never needs)."""
    from swarmshake.chaos.runner import point_latest as point_runner_latest

    point_runner_latest(out, run_dir)
