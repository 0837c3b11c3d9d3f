"""``swarmshake run SUITE.yaml [--backend local|docker|sim] [--nodes N] [--seed S] [--out runs/]``.

Runs one chaos scenario on a real cluster, or on the simulator's shell of the node
core (``--backend sim``, chaos/sim/suite.py), and checks its history.  Exit codes: 0
every property held, 1 a property was violated, 2 unknown (the run could not
decide), 64 bad usage or a bad scenario (the message names the file, line, field
and fix).  ``--json`` prints one JSON document (run directory, status, verdict) on
stdout; human progress goes to stderr.  A run directory's ``scenario.yaml`` is a
valid SUITE: it repeats that run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from swarmshake.chaos import faults as F
from swarmshake.chaos.backends import BACKEND_NAMES, supported_ops
from swarmshake.chaos.commands._args import ArgumentParser, UsageError
from swarmshake.chaos.runner import RunOptions, RunResult, run_blocking
from swarmshake.chaos.scenario import Scenario, ScenarioError, load, resolve
from swarmshake.reference_node.protocol.bugs import BUGS


def check_ops(scenario: Scenario, source: str) -> None:
    # What the system can take is checked when the scenario loads (Scenario._check_system);
    # here: what the backend can inject.
    ops = supported_ops(scenario.cluster.backend)
    for index, entry in enumerate(scenario.faults):
        names = {entry.op.name}
        heal = entry.op.heal()
        if isinstance(heal, F.Heal) and heal.scope not in ("all", "partition", "churn"):
            names.add(heal.scope)
        missing = sorted(names - ops)
        if missing:
            raise UsageError(
                f"{source}: faults[{index}]: op {missing[0]!r} is unsupported on the "
                f"{scenario.cluster.backend} backend; fix: use --backend "
                f"{'local or docker' if scenario.cluster.backend == 'sim' else 'docker'} or drop the entry "
                f"(supported here: {', '.join(sorted(ops))})"
            )


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="swarmshake run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "suite", type=Path, help="a scenario YAML file (suites/*.yaml or a run's scenario.yaml)"
    )
    parser.add_argument(
        "--backend",
        choices=(*BACKEND_NAMES, "sim"),
        help="override the scenario's backend (sim: the simulator, virtual time)",
    )
    parser.add_argument("--nodes", type=int, help="override the number of nodes")
    parser.add_argument(
        "--system",
        help="override the system under test: reference, torchelastic, torchft or pkg.module:Class",
    )
    parser.add_argument("--seed", type=int, help="override the seed")
    parser.add_argument(
        "--out", type=Path, default=Path("runs"), help="where run directories go (default runs/)"
    )
    parser.add_argument("--bug", action="append", default=[], choices=sorted(BUGS), metavar="NAME",
                        help=f"switch on a known protocol bug: {', '.join(sorted(BUGS))}")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--node-program", default=None, help=argparse_hidden())
    args = parser.parse_args(argv)
    try:
        scenario = resolve(
            load(args.suite),
            seed=args.seed,
            nodes=args.nodes,
            backend=args.backend,
            bugs=args.bug,
            system=args.system,
        )
    except ScenarioError as error:
        raise UsageError(str(error)) from None
    check_ops(scenario, str(args.suite))
    if scenario.cluster.backend == "sim":
        result = run_on_simulator(scenario, args)
    else:
        options = RunOptions(out=args.out, json_mode=args.json, quiet=args.quiet)
        if args.node_program:
            options.node_program = args.node_program
        result = run_blocking(scenario, options)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    else:
        print(
            f"{result.status}: {result.message}\nrun directory: {result.run_dir}", file=sys.stderr
        )
    return result.exit_code


def run_on_simulator(scenario: Scenario, args) -> RunResult:  # noqa: ANN001 - argparse namespace
    from swarmshake.chaos.sim.suite import SuiteError, plan, run_suite

    if args.node_program:
        raise UsageError("--node-program runs real nodes; the simulator runs the node core")
    try:
        suite = plan(scenario)
    except SuiteError as error:
        raise UsageError(f"{args.suite}: {error}") from None
    return run_suite(suite, args.out, quiet=args.quiet or args.json)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS
