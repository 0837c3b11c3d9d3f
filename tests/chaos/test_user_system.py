"""docs/testing-your-system.md: the example adapter, built from the doc's code and run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swarmshake.chaos.runner import RunOptions, run_blocking
from swarmshake.chaos.scenario import ScenarioError, load, loads, resolve
from swarmshake.chaos.systems import SystemConfigError, load_system
from swarmshake.verify.history import load_history

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing-your-system.md"
BLOCK = re.compile(r"```(?:python|yaml) (\S+)\n(.*?)```", re.S)


@pytest.fixture
def example(tmp_path, monkeypatch) -> Path:
    """The doc's files written out, the folder importable (as PYTHONPATH=. would)."""
    blocks = dict(BLOCK.findall(DOC.read_text()))
    assert set(blocks) == {"my_trainer.py", "my_system.py", "my-suite.yaml"}
    for name, text in blocks.items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_example_system_loads_by_module_path_and_refuses_link_faults(example):
    system = load_system("my_system:MySystem")
    assert system.name == "my-trainer" and "partition" not in system.supported_ops()
    suite = (example / "my-suite.yaml").read_text()
    broken = suite.replace(
        "op: {op: pause, nodes: [n3]}", "op: {op: partition, grouping: isolate, nodes: [n3]}"
    )
    with pytest.raises(ScenarioError, match="takes no link faults"):
        loads(broken, "my-suite.yaml")
    with pytest.raises(SystemConfigError, match="unknown option"):
        load_system("my_system:MySystem", {"nope": 1})
    with pytest.raises(ScenarioError, match="not a subclass"):
        loads(suite.replace("my_system:MySystem", "my_system:Path"), "my-suite.yaml")


@pytest.mark.slow
def test_the_example_runs_with_crash_and_pause_and_is_judged(example):
    scenario = resolve(load(example / "my-suite.yaml"))
    result = run_blocking(scenario, RunOptions(out=example / "runs", quiet=True))
    verdict = result.verdict
    assert verdict is not None, result.message
    statuses = {name: r.status for name, r in verdict.results.items()}
    assert statuses["S1"] == "valid" and statuses["L2"] == "valid", statuses
    assert statuses["L3"] == "valid", verdict.results["L3"].message
    assert statuses["S4"] == "unknown" and "does not record" in verdict.results["S4"].message
    history = load_history(result.run_dir)
    restarted = [e for e in history.events if e.node == "n2" and type(e).__name__ == "RejoinDone"]
    assert restarted, "n2 resumed from its checkpoint after the crash"
    assert (result.run_dir / "report.html").exists()
