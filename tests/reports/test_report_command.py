"""``swarmshake report``: regenerate, compare two runs, flag recovery regressions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.chaos.commands import report
from swarmshake.chaos.commands._args import UsageError


def _run(histories, path: Path, *, stall_s: float, detection_s: float = 0.25) -> Path:
    plan = histories.Plan(
        stall_s=stall_s,
        detection_s=detection_s,
        faults=[histories.PlannedFault("crash", "n3", 4.0, 7.0)],
    )
    return histories.write_run(path, plan)


def test_regenerates_and_exits_with_the_verdict(crash_run: Path, broken_run: Path) -> None:
    assert report.main([str(crash_run)]) == 0
    assert (crash_run / "report.html").is_file() and (crash_run / "junit.xml").is_file()
    assert report.main([str(broken_run)]) == 1


def test_compare_flags_a_recovery_regression(tmp_path: Path, histories, capsys) -> None:
    old = _run(histories, tmp_path / "old", stall_s=0.4)
    same = _run(histories, tmp_path / "same", stall_s=0.41)
    slow = _run(histories, tmp_path / "slow", stall_s=1.2)
    assert report.main([str(same), "--compare", str(old)]) == 0
    assert "no regression" in capsys.readouterr().err
    assert report.main([str(slow), "--compare", str(old)]) == 1
    terminal = capsys.readouterr().err
    assert terminal.startswith("regression: 1 of ")
    slower = [line for line in terminal.splitlines() if "SLOWER" in line]
    assert len(slower) == 1 and "fault 1 crash n3: recovery" in slower[0]
    assert "+800 ms (×3.00)" in slower[0]
    page = (slow / "compare.html").read_text()
    assert "default-src 'none'" in page and 'id="figure-changes"' in page
    assert re.search(r'<tr class="regressed"><td>fault 1 crash n3: recovery</td>', page)
    assert page.count('class="regressed"') == 1
    assert report.main([str(slow), "--compare", str(old), "--json"]) == 1
    comparison = json.loads(capsys.readouterr().out)
    flagged = [c for c in comparison["changes"] if c["regressed"]]
    assert [c["what"] for c in flagged] == ["fault 1 crash n3: recovery"]
    assert flagged[0]["before_ms"] == pytest.approx(400) and flagged[0][
        "after_ms"
    ] == pytest.approx(1200)
    assert "❌ slower" in (slow / "compare.md").read_text()


def test_bad_input_is_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a directory"):
        report.main([str(tmp_path / "missing")])
    with pytest.raises(UsageError, match="no events folder"):
        report.main([str(tmp_path)])


def test_cli_entry_point_routes_report(crash_run: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "report", str(crash_run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "verdict valid" in done.stderr


def _bench(folder: Path, recovery_p50_ms: float) -> Path:
    folder.mkdir()
    cell = {"min": 100.0, "p50": recovery_p50_ms, "p99": None, "max": recovery_p50_ms + 50, "n": 3}
    results = {"crash": {"detection_ms": {**cell, "p50": 200.0, "max": 250.0}, "recovery_ms": cell,
                         "rejoin_ms": {"n": 0}, "trials": 3, "false_positives": 0, "cells": []}}  # fmt: skip
    (folder / "bench.json").write_text(
        json.dumps({"schema": "swarmshake.bench.recovery/1", "results": results})
    )
    return folder


def test_compare_two_benchmarks(tmp_path: Path, capsys) -> None:
    old = _bench(tmp_path / "old", 400.0)
    new = _bench(tmp_path / "new", 900.0)
    assert report.main([str(new), "--compare", str(old), "--json"]) == 1
    comparison = json.loads(capsys.readouterr().out)
    flagged = sorted(c["what"] for c in comparison["changes"] if c["regressed"])
    assert flagged == ["crash: recovery_ms max", "crash: recovery_ms p50"]
    assert report.main([str(old), "--compare", str(new)]) == 0  # faster is no regression
    assert report.main([str(new)]) == 0  # regenerates the bench files
    assert (new / "report.html").is_file() and (new / "junit.xml").is_file()
    assert (new / "summary.md").read_text().startswith("## Recovery benchmark")


def _cell(backend: str, recovery_p50_ms: float) -> dict:
    summary = {"min": 90.0, "p50": recovery_p50_ms, "p99": None, "max": recovery_p50_ms, "n": 3}
    return {"backend": backend, "nodes": 4, "trials": 3, "recovery_ms": summary}


def test_benchmarks_compare_cell_by_cell(tmp_path: Path, capsys) -> None:
    """Pooling a sim cell with a local one hides a local regression; cells do not."""
    for name, local_ms in (("old", 300.0), ("new", 700.0)):
        folder = tmp_path / name
        folder.mkdir()
        cells = [_cell("sim", 100.0), _cell("local", local_ms)]
        (folder / "bench.json").write_text(json.dumps({"results": {"crash": {"cells": cells}}}))
    assert report.main([str(tmp_path / "new"), "--compare", str(tmp_path / "old"), "--json"]) == 1
    comparison = json.loads(capsys.readouterr().out)
    flagged = sorted(c["what"] for c in comparison["changes"] if c["regressed"])
    assert flagged == ["crash/local/4: recovery_ms max", "crash/local/4: recovery_ms p50"]
    assert not any(c["regressed"] for c in comparison["changes"] if "sim" in c["what"])
