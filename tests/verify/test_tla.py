"""The TLC runner and its parser, on small modules TLC really checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmshake.verify.tla import format_counterexample, parse_tlc_output, run_tlc

COUNTER = """---- MODULE Counter ----
EXTENDS Naturals
VARIABLES x, y
Init == x = 0 /\\ y = "idle"
Next == x < 3 /\\ x' = x + 1 /\\ y' = IF x = 1 THEN "busy" ELSE y
Small == x < 3
Eventually == <>(x = 5)
Spec == Init /\\ [][Next]_<<x, y>> /\\ WF_<<x, y>>(Next)
====
"""


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    module = tmp_path / "Counter.tla"
    module.write_text(COUNTER)
    return module


def test_invariant_violation_is_parsed_with_its_counterexample(counter: Path) -> None:
    result = run_tlc(counter, "INIT Init\nNEXT Next\nINVARIANT Small\n", timeout_s=60)
    assert result.status == "violated" and result.exit_code == 1
    assert result.violation_kind == "invariant" and result.violated_property == "Small"
    assert [state.variables["x"] for state in result.counterexample] == ["0", "1", "2", "3"]
    assert result.counterexample[2].variables["y"] == '"busy"'
    assert result.counterexample[1].action == "Next"
    assert result.distinct_states == 4 and result.depth == 4
    trace = format_counterexample(result)
    assert "state 3: Next" in trace and 'y = "busy"' in trace


def test_a_spec_that_holds_is_valid_with_its_statistics(counter: Path) -> None:
    result = run_tlc(counter, "INIT Init\nNEXT Next\n", timeout_s=60)
    assert result.status == "valid" and result.exit_code == 0
    assert result.distinct_states == 4 and result.depth == 4 and not result.counterexample


def test_a_temporal_violation_is_a_lasso(counter: Path) -> None:
    result = run_tlc(counter, "SPECIFICATION Spec\nPROPERTY Eventually\n", timeout_s=60)
    assert result.status == "violated" and result.violation_kind == "property"
    assert result.counterexample[-1].variables["x"] == "3"
    assert result.loops_back_to > 0  # stutters forever in x = 3


def test_deadlock_is_reported_when_asked_for(counter: Path) -> None:
    result = run_tlc(counter, "INIT Init\nNEXT Next\n", timeout_s=60, check_deadlock=True)
    assert result.status == "violated" and result.violation_kind == "deadlock"


def test_a_broken_module_is_unknown_with_tlc_s_error(tmp_path: Path) -> None:
    module = tmp_path / "Broken.tla"
    module.write_text("---- MODULE Broken ----\nVARIABLE x\nInit == x = Undefined\n====\n")
    result = run_tlc(module, "INIT Init\nNEXT Init\n", timeout_s=60)
    assert result.status == "unknown" and result.exit_code == 2
    assert "Undefined" in result.message


def test_the_deadline_kills_tlc_and_says_unknown(tmp_path: Path) -> None:
    module = tmp_path / "Forever.tla"
    module.write_text(
        "---- MODULE Forever ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x' = x + 1\n====\n"
    )
    result = run_tlc(module, "INIT Init\nNEXT Next\n", timeout_s=3)
    assert result.status == "unknown" and "did not finish within 3 s" in result.message


def test_parser_without_a_verdict_is_unknown() -> None:
    result = parse_tlc_output("M", "Exception in thread main java.lang.OutOfMemoryError", 1)
    assert result.status == "unknown" and "OutOfMemoryError" in result.message


def test_a_run_killed_at_its_deadline_keeps_its_progress_counts() -> None:
    output = (
        "@!@!@STARTMSG 2200:0 @!@!@\nProgress(12) at 2026-11-26 04:34:53: 120,291 states "
        "generated (119,856 s/min), 32,130 distinct states found (31,863 ds/min), 14,043 "
        "states left on queue.\n@!@!@ENDMSG 2200 @!@!@\n"
    )
    result = parse_tlc_output("M", output, -9)
    assert result.status == "unknown"
    assert (result.states_generated, result.distinct_states, result.depth) == (120291, 32130, 12)
