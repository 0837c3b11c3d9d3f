"""docs/faults.md is generated from the typed ops and cannot drift from them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.chaos import faults as F
from swarmshake.chaos.commands import faults as catalog_command
from swarmshake.chaos.scenario import loads

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "faults.md"


def test_the_committed_page_is_what_the_ops_generate():
    generated = catalog_command.markdown(catalog_command.catalog())
    assert PAGE.read_text(encoding="utf-8") == generated, (
        f"docs/faults.md differs from the ops in chaos/faults.py; run `{catalog_command.REGENERATE}`"
    )


def test_every_op_is_on_the_page_with_its_fields():
    page = PAGE.read_text(encoding="utf-8")
    for tag, cls in catalog_command.op_classes().items():
        assert f"\n## {tag}\n" in page, tag
        section = page.split(f"\n## {tag}\n", 1)[1].split("\n## ", 1)[0]
        for field in cls.__struct_fields__:
            assert f"| `{field}` |" in section, (tag, field)
    assert set(catalog_command.op_classes()) == set(F.FAULT_OPS)


@pytest.mark.parametrize("tag", F.FAULT_OPS)
def test_each_example_loads_in_a_scenario_on_a_backend_that_runs_it(tag):
    entry = next(e for e in catalog_command.catalog() if e["op"] == tag)
    assert tag in catalog_command.EXAMPLES, f"add an example for {tag}"
    backend = next(b for b in entry["backends"] if b != "sim")
    example = catalog_command._flow(entry["example"])
    heal = "\n    heal_after_s: 2" if entry["heal"] else ""
    text = f"name: x\ncluster: {{nodes: 4, backend: {backend}}}\nfaults:\n  - at_s: 1\n    op: {example}{heal}\n"
    scenario = loads(text, f"{tag}.yaml")
    assert scenario.faults[0].op.name == tag


def test_the_pages_schedule_example_loads():
    page = PAGE.read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(faults:\n.*?)```", page, re.S)
    assert block
    scenario = loads("name: x\n" + block.group(1), "faults.md")
    assert [e.op.name for e in scenario.faults] == ["crash", "partition"]


def test_the_command_lists_every_op():
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", "faults"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line and line[0] != " "}
    assert set(F.FAULT_OPS) <= listed
