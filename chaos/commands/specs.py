"""``swarmshake specs check``: the TLA+ specs, their mutants, or a run's trace, with TLC.

    swarmshake specs check [--spec NAME] [--profile default|deep] [--mutants]
                           [--trace RUN_DIR] [--timeout SECONDS] [--json]

Without ``--mutants``/``--trace`` it checks the specs (all, or ``--spec``).  With
``--mutants`` it checks that TLC catches every known bug of the registry, and
prints each counterexample as a readable trace.  With ``--trace`` it checks that
the run's history is a behaviour of the spec.  Exit: 0 valid, 1 a property was
violated (or a mutant escaped, or the trace was rejected), 2 unknown, 64 usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from swarmshake.chaos.commands._args import (
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
)
from swarmshake.reference_node.protocol.bugs import BUGS
from swarmshake.verify import tla_catalog, tla_trace
from swarmshake.verify.tla import TlcError, format_counterexample


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="swarmshake specs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="model-check specs, mutants or a run's trace")
    check.add_argument("--spec", choices=sorted(tla_catalog.SPECS), help="one spec only")
    check.add_argument("--profile", choices=tla_catalog.PROFILES, default="default")
    check.add_argument("--mutants", action="store_true", help="TLC must catch every known bug")
    check.add_argument(
        "--trace", metavar="RUN_DIR", help="validate a run's history against the spec"
    )
    check.add_argument("--timeout", type=float, metavar="SECONDS", help="deadline per TLC process")
    check.add_argument(
        "--jobs", type=int, metavar="N", help="TLC processes at once (default: the cores)"
    )
    check.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return parser


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _worst(codes: list[int]) -> int:
    # A violation is the stronger news; unknown only when nothing was violated.
    if EXIT_INVALID in codes:
        return EXIT_INVALID
    return EXIT_UNKNOWN if EXIT_UNKNOWN in codes else EXIT_VALID


def _check_specs(args: argparse.Namespace, report: dict) -> list[int]:
    names = [args.spec] if args.spec else list(tla_catalog.SPECS)
    codes = []
    report["specs"] = []
    checks = tla_catalog.check_specs(names, args.profile, timeout_s=args.timeout, jobs=args.jobs)
    for check in checks:
        result = check.result
        codes.append(result.exit_code)
        report["specs"].append(msgspec.to_builtins(check))
        _say(
            f"{result.status.upper():8} {check.spec} [{check.config}] "
            f"{result.distinct_states} distinct states, depth {result.depth}, "
            f"{result.duration_s:.1f} s"
        )
        if result.status == "violated":
            _say(f"  violated: {result.violated_property or result.violation_kind}")
            _say(format_counterexample(result))
        elif result.status == "unknown":
            _say(f"  {result.message}")
    return codes


def _check_mutants(args: argparse.Namespace, report: dict) -> list[int]:
    codes = []
    report["mutants"] = []
    module = tla_catalog.SPECS[args.spec].module if args.spec else None
    # --spec: only the mutants of that spec
    bugs = [
        bug
        for bug, known in {**BUGS, **tla_catalog.SPEC_MUTANTS}.items()
        if module is None or tla_catalog.MODULE_OF_CORE.get(known.core) == module
    ]
    for check in tla_catalog.check_mutants(bugs, timeout_s=args.timeout, jobs=args.jobs):
        bug = check.bug
        report["mutants"].append(msgspec.to_builtins(check))
        if check.caught:
            codes.append(EXIT_VALID)
            _say(
                f"CAUGHT   {bug} [{check.config}]: {check.breaks} violated after "
                f"{len(check.result.counterexample)} states ({check.result.duration_s:.1f} s)"
            )
            _say(format_counterexample(check.result))
        else:
            # TLC without a verdict (deadline, crash) is "unknown"; a mutant it explored
            # without catching it, or one with no mutant cfg, fails the check.
            no_verdict = check.result.status == "unknown" and bool(check.result.message)
            codes.append(EXIT_UNKNOWN if no_verdict else EXIT_INVALID)
            _say(f"ESCAPED  {bug} [{check.config}]: {check.problem}")
    return codes


def _check_trace(args: argparse.Namespace, report: dict) -> list[int]:
    run_dir = Path(args.trace)
    if not (run_dir / "events").is_dir():
        raise UsageError(f"{run_dir}: no events/ folder; pass a run directory (runs/<run-id>)")
    try:
        result = tla_trace.validate_run(run_dir, timeout_s=args.timeout)
    except ValueError as error:  # HistoryError: a malformed line, named by file and line
        raise UsageError(str(error)) from None
    report["trace"] = msgspec.to_builtins(result)
    verdict = {"valid": "ACCEPTED", "violated": "REJECTED", "unknown": "UNKNOWN"}[result.status]
    _say(
        f"{verdict:8} trace of {run_dir}: {result.explained}/{result.events} events explained "
        f"({result.duration_s:.1f} s)"
    )
    if result.message:
        _say(f"  {result.message}")
    if result.first_unexplained is not None:
        _say(f"  first event the spec cannot explain: {result.first_unexplained.event}")
    return [result.exit_code]


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout}: give a positive number of seconds")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give at least 1 TLC process")
    if args.trace and (args.mutants or args.spec):
        raise UsageError("--trace checks a run's history; use it without --spec/--mutants")
    report: dict = {"command": "specs check", "profile": args.profile}
    try:
        if args.trace:
            codes = _check_trace(args, report)
        elif args.mutants:
            codes = _check_mutants(args, report)
        else:
            codes = _check_specs(args, report)
    except TlcError as error:
        _say(f"swarmshake specs: {error}")
        report["error"] = str(error)
        codes = [EXIT_UNKNOWN]
    exit_code = _worst(codes)
    report["status"] = {EXIT_VALID: "valid", EXIT_INVALID: "violated", EXIT_UNKNOWN: "unknown"}[
        exit_code
    ]
    report["exit_code"] = exit_code
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    return exit_code
