"""``explore --seed S`` draws the same schedules in any process.

Stock Hypothesis mixes constants from every local module in ``sys.modules`` into its
draws, so the schedules used to depend on what the process had imported first
(found: importing ``swarmshake.chaos.backends`` before exploring changed a drawn
drift from 5000 to 3600 ppm within 12 runs).  chaos/sim/hypothesis_provider.py
leaves that pool out."""

from __future__ import annotations

import subprocess
import sys

DRAWS = """
import sys
if sys.argv[1] == "backends":
    import swarmshake.chaos.backends  # noqa: F401  (what the CLI may import first)
DRIFT_PPM_ONLY_HERE = 3333.0  # a literal in a local module: stock Hypothesis drew it
from swarmshake.chaos import faults
from swarmshake.chaos.sim.explore import explore
from swarmshake.chaos.sim.run import SimConfig
seen = []
explore(
    SimConfig(nodes=3, duration_s=5, seed=1, training=False), budget=12, seed=1,
    progress=lambda i, schedule, bad: seen.append(faults.schedule_to_yaml(schedule)),
)
print("\\n---\\n".join(seen))
"""


def draws(tmp_path, mode: str, hash_seed: str) -> str:
    script = tmp_path / "draws.py"  # a local module of its own, as a user's script is
    script.write_text(DRAWS)
    done = subprocess.run(
        [sys.executable, str(script), mode],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=tmp_path,
        env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"},
    )
    return done.stdout


def test_explore_draws_the_same_schedules_whatever_the_process_imported(tmp_path):
    plain = draws(tmp_path, "plain", "1")
    assert plain.count("---") == 11
    assert draws(tmp_path, "backends", "2") == plain
