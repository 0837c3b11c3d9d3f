"""An explore run's result on disk: the shrunk schedule beside the run that shows it.

``swarmshake explore`` (simulator or real backend) ends a search that found a
violation with one run directory (DESIGN: "Run directory") holding the history of
the shrunk schedule's failing run and ``shrunk.yaml``, the scenario file that replays
it.  The reports read ``shrunk.yaml`` from there (``reports/rundir.py``) and show it
in ``report.html``; :func:`write_shrunk` writes it and regenerates the reports, so
the page that explains the violation also says how to reproduce it.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.chaos import faults, scenario, yaml_input
from swarmshake.reports import write_run_reports

SHRUNK_FILE = "shrunk.yaml"
MAX_SHRUNK_BYTES = 1 << 20  # the reports refuse larger text files (reports/rundir.py)


def new_sim_run_dir(out: Path, seed: int) -> Path:
    """A fresh ``out/<UTC stamp>-explore-sim-s<seed>-<hex>`` (created), like the runner's ids."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = out / f"{stamp}-explore-sim-s{seed}-{secrets.token_hex(2)}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def write_shrunk(run_dir: Path, scenario_text: str) -> Path:
    """Write ``run_dir/shrunk.yaml`` and regenerate the run's reports; returns the file."""
    data = scenario_text.encode()
    if len(data) > MAX_SHRUNK_BYTES:
        raise ValueError(
            f"shrunk schedule of {len(data)} bytes is over {MAX_SHRUNK_BYTES}: not a shrunk one"
        )
    path = run_dir / SHRUNK_FILE
    path.write_bytes(data)
    write_run_reports(run_dir)
    return path


def point_latest(out: Path, run_dir: Path) -> None:
    """``out/latest`` -> ``run_dir``, the runner's way (imported here only on a violation:
    the runner pulls in every backend, which a clean simulator search never needs)."""
    from swarmshake.chaos.runner import point_latest as point_runner_latest

    point_runner_latest(out, run_dir)


REPLAY_FILE = "replay.yaml"
# What a real cluster needs on top of the simulator's schedule: the first steady
# state (a tiny model commits step 2 within a few seconds of start, 60 s on a busy
# machine) and a quiet tail long enough for the liveness properties (L2's bound, R).
REPLAY_STEADY_TIMEOUT_S = 60.0
REPLAY_QUIESCE_S = 15.0


def real_node_name(sim_name: str, sim_names: frozenset[str]) -> str:
    """The simulator's ``n0..n{N-1}`` as the real cluster's ``n1..nN``; other strings
    (``*``, group labels) unchanged."""
    return f"n{int(sim_name[1:]) + 1}" if sim_name in sim_names else sim_name


def _renamed(value: Any, sim_names: frozenset[str]) -> Any:
    if isinstance(value, str):
        return real_node_name(value, sim_names)
    if isinstance(value, list):
        return [_renamed(item, sim_names) for item in value]
    if isinstance(value, dict):
        return {key: _renamed(item, sim_names) for key, item in value.items()}
    return value


def replay_scenario(
    schedule: faults.FaultSchedule,
    *,
    nodes: int,
    seed: int,
    bug: str | None,
    duration_s: float,
    origin: str,
) -> str:
    """The simulator's shrunk ``schedule`` as a scenario ``swarmshake run`` takes on a
    real cluster: the same nodes under their real names, the bug switch in the
    cluster section (so the file alone reproduces it), the schedule's faults with
    their triggers.  Event-triggered entries (``when:``) keep their timing on real
    nodes, whose steps run at another pace than the simulator's; timed entries
    (``at_s``) count from steady state there, from the start in the simulator.
    Parsed back before it is returned, so the text is a valid scenario."""
    width = len(str(nodes - 1))
    sim_names = frozenset(f"n{i:0{width}d}" for i in range(nodes))
    entries = _renamed(msgspec.to_builtins(schedule)["entries"], sim_names)
    name = f"explore-sim-{bug or 'nobug'}-s{seed}"
    document = {
        "name": name,
        "description": f"the shrunk schedule of {origin}, replayed on real nodes",
        "seed": seed,
        "cluster": {"nodes": nodes, "model": "tiny", "bugs": [bug] if bug else []},
        "steady_state": {"min_commit_step": 2, "timeout_s": REPLAY_STEADY_TIMEOUT_S},
        "duration_s": duration_s,
        "quiesce_s": REPLAY_QUIESCE_S,
        "faults": entries,
    }
    text = f"# {origin}\n# replay: swarmshake run THIS_FILE\n" + yaml_input.dump(document)
    scenario.loads(text, f"<{name}>")  # raises ScenarioError on a schedule it cannot express
    return text


def write_replay(run_dir: Path, text: str, extra: Path | None = None) -> Path:
    """Write ``run_dir/replay.yaml`` (and ``extra`` when given, ``--write-scenario``)."""
    path = run_dir / REPLAY_FILE
    path.write_text(text)
    if extra is not None:
        extra.parent.mkdir(parents=True, exist_ok=True)
        extra.write_text(text)
    return path
