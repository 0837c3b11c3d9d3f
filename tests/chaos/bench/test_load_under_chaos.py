"""Load under chaos, driven by the runner: a scenario's ``load:`` section starts Locust
once the cluster is steady, keeps it posting ``/infer`` to every reference node through
a crash, stops it at the end of the quiesce, and the run's reports show availability,
latency and errors per fault window.  A real 4-node cluster on the local backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.chaos import cleanup
from swarmshake.chaos.scenario import ScenarioError, loads
from swarmshake.reference_node.protocol.history import Fault, History, RunMark

ROOT = Path(__file__).resolve().parents[3]
RUN_TIMEOUT_S = 300  # ~50 s idle; a 2-core box shared with other jobs can triple it

SUITE = """
name: load-crash
seed: 5
cluster: {nodes: 4, model: tiny}
steady_state: {min_commit_step: 2, timeout_s: 120}
duration_s: 10
quiesce_s: 6
load: {users: 4, spawn_rate: 4, rate_per_user: 5}
faults:
  - {at_s: 3, op: {op: crash, nodes: [n4]}, heal_after_s: 4}
"""


def test_load_section_is_validated() -> None:
    assert loads("name: x\n").load is None  # off unless asked for
    assert loads("name: x\nload: {}\n").load.users == 4
    with pytest.raises(
        ScenarioError, match=r"<scenario>:2: load.users: users = 0 must lie in \[1, 64\]"
    ):
        loads("name: x\nload: {users: 0}\n")
    with pytest.raises(ScenarioError, match="did you mean `rate_per_user`"):
        loads("name: x\nload: {rate_per_usr: 3}\n")


@pytest.mark.slow
def test_runner_drives_locust_through_a_crash(tmp_path: Path) -> None:
    suite = tmp_path / "load.yaml"
    suite.write_text(SUITE)
    state = tmp_path / "state"
    env = {**os.environ, "SWARMSHAKE_STATE_DIR": str(state), "CI": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "run", str(suite), "--out", str(tmp_path / "runs"),
         "--json"],
        env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )  # fmt: skip
    result = json.loads(done.stdout)
    run_dir = Path(result["run_dir"])
    record = json.loads((run_dir / "run.json").read_text())
    assert not [i for i in record["incidents"] if i["kind"] in ("load_failed", "aborted")], record
    assert result["violated"] == [], result["message"]

    # Load runs from steady state to the end of the quiesce, around every fault.
    history = History.load(run_dir)
    marks = {e.mark: e for e in history.of_kind(RunMark)}
    faults = list(history.of_kind(Fault))
    assert marks["steady_state"].t_mono < marks["load_start"].t_mono < faults[0].t_mono
    assert marks["quiesce"].t_mono < marks["load_stop"].t_mono <= marks["run_end"].t_mono
    assert marks["load_stop"].data["exit_status"] is not None  # Locust stopped, not orphaned
    assert marks["load_stop"].data["requests"] > 100

    # Every request is recorded; n4's requests fail exactly while it is down.
    records = [json.loads(line) for line in (run_dir / "load/requests.jsonl").open()]
    assert {r["node"] for r in records} == {"n1", "n2", "n3", "n4"}
    crash_at, restart_at = faults[0].t_mono, faults[1].t_mono
    down = [r for r in records if r["node"] == "n4" and crash_at + 0.2 < r["t_mono"] < restart_at]
    assert down and not any(r["ok"] for r in down)
    survivors = [r for r in records if r["node"] != "n4" and crash_at < r["t_mono"] < restart_at]
    assert sum(r["ok"] for r in survivors) >= 0.95 * len(survivors) > 0

    # Per fault window figures in load.json, verdict.json, report.html and summary.md.
    load = json.loads((run_dir / "load.json").read_text())
    steady, crash = load["windows"]
    assert (steady["label"], crash["label"]) == ("steady", "crash n4")
    assert crash["errors"] >= len(down) and 0.5 < crash["availability"] < 0.95
    assert "ConnectionRefusedError" in crash["errors_by_kind"]
    assert steady["availability"] > 0.9 and steady["latency_ms"]["p50"] > 0
    assert crash["latency_ms"]["p50"] <= crash["latency_ms"]["p95"] <= crash["latency_ms"]["p99"]
    assert load["requests"] == len(records) == steady["requests"] + crash["requests"]
    assert 10 < load["duration_s"] < 40  # the fault phase and quiesce, not Locust's backstop
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["load"] == load
    page = (run_dir / "report.html").read_text()
    assert 'id="load-windows"' in page and "<td>crash n4</td>" in page
    summary = (run_dir / "summary.md").read_text()
    assert "Load under chaos: 4 users" in summary and "| crash n4 |" in summary

    # Locust is gone with the run, and its own summary saw the crash too.
    assert cleanup.process_state(marks["load_start"].data["pid"]) in (None, "Z")
    assert "ConnectionRefusedError" in (run_dir / "load" / "locust.log").read_text()
