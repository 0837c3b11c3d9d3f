"""A worker started by fork (the zygote's path): it trains, is niced, dies with its node."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.launcher import LocalCluster

pytestmark = pytest.mark.slow
NODES = ["n1", "n2", "n3"]


def _proc_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    raise KeyError(name)


def test_forked_worker_trains_is_niced_and_dies_with_its_control_process(tmp_path):
    cluster = LocalCluster(
        tmp_path / "run",
        NODES,
        training={"hidden": [32]},
        extra={"worker": {"start": "fork", "nice": 7}},
    )
    cluster.start_all()
    try:
        cluster.wait_ready(timeout_s=120)
        cluster.wait_for(
            lambda: all((cluster.status(n) or {}).get("steps_committed", 0) >= 3 for n in NODES),
            120,
            what="three steps committed on every node",
        )
        status = cluster.status("n1")
        assert status is not None
        control_pid, worker_pid = status["pid"], status["worker_pid"]
        assert int(_proc_field(worker_pid, "PPid")) == control_pid
        # Forked, not exec'd: the worker runs the control process's command line.
        assert (
            Path(f"/proc/{worker_pid}/cmdline").read_bytes()
            == Path(f"/proc/{control_pid}/cmdline").read_bytes()
        )
        assert os.getpriority(os.PRIO_PROCESS, worker_pid) == 7
        by_step: dict[int, set[str]] = {}
        for node in NODES:
            for event in history.read_events(cluster.run_dir / "events" / f"{node}.jsonl").events:
                if isinstance(event, history.Commit):
                    by_step.setdefault(event.step, set()).add(event.param_fp)
        assert by_step and all(len(fps) == 1 for fps in by_step.values()), by_step

        cluster.kill("n1", signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{worker_pid}").exists() and time.monotonic() < deadline:
            if _proc_field(worker_pid, "State").startswith("Z"):
                break  # dead, waiting to be reaped by init
            time.sleep(0.05)
        assert not Path(f"/proc/{worker_pid}").exists() or _proc_field(
            worker_pid, "State"
        ).startswith("Z")
    finally:
        cluster.stop_all()
