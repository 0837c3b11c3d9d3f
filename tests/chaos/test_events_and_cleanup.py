"""Fast tests: the live event tail and the leftover reaper (no cluster needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from swarmshake.chaos import cleanup
from swarmshake.chaos.backends.events import EventTail
from swarmshake.reference_node.protocol.history import Commit, Ready, encode_event


def commit(node: str, step: int, fp: str = "aa") -> bytes:
    return encode_event(
        Commit(
            t_wall=0,
            t_mono=float(step),
            node=node,
            step=step,
            value_fp="v",
            contributors=[],
            param_fp=fp,
        )
    )


def test_tail_reads_only_complete_lines_and_tracks_steady_state(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    tail = EventTail(events, ["n1", "n2"])
    (events / "n1.jsonl").write_bytes(
        encode_event(Ready(t_wall=0, t_mono=0, node="n1")) + commit("n1", 3)
    )
    half = commit("n2", 4)
    with open(events / "n2.jsonl", "wb") as handle:
        handle.write(encode_event(Ready(t_wall=0, t_mono=0, node="n2")) + half[:20])
    assert tail.poll() == 3
    assert tail.steady(-1) and not tail.steady(0)
    with open(events / "n2.jsonl", "ab") as handle:
        handle.write(half[20:])
    assert tail.poll() == 1
    assert tail.min_commit_step() == 3 and tail.steady(3) and not tail.steady(4)


def test_tail_flags_a_step_committed_with_two_fingerprints(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    tail = EventTail(events, ["n1", "n2"])
    (events / "n1.jsonl").write_bytes(commit("n1", 5, "aa"))
    (events / "n2.jsonl").write_bytes(commit("n2", 5, "bb") + b"not json\n")
    seen = []
    tail.subscribe(seen.append)
    tail.poll()
    assert tail.divergent_steps == [5] and len(seen) == 2
    assert tail.summaries["n2"].bad_lines == 1


def test_reaper_kills_what_a_dead_harness_left_and_spares_recycled_pids(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSHAKE_STATE_DIR", str(tmp_path / "state"))
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = cleanup.active_dir() / "dead-run.json"
        entry = {
            "pid": orphan.pid,
            "start_time": cleanup.process_start_time(orphan.pid),
            "group": True,
        }
        # The bystander's pid with a wrong start time stands for a recycled pid.
        recycled = {"pid": bystander.pid, "start_time": 1, "group": False}
        harness = {"pid": 1, "start_time": -1}  # no process has this identity: the harness is dead
        record.write_text(json.dumps({"run_id": "dead-run", "harness": harness, "mounts": [],
                                      "processes": {"node-n1": entry, "other": recycled}}))  # fmt: skip
        removed = cleanup.reap_stale()
        assert removed["processes"] == 1
        orphan.wait(timeout=5)
        assert orphan.returncode == -9
        time.sleep(0.1)
        assert bystander.poll() is None
        assert not record.exists()
    finally:
        for process in (orphan, bystander):
            process.kill()
            process.wait()


def test_a_live_harness_record_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSHAKE_STATE_DIR", str(tmp_path / "state"))
    registry = cleanup.Registry.create("live-run", tmp_path)
    assert cleanup.reap_stale() == {}
    assert registry.path.exists()
    registry.close()
    assert not registry.path.exists()
