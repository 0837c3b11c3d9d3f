"""``long`` tests run only when asked for (tests/conftest.py): a plain ``pytest DIR``
must not start hours of work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVERY_MUTANT = "tests/verify/test_mutation.py::test_every_mutant"


def _pytest(*args: str) -> str:
    # --timeout: if the policy broke, the hours-long test is stopped, and this one fails.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "--timeout", "30", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout + result.stderr


def test_a_plain_run_skips_long_tests_and_says_how_to_run_them():
    out = _pytest("tests/verify/test_mutation.py", "-k", "every_mutant")
    assert "1 skipped" in out and "run with -m long" in out, out


def test_a_long_test_named_on_the_command_line_is_not_skipped():
    # --setup-plan runs no test but applies the marks (it reports the skip above).
    out = _pytest(EVERY_MUTANT, "--setup-plan")
    assert "test_every_mutant" in out and "skipped" not in out, out
