"""Spec-only mutants (verify/tla_catalog.py SPEC_MUTANTS): earlier behaviours the cores
no longer carry as a switch; TLC must still tell them apart from the protocol."""

from __future__ import annotations

import pytest

from swarmshake.reference_node.protocol.bugs import BUGS
from swarmshake.verify import tla_catalog
from swarmshake.verify.tla import format_counterexample


@pytest.mark.parametrize("bug", sorted(tla_catalog.SPEC_MUTANTS))
def test_every_spec_mutant_has_a_config_checking_its_property(bug: str) -> None:
    assert bug not in BUGS, "a spec-only mutant is not a registry switch"
    config = tla_catalog.specs_dir() / tla_catalog.mutant_config_name(bug)
    assert config.is_file(), f"add specs/{config.name}"
    assert tla_catalog._mutant_config_problem(bug, config.read_text()) == ""


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(tla_catalog.SPEC_MUTANTS))
def test_tlc_catches_every_spec_mutant(bug: str) -> None:
    check = tla_catalog.check_mutant(bug)
    assert check.caught, (check.problem, format_counterexample(check.result))
    assert check.result.violated_property == tla_catalog.SPEC_MUTANTS[bug].breaks
    assert len(check.result.counterexample) >= 2


@pytest.mark.slow
def test_the_detector_partition_profile_holds() -> None:
    checks = [c for c in tla_catalog.check_spec("detector") if "partition" in c.config]
    assert checks, "Detector.partition.cfg is in the default profile"
    for check in checks:
        assert check.result.status == "valid", (
            check.result.message,
            format_counterexample(check.result),
        )
        assert check.result.distinct_states > 100
