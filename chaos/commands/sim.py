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

import hashlib
import shlex
import subprocess
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
        faults.check_simulable(schedule)
    except faults.FaultSpecError as error:
        raise UsageError(str(error)) from None
    return schedule


def git_commit() -> str:
    """The checkout's commit (``-dirty`` with local edits), or ``unknown``: a seed
    replays bit for bit on its commit."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True, text=True,
            timeout=5, cwd=Path(__file__).resolve().parent, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):  # no git, or a hung one: the run goes on
        return "unknown"
    return done.stdout.strip() or "unknown"


def _non_default(value: msgspec.Struct, prefix: str) -> list[str]:
    default = type(value)()
    return [
        f"{prefix}.{name}={getattr(value, name)}"
        for name in value.__struct_fields__
        if getattr(value, name) != getattr(default, name)
    ] or [f"{prefix}=defaults"]


def knobs(config: SimConfig, faults_path: Path | None) -> str:
    """Every setting the run depends on, beside its seed (TigerBeetle's habit): with the
    commit, this line is enough to repeat the run bit for bit."""
    faults_text = "none"
    if faults_path is not None:
        digest = hashlib.sha256(faults_path.read_bytes()).hexdigest()[:12]
        faults_text = f"{faults_path}@sha256:{digest}"
    parts = [
        f"seed={config.seed}",
        f"nodes={config.nodes}",
        f"duration_s={config.duration_s:g}",
        f"training={'on' if config.training else 'off'}",
        f"bugs={','.join(config.bugs) or 'none'}",
        f"faults={faults_text}",
        f"delay_ms={config.delay_ms:g}",
        f"jitter_ms={config.jitter_ms:g}",
        f"lazy={'on' if config.lazy else 'off'}",
        *_non_default(config.app, "app"),
        *_non_default(config.detector, "detector"),
        *_non_default(config.bounds, "bounds"),
        f"names={','.join(config.names) or 'default'}",
        f"commit={git_commit()}",
    ]
    return " ".join(parts)


def reproduce(config: SimConfig, faults_path: Path | None) -> str:
    """The command line that repeats this run."""
    words = ["swarmshake", "sim", "--seed", str(config.seed), "--nodes", str(config.nodes)]
    words += ["--duration", f"{config.duration_s:g}s"]
    if faults_path is not None:
        words += ["--faults", str(faults_path)]
    for bug in config.bugs:
        words += ["--bug", bug]
    if not config.training:
        words.append("--no-training")
    return shlex.join(words)


def main(argv: list[str]) -> int:
    args = build_parser("swarmshake sim").parse_args(argv)
    config = config_from(args)
    schedule = load_faults(args.faults)
    if not args.json:  # before the run: a hung or crashed run still shows how to repeat it
        print(f"sim: {knobs(config, args.faults)}", file=sys.stderr)
        print(f"reproduce: {reproduce(config, args.faults)}", file=sys.stderr)
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
            f"sim: seed={config.seed} {result.nodes} nodes, {result.sim_seconds:.0f}s virtual in "
            f"{result.wall_seconds:.2f}s wall, {result.events} events, {result.commits} commits, "
            f"detection p50/p99/max {result.detection_ms.p50}/{result.detection_ms.p99}/"
            f"{result.detection_ms.max} ms, {result.false_positives} false positives, "
            f"verdict {result.status}, digest {result.digest}",
            file=sys.stderr,
        )
        for violation in result.violations:
            print(f"  {violation.property}: {violation.message}", file=sys.stderr)
    return EXIT_BY_STATUS[result.status]
