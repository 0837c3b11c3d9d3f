"""``swarmshake bench recovery --quick`` on the simulator: the CI command, every format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from swarmshake.reports import write_run_reports


def test_quick_recovery_bench_on_the_simulator_writes_every_format(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    done = subprocess.run(
        [
            sys.executable, "-m", "swarmshake", "bench", "recovery", "--quick",
            "--faults", "crash,restart,byzantine", "--out", str(out), "--json",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert set(results) == {"crash", "restart", "byzantine"}
    for fault in ("crash", "restart"):
        assert results[fault]["trials"] == 6  # sizes 4 and 8, three trials each
        assert results[fault]["recovery_ms"]["n"] >= 1
        assert results[fault]["detection_ms"]["p99"] is None  # fewer than 100 trials
    assert results["restart"]["rejoin_ms"]["n"] >= 1
    assert results["crash"]["rejoin_ms"]["n"] == 0
    assert all(cell["skipped"] for cell in results["byzantine"]["cells"])  # the sim cannot
    document = json.loads((out / "bench.json").read_text())
    assert document["schema"] == "swarmshake.bench.recovery/1" and document["results"] == results
    assert "| restart | sim | 4 | 3 |" in (out / "bench.md").read_text()
    assert 'id="matrix"' in (out / "bench.html").read_text()

    run_dir = Path(results["restart"]["cells"][0]["run_dirs"][0])
    write_run_reports(run_dir)
    page = (run_dir / "report.html").read_text()
    assert "swarmshake sim --nodes 4" in page and 'id="lane-n0-alive"' in page
