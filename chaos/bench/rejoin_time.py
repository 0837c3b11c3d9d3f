"""Rejoin time of a restarted reference node on the harness's ``local`` backend.

``python -m swarmshake.chaos.bench.rejoin_time --params 1M --restarts 4 --json``

Starts a cluster (zygote-forked nodes, as the harness runs them), waits for steady
state, then repeatedly SIGKILLs one node (round robin), lets the others advance
for ``--down-s``, restarts it and reads its new incarnation's events:

- restart -> in sync: from the restart request to ``rejoin_done`` (the node holds
  the state the majority committed, fingerprint verified against it);
- ready -> in sync: from its ``ready`` event (control and worker up) to the same;
- ... -> first commit: to its first ``commit`` after that, which also waits for the
  cluster's step in flight to end (a step's duration, not the rejoin's).

Every time is host CLOCK_MONOTONIC (the events' ``t_mono``).  Goals (issue 4),
for ~1M parameters: restart -> in sync ≤ 3 s, ready -> in sync ≤ 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.launcher import run_dir_or_scratch

SYNC_TIMEOUT_S = 60.0  # far above the goal; a rejoin that never ends is reported as such
POLL_S = 0.05


def _new_incarnation_events(path: Path, incarnation: int) -> list[history.EventBase]:
    return [e for e in history.read_events(path).events if e.incarnation == incarnation]


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50_s": round(statistics.median(values), 3),
        "max_s": round(max(values), 3),
    }


def run(nodes: int, restarts: int, down_s: float, run_dir: Path, hidden: list[int]) -> dict:
    from swarmshake.chaos import faults as F
    from swarmshake.chaos.backends.base import ClusterSpec
    from swarmshake.chaos.backends.session import ClusterSession

    names = tuple(f"n{i}" for i in range(1, nodes + 1))
    spec = ClusterSpec(
        run_id="rejoin-time",
        run_dir=run_dir,
        nodes=names,
        node_config={"training": {"hidden": hidden}},
    )
    samples: list[dict[str, float | str]] = []
    with ClusterSession("local", spec) as session:
        session.wait_until_steady(min_commit_step=2, timeout_s=120)
        for index in range(restarts):
            victim = names[index % nodes]
            path = run_dir / "events" / f"{victim}.jsonl"
            incarnation = max(e.incarnation for e in history.read_events(path).events) + 1
            session.inject(F.Crash(nodes=[victim]))
            time.sleep(down_s)
            restarted = time.monotonic()
            session.inject(F.Restart(nodes=[victim]))
            sample: dict[str, float | str] = {"node": victim}
            deadline = restarted + SYNC_TIMEOUT_S
            while time.monotonic() < deadline:
                events = _new_incarnation_events(path, incarnation)
                ready = next((e for e in events if isinstance(e, history.Ready)), None)
                done = next((e for e in events if isinstance(e, history.RejoinDone)), None)
                commit = next(
                    (
                        e
                        for e in events
                        if isinstance(e, history.Commit) and done is not None and e.step > done.step
                    ),
                    None,
                )
                if ready is not None and done is not None and commit is not None:
                    sample["restart_to_ready_s"] = round(ready.t_mono - restarted, 3)
                    sample["restart_to_in_sync_s"] = round(done.t_mono - restarted, 3)
                    sample["ready_to_in_sync_s"] = round(done.t_mono - ready.t_mono, 3)
                    sample["restart_to_first_commit_s"] = round(commit.t_mono - restarted, 3)
                    sample["ready_to_first_commit_s"] = round(commit.t_mono - ready.t_mono, 3)
                    sample["transfer_source"] = done.source if done else ""
                    sample["transfer_bytes"] = done.nbytes if done else 0
                    break
                time.sleep(POLL_S)
            else:
                sample["error"] = f"not in sync within {SYNC_TIMEOUT_S}s"
            samples.append(sample)
            session.wait_until_steady(min_commit_step=0, timeout_s=60)
    ok = [s for s in samples if "error" not in s]
    return {
        "nodes": nodes,
        "restarts": restarts,
        "parameters_hidden": hidden,
        "restart_to_in_sync": _summary([float(s["restart_to_in_sync_s"]) for s in ok]),
        "ready_to_in_sync": _summary([float(s["ready_to_in_sync_s"]) for s in ok]),
        "restart_to_ready": _summary([float(s["restart_to_ready_s"]) for s in ok]),
        "restart_to_first_commit": _summary([float(s["restart_to_first_commit_s"]) for s in ok]),
        "ready_to_first_commit": _summary([float(s["ready_to_first_commit_s"]) for s in ok]),
        "goals_s": {"restart_to_in_sync": 3.0, "ready_to_in_sync": 0.5},
        "samples": samples,
        "run_dir": str(run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    from swarmshake.reference_node.training.config import (
        TrainingConfigError,
        parse_parameter_count,
        sized_for,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--restarts", type=int, default=4)
    parser.add_argument("--down-s", type=float, default=2.0, help="time a node stays down")
    parser.add_argument("--params", default="1M", help="model size, e.g. 1M")
    parser.add_argument("--run-dir", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 3 <= args.nodes <= 16:
        parser.error(f"--nodes {args.nodes}: must lie in [3, 16] (a majority must stay up)")
    if not 1 <= args.restarts <= 100:
        parser.error(f"--restarts {args.restarts}: must lie in [1, 100]")
    if not 0 <= args.down_s <= 60:
        parser.error(f"--down-s {args.down_s}: must lie in [0, 60]")
    try:
        hidden = sized_for(parse_parameter_count(args.params)).hidden
    except (TrainingConfigError, ValueError) as error:
        parser.error(f"--params {args.params!r}: {error}")
    # Without --run-dir the run directory is scratch: removed once the figures are read.
    with run_dir_or_scratch(args.run_dir, "swarmshake-rejoin-") as run_dir:
        result = run(args.nodes, args.restarts, args.down_s, run_dir.resolve(), list(hidden))
    print(json.dumps(result, indent=2 if not args.json else None))
    return 0 if all("error" not in s for s in result["samples"]) else 2


if __name__ == "__main__":
    sys.exit(main())
