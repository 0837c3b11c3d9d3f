"""``swarmshake run`` end to end on the local backend, with stand-in nodes: the run
directory, exit codes for bad input, and cleanup after success, Ctrl-C and kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmshake.chaos import cleanup
from swarmshake.reference_node.protocol.history import Fault, RunMark, read_events

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

STAND_IN_SUITE = """
name: standin
seed: 3
cluster: {nodes: 3}
steady_state: {min_commit_step: -1, timeout_s: 60}
duration_s: 3
quiesce_s: 0.5
faults:
  - {at_s: 0.2, op: {op: crash, nodes: [n2]}, heal_after_s: 0.5}
  - {at_s: 1.0, op: {op: partition, grouping: isolate, nodes: [n1]}, heal_after_s: 0.5}
  - {at_s: 2.0, op: {op: latency, src: [n1], dst: [n3], delay_ms: 30}}
"""


HEARTBEAT_NODE = str(Path(__file__).with_name("heartbeat_node.py"))


@pytest.fixture
def env(tmp_path, heartbeat_program):
    state = tmp_path / "state"
    return {**os.environ, "SWARMSHAKE_STATE_DIR": str(state), "CI": "1"}


def swarmshake(args, env, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "swarmshake", *args], env=env, capture_output=True, text=True,
        timeout=240, cwd=ROOT, **kwargs,
    )  # fmt: skip


def alive_registered(state_dir: Path) -> list[int]:
    """Processes recorded by any run that still exist."""
    pids = []
    for record in (state_dir / "active").glob("*.json"):
        for entry in json.loads(record.read_text())["processes"].values():
            if cleanup.process_start_time(entry["pid"]) == entry["start_time"]:
                if cleanup.process_state(entry["pid"]) not in (None, "Z"):
                    pids.append(entry["pid"])
    return pids


def test_run_writes_the_run_directory_and_leaves_nothing(tmp_path, env):
    suite = tmp_path / "standin.yaml"
    suite.write_text(STAND_IN_SUITE)
    out = tmp_path / "runs"
    done = swarmshake(
        ["run", str(suite), "--out", str(out), "--json", "--node-program", HEARTBEAT_NODE], env
    )
    result = json.loads(done.stdout)
    # Stand-in nodes never commit: nothing is violated; the checkers call the rest valid
    # or unknown, and the exit code says which (0 or 2).
    assert result["violated"] == [], done.stderr[-2000:]
    assert (done.returncode, result["status"]) in ((0, "valid"), (2, "unknown")), done.stderr[
        -2000:
    ]
    run_dir = Path(result["run_dir"])
    assert (out / "latest").resolve() == run_dir
    for name in ("scenario.yaml", "run.json", "bounds.json", "verdict.json", "events/harness.jsonl",
                 "events/n1.jsonl", "logs/n1.log", "nodes/n1/node.toml"):  # fmt: skip
        assert (run_dir / name).exists(), name
    record = json.loads((run_dir / "run.json").read_text())
    assert record["environment"]["seed"] == 3 and record["environment"]["torch_version"]
    harness = read_events(run_dir / "events" / "harness.jsonl").events
    faults = [(e.op, e.phase) for e in harness if isinstance(e, Fault)]
    assert faults[:4] == [
        ("crash", "inject"),
        ("crash", "heal"),
        ("partition", "inject"),
        ("partition", "heal"),
    ]
    assert ("latency", "inject") in faults and ("heal", "heal") in faults  # quiesce healed it
    marks = [e.mark for e in harness if isinstance(e, RunMark)]
    assert marks[:3] == ["run_start", "cluster_up", "steady_state"] and "verdict" in marks
    assert alive_registered(Path(env["SWARMSHAKE_STATE_DIR"])) == []
    assert list((Path(env["SWARMSHAKE_STATE_DIR"]) / "active").glob("*.json")) == []
    # The resolved scenario is itself a valid suite.
    again = swarmshake(["run", str(run_dir / "scenario.yaml"), "--out", str(out), "--json",
                        "--node-program", HEARTBEAT_NODE], env)  # fmt: skip
    assert again.returncode in (0, 2) and json.loads(again.stdout)["violated"] == []


def test_bad_input_exits_64_with_file_and_line(tmp_path, env):
    suite = tmp_path / "bad.yaml"
    suite.write_text("name: bad\ncluster:\n  nodes: 4\n  backnd: local\n")
    done = swarmshake(["run", str(suite)], env)
    assert done.returncode == 64
    assert f"{suite}:4: cluster" in done.stderr and "did you mean `backend`" in done.stderr
    netem = tmp_path / "netem.yaml"
    netem.write_text("name: n\nfaults:\n  - {at_s: 1, op: {op: netem, loss_pct: 5}}\n")
    done = swarmshake(["run", str(netem), "--backend", "local"], env)
    assert done.returncode == 64 and "unsupported on the local backend" in done.stderr
    assert swarmshake(["run", str(tmp_path / "missing.yaml")], env).returncode == 64


def _start_run(tmp_path, env, duration_s=60):
    suite = tmp_path / "long.yaml"
    suite.write_text(STAND_IN_SUITE.replace("duration_s: 3", f"duration_s: {duration_s}"))
    out = tmp_path / "runs"
    process = subprocess.Popen(
        [sys.executable, "-m", "swarmshake", "run", str(suite), "--out", str(out), "--node-program", HEARTBEAT_NODE],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        harness = out / "latest" / "events" / "harness.jsonl"
        if harness.exists() and b'"steady_state"' in harness.read_bytes():
            return process, out
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the run never reached steady state")


def test_ctrl_c_during_a_run_brings_everything_down(tmp_path, env):
    process, out = _start_run(tmp_path, env)
    state = Path(env["SWARMSHAKE_STATE_DIR"])
    assert alive_registered(state)  # the cluster is up
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    assert alive_registered(state) == []
    record = json.loads((out / "latest" / "run.json").read_text())
    assert record["status"] == "unknown" and record["message"] == "interrupted"


@pytest.mark.slow
def test_sigterm_during_explore_brings_its_run_down(tmp_path, env):
    """``timeout N swarmshake explore`` ends with SIGTERM: the run in flight comes down
    as after Ctrl-C.  Explore had no handler of its own and, killed mid-run, left a
    torchft cluster (workers, Lighthouse, namespaces) running (session 8)."""
    suite = tmp_path / "around.yaml"
    suite.write_text(
        "name: around\ncluster: {nodes: 3}\nsteady_state: {min_commit_step: 1, timeout_s: 90}\n"
        "duration_s: 60\nquiesce_s: 15\n"
    )
    out = tmp_path / "runs"
    process = subprocess.Popen(
        [sys.executable, "-m", "swarmshake", "explore", "--backend", "local", "--scenario",
         str(suite), "--budget", "2", "--confirm", "1", "--out", str(out)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    state = Path(env["SWARMSHAKE_STATE_DIR"])
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            harness = out / "latest" / "events" / "harness.jsonl"
            if harness.exists() and b'"steady_state"' in harness.read_bytes():
                break
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
        else:
            raise AssertionError("explore's first run never reached steady state")
        assert alive_registered(state)  # the cluster is up
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=90)
        assert process.returncode == 130, stderr[-2000:]
        assert alive_registered(state) == []
        assert list((state / "active").glob("*.json")) == []
    finally:  # a failure here must not leave the cluster to the next test
        process.kill()
        process.wait()
        subprocess.run(
            [sys.executable, "-c", "from swarmshake.chaos import cleanup; cleanup.reap_stale()"],
            env=env, timeout=120, check=False,
        )  # fmt: skip


def test_kill_9_of_the_harness_is_cleaned_up_by_the_next_run(tmp_path, env):
    process, _ = _start_run(tmp_path, env)
    state = Path(env["SWARMSHAKE_STATE_DIR"])
    before = alive_registered(state)
    assert len(before) >= 3  # zygote, toxiproxy, mosquitto, nodes
    process.kill()
    process.wait()
    time.sleep(0.5)
    # The zygote saw its harness vanish and took the nodes with it; Toxiproxy and
    # Mosquitto are left for the next run to find.
    removed = subprocess.run(
        [sys.executable, "-c", "from swarmshake.chaos import cleanup; print(cleanup.reap_stale())"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "processes" in removed
    assert alive_registered(state) == []
    assert list((state / "active").glob("*.json")) == []


def test_up_status_down(tmp_path, env):
    out = tmp_path / "runs"
    up = swarmshake(
        ["up", "--nodes", "3", "--out", str(out), "--node-program", HEARTBEAT_NODE, "--json"], env
    )
    assert up.returncode == 0, up.stderr[-2000:]
    state = json.loads(up.stdout)
    assert state["status"] == "up" and len(state["cluster"]["nodes"]) == 3
    status = json.loads(swarmshake(["status", "--json"], env).stdout)
    assert all(node["running"] for node in status["cluster"]["nodes"].values())
    down = swarmshake(["down", "--all", "--json"], env)
    assert down.returncode == 0 and json.loads(down.stdout)["stopped"] is True
    assert alive_registered(Path(env["SWARMSHAKE_STATE_DIR"])) == []
    assert json.loads(swarmshake(["status", "--json"], env).stdout) == {"status": "down"}
