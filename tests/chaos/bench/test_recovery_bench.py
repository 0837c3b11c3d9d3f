"""The recovery matrix: cells, trial scenarios, aggregation and the files it writes.

Trials here are hand-built histories whose detection/recovery/rejoin are known (the
cluster is played by tests/reports/histories.py at the moment and on the victim the
trial's scenario names), so the aggregation is checked against exact numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lxml import etree
from lxml import html as lxml_html

from swarmshake.chaos import faults as F
from swarmshake.chaos.bench import matrix, recovery
from swarmshake.chaos.bench.stats import summarize_ms
from swarmshake.chaos.bench.trials import BackendUnavailable
from swarmshake.chaos.commands import bench as bench_command
from swarmshake.chaos.commands._args import UsageError


def _played_trial(histories, detection_by_trial: dict[int, float]):
    """A trial runner that plays the scenario's fault in a hand-built cluster."""

    def run(scenario, backend: str, out: Path) -> Path:
        entry = scenario.faults[0]
        trial = int(scenario.name.rsplit("-t", 1)[1])
        op = entry.op
        victim = op.nodes[0]
        heal = entry.at_s + entry.heal_after_s if entry.heal_after_s else None
        plan = histories.Plan(
            nodes=scenario.cluster.nodes,
            duration_s=8.0,
            detection_s=detection_by_trial[trial],
            faults=[histories.PlannedFault(op.name, victim, entry.at_s, heal)],
        )
        return histories.write_run(out / scenario.name, plan)

    return run


def test_cells_and_trial_scenarios_are_seeded_and_valid() -> None:
    cells = recovery.cells_for(["crash", "partition_majority"], [4, 5], ["sim"])
    assert [c.key for c in cells] == [
        "crash/sim/4",
        "crash/sim/5",
        "partition_majority/sim/4",
        "partition_majority/sim/5",
    ]
    first = matrix.trial_scenario(cells[0], 0, 7, matrix.QUICK_TIMING)
    again = matrix.trial_scenario(cells[0], 0, 7, matrix.QUICK_TIMING)
    other = matrix.trial_scenario(cells[0], 1, 7, matrix.QUICK_TIMING)
    assert first == again and first.seed != other.seed
    for fault in matrix.FAULT_TYPES:
        for size in (4, 5, 8):
            scenario = matrix.trial_scenario(
                matrix.Cell(fault, size, "local"), 3, 1, matrix.FULL_TIMING
            )
            assert scenario.cluster.nodes == size and len(scenario.faults) == 1
            op = scenario.faults[0].op
            assert "n1" not in op.targets() or isinstance(op, F.Partition), fault
    split = matrix.trial_scenario(cells[3], 0, 0, matrix.QUICK_TIMING).faults[0].op
    sides = [len(group) for group in split.groups]
    assert max(sides) < 5 // 2 + 1  # no side keeps a majority of 5
    with pytest.raises(ValueError, match="unknown fault type"):
        recovery.cells_for(["crash", "meteor"], [4], ["sim"])


def test_summary_reports_p99_only_with_enough_trials() -> None:
    few = summarize_ms([0.2, 0.3, 0.1], trials=3)
    assert few == {"min": 100.0, "p50": 200.0, "p99": None, "max": 300.0, "n": 3}
    many = summarize_ms([i / 1000 for i in range(1, 101)], trials=100)
    assert many["p99"] == 99.0 and many["max"] == 100.0
    assert summarize_ms([], trials=5)["n"] == 0


def test_matrix_aggregates_measured_trials(tmp_path: Path, histories) -> None:
    cells = recovery.cells_for(["crash", "restart"], [4], ["local"])
    runner = _played_trial(histories, {0: 0.2, 1: 0.3, 2: 0.25})
    results, errors = recovery.run_matrix(
        cells, 3, tmp_path, timing=matrix.QUICK_TIMING, runner=runner, progress=lambda _: None
    )
    assert errors == []
    document = recovery.bench_document(
        results,
        errors,
        command="swarmshake bench recovery --quick",
        quick=True,
        seed=0,
        timing=matrix.QUICK_TIMING,
    )
    crash = document["results"]["crash"]
    assert crash["trials"] == 3
    assert crash["detection_ms"] == {"min": 200.0, "p50": 250.0, "p99": None, "max": 300.0, "n": 3}
    assert crash["recovery_ms"]["p50"] == pytest.approx(400.0)
    assert crash["rejoin_ms"]["n"] == 0  # a crash without restart has no rejoin
    assert crash["false_positives"] == 0
    restart = document["results"]["restart"]
    assert restart["rejoin_ms"]["p50"] == pytest.approx(800.0)
    assert restart["cells"][0]["nodes"] == 4 and len(restart["cells"][0]["run_dirs"]) == 3

    paths = recovery.write_bench_files(document, tmp_path)
    assert json.loads(paths[0].read_text())["schema"] == recovery.SCHEMA
    page = lxml_html.fromstring(paths[1].read_text())
    assert len(page.xpath('//table[@id="matrix"]/tbody/tr')) == 2
    assert page.xpath('//*[@id="range-detection_ms-crash"]')
    schema = etree.XMLSchema(
        etree.parse(str(Path(__file__).parents[2] / "reports" / "junit-10.xsd"))
    )
    junit = etree.parse(str(paths[3]))
    assert schema.validate(junit), schema.error_log
    cases = junit.getroot().find("testsuite").findall("testcase")
    assert [c.get("name") for c in cases if c.find("skipped") is not None] == [
        "no recovery cliff: max ≤ 2 s"
    ]
    markdown = paths[2].read_text()
    assert "| crash | local | 4 | 3 | 200 / 250 / 300 |" in markdown
    assert "crash detection p99 ≤ 300 ms" in markdown


def test_failed_trials_are_recorded_not_measured(tmp_path: Path, histories) -> None:
    def broken(scenario, backend, out):
        raise RuntimeError("node n2 never became ready")

    cells = recovery.cells_for(["pause"], [4], ["local"])
    results, errors = recovery.run_matrix(
        cells, 2, tmp_path, timing=matrix.QUICK_TIMING, runner=broken, progress=lambda _: None
    )
    assert results[0].trials == 0 and results[0].failed_trials == 2
    assert errors[0] == {
        "cell": "pause/local/4",
        "trial": 0,
        "error": "RuntimeError: node n2 never became ready",
    }

    def aborted(scenario, backend, out):  # a run that never reached its fault phase
        run_dir = histories.write_run(out / scenario.name, histories.Plan(duration_s=2.0))
        (run_dir / "run.json").write_text('{"message": "steady state not reached within 120.0s"}')
        return run_dir

    results, errors = recovery.run_matrix(
        cells, 1, tmp_path, timing=matrix.QUICK_TIMING, runner=aborted, progress=lambda _: None
    )
    assert results[0].trials == 0 and results[0].failed_trials == 1
    assert (
        "no fault was injected" in errors[0]["error"]
        and "steady state not reached" in errors[0]["error"]
    )

    def unavailable(scenario, backend, out):
        raise BackendUnavailable("no simulator")

    with pytest.raises(BackendUnavailable):
        recovery.run_matrix(cells, 2, tmp_path, timing=matrix.QUICK_TIMING, runner=unavailable)


def test_cli_rejects_bad_usage() -> None:
    with pytest.raises(UsageError, match="choose from"):
        bench_command.main(["recovery", "--backend", "cloud"])
    with pytest.raises(UsageError, match="sizes"):
        bench_command.main(["recovery", "--sizes", "0"])
    with pytest.raises(UsageError, match="unknown benchmark"):
        bench_command.main(["warp"])


def test_a_trial_that_breaks_a_safety_property_is_reported_not_measured(
    tmp_path: Path, histories, monkeypatch, capsys
) -> None:
    """A recovery time of a run whose committed values diverged (S1) is not a
    recovery: the trial is listed as unsafe, left out of the figures, and the command
    exits 1 (chaos/bench/judged.py)."""
    played = _played_trial(histories, {0: 0.2, 1: 0.9, 2: 0.3})

    def diverging_second(scenario, backend: str, out: Path) -> Path:
        run_dir = played(scenario, backend, out)
        if scenario.name.endswith("-t1"):
            entry = scenario.faults[0]
            plan = histories.Plan(
                nodes=scenario.cluster.nodes,
                duration_s=8.0,
                detection_s=0.9,
                faults=[histories.PlannedFault(entry.op.name, entry.op.nodes[0], entry.at_s)],
                diverge_step=20,
            )
            run_dir = histories.write_run(out / scenario.name, plan)
        return run_dir

    cells = recovery.cells_for(["crash"], [4], ["local"])
    results, errors = recovery.run_matrix(
        cells, 3, tmp_path, timing=matrix.QUICK_TIMING, runner=diverging_second,
        progress=lambda _: None,
    )  # fmt: skip
    assert errors == []
    summary = results[0].summary()
    assert summary["trials"] == 2 and summary["unsafe_trials"] == 1
    assert summary["unsafe"][0]["violated"] == ["S1"]
    assert summary["unsafe"][0]["run_dir"].endswith("-t1")
    # The diverging trial's 900 ms detection is in no figure.
    assert summary["detection_ms"]["max"] == 300.0
    assert summary["verdicts"] == {"valid": 2, "invalid": 0, "unknown": 0}
    assert [t["verdict"] for t in summary["per_trial"]] == ["valid", "valid"]

    real_matrix = recovery.run_matrix

    def matrix_with(cells, trials, out, **kwargs):
        return real_matrix(
            cells, trials, out, **kwargs, runner=diverging_second, progress=lambda _: None
        )

    monkeypatch.setattr(recovery, "run_matrix", matrix_with)
    code = bench_command.main(
        ["recovery", "--backend", "local", "--faults", "crash", "--sizes", "4",
         "--trials", "3", "--out", str(tmp_path / "cli")]
    )  # fmt: skip
    assert code == 1
    assert "UNSAFE trial" in capsys.readouterr().err
    document = json.loads((tmp_path / "cli" / "bench.json").read_text())
    assert document["results"]["crash"]["unsafe_trials"] == 1
    # Every format says so: the summary, the page and a failing JUnit case.
    assert "1 trial(s) broke a safety property" in (tmp_path / "cli" / "summary.md").read_text()
    page = lxml_html.fromstring((tmp_path / "cli" / "report.html").read_text())
    assert page.xpath('//table[@id="unsafe"]/tbody/tr/td[3]')[0].text == "S1"
    junit = etree.parse(str(tmp_path / "cli" / "junit.xml")).getroot().find("testsuite")
    failing = [c.get("name") for c in junit.findall("testcase") if c.find("failure") is not None]
    assert "crash/local/4 safety" in failing


def test_a_trial_past_a_bound_it_measures_keeps_its_figures_and_its_verdict(
    tmp_path: Path, histories
) -> None:
    """S4 (a live node declared dead) and L1-L3 are what the bench measures: such a
    trial stays in the figures, its verdict beside them (leaving it out would make the
    figures look better than the system)."""

    def false_positive_first(scenario, backend: str, out: Path) -> Path:
        entry = scenario.faults[0]
        plan = histories.Plan(
            nodes=scenario.cluster.nodes,
            duration_s=8.0,
            detection_s=0.25,
            faults=[histories.PlannedFault(entry.op.name, entry.op.nodes[0], entry.at_s)],
            false_positive_at_s=1.0 if scenario.name.endswith("-t0") else None,
        )
        return histories.write_run(out / scenario.name, plan)

    cells = recovery.cells_for(["crash"], [4], ["local"])
    results, _ = recovery.run_matrix(
        cells, 2, tmp_path, timing=matrix.QUICK_TIMING, runner=false_positive_first,
        progress=lambda _: None,
    )  # fmt: skip
    summary = results[0].summary()
    assert summary["trials"] == 2 and summary["unsafe_trials"] == 0
    assert summary["verdicts"]["invalid"] == 1
    assert summary["per_trial"][0]["violated"] == ["S4"]
    assert summary["false_positives"] >= 1
