"""The TorchElastic workload on its own (one rank): the neutral history it writes, its resume."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from swarmshake.chaos.backends.local import reserve_ports
from swarmshake.verify.history import RejoinDone, StepCommitted, read_events

pytestmark = pytest.mark.slow  # two processes importing torch


def run_worker(tmp_path, max_steps: int) -> None:
    env = {
        **os.environ,
        "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(reserve_ports(1)[0]), "SWARMSHAKE_NODE": "n1",
        "SWARMSHAKE_EVENTS": str(tmp_path / "events" / "n1.jsonl"),
        "SWARMSHAKE_CHECKPOINTS": str(tmp_path / "ck"), "SWARMSHAKE_MAX_STEPS": str(max_steps),
        "SWARMSHAKE_STEP_INTERVAL_S": "0", "SWARMSHAKE_HIDDEN": "16",
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake.chaos.systems.torchelastic_worker"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_restarted_worker_resumes_from_its_checkpoint_with_the_same_fingerprints(tmp_path):
    run_worker(tmp_path, 8)
    run_worker(tmp_path, 12)
    events = read_events(tmp_path / "events" / "n1.jsonl").events
    commits = [e for e in events if isinstance(e, StepCommitted)]
    first = {e.step: e.param_fp for e in commits if e.incarnation == 1}
    second = {e.step: e.param_fp for e in commits if e.incarnation == 2}
    assert sorted(first) == list(range(8))
    (rejoin,) = [e for e in events if isinstance(e, RejoinDone)]
    assert rejoin.step == 5 and rejoin.source == "checkpoint"  # checkpoint_every = 5
    assert rejoin.param_fp == first[5]
    assert sorted(second) == list(range(6, 12))
    assert all(second[s] == first[s] for s in (6, 7))  # the same step recomputes the same value
    assert all(e.participants == ["n1"] and e.quorum_id for e in commits)
