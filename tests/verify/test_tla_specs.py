"""The specs hold in their default profile, and TLC catches every known bug's mutant."""

from __future__ import annotations

import json

import pytest

from swarmshake.reference_node.protocol.bugs import BUGS
from swarmshake.verify import tla_catalog
from swarmshake.verify.tla import format_counterexample


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_every_known_bug_has_a_mutant_config_checking_its_property(bug: str) -> None:
    # Fast, no TLC: a bug added to bugs.py without a spec mutant fails here.
    config = tla_catalog.specs_dir() / tla_catalog.mutant_config_name(bug)
    assert config.is_file(), f"no spec mutant for {bug}: add specs/{config.name}"
    assert tla_catalog._mutant_config_problem(bug, config.read_text()) == ""


def test_a_mutant_config_checking_another_property_is_refused() -> None:
    text = 'CONSTANTS\n    Bugs = {"no-quorum"}\nSPECIFICATION Spec\nINVARIANT S1\n'
    assert "must check exactly S3" in tla_catalog._mutant_config_problem("no-quorum", text)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(tla_catalog.SPECS))
def test_spec_holds_in_the_default_profile(name: str) -> None:
    for check in tla_catalog.check_spec(name, "default"):
        result = check.result
        assert result.status == "valid", (
            check.config,
            result.message,
            format_counterexample(result),
        )
        assert result.distinct_states > 100  # the model explored something real


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_tlc_catches_every_known_bug_as_the_property_it_breaks(bug: str) -> None:
    check = tla_catalog.check_mutant(bug)
    assert check.caught, check.problem
    assert check.result.violated_property == BUGS[bug].breaks
    assert len(check.result.counterexample) >= 2


@pytest.mark.slow
def test_without_the_vote_floor_a_rolled_back_node_commits_a_second_value() -> None:
    # The mechanism of 49f9838's bug, not just "some S1 violation": a restart rolls a
    # node back below a step whose record it pruned, and that step commits twice.
    check = tla_catalog.check_mutant("no-vote-floor")
    assert check.caught, check.problem
    states = check.result.counterexample
    restarts = [s for s in states if s.action == "Restart"]
    assert restarts, [s.action for s in states]
    last = states[-1].variables
    assert last["floor"] == "<<0, 0, 0>>"  # the mutant never writes it
    commits = next(s.variables["commits"] for s in reversed(states) if "commits" in s.variables)
    assert commits.count("step |-> 1") == 2, commits  # two values for step 1


@pytest.mark.slow
@pytest.mark.parametrize("witness", ["NoFloorRaised", "NoneBelowFloor"])
def test_the_floor_profile_prunes_and_restarts_a_node_below_its_floor(witness: str) -> None:
    # Commit.floor.cfg passing means something only if its behaviours reach a raised
    # floor and a node whose next step is at or below it (the vote floor acts).
    from swarmshake.verify.tla import run_tlc

    text = (tla_catalog.specs_dir() / "Commit.floor.cfg").read_text()
    checks = [line for line in text.splitlines() if line.startswith(("INVARIANT", "PROPERTY"))]
    assert checks, text
    for line in checks:
        text = text.replace(line + "\n", "")
    result = run_tlc(
        tla_catalog.specs_dir() / "Commit.tla",
        text + f"INVARIANT {witness}\n",
        timeout_s=tla_catalog.TIMEOUT_S["default"],
    )
    assert result.status == "violated" and result.violated_property == witness, result.message
    if witness == "NoneBelowFloor":  # put there by a restart (an older checkpoint)
        assert any(state.action == "Restart" for state in result.counterexample)


def test_cli_mutants_of_one_spec_print_the_counterexample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from swarmshake.chaos.commands import specs as specs_command

    assert specs_command.main(["check", "--mutants", "--spec", "rejoin", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [m["bug"] for m in report["mutants"]] == ["stale-rejoin"]
    assert report["mutants"][0]["caught"] and report["status"] == "valid"
    assert "CAUGHT   stale-rejoin" in captured.err and "state 2: " in captured.err
    assert "TransferFrom" in captured.err  # the action that took the stale parameters


def test_parallel_checks_keep_their_order_and_share_the_cores() -> None:
    # The CLI prints and reports in catalog order whatever finished first.
    import time

    from swarmshake.verify.tla import default_workers

    def task(index: int):
        def run(workers: int) -> tuple[int, int]:
            time.sleep(0.05 * (3 - index))  # later tasks finish first
            return index, workers

        return run

    results = tla_catalog._in_parallel([task(i) for i in range(3)], jobs=2)
    assert [index for index, _ in results] == [0, 1, 2]
    assert {workers for _, workers in results} == {max(1, default_workers() // 2)}
    alone = tla_catalog._in_parallel([task(0)], jobs=None)
    assert alone == [(0, default_workers())]  # one TLC process gets every core


def test_every_spec_has_a_config_per_profile_that_exists() -> None:
    for entry in tla_catalog.SPECS.values():
        assert (tla_catalog.specs_dir() / f"{entry.module}.tla").is_file()
        for profile in tla_catalog.PROFILES:
            assert entry.configs[profile], (entry.name, profile)
            for config in entry.configs[profile]:
                assert (tla_catalog.specs_dir() / config).is_file(), config
