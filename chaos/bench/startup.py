"""Start-up of a local cluster of reference nodes: from ``up`` to steady state.

``python -m swarmshake.chaos.bench.startup --nodes 8 --json``

Starts the harness's ``local`` backend (zygote-forked nodes, Toxiproxy, Mosquitto)
with the real reference node and times ``up()`` until every node has committed
``--min-commit-step`` (steady state: all committing).  Reports the backend's own
phase timings and, per node, when it logged ``ready`` and its first ``commit``
(seconds after ``up`` began), so a slow phase can be told from a slow node.
The harness issue's goal: 8 nodes ≤ 5 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.launcher import run_dir_or_scratch

STEADY_TIMEOUT_S = 120.0  # far above the goal; a stuck start is reported, not waited out


def run(nodes: int, min_commit_step: int, run_dir: Path, hidden: list[int]) -> dict:
    from swarmshake.chaos.backends.base import ClusterSpec
    from swarmshake.chaos.backends.session import ClusterSession

    spec = ClusterSpec(
        run_id="startup",
        run_dir=run_dir,
        nodes=tuple(f"n{i}" for i in range(1, nodes + 1)),
        node_config={"training": {"hidden": hidden}},
    )
    session = ClusterSession("local", spec)
    started_wall = time.time()
    started = time.monotonic()
    with session:
        session.wait_until_steady(min_commit_step=min_commit_step, timeout_s=STEADY_TIMEOUT_S)
        elapsed = time.monotonic() - started
        timings = dict(session.backend.timings)
    per_node: dict[str, dict[str, float]] = {}
    for path in sorted((run_dir / "events").glob("n*.jsonl")):
        for event in history.read_events(path).events:
            entry = per_node.setdefault(event.node, {})
            if isinstance(event, history.Ready) and "ready_s" not in entry:
                entry["ready_s"] = round(event.t_wall - started_wall, 3)
            if isinstance(event, history.Commit) and "first_commit_s" not in entry:
                entry["first_commit_s"] = round(event.t_wall - started_wall, 3)
    return {
        "nodes": nodes,
        "min_commit_step": min_commit_step,
        "up_to_steady_s": round(elapsed, 3),
        "goal_s": 5.0,
        "backend_timings_s": {k: round(v, 3) for k, v in timings.items()},
        "per_node": per_node,
        "run_dir": str(run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--min-commit-step", type=int, default=1)
    parser.add_argument("--hidden", default="64,64", help="hidden layer widths (default 64,64)")
    parser.add_argument("--run-dir", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 16:
        parser.error(f"--nodes {args.nodes}: must lie in [1, 16] on one machine")
    try:
        hidden = [int(width) for width in args.hidden.split(",")]
    except ValueError:
        parser.error(f"--hidden {args.hidden!r}: write widths like 64,64")
    # Without --run-dir the run directory is scratch: removed once the figures are read.
    with run_dir_or_scratch(args.run_dir, "swarmshake-startup-") as run_dir:
        result = run(args.nodes, args.min_commit_step, run_dir.resolve(), hidden)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{args.nodes} nodes from up to all committing step {args.min_commit_step}: "
            f"{result['up_to_steady_s']:.2f}s; {result['backend_timings_s']}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
