"""The 1,000-node simulation (``make test-long``; not CI): ten virtual minutes of churn
on a thousand nodes, every property checked.

BENCHMARKS.md records ~47 s of wall time on one core of the device host for this run;
the development machine took 22 s (2 cores, nothing else running), more when loaded:
too long for CI's budget, hence ``long``.  The deadline only stops a hung run; what is
asserted is the verdict and the detector's accuracy.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_a_thousand_nodes_under_churn_for_ten_virtual_minutes(tmp_path):
    churn = tmp_path / "churn2.yaml"
    churn.write_text("- {at_s: 1.0, op: {op: churn, events_per_min: 2}}\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "sim", "--nodes", "1000", "--duration", "600s",
         "--seed", "1", "--faults", str(churn), "--no-training", "--json"],
        capture_output=True, text=True, timeout=1700, cwd=ROOT,
    )  # fmt: skip
    wall_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["nodes"] == 1000 and result["status"] == "valid", result["violations"]
    assert result["false_positives"] == 0
    # L1 (every crash detected within D) is in the verdict; here: crashes were detected.
    assert result["detection_ms"]["max"] is not None
    print(f"1000 nodes, 600 s virtual: {wall_s:.0f} s wall, detection {result['detection_ms']}")
