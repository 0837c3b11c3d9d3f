"""Soak: the smoke suite's faults, repeated for an hour on real nodes, with memory and
leak checks (``make test-long``; not CI).

One ``swarmshake run`` of the smoke cluster (4 reference nodes, load on) whose fault
phase is the smoke suite's three faults tiled every 30 s for ``SWARMSHAKE_SOAK_S``
seconds (default 3600).  While it runs, the harness's process tree is sampled every
few seconds; when it ends:

- the verdict is valid (a violation found by an hour of faults is a finding);
- no process of the run outlives it; nothing is left in the cleanup registry;
- nothing is left in the temporary folder the run was given (``TMPDIR``), no network
  namespace and no Docker container was added;
- no long-lived process grew: resident memory in the last tenth of the fault phase
  is within ``RSS_GROWTH_FRACTION`` (+ ``RSS_GROWTH_SLACK_MB``) of the same process's
  after warm-up (10-20 % of the phase).  A leak of a few hundred bytes a step shows
  over an hour; allocator noise stays inside the slack.

Bounded: the run stops by itself (its duration), and the test's own deadline is the
soak plus the run's start, quiesce and verification.  ``SWARMSHAKE_SOAK_S=120`` is a
two-minute version of the same checks.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import psutil
import pytest

from swarmshake.chaos import cleanup, yaml_input
from swarmshake.chaos.scenario import load

ROOT = Path(__file__).resolve().parents[2]
SOAK_S = float(os.environ.get("SWARMSHAKE_SOAK_S", "3600"))
TILE_S = 30.0  # the smoke suite's fault phase: its faults at 2, 12 and 22 s
SAMPLE_EVERY_S = 5.0
RSS_GROWTH_FRACTION = 0.25
RSS_GROWTH_SLACK_MB = 64.0
# Start-up, steady state, the quiesce, verification and replay of an hour of history.
DEADLINE_S = SOAK_S * 1.5 + 900

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.timeout(int(DEADLINE_S) + 120)]


def soak_scenario(duration_s: float) -> dict:
    smoke = msgspec.to_builtins(load(ROOT / "suites" / "smoke.yaml"))
    tiles = int(duration_s // TILE_S)
    faults = [
        {**entry, "at_s": round(tile * TILE_S + entry["at_s"], 3)}
        for tile in range(tiles)
        for entry in smoke["faults"]
    ]
    return {**smoke, "name": "soak", "duration_s": duration_s, "faults": faults}


class Sampler(threading.Thread):
    """Resident memory of every process under the harness, every few seconds."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.samples: list[tuple[float, dict[tuple[int, float], tuple[str, int]]]] = []
        self.seen: set[tuple[int, float]] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY_S):
            try:
                root = psutil.Process(self.root_pid)
                processes = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            sample = {}
            for process in processes:
                try:
                    key = (process.pid, process.create_time())
                    name = " ".join(process.cmdline()[:4])[-80:]
                    sample[key] = (name, process.memory_info().rss)
                except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                    continue
            self.seen |= set(sample)
            self.samples.append((time.monotonic(), sample))  # the run's t_mono clock


def netns() -> list[str]:
    if shutil.which("ip") is None:
        return []
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    return sorted(done.stdout.split("\n"))


def project_containers() -> list[str]:
    if shutil.which("docker") is None:
        return []
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={cleanup.LABEL}"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return sorted(done.stdout.split()) if done.returncode == 0 else []


def marks(run_dir: Path) -> dict[str, float]:
    """The harness's milestones (``steady_state``, ``faults_end`` …) on ``t_mono``."""
    found = {}
    for line in (run_dir / "events" / "harness.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "run_mark":
            found.setdefault(event["mark"], event["t_mono"])
    return found


def rss_growth(samples, steady_t: float, end_t: float) -> list[tuple[str, float, float]]:
    """(process, MB after warm-up, MB at the end) for processes alive in both windows:
    warm-up is 10-20 % into the fault phase, the end its last tenth."""
    phase_s = end_t - steady_t
    warm = [s for t, s in samples if steady_t + 0.1 * phase_s <= t <= steady_t + 0.2 * phase_s]
    late = [s for t, s in samples if end_t - 0.1 * phase_s <= t <= end_t]
    both = set().union(*warm) & set().union(*late) if warm and late else set()
    rows = []
    for key in both:
        before = [s[key][1] for s in warm if key in s]
        after = [s[key][1] for s in late if key in s]
        name = next(s[key][0] for s in late if key in s)
        rows.append((name, statistics.median(before) / 2**20, statistics.median(after) / 2**20))
    return sorted(rows, key=lambda row: row[2] - row[1], reverse=True)


def test_smoke_faults_for_an_hour_leave_no_leak(tmp_path):
    suite = tmp_path / "soak.yaml"
    suite.write_text(yaml_input.dump(soak_scenario(SOAK_S)))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "SWARMSHAKE_STATE_DIR": str(tmp_path / "state"),
        "TMPDIR": str(scratch),
        "CI": "1",
    }
    namespaces_before, containers_before = netns(), project_containers()
    log = (tmp_path / "harness.log").open("w")
    started = time.monotonic()
    harness = subprocess.Popen(
        [sys.executable, "-m", "swarmshake", "run", str(suite), "--out", str(tmp_path / "runs"),
         "--json"],
        stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    sampler = Sampler(harness.pid)
    sampler.start()
    try:
        stdout, _ = harness.communicate(timeout=DEADLINE_S)
    finally:
        if harness.poll() is None:
            harness.kill()
        sampler.stop.set()
        sampler.join(timeout=30)
        log.close()
    elapsed_s = time.monotonic() - started
    stderr = (tmp_path / "harness.log").read_text()
    # The verdict is asserted last: a run with a finding is still checked for leaks.
    assert harness.returncode in (0, 1), f"exit {harness.returncode}\n{stdout}\n{stderr[-4000:]}"
    result = json.loads(stdout)
    run_dir = Path(result["run_dir"])

    # Processes: none of the run's outlives it (zombies reaped by init aside).
    time.sleep(2)  # a killed child's exit reaches init
    survivors = []
    for pid, created in sampler.seen:
        try:
            process = psutil.Process(pid)
            if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                survivors.append(" ".join(process.cmdline()))
        except psutil.NoSuchProcess:
            continue
    assert not survivors, f"processes outlived the run: {survivors}"
    for record in (tmp_path / "state" / "active").glob("*.json"):
        entries = json.loads(record.read_text())["processes"].values()
        alive = [e for e in entries if cleanup.process_start_time(e["pid"]) == e["start_time"]]
        assert not alive, f"cleanup registry still lists live processes: {alive}"

    # Temporary folders, namespaces, containers.  torch's compile cache
    # (``torchinductor_<user>``) is one folder per user that every run reuses, not scratch.
    left = sorted(p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_"))
    assert not left, f"left in TMPDIR: {left}"
    assert netns() == namespaces_before
    assert project_containers() == containers_before

    # Memory, over the fault phase (steady state to the end of the faults).
    milestones = marks(run_dir)
    rows = rss_growth(sampler.samples, milestones["steady_state"], milestones["faults_end"])
    assert rows, "no process lived through the whole fault phase: nothing to compare"
    report = "\n".join(f"  {b:8.1f} → {a:8.1f} MB  {name}" for name, b, a in rows)
    print(f"soak {SOAK_S:.0f} s in {elapsed_s:.0f} s wall, run {run_dir}\nRSS after warm-up → end:\n{report}")  # fmt: skip
    grown = [
        (name, before, after)
        for name, before, after in rows
        if after > before * (1 + RSS_GROWTH_FRACTION) + RSS_GROWTH_SLACK_MB
    ]
    assert not grown, f"resident memory grew past the bound:\n{report}"
    print(f"no leak: processes, registry, TMPDIR, namespaces, containers, RSS; verdict {result['status']}")  # fmt: skip
    assert result["status"] == "valid", f"the soak found: {result['message']} (run {run_dir})"
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)  # an hour of events is large
