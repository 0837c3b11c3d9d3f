"""One line per run of a kill-one-group scenario: where the kill landed, what the survivors did.

    .venv/bin/python scripts/torchft_kill_tally.py RUN_DIR [RUN_DIR ...]

For each run directory (``swarmshake run`` output) it reads the history and prints:
the first harness ``crash`` inject (the kill) and its victim; whether the kill landed
while the survivors were mid-step (the victim had logged ``collective`` for step *s* and no
survivor had committed *s* yet); the survivors' longest gap between commits from the
kill to the end of the run; every ``node_error`` (a survivor's death and its error);
and the run's L2 verdict.  Exit 64 on a path that is not a run directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from swarmshake.verify.checkers import Bounds, check_history
from swarmshake.verify.history import (
    HARNESS,
    Collective,
    Fault,
    NodeError,
    RunSystem,
    StepCommitted,
    load_history,
)


def tally(run_dir: Path) -> dict:
    history = load_history(run_dir)
    bounds = Bounds(**json.loads((run_dir / "bounds.json").read_text()))
    kill = next(
        (e for e in history.events
         if isinstance(e, Fault) and e.node == HARNESS and e.op == "crash" and e.phase == "inject"),
        None,
    )  # fmt: skip
    verdict = check_history(history, bounds, RunSystem.of(run_dir))
    row: dict = {"run": run_dir.name, "L2": verdict.results["L2"].status}
    if kill is None:
        row["kill"] = None
        return row
    victim = kill.target[0]
    survivors = sorted(set(history.nodes()) - {victim})
    before = [e for e in history.events if e.t_mono <= kill.t_mono]
    last_collective = max(
        (e.step for e in before if isinstance(e, Collective) and e.node == victim), default=-1
    )
    committed = {e.step for e in before if isinstance(e, StepCommitted) and e.node in survivors}
    after = [
        e.t_mono
        for e in history.events
        if isinstance(e, StepCommitted) and e.node in survivors and e.t_mono > kill.t_mono
    ]
    gaps = [b - a for a, b in zip([kill.t_mono, *after], after, strict=False)]
    row.update(
        victim=victim,
        kill_step=last_collective,
        survivors_mid_step=last_collective >= 0 and last_collective not in committed,
        survivor_gap_s=round(max(gaps, default=float("nan")), 2),
        survivor_commits_after=len(after),
        errors=[
            f"{e.node}: {e.error} @ {e.where.rsplit('/', 1)[-1]}"
            for e in history.events
            if isinstance(e, NodeError)
        ],  # fmt: skip
        L2_message=verdict.results["L2"].message[:300],
    )
    return row


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 64
    for path in map(Path, argv):
        if not (path / "events").is_dir() or not (path / "bounds.json").is_file():
            print(f"{path}: not a run directory (no events/ or bounds.json)", file=sys.stderr)
            return 64
        print(json.dumps(tally(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
