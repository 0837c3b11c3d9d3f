"""The README's "Use it" part shows what the code does: its suite is the smoke suite,
its error message is the one a user gets, its pytest example is a file a test runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.chaos.scenario import load, loads

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
EXAMPLE = ROOT / "docs" / "examples" / "test_chaos_partition.py"


def use_it() -> str:
    return README.split("## Use it", 1)[1].split("\n## ", 1)[0]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", use_it(), re.S)


def test_the_annotated_suite_is_the_smoke_suite():
    (suite,) = blocks("yaml")
    assert loads(suite, "README.md") == load(ROOT / "suites" / "smoke.yaml")


def test_the_error_shown_is_the_error_a_user_gets(tmp_path):
    shown = re.search(r"```\n(\$ swarmshake run .*?)```", use_it(), re.S).group(1)
    command, message = shown.strip().splitlines()
    (tmp_path / "suite.yaml").write_text(
        "name: x\nfaults:\n  - at_s: 1\n    op: {op: latency, src: [n1], dst: [n2], delay_ms: 1e6}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake", *command.split()[2:]],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 64
    assert done.stderr.strip() == message


def test_the_pytest_example_is_the_file_a_test_runs():
    (shown,) = blocks("python")
    code = EXAMPLE.read_text(encoding="utf-8")
    assert shown in code, "README's example differs from docs/examples/test_chaos_partition.py"


@pytest.mark.slow  # three reference nodes for a few seconds of faults
def test_the_pytest_example_passes_and_is_judged(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(EXAMPLE), "-q", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "base")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (verdict,) = [json.loads(p.read_text()) for p in (tmp_path / "base").rglob("verdict.json")]
    assert verdict["status"] == "valid" and verdict["events"] > 0


def test_every_command_in_the_usage_block_exists():
    from swarmshake.chaos.cli import COMMANDS

    usage = README.split("The command line (`swarmshake` or `python -m swarmshake`):", 1)[1]
    usage = usage.split("```", 2)[1]
    named = {
        name for words in re.findall(r"swarmshake ([a-z|]+)", usage) for name in words.split("|")
    }
    assert named <= set(COMMANDS), named - set(COMMANDS)
