"""The control process never imports torch (or numpy).

Importing torch costs seconds of CPU; a restarting node's control process that did
so on a 2-core machine starved every other node's heartbeats and caused false
`declare_dead` events.  Checked in a fresh interpreter, as the node starts.
"""

from __future__ import annotations

import json
import subprocess
import sys

CONTROL_MODULES = [
    "swarmshake.reference_node.__main__",
    "swarmshake.reference_node.config",
    "swarmshake.reference_node.runtime.node",
    "swarmshake.reference_node.runtime.step_driver",
    "swarmshake.reference_node.runtime.detector_driver",
    "swarmshake.reference_node.runtime.ipc",
    "swarmshake.reference_node.runtime.mqtt",
    "swarmshake.reference_node.runtime.mqtt_messages",
    "swarmshake.reference_node.runtime.http_api",
    "swarmshake.reference_node.runtime.worker_start",
    "swarmshake.reference_node.bench.detection",
    "swarmshake.reference_node.training.behaviour",
    "swarmshake.reference_node.training.host",
]


def test_control_process_modules_do_not_import_torch():
    script = (
        "import importlib, json, sys\n"
        f"for name in {CONTROL_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "heavy = sorted(m for m in ('torch', 'numpy') if m in sys.modules)\n"
        "print(json.dumps(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(result.stdout) == [], result.stdout


def test_torch_version_read_without_torch_matches_torch():
    import torch

    from swarmshake.reference_node.training.host import installed_torch_version

    assert installed_torch_version() == str(torch.__version__)


def test_old_import_paths_still_work():
    from swarmshake.reference_node.training import behaviour, byzantine, environment, host

    assert byzantine.ByzantineBehaviour is behaviour.ByzantineBehaviour
    assert byzantine.BYZANTINE_MODES == behaviour.BYZANTINE_MODES
    assert environment.cpu_flags is host.cpu_flags
