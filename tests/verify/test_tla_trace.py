"""Trace validation: TLC accepts faulty-but-correct runs and rejects an edited event."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from swarmshake.chaos.commands import specs as specs_command
from swarmshake.reference_node.protocol import history as h
from swarmshake.verify.tla_trace import event_record, trace_module, validate_events, validate_run

History = list[h.EventBase]


def _index_of(events: History, kind: type[h.EventBase], nth: int = 0, **match: object) -> int:
    found = [
        index
        for index, event in enumerate(events)
        if isinstance(event, kind) and all(getattr(event, k) == v for k, v in match.items())
    ]
    return found[nth]


def _edit(events: History, index: int, **changes: object) -> History:
    edited = list(events)
    edited[index] = msgspec.structs.replace(edited[index], **changes)
    return edited


def _write_run(run_dir: Path, events: History) -> Path:
    by_node: dict[str, list[h.EventBase]] = {}
    for event in events:
        by_node.setdefault(event.node, []).append(event)
    for node, node_events in by_node.items():
        h.write_history(run_dir / "events" / f"{node}.jsonl", node_events)
    return run_dir


def test_a_run_with_crash_restart_and_partition_is_accepted(
    make_history: Callable[..., History], tmp_path: Path
) -> None:
    events = make_history()
    ops = {(e.op, e.phase) for e in events if isinstance(e, h.Fault)}
    assert {("crash", "inject"), ("restart", "inject"), ("partition", "inject")} <= ops
    result = validate_run(_write_run(tmp_path / "run", events))
    assert result.status == "valid", result.message
    assert result.explained == result.events == len(events)
    assert result.first_unexplained is None


# Each edit breaks one rule; the trace must be rejected exactly at the edited event.
EDITS: dict[str, Callable[[History], tuple[History, int]]] = {
    # S1: a replica reports other parameters for a step another replica committed.
    "S1 params differ": lambda ev: (
        _edit(ev, i := _index_of(ev, h.Commit, 7), param_fp="0" * 16),
        i,
    ),
    # S3: a commit resting on a minority quorum (no-quorum).
    "S3 minority quorum": lambda ev: (
        _edit(ev, i := _index_of(ev, h.Commit, 4), quorum=[ev[_index_of(ev, h.Commit, 4)].node]),
        i,
    ),
    # ack-before-apply: an accept without the aggregate's bytes.
    "accept without bytes": lambda ev: (
        _edit(ev, i := _index_of(ev, h.Accept, 3), holds_bytes=False),
        i,
    ),
    # eager-dead / S4: declaring dead a peer never suspected.
    "dead without suspicion": lambda ev: (
        _edit(ev, i := _index_of(ev, h.DeclareDead, 0), peer_incarnation=5),
        i,
    ),
    # a crashed process cannot log: move n3's restart start event's node to... an edit of
    # the restarted node's incarnation backwards (incarnations never go back).
    "incarnation goes back": lambda ev: (
        _edit(ev, i := _index_of(ev, h.Start, 0, node="n3", incarnation=1), incarnation=0),
        i,
    ),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_event_is_rejected_at_that_event(
    make_history: Callable[..., History], edit: str
) -> None:
    events, index = EDITS[edit](make_history())
    result = validate_events(events)
    assert result.status == "violated" and result.exit_code == 1, result.message
    assert result.first_unexplained is not None
    assert result.first_unexplained.index == index + 1  # 1-based, as the message says
    assert result.explained == index
    assert result.first_unexplained.event == msgspec.to_builtins(events[index])


def test_a_declared_death_of_a_live_node_breaks_s4_inside_the_envelope(
    make_history: Callable[..., History],
) -> None:
    events = make_history()
    first_fault = _index_of(events, h.Fault, 0)
    # n1 suspects then confirms n2 dead while n2 runs and no network fault happened.
    template = events[first_fault - 1]
    t = template.t_mono
    suspicion = h.Suspect(t_wall=t, t_mono=t, node="n1", peer="n2", peer_incarnation=0)
    death = h.DeclareDead(t_wall=t, t_mono=t, node="n1", peer="n2", peer_incarnation=0)
    edited = events[:first_fault] + [suspicion, death] + events[first_fault:]
    result = validate_events(edited)
    assert result.status == "violated"
    assert (
        result.first_unexplained is not None and result.first_unexplained.index == first_fault + 2
    )


def test_the_generated_module_holds_the_trace_as_a_sequence_literal(
    make_history: Callable[..., History],
) -> None:
    events = make_history()[:7]  # run_mark, then start + ready of n1..n3
    text = trace_module(events, (Path(__file__).parents[2] / "specs" / "History.tla").read_text())
    assert "MODULE HistoryTrace" in text and "CONSTANTS Trace, Nodes" not in text
    assert 'Nodes == {"n1", "n2", "n3"}' in text
    assert event_record(events[1]) in text
    assert event_record(events[1]).startswith('[k |-> "start", n |-> "n1", inc |-> 0')


def test_cli_trace_json_and_exit_codes(
    make_history: Callable[..., History], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _write_run(tmp_path / "run", make_history())
    assert specs_command.main(["check", "--trace", str(run_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "valid" and report["trace"]["explained"] == report["trace"]["events"]


def test_cli_rejects_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(specs_command.UsageError, match="no events/ folder"):
        specs_command.main(["check", "--trace", str(tmp_path)])


def test_cli_bad_usage_exits_64() -> None:
    with pytest.raises(SystemExit) as exit_info:
        specs_command.main(["check", "--profile", "nightly"])
    assert exit_info.value.code == 64


def _simulated_run(run_dir: Path) -> Path:
    from swarmshake.chaos import faults
    from swarmshake.chaos.sim.run import SimConfig, run_simulation

    schedule = faults.FaultSchedule(
        entries=[
            faults.ScheduleEntry(op=faults.Crash(nodes=["n2"]), at_s=5.0),
            faults.ScheduleEntry(op=faults.Restart(nodes=["n2"]), at_s=12.0),
            faults.ScheduleEntry(
                op=faults.Partition(grouping="groups", groups=[["n0", "n1"], ["n2"]]),
                at_s=20.0,
                heal_after_s=5.0,
            ),
        ]
    )
    run_simulation(SimConfig(nodes=3, duration_s=40.0, seed=3), schedule, run_dir)
    return run_dir


def test_a_simulator_run_with_crash_restart_and_partition_is_accepted(tmp_path: Path) -> None:
    run_dir = _simulated_run(tmp_path / "sim")
    events = h.History.load(run_dir).events
    ops = {e.op for e in events if isinstance(e, h.Fault)}
    assert {"crash", "partition"} <= ops and any(isinstance(e, h.RejoinDone) for e in events)
    result = validate_run(run_dir)
    assert result.status == "valid", (result.message, result.first_unexplained)
    assert result.explained == len(events) > 100


def test_an_edited_simulator_history_is_rejected_at_that_event(tmp_path: Path) -> None:
    events = h.History.load(_simulated_run(tmp_path / "sim")).events
    index = _index_of(events, h.Commit, 10)
    result = validate_events(_edit(events, index, value_fp="f" * 16))
    assert result.status == "violated"
    assert result.first_unexplained is not None and result.first_unexplained.index == index + 1


def test_a_last_event_racing_the_crash_signal_is_explained(
    make_history: Callable[..., History],
) -> None:
    # The harness logs the crash before SIGKILL lands: the victim may log once more.
    events = make_history()
    crash = _index_of(events, h.Fault, 0)
    victim = events[crash].target[0]
    t = events[crash].t_mono
    late = h.TrainStep(t_wall=t, t_mono=t, node=victim, step=99, loss=0.5)
    result = validate_events(events[: crash + 1] + [late] + events[crash + 1 :])
    assert result.status == "valid", result.message


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_local_run_with_crash_restart_and_partition_is_accepted(tmp_path: Path) -> None:
    # The CI smoke suite on real reference nodes (local backend, about a minute): a
    # crash with restart, a partition with heal and a latency spike.  Whatever the
    # run's own verdict, its history must be a behaviour of the spec: a rejection
    # here is a divergence between the implementation and History.tla.
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SWARMSHAKE_STATE_DIR": str(tmp_path / "state"), "CI": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "run", str(root / "suites" / "smoke.yaml"),
         "--backend", "local", "--out", str(tmp_path / "runs"), "--json", "--quiet"],
        env=env, cwd=root, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    run_dir = Path(json.loads(done.stdout)["run_dir"])
    events = h.History.load(run_dir).events
    faults = {(e.op, e.phase) for e in events if isinstance(e, h.Fault)}
    assert {("crash", "inject"), ("partition", "inject"), ("partition", "heal")} <= faults
    starts = [e for e in events if isinstance(e, h.Start)]
    assert len(starts) > len({e.node for e in starts})  # a node was restarted
    assert sum(isinstance(e, h.Commit) for e in events) > 100
    result = validate_run(run_dir)
    assert result.status == "valid", (result.message, result.first_unexplained)
    assert result.explained == result.events == len(events)


def test_every_event_kind_of_the_history_schema_has_an_action_in_history_tla() -> None:
    # Fast, no TLC: a kind added to history.py without an action in History.tla would
    # make every real run that logs it fail trace validation at its first occurrence.
    import re

    text = (Path(__file__).parents[2] / "specs" / "History.tla").read_text()
    named = set(re.findall(r'ev\.k = "([a-z_]+)"', text))
    for group in re.findall(r"ev\.k \\in \{([^}]*)\}", text):
        named.update(re.findall(r'"([a-z_]+)"', group))
    missing = sorted(set(h.EVENT_KINDS) - named)
    assert not missing, f"History.tla explains no event of kind {missing}: add an action"
