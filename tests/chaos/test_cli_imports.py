"""The harness process never imports torch: ``--help`` and rejecting a bad file are fast.

``swarmshake run --help`` took 2.6 s and rejecting a bad scenario 2.4-6.3 s because
``chaos/nemesis/inject.py`` imported ``reference_node/training/byzantine.py``, which
imports torch (about 1.2 s of import alone, more on a loaded machine).  The harness
needs none of it: the nodes train in their own processes.  These tests import the
command line and every harness module in a fresh interpreter and fail if torch came
along.  Times are printed for the record, not asserted (two shared cores are noisy);
the torch-free import is what keeps them short.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Everything the harness process loads to run, explore, simulate, verify and report.
HARNESS_MODULES = [
    "swarmshake.chaos.cli",
    "swarmshake.chaos.runner",
    "swarmshake.chaos.scenario",
    "swarmshake.chaos.faults",
    "swarmshake.chaos.nemesis",
    "swarmshake.chaos.backends.local",
    "swarmshake.chaos.backends.docker",
    "swarmshake.chaos.sim.run",
    "swarmshake.verify.checkers",
    "swarmshake.reports",
    *(
        f"swarmshake.chaos.commands.{name}"
        for name in (
            "run", "explore", "sim", "verify", "report", "specs", "bench", "cluster", "doctor",
            "faults",
        )
    ),
]  # fmt: skip


def test_harness_modules_import_without_torch():
    script = (
        "import importlib, sys\n"
        f"for name in {HARNESS_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "    assert 'torch' not in sys.modules, f'{name} imported torch'\n"
        "print('torch-free')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch-free"


def imported_modules(stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@pytest.mark.parametrize(
    "args",
    [["run", "--help"], ["run", "{bad}"], ["sim", "--faults", "{bad}"], ["bench", "--help"]],
    ids=["run-help", "run-bad-file", "sim-bad-faults", "bench-help"],
)
def test_help_and_rejecting_a_bad_file_load_no_torch(tmp_path, args):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration_s: 10\nduration_s: 20\n")
    argv = [arg.replace("{bad}", str(bad)) for arg in args]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "swarmshake", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    elapsed_s = time.monotonic() - started
    modules = imported_modules(result.stderr)
    assert "swarmshake.chaos.cli" in modules  # the import log was read
    assert "torch" not in modules
    if "{bad}" in args:
        assert result.returncode == 64
        assert f"{bad}:3: key `duration_s` is written twice" in result.stderr
    else:
        assert result.returncode == 0
    print(f"swarmshake {' '.join(args)}: {elapsed_s:.2f} s (with -X importtime)")
