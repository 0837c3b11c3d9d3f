"""scripts/declarations.py on the demo's history: the old protocol's relayed verdicts
on n4 after n1's heal are reported as healthy nodes declared dead, the fixed
protocol's history reports none, and a path that is no run directory exits 64."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.reference_node.protocol.history import write_history

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "declarations.py"
_HISTORIES = ROOT / "tests" / "reports" / "histories.py"


@pytest.fixture(scope="module")
def demo_histories():
    """tests/reports/histories.py, loaded by path (test folders are not packages)."""
    spec = importlib.util.spec_from_file_location("swarmshake_declarations_histories", _HISTORIES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def write_demo_run(run_dir: Path, events: list) -> Path:
    by_node: dict[str, list] = {}
    for event in events:
        by_node.setdefault(event.node, []).append(event)
    for node, node_events in by_node.items():
        write_history(run_dir / "events" / f"{node}.jsonl", node_events)
    return run_dir


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def test_the_old_protocols_relayed_verdicts_are_reported(tmp_path, demo_histories):
    run_dir = write_demo_run(tmp_path / "old", demo_histories.demo_heal_events(old_protocol=True))
    done = run_script(str(run_dir), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    healthy = {(v["declarer"], v["peer"]) for v in report["healthy_declared_after_heal"]}
    assert healthy == {("n3", "n4"), ("n2", "n4")}
    assert {(v["declarer"], v["peer"]) for v in report["invalid_judgements"]} >= healthy
    # n1, cut off, was rightly declared dead and rightly restarted; n4's restart is there too.
    assert {r["node"] for r in report["forced_restarts"]} == {"n1", "n4"}
    assert report["heals_s"][0][1] == ["n1"]
    assert report["heals_s"][0][0] == pytest.approx(demo_histories.DEMO_ISOLATE_S[1], abs=1e-6)


def test_the_fixed_protocols_history_reports_no_healthy_node_declared(tmp_path, demo_histories):
    run_dir = write_demo_run(tmp_path / "new", demo_histories.demo_heal_events(old_protocol=False))
    done = run_script(str(run_dir), "--json")
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout)
    assert report["healthy_declared_after_heal"] == []
    assert report["invalid_judgements"] == []
    assert report["declarations"] == 9


def test_a_path_without_events_is_a_usage_error(tmp_path):
    done = run_script(str(tmp_path))
    assert done.returncode == 64
    assert "no events/ folder" in done.stderr
