"""``swarmshake sim``: run the deterministic simulator once and check its history.

    swarmshake sim [--nodes N] [--duration 600s] [--seed S] [--faults SPEC]
                   [--bug NAME] [--out DIR] [--no-training] [--json]

``--json`` prints ``{nodes, sim_seconds, wall_seconds, events, commits, violations,
detection_ms: {p50, p99, max}, false_positives, digest, ...}``; the same seed and
schedule give the same ``digest`` in any process.  ``--out DIR`` writes the run
directory (``events/<node>.jsonl``, ``events/harness.jsonl``, ``scenario.yaml``,
``verdict.json``) that ``swarmshake verify DIR`` re-checks.  Exit 0 valid, 1 a
property violated, 2 unknown, 64 bad usage (an unknown bug, a bad fault file, an op
the simulator cannot inject).
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from swarmshake.chaos import faults
from swarmshake.chaos.commands._args import (
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
    parse_duration_s,
)
from swarmshake.chaos.sim.run import SimConfig, run_simulation
from swarmshake.reference_node.protocol.bugs import BUGS

EXIT_BY_STATUS = {"valid": EXIT_VALID, "invalid": EXIT_INVALID, "unknown": EXIT_UNKNOWN}


def build_parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8, help="cluster size (default 8)")
    parser.add_argument(
        "--duration", type=parse_duration_s, default=60.0, help="virtual time, e.g. 600s"
    )
    parser.add_argument("--seed", type=int, default=0, help="the one seed of the run")
    parser.add_argument(
        "--faults", type=Path, help="fault schedule (YAML/JSON; a scenario's faults:)"
    )
    parser.add_argument(
        "--bug", action="append", choices=sorted(BUGS), help="switch on a known bug"
    )
    parser.add_argument("--out", type=Path, help="write the run directory here")
    parser.add_argument("--no-training", action="store_true", help="detector and membership only")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return parser


def config_from(args) -> SimConfig:  # noqa: ANN001 - argparse namespace
    try:
        return SimConfig(
            nodes=args.nodes,
            duration_s=args.duration,
            seed=args.seed,
            bugs=tuple(args.bug or ()),
            training=not args.no_training,
        )
    except (ValueError, msgspec.ValidationError) as error:
        raise UsageError(f"bad simulation settings: {error}") from None


def load_faults(path: Path | None) -> faults.FaultSchedule | None:
    if path is None:
        return None
    try:
        schedule = faults.load_schedule(path)
        faults.check_supported(schedule, faults.SIM_SUPPORTED, "simulator")
    except faults.FaultSpecError as error:
        raise UsageError(str(error)) from None
    return schedule


def main(argv: list[str]) -> int:
    args = build_parser("swarmshake sim").parse_args(argv)
    config = config_from(args)
    schedule = load_faults(args.faults)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    try:
        run = run_simulation(config, schedule, args.out)
    except faults.FaultSpecError as error:
        raise UsageError(str(error)) from None
    result = run.result
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    else:
        print(
            f"sim: {result.nodes} nodes, {result.sim_seconds:.0f}s virtual in "
            f"{result.wall_seconds:.2f}s wall, {result.events} events, {result.commits} commits, "
            f"detection p50/p99/max {result.detection_ms.p50}/{result.detection_ms.p99}/"
            f"{result.detection_ms.max} ms, {result.false_positives} false positives, "
            f"verdict {result.status}, digest {result.digest}",
            file=sys.stderr,
        )
        for violation in result.violations:
            print(f"  {violation.property}: {violation.message}", file=sys.stderr)
    return EXIT_BY_STATUS[result.status]
