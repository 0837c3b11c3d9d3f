"""Systems under test: found by name, each says how node i starts and what it can take."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmshake.chaos.backends.base import ClusterSpec
from swarmshake.chaos.netns import kernel_qdiscs
from swarmshake.chaos.scenario import ScenarioError, loads
from swarmshake.chaos.systems import (
    NodeContext,
    SystemConfigError,
    known_systems,
    load_system,
)
from swarmshake.chaos.systems.reference import ReferenceSystem
from swarmshake.chaos.systems.torchelastic import TorchElasticSystem


def context(system, tmp_path: Path, **spec_fields) -> NodeContext:
    spec = ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=("n1", "n2", "n3"), **spec_fields)
    return NodeContext(
        spec=spec, name="n2", index=1, address="10.213.0.11",
        ports=dict.fromkeys(system.ports, 20001), peers={}, addresses={},
        services={"rendezvous": ("10.213.0.1", 29400)}, run_dir=tmp_path, python="/venv/python",
    )  # fmt: skip


def test_builtin_systems_are_found_by_name():
    assert {"reference", "torchelastic"} <= set(known_systems())
    assert isinstance(load_system("reference"), ReferenceSystem)
    assert isinstance(load_system("torchelastic"), TorchElasticSystem)
    module_path = "swarmshake.chaos.systems.torchelastic:TorchElasticSystem"
    assert isinstance(load_system(module_path), TorchElasticSystem)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", "system 'nope' is unknown; known: reference"),
        ("no such/thing", "write a registered name"),
        ("swarmshake.chaos.nowhere:X", "cannot import"),
        ("swarmshake.chaos.systems.base:LinkFaults", "not a subclass"),
    ],
)
def test_a_bad_system_name_says_the_fix(name, message):
    with pytest.raises(SystemConfigError, match=message):
        load_system(name)


def test_options_are_checked():
    with pytest.raises(SystemConfigError, match="unknown option"):
        load_system("torchelastic", {"max_restart": 3})
    with pytest.raises(SystemConfigError, match="collective_timeout_s"):
        load_system("torchelastic", {"collective_timeout_s": 0})


def test_reference_launch_is_the_node_module_with_its_config(tmp_path):
    system = ReferenceSystem()
    launch = system.launch(context(system, tmp_path, bugs=("forget-vote",)))
    assert launch.argv[:3] == ("/venv/python", "-m", "swarmshake.reference_node")
    assert launch.python_module == "swarmshake.reference_node"  # the zygote fast path
    assert "--bug" in launch.module_argv and str(tmp_path / "nodes/n2/node.toml") in launch.argv


def test_torchelastic_launch_is_torchrun_with_restarts_and_the_external_store(tmp_path):
    system = TorchElasticSystem({"max_restarts": 7})
    launch = system.launch(context(system, tmp_path))
    argv = " ".join(launch.argv)
    assert "--max-restarts=7" in argv and "--nnodes=2:3" in argv
    assert "--rdzv-endpoint=10.213.0.1:29400" in argv and "is_host=false" in argv
    assert "--local-addr=10.213.0.11" in argv
    assert launch.python_module is None  # executed, never forked from the zygote
    assert launch.env["SWARMSHAKE_EVENTS"].endswith("events/n2.jsonl")


def test_a_scenario_names_its_system_and_faults_are_checked_against_it():
    base = "name: t\nsystem: torchelastic\nfaults:\n  - at_s: 1\n    op: {op: %s}\n"
    scenario = loads(base % "crash, nodes: [n2]", "t.yaml")
    assert scenario.system == "torchelastic"
    with pytest.raises(ScenarioError, match="cannot take fault op 'clock_skew'"):
        loads(base % "clock_skew, nodes: [n2], offset_ms: 100", "t.yaml")
    with pytest.raises(ScenarioError, match="t.yaml:2"):
        loads("name: t\nsystem: nope\n", "t.yaml")
    latency = base % "latency, src: [n1], dst: [n2], delay_ms: 50"
    if kernel_qdiscs().get("netem"):
        with pytest.raises(ScenarioError, match="unsupported on this kernel"):
            loads(latency, "t.yaml")
    else:
        assert loads(latency, "t.yaml").faults[0].op.name == "latency"
    with pytest.raises(ScenarioError, match="no such planted-bug switch"):
        loads("name: t\nsystem: torchelastic\ncluster: {bugs: [forget-vote]}\n", "t.yaml")
    with pytest.raises(ScenarioError, match="serves no inference API"):
        loads("name: t\nsystem: torchft\nload: {users: 2}\n", "t.yaml")
