"""``swarmshake explore``: draw fault schedules, run each, shrink a failing one.

    swarmshake explore [--backend sim] [--budget N] [--seed S] [--bug NAME]
                       [--nodes N] [--duration 40s] [--property P ...] [--out runs/] [--json]

With ``--backend sim`` Hypothesis draws schedules (crashes, event-triggered crashes,
pauses, partitions, black holes, jitter, clock skew), the simulator runs each and the
checkers judge it.  On a violation the schedule is shrunk to the smallest one that
still violates, printed as a scenario's ``faults:`` YAML on stdout, and the exit code
is 1; with no violation in ``--budget`` runs the exit code is 0.  ``--property``
limits what counts (default: any invalid property; ``--bug NAME`` defaults it to the
property that bug must break).  ``unknown`` verdicts never count as violations.

A violation also leaves a run directory under ``--out`` (default ``runs/``, and
``runs/latest`` points at it): the shrunk schedule's run (events, verdict, reports)
and ``shrunk.yaml``, the scenario file that replays it, which ``report.html`` shows.
With ``--backend sim`` it also holds ``replay.yaml`` (and ``--write-scenario PATH``
writes it there too): the same schedule as a whole scenario, bug switch included,
for ``swarmshake run`` on real nodes.

With ``--backend local|docker`` the harness draws schedules from its fault
generator, runs each on a real cluster, re-runs a failing one to confirm it despite
real-world nondeterminism, shrinks it greedily and prints the scenario
(``swarmshake.chaos.explore_real``); ``swarmshake run`` replays it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from swarmshake.chaos import faults
from swarmshake.chaos.commands._args import (
    EXIT_INVALID,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
    parse_duration_s,
)
from swarmshake.chaos.scenario import ScenarioError
from swarmshake.chaos.shrunk import (
    new_sim_run_dir,
    point_latest,
    replay_scenario,
    write_replay,
    write_shrunk,
)
from swarmshake.chaos.sim.explore import explore
from swarmshake.chaos.sim.run import SimConfig, run_simulation
from swarmshake.reference_node.protocol.bugs import BUGS
from swarmshake.verify.checkers import PROPERTIES

MAX_BUDGET = 100_000  # runs; a larger search belongs in a nightly job with its own seed
# The CI budget: every known bug is found with it (tests/chaos/sim/test_explore.py) and
# a healthy protocol comes out clean; about 10-25 s on one core.
DEFAULT_BUDGET = 200


MAX_REAL_BUDGET = 200  # each real run takes tens of seconds; more is a nightly job


def explore_real_cluster(args) -> int:  # noqa: ANN001 - the parsed arguments of main()
    """Explore on real nodes; exit 1 with the shrunk scenario on a confirmed violation."""
    import json

    from swarmshake.chaos.explore_real import explore_blocking

    if args.budget > MAX_REAL_BUDGET:
        raise UsageError(f"--budget {args.budget}: at most {MAX_REAL_BUDGET} real runs")
    from swarmshake.chaos import scenario as scenario_file
    from swarmshake.chaos.scenario import Scenario, SteadyState
    from swarmshake.chaos.systems import DEFAULT_SYSTEM, SystemConfigError, load_system

    around: Scenario | None = None
    if args.scenario is not None:
        try:
            around = scenario_file.load(args.scenario)
        except scenario_file.ScenarioError as error:
            raise UsageError(str(error)) from None
        if args.system not in (None, around.system):
            raise UsageError(
                f"--system {args.system}: {args.scenario} runs system {around.system}; "
                "drop --system or name the same one"
            )
        args.system = around.system
    args.system = args.system or DEFAULT_SYSTEM
    try:
        system = load_system(args.system, around.system_options if around else None)
    except SystemConfigError as error:
        raise UsageError(str(error)) from None
    # The generator draws only what the system can take (a kernel without sch_netem
    # cannot delay a namespace's links: latency is left out, not skipped at run time).
    ops = [op for op in ("crash", "pause", "partition", "latency") if op in system.supported_ops()]
    from swarmshake.verify.checkers import Bounds

    try:
        bounds = Bounds(**system.bounds)
    except (TypeError, ValueError) as error:
        raise UsageError(
            f"system {args.system}: bad bounds {dict(system.bounds)}: {error}"
        ) from None
    # The run lasts --duration (a stall of a 60 s timeout needs room to show), then
    # quiesces half as long; the system's bounds fit its own timeouts, and its steady
    # timeout its start-up (workers that import torch take longer).
    base = Scenario(
        name="explore", duration_s=args.duration, quiesce_s=max(15.0, args.duration / 2),
        system=args.system, bounds=bounds,
        steady_state=SteadyState(min_commit_step=2, timeout_s=system.steady_timeout_s),
    )  # fmt: skip
    if around is not None:
        # Everything but the faults comes from the file (cluster, system and its
        # options, steady state, durations, bounds); explore draws the faults, with
        # the file's generator (ops, rate, how long a fault lasts) when it has one.
        base = msgspec.structs.replace(around, faults=[], generator=None)
        if around.generator is not None:
            unsupported = sorted(set(around.generator.ops) - system.supported_ops())
            if unsupported:
                raise UsageError(
                    f"{args.scenario}: generator.ops {unsupported}: system {args.system} "
                    f"cannot take them here ({system.unsupported_reason(unsupported[0])})"
                )
    # Drawn crashes and pauses may fire on the system's own kinds (torchft's
    # ``collective``: a kill at the all-reduce start), when it declares any.
    trigger_kinds = system.trigger_kinds() or None
    result = explore_blocking(
        backend=args.backend,
        budget=args.budget,
        seed=args.seed,
        nodes=max(args.nodes or (around.cluster.nodes if around else 3), 3),
        bugs=[args.bug] if args.bug else None,
        out=args.out,
        base=base,
        ops=ops,
        trigger_kinds=trigger_kinds,
        confirm_attempts=args.confirm,
        generator=around.generator if around is not None else None,
    )
    run_dir = str(result.run_dir) if result.run_dir else None
    if args.json:
        print(json.dumps({"runs": result.runs, "failing": bool(result.failing),
                          "violated": list(result.violated or []),
                          "scenario": result.scenario_yaml(), "run_dir": run_dir}))  # fmt: skip
    elif result.failing:
        print(result.scenario_yaml())
    if run_dir:
        print(f"explore: shrunk schedule and its run in {run_dir}", file=sys.stderr)
    print(f"explore --backend {args.backend}: {result.runs} runs, "
          f"{'violation of ' + ', '.join(result.violated or []) if result.failing else 'no violation'}",
          file=sys.stderr)  # fmt: skip
    return 1 if result.failing else 0


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="swarmshake explore", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sim", choices=("sim", "local", "docker"))
    parser.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_BUDGET,
        help=f"schedules to try (default {DEFAULT_BUDGET})",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bug", choices=sorted(BUGS), help="switch on a known bug")
    parser.add_argument(
        "--nodes", type=int, default=None, help="cluster size (default 3, or --scenario's)"
    )
    parser.add_argument(
        "--duration",
        type=parse_duration_s,
        default=40.0,
        help="time per run (sim: virtual; a real backend: the fault phase, then a quiesce "
        "of half as long, at least 15 s)",
    )
    parser.add_argument(
        "--property", action="append", choices=PROPERTIES, help="what counts as a violation"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        help="where the failing run's directory goes (default runs/)",
    )
    parser.add_argument(
        "--system",
        default=None,
        help="system under test on a real backend: reference (default), torchft, "
        "torchelastic or pkg.module:Class",
    )
    parser.add_argument(
        "--scenario",
        type=Path,
        metavar="SUITE",
        help="(local, docker) explore around this scenario file: its cluster, system and "
        "options, steady state, durations and bounds; its faults are replaced by drawn ones "
        "(drawn by its generator: section when it has one)",
    )
    parser.add_argument(
        "--write-scenario",
        type=Path,
        metavar="PATH",
        help="(sim) also write the shrunk schedule as a scenario `swarmshake run` replays "
        "on real nodes (always written as replay.yaml in the run directory)",
    )
    parser.add_argument(
        "--confirm",
        type=int,
        default=3,
        metavar="N",
        help="(local, docker) runs of a shrink candidate before it counts as not violating "
        "(default 3; 1 shrinks faster and may keep an entry it could drop)",
    )
    parser.add_argument(
        "--leaves",
        action="store_true",
        help="(sim) also draw churn of clean leaves: removals through committed steps and "
        "rejoins as joiners (configuration changes)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = parser.parse_args(argv)
    if args.leaves and args.backend != "sim":
        raise UsageError("--leaves: the simulator's draws only (real backends explore a scenario)")
    if args.write_scenario is not None and args.backend != "sim":
        raise UsageError("--write-scenario: the real backends print their scenario already")
    if args.backend == "sim" and args.scenario is not None:
        raise UsageError("--scenario: the simulator draws its own clusters; use --backend local")
    if not 1 <= args.confirm <= 10:
        raise UsageError(f"--confirm {args.confirm} must lie in [1, 10]")
    if args.nodes is not None and not 1 <= args.nodes <= 64:
        raise UsageError(f"--nodes {args.nodes} must lie in [1, 64]")
    if args.backend == "sim" and args.system is not None:
        from swarmshake.chaos.systems import SystemConfigError, load_system

        try:
            simulated = load_system(args.system).simulated
        except SystemConfigError as error:
            raise UsageError(str(error)) from None
        if not simulated:
            raise UsageError(
                f"--system {args.system}: the simulator runs the node core's systems only "
                "(this one is not built on it); use --backend local"
            )
    if not 1 <= args.budget <= MAX_BUDGET:
        raise UsageError(f"--budget {args.budget} must lie in [1, {MAX_BUDGET}]")
    if args.backend != "sim":
        return explore_real_cluster(args)
    args.nodes = args.nodes or 3
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

    found = explore(
        config, args.budget, args.seed, properties, progress=progress, leaves=args.leaves
    )
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
    schedule, _ = found
    scenario = faults.schedule_to_yaml(schedule)
    run_dir = new_sim_run_dir(args.out, args.seed)
    # The shrunk schedule's run again, recorded this time: same inputs, same history.
    run = run_simulation(config, schedule, run_dir)
    header = (
        f"# swarmshake explore --backend sim --seed {args.seed} --nodes {args.nodes}"
        f"{' --bug ' + args.bug if args.bug else ''}: violates {', '.join(run.verdict.violated())}\n"
        f"# replay: swarmshake sim --nodes {args.nodes} --duration {args.duration:g}s --seed {args.seed}"
        f"{' --bug ' + args.bug if args.bug else ''} --faults THIS_FILE\n"
    )
    write_shrunk(run_dir, header + scenario)
    origin = (
        f"swarmshake explore --backend sim --seed {args.seed} --nodes {args.nodes} "
        f"--budget {args.budget}{' --bug ' + args.bug if args.bug else ''}: violates "
        f"{', '.join(run.verdict.violated())} in the simulator"
    )
    try:
        replay = replay_scenario(
            schedule, nodes=args.nodes, seed=args.seed, bug=args.bug,
            duration_s=args.duration, origin=origin,
        )  # fmt: skip
        replay_path = write_replay(run_dir, replay, args.write_scenario)
    except (ScenarioError, OSError) as error:
        replay_path = None
        print(f"explore: no replay scenario written: {error}", file=sys.stderr)
    point_latest(args.out, run_dir)
    if args.json:
        document = {
            "status": "invalid",
            "violated": run.verdict.violated(),
            "schedule_size": schedule.size(),
            "scenario_yaml": scenario,
            "run_dir": str(run_dir),
            "replay_scenario": str(replay_path) if replay_path else None,
            "result": msgspec.to_builtins(run.result),
        }
        print(msgspec.json.encode(document).decode())
    else:
        sys.stdout.write(header + scenario)
        for violation in run.result.violations:
            print(f"explore: {violation.property}: {violation.message}", file=sys.stderr)
        print(f"explore: shrunk schedule and its run in {run_dir}", file=sys.stderr)
        if replay_path:
            print(f"explore: on real nodes: swarmshake run {replay_path}", file=sys.stderr)
    return EXIT_INVALID
