"""The ``swarmshake`` command line: the composition root (DESIGN.md).

Routes ``swarmshake COMMAND ...`` to ``swarmshake.chaos.commands.<module>.main``.
Exit codes, for CI: 0 valid, 1 a property was violated, 2 unknown, 64 bad usage.
``--json`` prints one JSON document on stdout; human progress goes to stderr.

Only a command's own verdict may exit 1.  Bad input that a command lets escape
(a scenario or fault-schedule error) still exits 64 with its message, and any other
exception is a crash of the harness: exit 2 (unknown: nothing was decided) with the
traceback, never Python's default 1, which CI would read as "a property was violated".
"""

from __future__ import annotations

import importlib
import sys
import traceback

from swarmshake.chaos.commands._args import EXIT_UNKNOWN, EXIT_USAGE, UsageError

# command -> (module under swarmshake.chaos.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run a chaos suite: swarmshake run SUITE.yaml [--backend local|docker]"),
    "explore": ("explore", "draw fault schedules, shrink a failing one to a scenario"),
    "sim": ("sim", "run the deterministic simulator"),
    "verify": ("verify", "check a run directory's history against the properties"),
    "report": ("report", "regenerate or compare reports of a run directory"),
    "faults": ("faults", "the fault catalog: every op, its fields, its heal, where it runs"),
    "specs": ("specs", "check the TLA+ specs, their mutants, or a run's trace with TLC"),
    "bench": ("bench", "benchmarks: recovery, overhead, load, rejoin, harness, bugs, kernels, sim"),
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
    try:
        module = importlib.import_module(f"swarmshake.chaos.commands.{COMMANDS[command][0]}")
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
    except Exception as error:  # the last line of defence: exit 64 or 2, never 1
        if _is_input_error(error):
            print(f"swarmshake {command}: {error}", file=sys.stderr)
            return EXIT_USAGE
        traceback.print_exc()
        print(
            f"swarmshake {command}: internal error ({type(error).__name__}: {error}); this is a "
            "bug in swarmshake, not a verdict on the system under test: exit 2 (unknown). "
            "Please report it with the traceback above.",
            file=sys.stderr,
        )
        return EXIT_UNKNOWN


def _is_input_error(error: Exception) -> bool:
    """A scenario or schedule error escaped a command: still bad input (64)."""
    from swarmshake.chaos.faults import FaultSpecError
    from swarmshake.chaos.scenario import ScenarioError
    from swarmshake.chaos.yaml_input import YamlInputError

    return isinstance(error, ScenarioError | FaultSpecError | YamlInputError)


if __name__ == "__main__":
    raise SystemExit(main())
