"""Fixtures for the report tests: run directories with hand-built histories."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "swarmshake_test_histories", Path(__file__).with_name("histories.py")
)
histories = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = histories  # dataclasses resolve their module by name
_spec.loader.exec_module(histories)

Plan = histories.Plan
PlannedFault = histories.PlannedFault


@pytest.fixture(name="histories")
def histories_module():
    """tests/reports/histories.py (a helper module; test folders are not packages)."""
    return histories


@pytest.fixture
def crash_run(tmp_path: Path) -> Path:
    """4 nodes; n3 crashes at 4 s and restarts at 7 s; n2 paused 9–9.6 s; n2's control
    loop stalls 180 ms up to 2 s and n1's 60 ms up to 5.5 s."""
    plan = Plan(
        faults=[
            PlannedFault("crash", "n3", 4.0, 7.0),
            PlannedFault("pause", "n2", 9.0, 9.6),
        ],
        loop_stalls=[("n2", 2.0, 180.0), ("n1", 5.5, 60.0)],
    )
    return histories.write_run(tmp_path / "run-crash", plan)


@pytest.fixture
def broken_run(tmp_path: Path) -> Path:
    """Like crash_run, plus a false positive (S4) and a diverging fingerprint (S1)."""
    plan = Plan(
        faults=[PlannedFault("crash", "n3", 4.0, 7.0)],
        false_positive_at_s=2.05,
        diverge_step=30,
    )
    return histories.write_run(tmp_path / "run-broken", plan, scenario_name="broken")


@pytest.fixture
def demo_run(tmp_path: Path) -> Path:
    """The demo's run (smoke suite, seed 1) as the old protocol logged it: after n1's
    isolation healed, n3 and n2 relayed n1's verdict on healthy n4, which restarted."""
    return histories.write_demo_run(tmp_path / "run-demo", old_protocol=True)
