"""``swarmshake run SUITE.yaml --backend sim``: a chaos suite on the simulator's shell
of the node core, judged and reported like a real run (chaos/sim/suite.py)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from swarmshake.chaos import cli
from swarmshake.chaos.scenario import ScenarioError, loads, resolve
from swarmshake.chaos.sim.run import run_simulation
from swarmshake.chaos.sim.suite import first_steady_s, plan
from swarmshake.reference_node.protocol.history import Fault, History

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "suites" / "smoke.yaml"


def run_cli(*args: str, capsys) -> tuple[int, dict]:  # noqa: ANN001 - pytest fixture
    code = cli.main(["run", *args, "--json"])
    out = capsys.readouterr().out.strip()
    return code, json.loads(out) if out else {}


def test_the_smoke_suite_runs_valid_on_the_simulator_with_its_names_and_reports(tmp_path, capsys):
    code, result = run_cli(str(SMOKE), "--backend", "sim", "--out", str(tmp_path), capsys=capsys)
    assert code == 0 and result["status"] == "valid", result["message"]
    run_dir = Path(result["run_dir"])
    for name in ("scenario.yaml", "run.json", "verdict.json", "report.html", "junit.xml",
                 "summary.md"):  # fmt: skip
        assert (run_dir / name).is_file(), name
    history = History.load(run_dir)
    assert {e.node for e in history.events} == {"harness", "n1", "n2", "n3", "n4"}
    record = json.loads((run_dir / "run.json").read_text())
    assert record["backend"] == "sim" and record["status"] == "valid"
    assert any("load" in note for note in record["not_simulated"])  # said, not dropped
    # The faults fire at_s after steady state (2, 12 and 22 s), as the runner fires them.
    steady_s = record["timings_s"]["steady_state"]
    injects = sorted(
        (e.t_mono, e.op) for e in history.events if isinstance(e, Fault) and e.phase == "inject"
    )
    assert [op for _, op in injects] == ["crash", "partition", "latency"]
    assert [round(t - steady_s, 6) for t, _ in injects] == [2.0, 12.0, 22.0]
    marks = {e.mark: e.t_mono for e in history.events if type(e).__name__ == "RunMark"}
    assert marks["steady_state"] == steady_s and marks["faults_end"] == steady_s + 30.0
    # Steady state means what it means on the real backends.
    assert first_steady_s(history, ("n1", "n2", "n3", "n4"), 2) == pytest.approx(steady_s)


def test_the_run_directory_scenario_repeats_the_run_bit_for_bit(tmp_path, capsys):
    code, first = run_cli(str(SMOKE), "--backend", "sim", "--seed", "3", "--out",
                          str(tmp_path), capsys=capsys)  # fmt: skip
    assert code == 0
    scenario = Path(first["run_dir"]) / "scenario.yaml"
    code, again = run_cli(str(scenario), "--out", str(tmp_path), capsys=capsys)
    assert code == 0
    digests = [
        json.loads((Path(r["run_dir"]) / "run.json").read_text())["digest"] for r in (first, again)
    ]
    assert digests[0] == digests[1]


def test_the_steady_state_pass_is_the_prefix_of_the_run():
    """The faults are the only difference between the two runs and none fires before
    steady state, so both histories agree up to it."""
    suite = plan(resolve(loads(SMOKE.read_text(), source=str(SMOKE)), backend="sim", seed=5))
    probe = run_simulation(suite.config).history
    steady_s = first_steady_s(probe, suite.config.names, 2)
    assert steady_s is not None
    from swarmshake.chaos.sim.run import RunPhases

    config = msgspec.structs.replace(suite.config, duration_s=steady_s + 40.0)
    run = run_simulation(config, suite.schedule, None, RunPhases(steady_s, steady_s + 30.0))

    def before(history: History) -> list[tuple]:
        return [
            (e.t_mono, e.node, e.__struct_config__.tag, e.step)
            for e in history.events
            if e.node != "harness" and e.t_mono <= steady_s
        ]

    assert before(probe) == before(run.history)


def test_a_trigger_is_armed_at_steady_state_not_at_the_start(tmp_path, capsys):
    suite = tmp_path / "trigger.yaml"
    suite.write_text(
        "name: trigger\nseed: 2\ncluster: {nodes: 4, backend: sim}\nduration_s: 10\n"
        "quiesce_s: 10\nfaults:\n"
        "  - when: {node: n2, kind: commit}\n    op: {op: crash, nodes: [n2]}\n"
        "    heal_after_s: 3\n"
    )
    code, result = run_cli(str(suite), "--out", str(tmp_path / "runs"), capsys=capsys)
    assert code == 0, result["message"]
    run_dir = Path(result["run_dir"])
    steady_s = json.loads((run_dir / "run.json").read_text())["timings_s"]["steady_state"]
    history = History.load(run_dir)
    crashes = [e.t_mono for e in history.events if isinstance(e, Fault) and e.phase == "inject"]
    # n2 committed steps before steady state; the first commit after it fires the crash.
    assert len(crashes) == 1 and steady_s <= crashes[0] < steady_s + 3.0


def test_a_bug_the_suite_exposes_is_invalid_on_the_simulator(tmp_path, capsys):
    code, result = run_cli(str(SMOKE), "--backend", "sim", "--bug", "stale-rejoin", "--out",
                           str(tmp_path), capsys=capsys)  # fmt: skip
    assert code == 1 and result["status"] == "invalid"
    assert "S1" in result["violated"]


def test_a_run_that_never_reaches_steady_state_is_still_judged(tmp_path, capsys):
    """As the runner's aborted run: unknown, unless its history shows a violation."""
    code, result = run_cli(str(SMOKE), "--backend", "sim", "--bug", "eager-dead", "--out",
                           str(tmp_path), capsys=capsys)  # fmt: skip
    assert code == 1 and "steady state" in result["message"] and "S4" in result["violated"]


def test_what_the_simulator_cannot_run_is_refused_with_the_fix(tmp_path, capsys):
    code = cli.main(["run", str(ROOT / "suites" / "broker.yaml"), "--backend", "sim",
                     "--out", str(tmp_path)])  # fmt: skip
    assert code == 64
    assert "broker_loss" in capsys.readouterr().err
    code = cli.main(["run", str(ROOT / "suites" / "torchft-smoke.yaml"), "--backend", "sim",
                     "--out", str(tmp_path)])  # fmt: skip
    assert code == 64
    assert "has no simulator" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before any run directory


def test_the_suite_node_and_detector_settings_reach_the_node_core():
    scenario = loads(
        "name: knobs\ncluster:\n  backend: sim\n"
        "  step: {checkpoint_every: 5, node: {collect_s: 2.5}}\n"
        "  detector: {suspicion_floor_s: 0.3}\n",
        source="knobs.yaml",
    )
    suite = plan(resolve(scenario))
    assert suite.config.app.node.collect_s == 2.5
    assert suite.config.app.node.min_contributors == 1  # the mean
    # The aggregation rule's fewest contributors reach the simulated leader too.
    median = loads(
        "name: median\ncluster: {backend: sim, nodes: 5, aggregation: median,"
        " training: {byzantine_f: 2}}\n",
        source="median.yaml",
    )
    assert plan(resolve(median)).config.app.node.min_contributors == 5
    assert suite.config.app.checkpoint.every_steps == 5
    assert suite.config.detector.suspicion_floor_s == 0.3
    # A bad value stops the suite when it loads, on every backend (exit 64), naming it.
    with pytest.raises(ScenarioError, match=r"cluster\.step: .*collect_s"):
        loads("name: bad\ncluster: {step: {node: {collect_s: -1}}}\n", source="bad.yaml")
    with pytest.raises(ScenarioError, match=r"cluster\.detector: .*no_such_knob"):
        loads("name: bad\ncluster: {detector: {no_such_knob: 1}}\n", source="bad.yaml")


def test_an_interrupted_run_says_so_in_its_directory(tmp_path, monkeypatch):
    """Ctrl-C mid-run: the run directory is left saying it was interrupted (unknown),
    as the runner leaves a real run's, and the interrupt reaches the caller."""
    from swarmshake.chaos.sim import suite as suite_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    planned = plan(resolve(loads(SMOKE.read_text(), source=str(SMOKE)), backend="sim"))
    monkeypatch.setattr(suite_module, "steady_state_s", interrupted)
    with pytest.raises(KeyboardInterrupt):
        suite_module.run_suite(planned, tmp_path, quiet=True)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and p.name != "latest"]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "unknown" and record["message"] == "interrupted"
    assert (run_dir / "scenario.yaml").is_file()


def test_a_suite_whose_trigger_never_fires_is_unknown_and_says_which_entry(tmp_path, capsys):
    """A green run that tested less than its suite says hides what it skipped (CI, stop
    31: a control run's hold never fired, the crash came first, and the run was valid).
    The checkers' verdict of the history stands, but the run is unknown (exit 2), its
    message names the entry, and the reports list the incident."""
    suite = tmp_path / "never.yaml"
    suite.write_text(
        SMOKE.read_text().split("faults:")[0]
        + "faults:\n"
        + "  - {at_s: 2, op: {op: crash, nodes: [n4]}, heal_after_s: 5}\n"
        + "  - when: {node: n1, kind: accept, step_at_least: 1000000}\n"
        + "    op: {op: crash, nodes: [n2]}\n"
    )
    code, result = run_cli(str(suite), "--backend", "sim", "--out", str(tmp_path), capsys=capsys)
    assert code == 2 and result["status"] == "unknown", result
    assert "entry 1 (crash n2 when n1 logs accept of step >= 1000000)" in result["message"]
    assert "entry 0" not in result["message"]  # the crash at 2 s fired
    run_dir = Path(result["run_dir"])
    record = json.loads((run_dir / "run.json").read_text())
    assert record["faults_never_fired"] == [1] and record["exit_code"] == 2
    assert json.loads((run_dir / "verdict.json").read_text())["status"] == "valid"
    assert "faults_never_fired" in (run_dir / "summary.md").read_text()
    # The same suite with a trigger that matches is valid.
    suite.write_text(suite.read_text().replace("1000000", "3"))
    code, result = run_cli(str(suite), "--backend", "sim", "--out", str(tmp_path), capsys=capsys)
    assert code == 0 and result["status"] == "valid", result["message"]


def test_an_untested_entry_never_turns_a_violation_valid():
    from swarmshake.chaos.runner import with_untested

    scenario = resolve(loads(SMOKE.read_text(), source=str(SMOKE)), backend="sim", seed=1)
    assert with_untested("invalid", "S1: two values", scenario, [1]) == (
        "invalid",
        "S1: two values; not tested, never applied: entry 1 (partition n1 at 12 s)",
    )
    assert with_untested("valid", "every property valid", scenario, []) == (
        "valid",
        "every property valid",
    )
