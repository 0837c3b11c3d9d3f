"""Argument parsing shared by the subcommands: usage errors exit 64, as DESIGN says."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 2
EXIT_USAGE = 64


class UsageError(Exception):
    """Bad usage or bad input; the message names the file, the line and the fix."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which CI would read as "unknown"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def parse_duration_s(text: str) -> float:
    """``600s``, ``10m``, ``250ms``, ``1h`` or a plain number of seconds."""
    stripped = text.strip()
    number, scale = stripped, 1.0
    # "ms" before "s": the longest unit that matches wins.
    for suffix, unit_s in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if stripped.endswith(suffix):
            number, scale = stripped[: -len(suffix)], unit_s
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; write e.g. 600s, 10m or 250ms"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration cannot be negative")
    return value


QUICK_HELP = (
    "the CI size: fewer trials, smaller models, shorter runs (the benchmark's help says which)"
)
JSON_HELP = "print one JSON document on stdout (human progress goes to stderr)"


def bench_flags() -> argparse.ArgumentParser:
    """``--quick`` and ``--json``, the same on every benchmark: a parent parser
    (``ArgumentParser(parents=[bench_flags()])``).  ``kernels/bench.py`` may not import
    the harness (DESIGN's import table) and declares the same two flags itself; a test
    holds every benchmark's parser to these."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--quick", action="store_true", help=QUICK_HELP)
    parent.add_argument("--json", action="store_true", help=JSON_HELP)
    return parent
