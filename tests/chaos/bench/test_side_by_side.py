"""``swarmshake bench recovery --system A,B,C``: argument checks and the side-by-side table.

The table tests read per-trial figures recorded from real runs of this machine
(``data/side_by_side_probe.json``: one trial a system of ``bench recovery --system
reference,torchft,torchelastic --backend local --faults restart --sizes 4 --trials 1``,
2026-11-26 17:53 UTC, measured by ``reports.recovery.measure_run``), not made-up values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.chaos.bench import matrix, recovery
from swarmshake.chaos.commands import bench as bench_command
from swarmshake.chaos.commands._args import UsageError
from swarmshake.chaos.systems import load_system
from swarmshake.reports.side_by_side import render_markdown, render_svg, side_by_side

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[3]


def test_a_bad_system_name_exits_64_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "bench", "recovery", "--system",
         "reference,torchfx", "--faults", "restart"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 64, done.stderr
    assert "'torchfx'" in done.stderr and "known: reference, torchelastic, torchft" in done.stderr


def test_system_arguments_are_checked_before_anything_runs() -> None:
    with pytest.raises(UsageError, match="named twice"):
        bench_command.main(["recovery", "--system", "torchft,torchft"])
    with pytest.raises(UsageError, match="pkg.module:Class"):
        bench_command.main(["recovery", "--system", "no spaces allowed"])
    with pytest.raises(UsageError, match="runs the node core's systems only, not torchft"):
        bench_command.main(["recovery", "--system", "reference,torchft", "--backend", "sim"])
    with pytest.raises(UsageError, match="unknown fault type"):
        bench_command.main(["recovery", "--system", "torchft", "--faults", "meteor"])


def test_a_throughput_side_by_side_trains_one_model_with_each_systems_options() -> None:
    """``--model medium --system-option torchft.step_interval_s=0``: every system trains
    the same 0.8M-parameter MLP, torchft without its pause between steps (the recovery
    cells keep 0.2 s so four groups share two cores)."""
    cells = recovery.cells_for(["crash"], [4], ["local"], ["reference", "torchft"])
    setup = matrix.TrialSetup(
        model="medium",
        options=bench_command._system_options(
            ["torchft.step_interval_s=0", "torchft.heartbeat_timeout_ms=500"],
            ["reference", "torchft"],
        ),
    )
    ours, theirs = (matrix.trial_scenario(c, 0, 0, matrix.FULL_TIMING, setup) for c in cells)
    assert ours.cluster.model == theirs.cluster.model == "medium"
    assert theirs.system_options == {
        "join_timeout_ms": 5000, "step_interval_s": 0, "heartbeat_timeout_ms": 500
    }  # fmt: skip
    assert ours.system_options == {} and ours.faults == theirs.faults
    document = recovery.bench_document(
        [], [], command="", quick=False, seed=0, timing=matrix.FULL_TIMING, setup=setup
    )
    assert document["model"]["preset"] == "medium"
    # Checked by the system itself, and only for the systems measured.
    for bad, named in (
        (["torchft.step_interval_s=-1"], "step_interval_s"),
        (["torchft.no_such=1"], "no_such"),
        (["torchelastic.collective_timeout_s=5"], "not one of --system"),
        (["torchft-step_interval_s"], "SYSTEM.KEY=VALUE"),
    ):
        with pytest.raises(UsageError, match=named):
            bench_command._system_options(bad, ["reference", "torchft"])


def test_training_fields_and_direct_links_reach_every_systems_cluster() -> None:
    """``--training aggregation_path=sharded --links direct``: the reference node's
    sharded path without the proxy hop, beside torchft on the same cluster settings;
    the document records both, and the scenario refuses what cannot run."""
    cells = recovery.cells_for(["crash"], [4], ["local"], ["reference", "torchft"])
    setup = matrix.TrialSetup(
        model="medium",
        training=bench_command._key_values(
            ["aggregation_path=sharded", "learning_rate=0.02"], "--training"
        ),
        links="direct",
    )
    for cell in cells:
        cluster = matrix.trial_scenario(cell, 0, 0, matrix.FULL_TIMING, setup).cluster
        assert cluster.links == "direct" and cluster.model == "medium"
        assert cluster.training_section(0)["aggregation_path"] == "sharded"
        assert cluster.training_section(0)["learning_rate"] == 0.02  # JSON: a number, not text
    document = recovery.bench_document(
        [], [], command="", quick=False, seed=0, timing=matrix.FULL_TIMING, setup=setup
    )
    assert document["training"] == {"aggregation_path": "sharded", "learning_rate": 0.02}
    assert document["links"] == "direct"
    for argv, named in (
        (["--training", "aggregation_path=ring"], "aggregation_path"),
        (["--training", "no_such=1"], "no_such"),
        (["--training", "lr"], "KEY=VALUE"),
        (["--links", "direct", "--faults", "partition_minority"], "partition acts on links"),
    ):
        with pytest.raises(UsageError, match=named):
            bench_command.main(["recovery", "--backend", "local", "--sizes", "4", *argv])
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        bench_command.main(["recovery", "--links", "tunnel"])


def test_combine_rejects_files_that_are_not_a_recovery_bench(tmp_path: Path) -> None:
    other = tmp_path / "verdict.json"
    other.write_text('{"schema": "swarmshake.verdict/1"}')
    with pytest.raises(UsageError, match="not a recovery benchmark"):
        bench_command.main(["recovery", "--combine", str(other), "--out", str(tmp_path)])
    with pytest.raises(UsageError, match="missing.json"):
        bench_command.main(
            ["recovery", "--combine", str(tmp_path / "missing.json"), "--out", str(tmp_path)]
        )


def test_every_system_gets_the_same_fault_at_the_same_moment() -> None:
    cells = recovery.cells_for(["restart", "isolate"], [4], ["local"], ["reference", "torchft"])
    assert [c.key for c in cells] == [
        "restart/local/4",
        "torchft/restart/local/4",
        "isolate/local/4",
        "torchft/isolate/local/4",
    ]
    timing = matrix.full_timing([load_system("reference"), load_system("torchft")])
    # The slowest system to settle sets every cell's quiesce; the reference alone keeps 8 s.
    assert timing.quiesce_s == 25.0 and timing.duration_s == matrix.FULL_TIMING.duration_s
    assert matrix.full_timing([load_system("reference")]) == matrix.FULL_TIMING
    for trial in range(3):
        ours = matrix.trial_scenario(cells[2], trial, 0, timing)
        theirs = matrix.trial_scenario(cells[3], trial, 0, timing)
        assert ours.faults == theirs.faults and ours.seed == theirs.seed
        assert theirs.system == "torchft" and theirs.system_options == {"join_timeout_ms": 5000}
        assert ours.name != theirs.name  # one run directory each
    assert matrix.model_description()["parameters"] == 6792  # 32→64→64→8


def _probe_document() -> dict:
    return json.loads((DATA / "side_by_side_probe.json").read_text())


def test_side_by_side_table_from_recorded_trials() -> None:
    table = side_by_side(_probe_document())
    (cell,) = table["cells"]
    assert (cell["fault"], cell["backend"], cell["nodes"]) == ("restart", "local", 4)
    ref, tft, tel = (cell["systems"][s] for s in ("reference", "torchft", "torchelastic"))
    assert ref["detection"]["median_ms"] == 162.5 and ref["detection"]["ratio_to_reference"] == 1
    assert tft["detection"]["median_ms"] == 5025.5
    assert tft["detection"]["ratio_to_reference"] == pytest.approx(30.93)
    assert tft["rejoin"]["median_ms"] == 2578.1  # from the harness's restart, not its start
    assert tel["detection"]["n"] == 0 and "left the victim out" in tel["detection"]["missing"]
    markdown = render_markdown(table)
    assert "6,792 parameters" in markdown
    assert (
        "| restart (local, 4 nodes) | torchft | 1 | 5,026 / 5,026 | ×30.93 | 5,023 / 5,023 "
        "| ×23.91 | 2,578 / 2,578 | ×7.41 | 0% (0%) | ×0.00 | 3.91 |" in markdown
    )
    row = next(line for line in markdown.splitlines() if "| torchelastic |" in line)
    assert row.count("— [") == 3  # detection, recovery, rejoin: each with a numbered reason
    assert "] no victim restarted after the fault" in markdown
    assert "`torchft` join_timeout_ms=5000" in markdown
    svg = render_svg(table)
    assert 'id="bar-detection-restart-torchft"' in svg
    assert 'id="bar-detection-restart-torchelastic"' not in svg  # nothing measured, no bar


def test_a_partly_measured_figure_says_how_many_and_why() -> None:
    document = _probe_document()
    (cell,) = document["results"]["torchft/restart"]["cells"]
    reference = document["results"]["restart"]["cells"][0]
    missed = dict(reference["per_trial"][0], detection_s=None)
    missed["why"] = {"detection": "not every observer declared every victim dead while it lasted"}
    reference["per_trial"].append(missed)
    reference["trials"] = 2
    table = side_by_side(document)
    figures = table["cells"][0]["systems"]["reference"]
    assert figures["detection"] == {
        "n": 1,
        "trials": 2,
        "median_ms": 162.5,
        "max_ms": 162.5,
        "missing": "not every observer declared every victim dead while it lasted",
        "ratio_to_reference": 1.0,
    }
    assert "| restart (local, 4 nodes) | reference | 2 | 162 / 162 (1/2 [1]) | ×1.00 |" in (
        render_markdown(table)
    )
    assert cell["trials"] == 1


@pytest.mark.slow
def test_one_real_cell_side_by_side(tmp_path: Path) -> None:
    """One trial of the reference node and of torchft, a 4-node restart, end to end."""
    out = tmp_path / "bench"
    env = {**os.environ, "SWARMSHAKE_STATE_DIR": str(tmp_path / "state"), "CI": "1"}
    done = subprocess.run(
        [
            sys.executable, "-m", "swarmshake", "bench", "recovery", "--system",
            "reference,torchft", "--faults", "restart", "--sizes", "4", "--trials", "1",
            "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    table = json.loads((out / "side_by_side.json").read_text())
    (cell,) = table["cells"]
    systems = cell["systems"]
    assert set(systems) == {"reference", "torchft"}
    assert systems["reference"]["trials"] == 1 and systems["torchft"]["trials"] == 1
    # torchft leaves a killed group out of its next quorum and commits without it, after
    # the Lighthouse's 5 s heartbeat timeout.  The restart comes 4-5 s after the kill,
    # so in some trials the group is back first and no quorum ever leaves it out: the
    # figure is then missing for that one reason (CI checks: 1 trial of 4, session 13),
    # and any other reason fails here.
    detection = systems["torchft"]["detection"]
    if detection["n"] == 1:
        assert detection["ratio_to_reference"] is not None
    else:
        assert detection["missing"] == (
            "no observer's group left the victim out while the fault lasted"
        ), detection
    assert systems["torchft"]["recovery"]["n"] == 1
    markdown = (out / "side_by_side.md").read_text()
    assert "| restart (local, 4 nodes) | torchft | 1 |" in markdown
    assert (out / "side_by_side.svg").read_text().startswith("<svg")


# Two trials of the run recorded in BENCHMARKS.md ("Session 5: recovery side by side"),
# their events as written (``collective`` events and commits far from the fault cut
# to keep the files small); the figures are what the bench measured on the full runs.
TORCHFT_RUN = DATA / "histories" / "bench-torchft-restart-local-4-t0"
TORCHELASTIC_RUN = DATA / "histories" / "bench-torchelastic-restart-local-4-t3"


def _events(run_dir: Path) -> list[dict]:
    events = []
    for path in sorted((run_dir / "events").glob("*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line]
    return sorted(events, key=lambda e: e["t_mono"])


def test_a_torchft_history_is_measured_from_its_membership_and_commits() -> None:
    fault, _, _, _, _ = recovery.measure_trial(TORCHFT_RUN)
    assert fault.victims == ("n2",)
    assert fault.detection_s == pytest.approx(5.066729223000948)
    assert fault.recovery_s == pytest.approx(5.055800644000556)
    assert fault.rejoin_from_restart_s == pytest.approx(3.3435367550009687)
    assert fault.why == {"rejoin_from_ready": "the system writes no ready event"}
    # Detection is the last survivor's first quorum without the victim, read here
    # straight from the raw events.
    events = _events(TORCHFT_RUN)
    inject = next(e for e in events if e["kind"] == "fault" and e["phase"] == "inject")
    firsts = {}
    for event in events:
        if (
            event["kind"] == "membership"
            and event["t_mono"] > inject["t_mono"]
            and event["node"] != "n2"
            and "n2" not in event["members"]
        ):
            firsts.setdefault(event["node"], event["t_mono"])
    assert set(firsts) == {"n1", "n3", "n4"}
    assert fault.detection_s == pytest.approx(max(firsts.values()) - inject["t_mono"])


def test_a_torchelastic_group_that_never_left_the_victim_out_has_no_detection() -> None:
    fault, _, _, _, _ = recovery.measure_trial(TORCHELASTIC_RUN)
    assert fault.detection_s is None
    assert fault.why["detection"] == (
        "no observer's group left the victim out while the fault lasted"
    )
    events = _events(TORCHELASTIC_RUN)
    inject = next(e for e in events if e["kind"] == "fault" and e["phase"] == "inject")
    after = [e for e in events if e["kind"] == "membership" and e["t_mono"] > inject["t_mono"]]
    assert after and all(inject["target"][0] in e["members"] for e in after)
    assert fault.recovery_s == pytest.approx(24.876188113999888)  # gloo timeout + restart
    assert fault.rejoin_from_restart_s == pytest.approx(16.06835874600074)


def test_combine_writes_the_table_of_a_recorded_sitting(tmp_path: Path) -> None:
    """``--combine`` on the crash call of the recorded sitting (BENCHMARKS.md, Session 5:
    recovery side by side): one torchft trial of five had no detection, and says why."""
    recorded = DATA / "bench-crash-side-by-side.json"
    probe = DATA / "side_by_side_probe.json"
    code = bench_command.main(
        ["recovery", "--system", "reference,torchft,torchelastic", "--combine",
         f"{recorded},{probe}", "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    markdown = (tmp_path / "side_by_side.md").read_text()
    assert (
        "| crash (local, 4 nodes) | torchft | 5 | 5,028 / 5,115 (4/5 [1]) | ×32.09 | "
        "5,034 / 8,462 | ×29.53 | 2,648 / 2,820 | ×12.23 | 30% (0%) | ×0.30 | 3.90 |" in markdown
    )
    assert "[1] no observer's group left the victim out while the fault lasted" in markdown
    assert "| restart (local, 4 nodes) | torchft | 1 |" in markdown  # the probe's cell
    table = json.loads((tmp_path / "side_by_side.json").read_text())
    assert [c["fault"] for c in table["cells"]] == ["crash", "restart"]
    assert len(table["calls"]) == 2
