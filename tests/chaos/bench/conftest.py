"""Fixtures for the benchmark tests: hand-built histories from tests/reports/histories.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).parents[2] / "reports" / "histories.py"
_spec = importlib.util.spec_from_file_location("swarmshake_test_histories", _PATH)
_module = importlib.util.module_from_spec(_spec)
sys.modules.setdefault(_spec.name, _module)
_spec.loader.exec_module(sys.modules[_spec.name])


@pytest.fixture(name="histories")
def histories_module():
    """tests/reports/histories.py (a helper module; test folders are not packages)."""
    return sys.modules[_spec.name]
