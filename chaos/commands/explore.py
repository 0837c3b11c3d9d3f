"""``swarmshake explore``: draw fault schedules, run each, shrink a failing one.

    swarmshake explore [--backend sim] [--budget N] [--seed S] [--bug NAME]
                       [--nodes N] [--duration 40s] [--property P ...] [--json]

With ``--backend sim`` Hypothesis draws schedules (crashes, event-triggered crashes,
pauses, partitions, black holes, jitter, clock skew), the simulator runs each and the
checkers judge it.  On a violation the schedule is shrunk to the smallest one that
still violates, printed as a scenario's ``faults:`` YAML on stdout, and the exit code
is 1; with no violation in ``--budget`` runs the exit code is 0.  ``--property``
limits what counts (default: any invalid property; ``--bug NAME`` defaults it to the
property that bug must break).  ``unknown`` verdicts never count as violations.

With ``--backend local|docker`` the harness draws schedules from its fault
generator, runs each on a real cluster, re-runs a failing one to confirm it despite
real-world nondeterminism, shrinks it greedily and prints the scenario
(``swarmshake.chaos.explore_real``); ``swarmshake run`` replays it.
"""

from __future__ import annotations

import sys

import msgspec

from swarmshake.chaos import faults
from swarmshake.chaos.commands._args import (
    EXIT_INVALID,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
    parse_duration_s,
)
from swarmshake.chaos.sim.explore import explore
from swarmshake.chaos.sim.run import SimConfig
from swarmshake.reference_node.protocol.bugs import BUGS
from swarmshake.verify.checkers import PROPERTIES

MAX_BUDGET = 100_000  # runs; a larger search belongs in a nightly job with its own seed


MAX_REAL_BUDGET = 200  # each real run takes tens of seconds; more is a nightly job


def explore_real_cluster(args) -> int:  # noqa: ANN001 - the parsed arguments of main()
    """Explore on real nodes; exit 1 with the shrunk scenario on a confirmed violation."""
    import json
    from pathlib import Path

    from swarmshake.chaos.explore_real import explore_blocking

    if args.budget > MAX_REAL_BUDGET:
        raise UsageError(f"--budget {args.budget}: at most {MAX_REAL_BUDGET} real runs")
    result = explore_blocking(
        backend=args.backend,
        budget=args.budget,
        seed=args.seed,
        nodes=max(args.nodes, 3),
        bugs=[args.bug] if args.bug else None,
        out=Path("runs"),
    )
    if args.json:
        print(json.dumps({"runs": result.runs, "failing": bool(result.failing),
                          "violated": list(result.violated or []),
                          "scenario": result.scenario_yaml()}))  # fmt: skip
    elif result.failing:
        print(result.scenario_yaml())
    print(f"explore --backend {args.backend}: {result.runs} runs, "
          f"{'violation of ' + ', '.join(result.violated or []) if result.failing else 'no violation'}",
          file=sys.stderr)  # fmt: skip
    return 1 if result.failing else 0


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="swarmshake explore", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sim", choices=("sim", "local", "docker"))
    parser.add_argument("--budget", type=int, default=200, help="schedules to try (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bug", choices=sorted(BUGS), help="switch on a known bug")
    parser.add_argument("--nodes", type=int, default=3, help="cluster size (default 3)")
    parser.add_argument(
        "--duration", type=parse_duration_s, default=40.0, help="virtual time per run"
    )
    parser.add_argument(
        "--property", action="append", choices=PROPERTIES, help="what counts as a violation"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = parser.parse_args(argv)
    if not 1 <= args.budget <= MAX_BUDGET:
        raise UsageError(f"--budget {args.budget} must lie in [1, {MAX_BUDGET}]")
    if args.backend != "sim":
        return explore_real_cluster(args)
    if args.duration < 25.0:
        raise UsageError("--duration must be at least 25s: faults fall in the first 20s")
    properties = tuple(args.property) if args.property else None
    if properties is None and args.bug:
        properties = (BUGS[args.bug].breaks,)
    try:
        config = SimConfig(
            nodes=args.nodes,
            duration_s=args.duration,
            seed=args.seed,
            bugs=(args.bug,) if args.bug else (),
        )
    except (ValueError, msgspec.ValidationError) as error:
        raise UsageError(f"bad simulation settings: {error}") from None

    def progress(count: int, schedule: faults.FaultSchedule, bad: list[str]) -> None:
        if count % 50 == 0 or bad:
            mark = f" violates {','.join(bad)}" if bad else ""
            print(f"explore: run {count}, schedule of {schedule.size()}{mark}", file=sys.stderr)

    found = explore(config, args.budget, args.seed, properties, progress=progress)
    if found is None:
        if args.json:
            print(
                msgspec.json.encode(
                    {"status": "valid", "budget": args.budget, "seed": args.seed}
                ).decode()
            )
        else:
            print(
                f"explore: no violation in {args.budget} schedules (seed {args.seed})",
                file=sys.stderr,
            )
        return EXIT_VALID
    schedule, run = found
    scenario = faults.schedule_to_yaml(schedule)
    header = (
        f"# swarmshake explore --backend sim --seed {args.seed} --nodes {args.nodes}"
        f"{' --bug ' + args.bug if args.bug else ''}: violates {', '.join(run.verdict.violated())}\n"
        f"# replay: swarmshake sim --nodes {args.nodes} --duration {args.duration:g}s --seed {args.seed}"
        f"{' --bug ' + args.bug if args.bug else ''} --faults THIS_FILE\n"
    )
    if args.json:
        document = {
            "status": "invalid",
            "violated": run.verdict.violated(),
            "schedule_size": schedule.size(),
            "scenario_yaml": scenario,
            "result": msgspec.to_builtins(run.result),
        }
        print(msgspec.json.encode(document).decode())
    else:
        sys.stdout.write(header + scenario)
        for violation in run.result.violations:
            print(f"explore: {violation.property}: {violation.message}", file=sys.stderr)
    return EXIT_INVALID
