"""Real node processes: checkpoints on the Young–Daly policy, replicated to peers.

The policy reads the failures the node observes (a peer declared dead lowers the
MTBF estimate); every checkpoint is copied to a peer, verified and stored under the
origin's name; a node restarting with only corrupt checkpoints gets its replica back
from that peer instead of starting from nothing.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol.rejoin import rendezvous_order
from swarmshake.reference_node.runtime.launcher import LocalCluster

pytestmark = pytest.mark.slow
NODES = ["n1", "n2", "n3"]
PRIOR_MTBF_S = 60.0
STEP = {
    "checkpoint_policy": "young-daly",
    # sqrt(2 * C * M) with a write cost C of milliseconds: under a second, so the
    # clamp's floor sets the pace and a short test sees several checkpoints.
    "checkpoint_prior_mtbf_s": PRIOR_MTBF_S,
    "checkpoint_min_interval_s": 0.5,
    "checkpoint_max_interval_s": 30.0,
}


def events_of(cluster: LocalCluster, node: str) -> list[history.EventBase]:
    return history.read_events(cluster.run_dir / "events" / f"{node}.jsonl").events


def step_of(cluster: LocalCluster, node: str) -> int:
    return (cluster.status(node) or {}).get("step", -1)


def checkpoints_status(cluster: LocalCluster, node: str) -> dict:
    return ((cluster.status(node) or {}).get("commit") or {}).get("checkpoints") or {}


def test_young_daly_checkpoints_replicated_and_restored(tmp_path):
    cluster = LocalCluster(tmp_path / "run", NODES, training={"hidden": [64, 64]}, step=STEP)
    holder = rendezvous_order(0, "n1", 0, ("n2", "n3"))[0]  # r = (3 - 1) // 2 = 1
    replicas = cluster.run_dir / "nodes" / holder / "replicas" / "n1"
    try:
        cluster.start_all()
        cluster.wait_ready(timeout_s=180)
        cluster.wait_for(
            lambda: (
                len(checkpoint.list_checkpoints(replicas)) >= 1
                and min(step_of(cluster, n) for n in NODES) >= 5
            ),
            90,
            what=f"n1's checkpoint replicated to {holder}",
        )
        status = checkpoints_status(cluster, "n1")
        assert status["policy"] == "YoungDaly" and status["failures_observed"] == 0
        # A fresh cluster: a first start begins at step 0 with no state transfer
        # (node_core.rejoins_at_start); a node that came up after a majority had
        # already committed (the leader does not wait for a voter late by more than
        # the straggler grace) learned it from their messages and rejoined from a
        # live peer's verified state.
        for node in NODES:
            done = [e for e in events_of(cluster, node) if isinstance(e, history.RejoinDone)]
            assert all(d.verified and d.source in NODES for d in done), done
        writes = {
            e.step: e.param_fp
            for e in events_of(cluster, "n1")
            if isinstance(e, history.CheckpointWrite)
        }
        # The replica is byte-for-byte a verified checkpoint n1 wrote.
        step, path = checkpoint.list_checkpoints(replicas)[0]
        assert checkpoint.read_checkpoint(path).param_fingerprint() == writes[step]
        other = next(n for n in ("n2", "n3") if n != holder)
        assert not (cluster.run_dir / "nodes" / other / "replicas" / "n1").exists()

        # A crash is an observed failure: the survivors' MTBF estimate drops.
        cluster.kill("n1", signal.SIGKILL)
        cluster.wait_for(
            lambda: all(
                checkpoints_status(cluster, n).get("failures_observed", 0) >= 1
                for n in ("n2", "n3")
            ),
            30,
            what="n2 and n3 observe n1's death",
        )
        for node in ("n2", "n3"):
            status = checkpoints_status(cluster, node)
            uptime = (cluster.status(node) or {})["uptime_s"]
            # (prior + observed) / (1 + failures): at most half of the failure-free value.
            assert status["mtbf_s"] <= (PRIOR_MTBF_S + uptime) / 2 + 1.0, status

        # n1's own checkpoints are all corrupted on disk: it gets its replica back.
        replica_step, replica_path = checkpoint.list_checkpoints(replicas)[0]
        own = checkpoint.list_checkpoints(cluster.run_dir / "checkpoints" / "n1")
        assert own
        for _, file in own:
            data = bytearray(file.read_bytes())
            data[-1] ^= 0xFF  # a flipped payload byte: the sha256 no longer matches
            file.write_bytes(bytes(data))
        cluster.start("n1")
        cluster.wait_ready(["n1"], timeout_s=180)
        assert (cluster.status("n1") or {}).get("worker_source") == "replica"
        n1_events = events_of(cluster, "n1")
        last_start = max(i for i, e in enumerate(n1_events) if isinstance(e, history.Start))
        restarted = n1_events[last_start:]
        skipped = [e for e in restarted if isinstance(e, history.CheckpointSkip)]
        assert len(skipped) >= len(own), skipped
        restored = checkpoint.checkpoint_path(cluster.run_dir / "checkpoints" / "n1", replica_step)
        assert checkpoint.read_checkpoint(restored).param_fingerprint() == writes[replica_step]
        # Its rejoin started from the restored checkpoint's step, not from nothing.
        begins = [e for e in restarted if isinstance(e, history.RejoinBegin)]
        assert begins and begins[0].from_step == replica_step - 1

        start = {n: step_of(cluster, n) for n in NODES}
        cluster.wait_for(
            lambda: all(step_of(cluster, n) >= start[n] + 3 for n in NODES),
            90,
            what="all three train after the restore",
        )
        by_step: dict[int, set[str]] = {}
        for node in NODES:
            for event in events_of(cluster, node):
                if isinstance(event, history.Commit):
                    by_step.setdefault(event.step, set()).add(event.param_fp)
        assert all(len(fps) == 1 for fps in by_step.values())
    finally:
        cluster.stop_all()


def test_a_failing_checkpoint_disk_does_not_stop_the_node(tmp_path):
    """suites/disk.yaml: under disk_full the worker's ENOSPC was raised inside its
    command task group and stopped the worker, so the node exited.  Now a failed write
    is a ``checkpoint_fail`` event, the node trains on, and writes resume once the
    disk works.  (The checkpoint folder replaced by a file makes every write fail
    without root, where the disk_full fault mounts a full tmpfs.)"""
    step = {"checkpoint_policy": "fixed", "checkpoint_every": 2}
    cluster = LocalCluster(tmp_path / "run", NODES, training={"hidden": [16]}, step=step)
    folder = cluster.run_dir / "checkpoints" / "n1"
    try:
        cluster.start_all()
        cluster.wait_ready(timeout_s=180)
        cluster.wait_for(lambda: checkpoint.list_checkpoints(folder), 60, what="n1 checkpoints")
        _replace_by_a_file(folder)
        broken_at = step_of(cluster, "n1")
        cluster.wait_for(
            lambda: (
                checkpoints_status(cluster, "n1").get("writes_failed", 0) >= 2
                and step_of(cluster, "n1") >= broken_at + 6
            ),
            60,
            what="n1 trains on through failed checkpoint writes",
        )
        assert cluster.alive("n1")
        failures = [e for e in events_of(cluster, "n1") if isinstance(e, history.CheckpointFail)]
        assert failures and all(f.reason for f in failures), failures
        assert "writes_failed" in checkpoints_status(cluster, "n1")
        folder.unlink()  # the disk works again
        mended_at = step_of(cluster, "n1")
        cluster.wait_for(
            lambda: any(
                isinstance(e, history.CheckpointWrite) and e.step > mended_at
                for e in events_of(cluster, "n1")
            ),
            60,
            what="n1 writes checkpoints again",
        )
        assert cluster.alive("n1")
    finally:
        cluster.stop_all()


def _replace_by_a_file(folder: Path) -> None:
    """Put a file where the node's checkpoint folder is, while the node may be writing
    into it (a write recreates a missing folder: move it away, then claim the name)."""
    for attempt in range(10):  # bounded: a write lands between the two at most rarely
        folder.rename(folder.with_name(f"{folder.name}.moved-{attempt}"))
        try:
            with open(folder, "xb") as handle:
                handle.write(b"not a folder")
            return
        except (FileExistsError, IsADirectoryError):
            continue
    raise AssertionError(f"could not replace {folder} by a file")
