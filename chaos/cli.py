"""The ``swarmshake`` command line: the composition root (DESIGN.md).

Routes ``swarmshake COMMAND ...`` to ``swarmshake.chaos.commands.<module>.main``.
Exit codes, for CI: 0 valid, 1 a property was violated, 2 unknown, 64 bad usage.
``--json`` prints one JSON document on stdout; human progress goes to stderr.
"""

from __future__ import annotations

import importlib
import sys

from swarmshake.chaos.commands._args import EXIT_USAGE, UsageError

# command -> (module under swarmshake.chaos.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run a chaos suite: swarmshake run SUITE.yaml [--backend local|docker]"),
    "explore": ("explore", "draw fault schedules, shrink a failing one to a scenario"),
    "sim": ("sim", "run the deterministic simulator"),
    "verify": ("verify", "check a run directory's history against the properties"),
    "report": ("report", "regenerate or compare reports of a run directory"),
    "specs": ("specs", "check the TLA+ specs, their mutants, or a run's trace with TLC"),
    "bench": ("bench", "benchmarks: recovery, rejoin, kernels, overhead"),
    "up": ("cluster", "start a long-lived cluster for exploring by hand"),
    "down": ("cluster", "stop a cluster (--all: everything swarmshake ever started)"),
    "status": ("cluster", "show the long-lived cluster"),
    "doctor": ("doctor", "every component's status, and the fix when one is missing"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: swarmshake COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += ["", "exit codes: 0 valid, 1 violated, 2 unknown, 64 bad usage"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage(), file=sys.stderr if not args else sys.stdout)
        return 0 if args else EXIT_USAGE
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"swarmshake: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(f"swarmshake.chaos.commands.{COMMANDS[command][0]}")
    try:
        return int(
            module.main([command, *rest])
            if module.__name__.endswith("cluster")
            else module.main(rest)
        )
    except UsageError as error:
        print(f"swarmshake {command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"swarmshake {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
