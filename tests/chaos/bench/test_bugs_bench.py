"""``swarmshake bench bugs``: the tally on verdicts recorded from real runs, the plan,
the lock, and the command's input validation (no cluster is started here)."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.chaos.bench import bugs
from swarmshake.chaos.scenario import load
from swarmshake.reference_node.protocol.bugs import BUGS

ROOT = Path(__file__).resolve().parents[3]
# verdict.json files copied unchanged from `swarmshake bench bugs` runs on the local
# backend (2026-11-27; data/bug-verdicts/README.md names each run).
VERDICTS = Path(__file__).parent / "data" / "bug-verdicts"


def verdict(name: str) -> dict:
    return json.loads((VERDICTS / f"{name}.json").read_text())


def run_dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    shutil.copy(VERDICTS / f"{name}.json", path / "verdict.json")
    return path


def test_every_registry_bug_has_a_scenario_that_loads():
    assert set(bugs.BUG_SCENARIOS) == set(BUGS)
    for bug in BUGS:
        scenario = load(bugs.scenario_path(bug))
        assert scenario.faults, bug
        assert bugs.run_bound_s(bugs.scenario_path(bug)) <= 600, bug  # one run, bounded


@pytest.mark.parametrize(
    ("name", "bug", "outcome"),
    [
        ("ack-before-apply-caught", "ack-before-apply", "caught"),  # S2 and L2 invalid
        # The same verdict for a bug on another property: invalid, but not its catch.
        ("ack-before-apply-caught", "eager-dead", "invalid-other"),
        ("forget-vote-caught", "forget-vote", "caught"),
        ("control-valid", "no-quorum", "missed"),
        ("run-unknown", "eager-dead", "unknown"),
    ],
)
def test_a_recorded_verdict_is_classified_against_the_bugs_property(name, bug, outcome):
    assert bugs.classify(verdict(name), BUGS[bug].breaks) == outcome


def test_a_control_is_its_verdicts_status_and_no_verdict_is_an_error():
    assert bugs.classify(verdict("control-valid"), None) == "valid"
    assert bugs.classify(verdict("run-unknown"), None) == "unknown"
    assert bugs.classify(verdict("ack-before-apply-caught"), None) == "invalid"
    assert bugs.classify(None, "S1") == "error"
    assert bugs.classify({"status": "crashed"}, "S1") == "error"


def test_the_tally_counts_outcomes_and_properties_per_bug_and_controls_per_scenario(tmp_path):
    caught = run_dir(tmp_path, "ack-before-apply-caught")
    valid = run_dir(tmp_path, "control-valid")
    trials = [
        bugs.judge_run_dir(caught, "ack-before-apply", "suites/bugs/ack-before-apply.yaml", 1),
        bugs.judge_run_dir(caught, "ack-before-apply", "suites/bugs/ack-before-apply.yaml", 2),
        bugs.judge_run_dir(valid, "no-quorum", "suites/smoke.yaml", 1),
        bugs.judge_run_dir(tmp_path / "gone", "no-quorum", "suites/smoke.yaml", 2),
        bugs.judge_run_dir(valid, None, "suites/smoke.yaml", 1),
    ]
    assert [t.outcome for t in trials] == ["caught", "caught", "missed", "error", "valid"]
    assert trials[0].invalid == sorted(
        name for name, r in verdict("ack-before-apply-caught")["results"].items()
        if r["status"] == "invalid"
    )  # fmt: skip
    assert "S2" in trials[0].invalid
    assert trials[3].message == "no verdict.json"

    document = bugs.bench_document(
        trials, ["ack-before-apply", "no-quorum"], command="swarmshake bench bugs",
        backend="local", started="2026-11-27T00:00:00Z",
    )  # fmt: skip
    row = document["bugs"]["ack-before-apply"]
    assert (row["caught"], row["trials"], row["property"]) == (2, 2, "S2")
    assert row["invalid_properties"]["S2"] == 2
    assert row["run_dirs"] == [str(caught), str(caught)]
    quorum = document["bugs"]["no-quorum"]
    assert (quorum["caught"], quorum["missed"], quorum["error"]) == (0, 1, 1)
    assert document["controls"]["suites/smoke.yaml"]["valid"] == 1
    text = bugs.markdown(document)
    assert "| ack-before-apply | S2 | `suites/bugs/ack-before-apply.yaml` | 2/2 |" in text
    assert "| no-quorum | S1 | `suites/smoke.yaml` | 0/2 | 1 missed, 1 error |" not in text
    assert "| no-quorum | S3 | `suites/smoke.yaml` | 0/2 | 1 missed, 1 error | — | 1/1 |" in text
    paths = bugs.write_files(document, tmp_path / "out")
    assert json.loads(paths[0].read_text())["schema"] == bugs.SCHEMA


def test_the_plan_is_round_robin_with_controls_spread_between_rounds():
    planned = bugs.plan(["no-quorum", "stale-rejoin", "no-refute"], trials=10, controls=2)
    labels = [(p.bug, p.index) for p in planned]
    assert len(planned) == 3 * 10 + 2 * 2  # smoke is shared: two distinct scenarios
    assert labels[:3] == [("no-quorum", 1), ("stale-rejoin", 1), ("no-refute", 1)]
    controls = [i for i, p in enumerate(planned) if p.bug is None]
    assert [planned[i].index for i in controls] == [1, 1, 2, 2]
    assert controls[0] == 9 and controls[2] == 9 + 2 + 12  # after rounds 3 and 7
    assert bugs.plan(["no-quorum"], trials=1, controls=2)[1:] == [
        bugs.Planned(None, ROOT / "suites" / "smoke.yaml", 1),
        bugs.Planned(None, ROOT / "suites" / "smoke.yaml", 2),
    ]


def test_run_bench_stops_at_the_deadline_and_reports_each_trial(tmp_path):
    calls: list[tuple] = []

    def fake_run_one(scenario_file, bug, *, backend, out, index, timeout_s):
        calls.append((bug, index, backend, timeout_s))
        return bugs.Trial(bug=bug, scenario=str(scenario_file), index=index, outcome="caught")

    seen: list[int] = []
    planned = bugs.plan(["no-refute"], trials=3, controls=0)
    done = bugs.run_bench(
        planned, backend="local", out=tmp_path, run_one_fn=fake_run_one,
        progress=lambda line: None, on_trial=lambda trials: seen.append(len(trials)),
    )  # fmt: skip
    assert [t.index for t in done] == [1, 2, 3] and seen == [1, 2, 3]
    bound = bugs.run_bound_s(bugs.scenario_path("no-refute"))
    assert calls[0] == ("no-refute", 1, "local", bound)
    assert bugs.run_bench(
        planned, backend="local", out=tmp_path, run_one_fn=fake_run_one,
        progress=lambda line: None, deadline=0.0,
    ) == []  # fmt: skip


def test_the_heavy_lock_is_exclusive_while_held(tmp_path):
    lock = tmp_path / "heavy.lock"
    with bugs.heavy_lock(lock) as waited, lock.open("a") as other:
        assert waited >= 0
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with lock.open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bugs", "no-quorum,nope"], "unknown bug nope; known: ack-before-apply"),
        (["--bugs", ","], "--bugs ',': name one or more of"),
        (["--trials", "0"], "--trials 0: must lie in [1, 100]"),
        (["--controls", "-1"], "--controls -1: must lie in [0, 100]"),
        (["--backend", "sim"], "invalid choice: 'sim'"),
        (["--budget", "soon"], "'soon' is not a duration"),
        # After the two flags every benchmark takes: refused by the bench's own check.
        (["--quick", "--json", "--trials", "0"], "--trials 0: must lie in [1, 100]"),
    ],
)
def test_bad_input_exits_64_and_says_why(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "bench", "bugs", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 64, done.stderr
    assert message in done.stderr
    assert "runs (" not in done.stderr  # nothing started
