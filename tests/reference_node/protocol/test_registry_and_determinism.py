"""Every known bug of the protocol cores is wired into its core; runs are deterministic
across processes (no dependence on Python's per-process hash salt)."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmshake.reference_node.protocol.bugs import BUGS


@pytest.mark.parametrize("name", sorted(BUGS))
def test_each_bug_switch_is_consulted_by_the_core_it_names(name):
    bug = BUGS[name]
    module = importlib.import_module(f"swarmshake.reference_node.protocol.{bug.core}")
    assert f'"{name}" in bugs' in inspect.getsource(module), f"{bug.core}.py never checks {name}"


_SCRIPT = """
import hashlib, sys
sys.path.insert(0, {here!r})
from protocol_harness import MiniCluster
cluster = MiniCluster(8, 11)
cluster.crash("n3", 2.0)
cluster.run(4.0)
print(hashlib.sha256(repr(cluster.log).encode()).hexdigest())
for detector in cluster.detectors.values():
    print(hashlib.sha256(repr(detector.snapshot()).encode()).hexdigest())
"""


def test_same_seed_same_history_across_processes_with_different_hash_seeds():
    script = _SCRIPT.format(here=str(Path(__file__).parent))
    outputs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        result = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0].split()) == 9
