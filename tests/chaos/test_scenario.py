"""Scenario files: a bad file fails at load with file, line, field and fix; suites load."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmshake.chaos import faults as F
from swarmshake.chaos.scenario import (
    MAX_SCENARIO_BYTES,
    ScenarioError,
    dumps,
    load,
    loads,
    resolve,
)

SUITES = sorted((Path(__file__).resolve().parents[2] / "suites").glob("*.yaml"))


def error_of(text: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        loads(text, "suite.yaml")
    return str(caught.value)


def test_unknown_field_names_line_field_and_suggests_the_fix():
    message = error_of("name: x\ncluster:\n  model: tiny\n  nodez: 4\n")
    assert message.startswith("suite.yaml:4: cluster:")
    assert "unknown field `nodez`" in message and "did you mean `nodes`?" in message


def test_wrong_type_deep_in_a_fault_entry_points_at_its_line():
    text = "name: x\nfaults:\n  - at_s: 1\n    op: {op: crash, nodes: [n1]}\n  - at_s: 2\n    op:\n      op: latency\n      delay_ms: slow\n"
    message = error_of(text)
    assert message.startswith("suite.yaml:8: faults[1].op.delay_ms:"), message
    assert "Expected `float`" in message and "fix:" in message


def test_value_out_of_range_says_the_allowed_range():
    message = error_of("name: x\nfaults:\n  - at_s: 1\n    op: {op: latency, delay_ms: -5}\n")
    assert message.startswith("suite.yaml:4: faults[0].op.delay_ms:"), message
    assert "[0.0, 600000.0]" in message


def test_unknown_fault_op_lists_the_catalog():
    message = error_of("name: x\nfaults:\n  - at_s: 1\n    op: {op: crsh, nodes: [n1]}\n")
    assert "suite.yaml:4" in message and "crsh" in message


def test_missing_required_field_says_what_to_add():
    message = error_of("cluster: {nodes: 3}\n")
    assert message.startswith("suite.yaml:1:") and "add `name:`" in message


def test_entry_with_neither_time_nor_trigger_is_refused():
    message = error_of("name: x\nfaults:\n  - op: {op: crash, nodes: [n1]}\n")
    assert "suite.yaml:3: faults[0]" in message and "exactly one of at_s" in message


def test_fault_after_the_fault_phase_is_refused():
    message = error_of(
        "name: x\nduration_s: 10\nfaults:\n  - {at_s: 20, op: {op: crash, nodes: [n1]}}\n"
    )
    assert "after duration_s" in message


def test_unknown_bug_switch_lists_the_registry():
    message = error_of("name: x\ncluster: {bugs: [no-such-bug]}\n")
    assert "suite.yaml:2: cluster" in message and "no-quorum" in message


def test_yaml_syntax_error_has_a_line():
    message = error_of("name: x\ncluster: {nodes: 4\nseed: 1\n")
    assert message.startswith("suite.yaml:") and "not valid YAML" in message


def test_unsafe_tags_are_refused():
    message = error_of("name: !!python/object/apply:os.system ['true']\n")
    assert "suite.yaml" in message


def test_alias_bomb_and_deep_nesting_are_refused_before_expansion():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefgh":
        previous = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [{', '.join(['*' + previous] * 10)}]\n"
    assert "YAML nodes" in error_of(bomb + "name: x\n")
    assert "nested deeper" in error_of("name: x\ndeep: " + "[" * 40 + "]" * 40 + "\n")


def test_oversized_file_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: x\n" + "#" * (MAX_SCENARIO_BYTES + 1))
    with pytest.raises(ScenarioError, match="more than"):
        load(path)


@pytest.mark.parametrize("path", SUITES, ids=[p.stem for p in SUITES])
def test_every_suite_loads_and_resolves(path):
    scenario = resolve(load(path))
    assert scenario.faults, "a chaos suite injects something"
    assert scenario.duration_s + scenario.quiesce_s <= 180


def test_smoke_suite_fits_ci():
    smoke = load(Path(__file__).resolve().parents[2] / "suites" / "smoke.yaml")
    assert smoke.steady_state.timeout_s + smoke.duration_s + smoke.quiesce_s <= 150


def test_resolve_writes_the_generator_out_and_round_trips():
    text = "name: gen\nseed: 9\nduration_s: 60\ngenerator: {ops: [crash, latency, partition], rate_per_min: 10}\n"
    resolved = resolve(loads(text), nodes=5, backend="local", bugs=["no-quorum"])
    assert resolved.generator is None and resolved.faults
    assert resolved.cluster.nodes == 5 and resolved.cluster.bugs == ["no-quorum"]
    assert resolve(loads(text), nodes=5).faults == resolve(loads(text), nodes=5).faults  # seeded
    assert resolve(loads(text), seed=10).faults != resolve(loads(text), seed=9).faults
    again = loads(dumps(resolved))
    assert again == resolved
    for entry in again.faults:
        assert isinstance(entry.op, F.Crash | F.Latency | F.Partition)
        assert set(entry.op.targets()) <= {f"n{i}" for i in range(1, 6)} | {F.ALL}


def test_override_that_breaks_the_file_is_reported():
    scenario = loads("name: x\nfaults:\n  - {at_s: 1, op: {op: crash, nodes: [n1]}}\n")
    with pytest.raises(ScenarioError, match="nodes = 0"):
        resolve(scenario, nodes=0)


def test_fault_naming_a_node_outside_the_cluster_is_refused():
    message = error_of(
        "name: x\ncluster: {nodes: 3}\nfaults:\n  - {at_s: 1, op: {op: crash, nodes: [n5]}}\n"
    )
    assert "['n5']" in message and "n1..n3" in message
    scenario = loads(
        "name: x\ncluster: {nodes: 5}\nfaults:\n  - {at_s: 1, op: {op: crash, nodes: [n5]}}\n"
    )
    with pytest.raises(ScenarioError, match="n5"):
        resolve(scenario, nodes=3)


def test_direct_links_refuse_link_faults_and_docker():
    message = error_of(
        "name: x\ncluster: {links: direct}\nfaults:\n"
        "  - {at_s: 1, op: {op: latency, delay_ms: 20}}\n"
    )
    assert "latency acts on links" in message and "links: proxied" in message
    message = error_of("name: x\ncluster: {links: direct}\ngenerator: {ops: [crash, partition]}\n")
    assert "['partition']" in message
    assert "local backend only" in error_of("name: x\ncluster: {links: direct, backend: docker}\n")
    scenario = loads(
        "name: x\ncluster: {links: direct}\nfaults:\n  - {at_s: 1, op: {op: crash, nodes: [n1]}}\n"
    )
    assert scenario.cluster.links == "direct"
