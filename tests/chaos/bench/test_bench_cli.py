"""``swarmshake bench recovery --quick`` on the simulator: the CI command, every format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.reports import write_run_reports

ROOT = Path(__file__).resolve().parents[3]


def test_quick_recovery_bench_on_the_simulator_writes_every_format(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    done = subprocess.run(
        [
            sys.executable, "-m", "swarmshake", "bench", "recovery", "--quick",
            "--faults", "crash,restart,byzantine", "--out", str(out), "--json",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert set(results) == {"crash", "restart", "byzantine"}
    for fault in ("crash", "restart"):
        assert results[fault]["trials"] == 6  # sizes 4 and 8, three trials each
        assert results[fault]["recovery_ms"]["n"] >= 1
        assert results[fault]["detection_ms"]["p99"] is None  # fewer than 100 trials
    assert results["restart"]["rejoin_ms"]["n"] >= 1
    assert results["crash"]["rejoin_ms"]["n"] == 0
    assert results["crash"]["loop_stalls"] == 0  # simulated nodes never stall
    assert all(cell["skipped"] for cell in results["byzantine"]["cells"])  # the sim cannot
    document = json.loads((out / "bench.json").read_text())
    assert document["schema"] == "swarmshake.bench.recovery/1" and document["results"] == results
    assert "| restart | sim | 4 | 3 |" in (out / "summary.md").read_text()
    assert 'id="matrix"' in (out / "report.html").read_text()
    assert "<testsuites" in (out / "junit.xml").read_text()

    run_dir = Path(results["restart"]["cells"][0]["run_dirs"][0])
    write_run_reports(run_dir)
    page = (run_dir / "report.html").read_text()
    assert "swarmshake sim --nodes 4" in page and 'id="lane-n0-alive"' in page


@pytest.mark.slow
def test_quick_recovery_bench_on_real_nodes_writes_every_format(tmp_path: Path) -> None:
    """One cell of ``bench recovery --quick --backend local``: a real 4-node cluster,
    one trial (the --quick default on real backends), every format written."""
    out = tmp_path / "bench"
    env = {**os.environ, "SWARMSHAKE_STATE_DIR": str(tmp_path / "state"), "CI": "1"}
    done = subprocess.run(
        [
            sys.executable, "-m", "swarmshake", "bench", "recovery", "--quick", "--backend",
            "local", "--faults", "crash", "--out", str(out), "--json",
        ],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    crash = json.loads(done.stdout)["crash"]
    assert crash["trials"] == 1 and crash["failed_trials"] == 0
    (cell,) = crash["cells"]
    assert (cell["backend"], cell["nodes"]) == ("local", 4)
    # A SIGKILLed node is declared by every survivor and the cluster commits without it.
    assert 0 < crash["detection_ms"]["p50"] < 2000
    assert 0 < crash["recovery_ms"]["p50"] < 10_000
    assert isinstance(crash["false_positives"], int) and isinstance(cell["loop_stalls"], int)
    for name in ("bench.json", "report.html", "summary.md", "junit.xml"):
        assert (out / name).stat().st_size > 0, name
    assert "| crash | local | 4 | 1 |" in (out / "summary.md").read_text()
    run_dir = Path(cell["run_dirs"][0])
    assert (run_dir / "events" / "harness.jsonl").is_file()


@pytest.mark.slow
def test_harness_bench_measures_start_up_fault_latency_and_capacity() -> None:
    """``bench harness`` on a small real local cluster: every figure is present and
    plausible (the goals themselves are for BENCHMARKS.md, not for a test)."""
    done = subprocess.run(
        [
            sys.executable, "-m", "swarmshake", "bench", "harness", "--backend", "local",
            "--nodes", "3", "--trials", "1", "--capacity", "3", "--json",
        ],
        capture_output=True, text=True, timeout=400, env={**os.environ, "CI": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert 0 < result["up_to_steady_s"]["median"] < 120
    latencies = result["fault_call_to_effect_ms"]
    assert set(latencies) == {
        "partition_isolate_one", "partition_halves", "latency_one_link", "pause", "crash"
    }  # fmt: skip
    assert all(0 < cell["median"] < 10_000 and cell["trials"] == 1 for cell in latencies.values())
    ramp = result["capacity"]["ramp"]
    assert [entry["nodes"] for entry in ramp] == [3] and "holds" in ramp[0]


def test_harness_bench_rejects_bad_arguments() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "bench", "harness", "--nodes", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 64 and "--nodes" in done.stderr


# Arguments a parser needs before it parses at all (bench load is pointed at nodes).
REQUIRED = {"load": ["--target", "http://127.0.0.1:1", "--out", "runs/x"]}


def test_every_benchmark_takes_the_same_quick_and_json() -> None:
    from swarmshake.chaos.commands import bench
    from swarmshake.chaos.commands._args import JSON_HELP, QUICK_HELP

    assert set(bench.PARSERS) == set(bench.SUBCOMMANDS)
    for name in bench.SUBCOMMANDS:
        parser = bench.PARSERS[name]()
        flags = {option: action for action in parser._actions for option in action.option_strings}
        for option, help_text in (("--quick", QUICK_HELP), ("--json", JSON_HELP)):
            action = flags.get(option)
            assert action is not None, f"bench {name} has no {option}"
            assert action.nargs == 0 and action.default is False, (name, option)
            assert action.help == help_text, (name, option)
        args = parser.parse_args(["--quick", "--json", *REQUIRED.get(name, [])])
        assert args.quick is True and args.json is True, name
        args = parser.parse_args(REQUIRED.get(name, []))
        assert args.quick is False and args.json is False, name


@pytest.mark.parametrize("name", ["recovery", "overhead", "load", "rejoin", "harness", "kernels"])
def test_the_command_line_accepts_quick_and_json_for_every_benchmark(name: str) -> None:
    """Through ``swarmshake bench``: an out-of-range value after the two flags is
    refused by the benchmark's own check (64), never by argparse as unrecognized."""
    bad = {
        "recovery": ["--backend", "nowhere"],
        "overhead": ["--world", "1"],
        "load": ["--target", "http://127.0.0.1:1", "--out", "runs/x", "--users", "0"],
        "rejoin": ["--repeats", "0"],
        "harness": ["--nodes", "1"],
        "kernels": ["--bogus-after-the-flags"],
    }[name]
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "bench", name, "--quick", "--json", *bad],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    if name == "kernels":  # argparse names only the one unknown flag
        assert "unrecognized arguments: --bogus-after-the-flags" in done.stderr
    else:
        assert "unrecognized arguments" not in done.stderr, done.stderr
    assert done.returncode == 64, done.stderr


def test_top_level_help_lists_every_benchmark() -> None:
    from swarmshake.chaos import cli
    from swarmshake.chaos.commands import bench

    line = next(line for line in cli._usage().splitlines() if line.strip().startswith("bench"))
    assert all(name in line for name in bench.SUBCOMMANDS), line
