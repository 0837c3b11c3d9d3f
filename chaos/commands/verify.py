"""``swarmshake verify RUN_DIR [--json]``: check a run's history against S1–S4, L1–L3.

Reads ``RUN_DIR/events/*.jsonl``, writes ``RUN_DIR/verdict.json`` and exits 0 (valid),
1 (a property violated), 2 (unknown) or 64 (no such run directory, malformed
history, bad bounds).  Bounds default to the reference profile; ``--bounds FILE``
(JSON/YAML with the fields of ``Bounds``) or ``RUN_DIR/bounds.json`` override them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from swarmshake.chaos import yaml_input
from swarmshake.chaos.commands._args import (
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
)
from swarmshake.reference_node.protocol.history import History, HistoryError
from swarmshake.verify.checkers import Bounds, Verdict, check_history
from swarmshake.verify.history import RunSystem

MAX_BOUNDS_BYTES = 64 * 1024  # a dozen numbers; anything larger is not a bounds file
EXIT_BY_STATUS = {"valid": EXIT_VALID, "invalid": EXIT_INVALID, "unknown": EXIT_UNKNOWN}


def load_bounds(path: Path) -> Bounds:
    try:  # the scenario reader: YAML 1.2 numbers, bounded, no duplicate keys
        return msgspec.convert(
            yaml_input.load(path.read_bytes(), str(path), MAX_BOUNDS_BYTES), type=Bounds
        )
    except OSError as error:
        raise UsageError(f"{path}: cannot read bounds: {error.strerror}") from None
    except yaml_input.YamlInputError as error:
        raise UsageError(str(error)) from None
    except msgspec.ValidationError as error:
        raise UsageError(
            f"{path}: bad bounds: {error}; fields: {', '.join(Bounds.__struct_fields__)}"
        ) from None


def verify_run_dir(
    run_dir: Path,
    bounds: Bounds | None = None,
    *,
    history: History | None = None,
    write: bool = True,
) -> Verdict:
    """Check ``run_dir`` (``history``: its history, when the caller has read it) and
    (``write``) write its ``verdict.json``; ``UsageError`` on bad input."""
    if bounds is None:
        bounds_file = run_dir / "bounds.json"
        bounds = load_bounds(bounds_file) if bounds_file.is_file() else Bounds()
    try:
        history = History.load(run_dir) if history is None else history
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
    except HistoryError as error:
        raise UsageError(
            f"{error} (fix or remove the line; only a torn last line is skipped)"
        ) from None
    verdict = check_history(history, bounds, RunSystem.of(run_dir))
    if write:
        (run_dir / "verdict.json").write_bytes(verdict.to_json())
    return verdict


def render(verdict: Verdict) -> str:
    lines = [f"verdict: {verdict.status} ({verdict.events} events)"]
    for name, result in verdict.results.items():
        lines.append(f"  {name:3s} {result.status:8s} {result.message}")
        for ref in result.evidence[:3]:
            lines.append(
                f"        {ref.node} #{ref.index} t={ref.t_mono:.3f} {ref.kind} {ref.note}"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="swarmshake verify", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run directory with events/*.jsonl")
    parser.add_argument("--bounds", type=Path, help="JSON/YAML file with D, R, J … (Bounds fields)")
    parser.add_argument("--json", action="store_true", help="print verdict.json on stdout")
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        raise UsageError(f"{args.run_dir}: not a directory (give a run directory, e.g. runs/<id>)")
    bounds = load_bounds(args.bounds) if args.bounds else None
    verdict = verify_run_dir(args.run_dir, bounds)
    if args.json:
        sys.stdout.write(verdict.to_json().decode() + "\n")
    else:
        print(render(verdict), file=sys.stderr)
    return EXIT_BY_STATUS[verdict.status]
