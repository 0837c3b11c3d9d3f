"""The real-backend exploration hook runs a schedule and reports its outcome."""

from __future__ import annotations

import asyncio

import pytest

from swarmshake.chaos import faults as F
from swarmshake.chaos.explore_real import run_schedule, scenario_for
from swarmshake.chaos.scenario import Scenario, SteadyState
from swarmshake.reference_node.protocol.history import Fault, read_events

pytestmark = pytest.mark.slow


def test_scenario_for_covers_the_whole_schedule():
    schedule = F.FaultSchedule(
        entries=[F.ScheduleEntry(op=F.Crash(nodes=["n2"]), at_s=40, heal_after_s=5)]
    )
    scenario = scenario_for(schedule, backend="local", nodes=3, seed=7, bugs=["no-quorum"])
    assert (
        scenario.duration_s >= 46 and scenario.seed == 7 and scenario.cluster.bugs == ["no-quorum"]
    )


def test_run_schedule_on_the_local_backend(tmp_path, heartbeat_program, monkeypatch):
    monkeypatch.setenv("SWARMSHAKE_STATE_DIR", str(tmp_path / "state"))
    base = Scenario(
        name="explore", steady_state=SteadyState(min_commit_step=-1), duration_s=2, quiesce_s=0.5
    )
    schedule = F.FaultSchedule(
        entries=[F.ScheduleEntry(op=F.Pause(nodes=["n1"]), at_s=0.2, heal_after_s=0.5)]
    )
    outcome = asyncio.run(
        run_schedule(
            schedule,
            nodes=3,
            seed=1,
            out=tmp_path / "runs",
            base=base,
            node_program=heartbeat_program,
        )
    )
    # Stand-in nodes do not train: nothing can be violated (the checkers may call the
    # rest valid or unknown); the run itself must complete and record its faults.
    assert outcome.status in ("valid", "unknown") and outcome.violated == []
    assert (outcome.run_dir / "verdict.json").exists()
    faults = [
        e
        for e in read_events(outcome.run_dir / "events" / "harness.jsonl").events
        if isinstance(e, Fault)
    ]
    assert [(f.op, f.phase) for f in faults][:2] == [("pause", "inject"), ("pause", "heal")]
