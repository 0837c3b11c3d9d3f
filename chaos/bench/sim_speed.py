"""``swarmshake bench sim [--quick] [--json]``: how fast the simulator runs the node.

Three figures (issue 12, after issue 3), each one ``swarmshake sim`` run, timed by
the run itself (``SimResult.wall_seconds``: all of ``run_simulation``, i.e. set-up,
the event loop, ordering the history, the checkers and the detection figures):

- 1,000 nodes x 600 s with churn (2 events a minute), no training: goal <= 60 s
  wall on one core;
- 10 nodes x 600 s with training (seeds 1-3): goal >= 1,000x real time;
- 64 nodes x 600 s with training: measured, no goal.

``--quick`` runs a tenth of the virtual time (60 s), for CI.  The simulator is
single-threaded: run this on a quiet machine, the figures move with the load.
"""

from __future__ import annotations

import json
import platform
import sys

from swarmshake.chaos import faults
from swarmshake.chaos.commands._args import ArgumentParser, bench_flags
from swarmshake.chaos.sim.run import SimConfig, run_simulation

CHURN = faults.FaultSchedule(
    entries=[faults.ScheduleEntry(op=faults.Churn(events_per_min=2), at_s=1.0)]
)
# (label, config, schedule, goal as text): the three figures of the module docstring.
FIGURES = (
    ("1000 nodes, churn, no training", dict(nodes=1000, training=False, seed=0), CHURN, "<= 60 s"),
    ("10 nodes, training, seed 1", dict(nodes=10, seed=1), None, ">= 1000x"),
    ("10 nodes, training, seed 2", dict(nodes=10, seed=2), None, ">= 1000x"),
    ("10 nodes, training, seed 3", dict(nodes=10, seed=3), None, ">= 1000x"),
    ("64 nodes, training", dict(nodes=64, seed=1), None, "measured"),
)


def parser() -> ArgumentParser:
    return ArgumentParser(
        prog="swarmshake bench sim",
        description="simulator speed: 1000 nodes with churn, 10 and 64 nodes with training",
        epilog="--quick: 60 s of virtual time instead of 600 s",
        parents=[bench_flags()],
    )


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    duration_s = 60.0 if args.quick else 600.0
    # The figures move with the interpreter's build as much as with the code (Debian's
    # PGO build runs the simulator ~14 % faster than pyenv's default one): say which.
    python = f"{platform.python_implementation()} {platform.python_version()} ({sys.base_prefix})"
    print(f"bench sim: {python}", file=sys.stderr)
    rows = []
    for label, knobs, schedule, goal in FIGURES:
        result = run_simulation(SimConfig(duration_s=duration_s, **knobs), schedule).result
        row = {
            "figure": label,
            "nodes": result.nodes,
            "sim_seconds": result.sim_seconds,
            "wall_seconds": result.wall_seconds,
            "x_real_time": round(result.sim_seconds / max(result.wall_seconds, 1e-9), 1),
            "events": result.events,
            "commits": result.commits,
            "status": result.status,
            "goal": goal,
        }
        rows.append(row)
        print(
            f"bench sim: {label}: {result.sim_seconds:.0f} s virtual in "
            f"{result.wall_seconds:.2f} s wall ({row['x_real_time']}x real time), "
            f"{result.events} events, {result.commits} commits, {result.status} (goal {goal})",
            file=sys.stderr,
        )
    if args.json:
        sys.stdout.write(json.dumps({"python": python, "figures": rows}) + "\n")
    return 0
