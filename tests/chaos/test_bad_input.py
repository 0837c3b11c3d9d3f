"""Bad input never crashes the harness: exit 64 with the file, the line and the fix.

Covers what a user hit (issue 16): 10,000 nested ``[`` died with a RecursionError
and exit 1; a key written twice ran with the second value; ``1e12`` was read as a
string.  The fuzz tests feed the scenario loader and ``swarmshake run`` random YAML
documents, mutated suites and random bytes: the only outcomes allowed are a loaded
scenario or a one-line error that names the source and a fix; each example is
checked under a 1 s deadline, and no process is ever started.
"""

from __future__ import annotations

import collections
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import hypothesis.strategies as st
import psutil
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings

from swarmshake.chaos import cli, faults
from swarmshake.chaos.commands import run as run_command
from swarmshake.chaos.scenario import Scenario, ScenarioError, dumps, loads

ROOT = Path(__file__).resolve().parents[2]
SMOKE = (ROOT / "suites" / "smoke.yaml").read_text()
OUTCOMES: collections.Counter[str] = collections.Counter()  # printed by the last test (-s)


def swarmshake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmshake", *args],
        capture_output=True,
        text=True,
        timeout=60,  # a rejection takes well under a second; a hang must fail the test
        cwd=ROOT,
    )


def error_of(text: str | bytes) -> str:
    with pytest.raises(ScenarioError) as caught:
        loads(text, "suite.yaml")
    return str(caught.value)


# --- what a user hit ------------------------------------------------------------------------


def test_ten_thousand_nested_brackets_exit_64_naming_the_file(tmp_path):
    suite = tmp_path / "deep.yaml"
    suite.write_text("[" * 10_000)
    started = time.monotonic()
    result = swarmshake("run", str(suite), "--out", str(tmp_path / "runs"))
    elapsed_s = time.monotonic() - started
    assert result.returncode == 64, result.stderr
    assert f"{suite}:1: nested deeper than 32 levels" in result.stderr
    assert "fix:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started
    print(f"10,000 nested [ rejected in {elapsed_s:.2f} s (whole process)")


def test_deep_block_nesting_and_deep_flow_mappings_are_refused_too():
    assert "nested deeper than 32 levels" in error_of("{a: " * 5000)
    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + "  " * 40 + "v: 1\n"
    assert "nested deeper than 32 levels" in error_of("name: x\n" + block)


def test_a_key_written_twice_names_both_lines():
    message = error_of("name: x\nduration_s: 10\nquiesce_s: 5\nduration_s: 20\n")
    assert message.startswith("suite.yaml:4: key `duration_s` is written twice (lines 2 and 4)")
    assert "fix: keep one of them" in message
    nested = error_of("name: x\ncluster:\n  nodes: 3\n  model: tiny\n  nodes: 5\n")
    assert "suite.yaml:5: key `nodes` is written twice (lines 3 and 5)" in nested
    in_a_fault = error_of(
        "name: x\nfaults:\n  - at_s: 1\n    op: {op: crash, nodes: [n1], nodes: [n2]}\n"
    )
    assert "key `nodes` is written twice (lines 4 and 4)" in in_a_fault


def test_numbers_are_read_as_a_user_means_them():
    scenario = loads("name: x\nduration_s: 1.5e2\nquiesce_s: 1e1\nseed: 012\n")
    assert (scenario.duration_s, scenario.quiesce_s, scenario.seed) == (150.0, 10.0, 12)
    # YAML 1.1 read these as booleans; a name is text.
    assert loads("name: x\ndescription: no\n").description == "no"


def test_a_huge_duration_is_refused_by_range_on_its_own_line():
    message = error_of("name: x\nseed: 1\nduration_s: 1e12\n")
    assert message.startswith("suite.yaml:3: duration_s:"), message
    assert "[0, 86400]" in message and "fix:" in message


def test_infinity_and_not_a_number_are_refused_with_their_line():
    text = "name: x\nfaults:\n  - at_s: 1\n    op: {op: latency, src: [n1], dst: [n2], delay_ms: 1e309}\n"
    message = error_of(text)
    assert message.startswith("suite.yaml:4: `1e309` reads as infinity"), message
    assert "fix:" in message
    assert "reads as not a number" in error_of("name: x\nduration_s: .nan\n")


def test_a_number_too_large_for_a_finite_delay_is_refused_by_range():
    text = "name: x\nfaults:\n  - at_s: 1\n    op: {op: latency, delay_ms: 1e12}\n"
    message = error_of(text)
    assert message.startswith("suite.yaml:4: faults[0].op.delay_ms:"), message
    assert "[0.0, 600000.0]" in message


def test_a_number_written_with_underscores_or_quotes_says_how_to_write_it():
    assert "write the number plainly" in error_of("name: x\nduration_s: 1_000\n")
    assert "remove the quotes" in error_of('name: x\nduration_s: "10"\n')


def test_what_the_harness_writes_it_reads_back_the_same():
    scenario = loads("name: '1e5'\ndescription: 'yes'\nseed: 7\n")
    assert scenario.name == "1e5" and scenario.description == "yes"
    assert loads(dumps(scenario)) == scenario
    assert yaml.safe_load(dumps(scenario))["description"] == "yes"  # a YAML 1.1 reader too


def test_fault_schedules_are_read_the_same_way(tmp_path):
    schedule = tmp_path / "faults.yaml"
    schedule.write_text("- at_s: 1e1\n  op: {op: crash, nodes: [n1]}\n  at_s: 2\n")
    result = swarmshake("sim", "--nodes", "3", "--duration", "5s", "--faults", str(schedule))
    assert result.returncode == 64
    assert f"{schedule}:3: key `at_s` is written twice (lines 1 and 3)" in result.stderr
    assert faults.decode_schedule("- at_s: 1e1\n  op: {op: crash, nodes: [n1]}\n").entries[
        0
    ].at_s == pytest.approx(10.0)


def test_a_bad_fault_schedule_names_its_line_and_entry():
    text = "- at_s: 1\n  op: {op: crash, nodes: [n1]}\n- at_s: 2\n  op: {op: latency, delay_ms: slow}\n"
    with pytest.raises(faults.FaultSpecError) as caught:
        faults.decode_schedule(text, source="faults.yaml")
    message = str(caught.value)
    assert message.startswith("faults.yaml:4: entries[1].op.delay_ms: Expected `float`"), message
    assert "fix:" in message
    in_a_scenario = "name: x\nfaults:\n  - at_s: 1\n    op: {op: crsh, nodes: [n1]}\n"
    with pytest.raises(faults.FaultSpecError, match=r"faults\.yaml:4: faults\[0\]\.op"):
        faults.decode_schedule(in_a_scenario, source="faults.yaml")


# --- exit codes of the command line ---------------------------------------------------------


def test_a_crash_of_the_harness_exits_2_with_its_traceback(monkeypatch, capsys, tmp_path):
    def broken(argv: list[str]) -> int:  # a harness bug, injected where a command runs
        raise RuntimeError("boom in the harness")

    from swarmshake.chaos.commands import verify

    monkeypatch.setattr(verify, "main", broken)
    assert cli.main(["verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "internal error (RuntimeError: boom in the harness)" in err
    assert "exit 2 (unknown)" in err


def test_a_scenario_error_that_escapes_a_command_still_exits_64(monkeypatch, capsys, tmp_path):
    def escaping(argv: list[str]) -> int:
        return int(loads("name: x\nnodez: 3\n", "escaped.yaml") is None)

    from swarmshake.chaos.commands import verify

    monkeypatch.setattr(verify, "main", escaping)
    assert cli.main(["verify", str(tmp_path)]) == 64
    err = capsys.readouterr().err
    assert "escaped.yaml:2" in err and "Traceback" not in err


def test_usage_errors_of_every_command_exit_64():
    for args in (["run"], ["sim", "--nodes", "x"], ["verify"], ["bench", "nope"], ["nope"]):
        assert swarmshake(*args).returncode == 64, args


# --- fuzz -----------------------------------------------------------------------------------

SCHEMA_WORDS = [
    *Scenario.__struct_fields__, "nodes", "backend", "model", "op", "at_s", "heal_after_s",
    "crash", "partition", "latency", "delay_ms", "src", "dst", "ops", "rate_per_min", "when",
    "grouping", "isolate", "n1", "n2", "users", "min_commit_step", "timeout_s",
]  # fmt: skip
NUMBERISH = st.sampled_from(
    ["1e12", "1e309", "-1e309", ".inf", ".nan", "012", "0x1f", "0o17", "1_000", "1:30", "-0",
     "+.5", "1e", "9" * 50, "yes", "on", "~", "null", "2024-01-01", "<<", "!!float 1"]
)  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(SCHEMA_WORDS)
    | NUMBERISH
    | st.text(max_size=12)
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(SCHEMA_WORDS) | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=40,
)


def yaml_text(document: object, flow: bool) -> str:
    return yaml.safe_dump(document, default_flow_style=flow, allow_unicode=True)


@st.composite
def mutated_suites(draw: st.DrawFn) -> str:
    """The smoke suite with a few random edits: a deleted span, an inserted snippet,
    a duplicated line: near misses, the input users actually write."""
    text = SMOKE
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "duplicate"]))
        at = draw(st.integers(0, len(text)))
        if kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)) :]
        elif kind == "insert":
            snippet = draw(NUMBERISH | st.sampled_from([":", "[", "{", "- ", "\n", "  ", "&a ", "*a", '"', "#"]) | st.text(max_size=4))  # fmt: skip
            text = text[:at] + snippet + text[at:]
        else:
            lines = text.splitlines(keepends=True)
            index = draw(st.integers(0, len(lines) - 1))
            text = "".join([*lines[: index + 1], lines[index], *lines[index + 1 :]])
    return text


def check_outcome(data: str | bytes) -> None:
    started = time.monotonic()
    try:
        scenario = loads(data, "fuzz.yaml")
    except ScenarioError as error:
        message = str(error)
        assert message.startswith("fuzz.yaml"), message
        assert "fix:" in message and "\n" not in message and "Traceback" not in message
        outcome = "rejected"
    else:
        assert isinstance(scenario, Scenario)
        for value in (scenario.duration_s, scenario.quiesce_s):
            assert math.isfinite(value)
        outcome = "loaded"
    assert time.monotonic() - started < 1.0
    OUTCOMES[outcome] += 1
    event(outcome)


FUZZ = settings(max_examples=600, deadline=1000, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(document=DOCUMENTS, flow=st.booleans())
def test_fuzz_random_yaml_documents(document, flow):
    check_outcome(yaml_text(document, flow))


@FUZZ
@given(document=st.dictionaries(st.sampled_from(SCHEMA_WORDS), DOCUMENTS, min_size=1, max_size=8))
def test_fuzz_random_scenario_shaped_mappings(document):
    check_outcome(yaml_text({"name": "fuzz", **document}, flow=False))


@FUZZ
@given(text=mutated_suites())
def test_fuzz_mutated_suites(text):
    check_outcome(text)


@FUZZ
@given(data=st.binary(max_size=2048) | st.text(max_size=512).map(str.encode))
def test_fuzz_random_bytes(data):
    check_outcome(data)


class ClusterStarted(BaseException):  # not Exception: the CLI turns those into exit 2
    """Raised in place of a run: the scenario was valid, so the CLI went on to run it."""


@settings(max_examples=150, deadline=1000, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated_suites() | DOCUMENTS.map(lambda d: yaml_text(d, False)))
def test_fuzz_swarmshake_run_exits_64_or_reaches_the_run(text, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    suite = folder / "suite.yaml"
    suite.write_text(text)
    children_before = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}

    def no_run(scenario, options):  # the tripwire: a valid scenario stops here, unrun
        raise ClusterStarted

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_command, "run_blocking", no_run)
        started = time.monotonic()
        try:
            code = cli.main(["run", str(suite), "--out", str(folder / "runs"), "--quiet"])
        except ClusterStarted:
            code = None
        elapsed_s = time.monotonic() - started
    assert code in (None, 64)
    assert elapsed_s < 1.0
    children_after = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    assert children_after <= children_before  # no process started
    assert not (folder / "runs").exists()
    OUTCOMES["cli-reached-run" if code is None else "cli-exit-64"] += 1


def test_zz_fuzz_counts():
    """Prints the outcome counts of the fuzz tests above (run with -s to see them)."""
    print(f"fuzz outcomes: {dict(OUTCOMES)}")
    if OUTCOMES:
        assert OUTCOMES["rejected"] > 0 and OUTCOMES["loaded"] > 0
