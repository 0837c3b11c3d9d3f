"""``swarmshake sim`` prints every knob beside ``seed=`` and the command that repeats the
run, so a run seen in a terminal can be reproduced from the terminal (TigerBeetle's habit)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from swarmshake.chaos.sim.run import SimConfig

ROOT = Path(__file__).resolve().parents[3]


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmshake", "sim", *args],
        capture_output=True,
        text=True,
        timeout=120,  # a few seconds of virtual time on four nodes; a hang must fail
        cwd=ROOT,
    )


def test_human_output_names_every_knob_and_the_command_that_repeats_it(tmp_path):
    faults = tmp_path / "faults.yaml"
    faults.write_text("- at_s: 1\n  op: {op: crash, nodes: [n2]}\n  heal_after_s: 2\n")
    first = sim("--nodes", "4", "--duration", "6s", "--seed", "11", "--faults", str(faults))
    assert first.returncode == 0, first.stderr
    knobs = next(line for line in first.stderr.splitlines() if line.startswith("sim: seed="))
    for field in SimConfig.__struct_fields__:  # every setting the run depends on
        assert re.search(rf"\b{field}[=.]", knobs), f"{field} missing from: {knobs}"
    assert "seed=11 " in knobs and "nodes=4 " in knobs and "duration_s=6 " in knobs
    assert re.search(r"faults=\S+faults\.yaml@sha256:[0-9a-f]{12}", knobs)
    assert re.search(r"commit=\S+", knobs)
    command = next(line for line in first.stderr.splitlines() if line.startswith("reproduce: "))
    words = shlex.split(command.removeprefix("reproduce: "))
    assert words[:2] == ["swarmshake", "sim"]
    again = sim(*words[2:])  # the printed command, run as printed
    assert again.returncode == 0, again.stderr
    assert digest_of(first.stderr) == digest_of(again.stderr)


def digest_of(stderr: str) -> str:
    match = re.search(r"digest ([0-9a-f]{16,})", stderr)
    assert match, stderr
    return match.group(1)


def test_json_output_stays_one_document():
    done = sim("--nodes", "3", "--duration", "3s", "--seed", "5", "--json", "--no-training")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()) == 1 and "seed=" not in done.stdout


def test_churn_with_clean_leaves_runs_in_the_simulator(tmp_path):
    """A churn whose departures are clean leaves runs (it was refused while the
    simulator ran no joins or leaves): exit 0, and the run is judged valid."""
    spec = tmp_path / "churn.yaml"
    spec.write_text(
        "- at_s: 1\n  op: {op: churn, events_per_min: 12, crash_fraction: 0, down_s: 4}\n"
    )
    done = sim("--nodes", "4", "--duration", "20s", "--seed", "3", "--faults", str(spec))
    assert done.returncode == 0, done.stderr
    assert "verdict valid" in done.stderr + done.stdout
