"""``swarmshake bench recovery|overhead|load|rejoin|kernels ...``: the benchmarks.

- ``recovery [--quick] [--backend sim|local|docker] [--faults A,B] [--sizes 4,8]
  [--trials N] [--seed S] [--out DIR] [--json]``: the recovery matrix; writes
  ``bench.json``, ``bench.html`` and ``bench.md`` into ``--out``; ``--json`` prints the
  results keyed by fault type.
- ``overhead [--world 4] [--steps N] [--json]``: steady-state cost of fault tolerance
  against a plain ``torch.distributed`` gloo all-reduce of the same model.
- ``load --target URL ... [--users N] [--duration 30s] [--out RUN_DIR]``: Locust
  users posting ``/infer``; per-fault-window availability and latency into the run.
- ``rejoin``: the node runtime's state-transfer benchmark, when the runtime has one.
- ``kernels``: the GPU kernel benchmarks (``swarmshake.kernels.bench``).

Exit codes: 0 done, 2 could not measure (a backend missing, every trial failed),
64 bad usage.
"""

from __future__ import annotations

import importlib
import json
import shlex
import sys
from pathlib import Path

from swarmshake.chaos.commands._args import (
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
    parse_duration_s,
)

SUBCOMMANDS = ("recovery", "overhead", "load", "rejoin", "kernels")


def _csv_ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--sizes {text!r}: write cluster sizes like 4,8,16") from None
    if not values or any(v < 1 or v > 64 for v in values):
        raise UsageError(f"--sizes {text!r}: each size must lie in [1, 64]")
    return values


def recovery_main(argv: list[str]) -> int:
    from swarmshake.chaos.bench import matrix, recovery
    from swarmshake.chaos.bench.trials import BACKENDS, BackendUnavailable

    parser = ArgumentParser(prog="swarmshake bench recovery", description="the recovery matrix")
    parser.add_argument(
        "--quick", action="store_true", help="CI size: few sizes, 3 trials, short runs"
    )
    parser.add_argument(
        "--backend", default="sim", help="sim, local or docker; several comma-separated"
    )
    parser.add_argument("--faults", help=f"subset of: {', '.join(matrix.FAULT_TYPES)}")
    parser.add_argument("--sizes", help="cluster sizes, e.g. 4,8 (default: per backend)")
    parser.add_argument("--trials", type=int, help="trials per cell (default 3 quick, 20 full)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-recovery"))
    parser.add_argument("--json", action="store_true", help="print the results keyed by fault type")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        raise UsageError(f"--backend {args.backend!r}: choose from {', '.join(BACKENDS)}")
    faults = (
        [f.strip() for f in args.faults.split(",")] if args.faults else list(matrix.FAULT_TYPES)
    )
    trials = args.trials if args.trials is not None else (3 if args.quick else 20)
    timing = matrix.QUICK_TIMING if args.quick else matrix.FULL_TIMING
    cells: list[matrix.Cell] = []
    try:
        for backend in backends:
            sizes = (
                _csv_ints(args.sizes)
                if args.sizes
                else (matrix.QUICK_SIZES if args.quick else matrix.BACKEND_SIZES)[backend]
            )
            cells += recovery.cells_for(faults, sizes, [backend])
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        results, errors = recovery.run_matrix(
            cells, trials, args.out, timing=timing, seed=args.seed
        )
    except BackendUnavailable as error:
        print(f"swarmshake bench recovery: cannot measure: {error}", file=sys.stderr)
        return EXIT_UNKNOWN
    except ValueError as error:
        raise UsageError(str(error)) from None
    command = shlex.join(["swarmshake", "bench", "recovery", *argv])
    document = recovery.bench_document(
        results, errors, command=command, quick=args.quick, seed=args.seed, timing=timing
    )
    paths = recovery.write_bench_files(document, args.out)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(document["results"], indent=2) + "\n")
    measured = sum(r.trials for r in results)
    return EXIT_VALID if measured else EXIT_UNKNOWN


def overhead_main(argv: list[str]) -> int:
    from swarmshake.chaos.bench import overhead

    return overhead.main(argv)


def load_main(argv: list[str]) -> int:
    from swarmshake.chaos.bench import load

    parser = ArgumentParser(prog="swarmshake bench load", description="Locust users on /infer")
    parser.add_argument(
        "--target", action="append", required=True, help="a node's HTTP base URL (repeat)"
    )
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--duration", type=parse_duration_s, default=30.0)
    parser.add_argument(
        "--out", type=Path, required=True, help="the run directory to add load.json to"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        results = load.run_load(
            args.target, users=args.users, duration_s=args.duration, run_dir=args.out
        )
    except load.LoadConfigError as error:
        raise UsageError(str(error)) from None
    except load.LoadRunError as error:
        print(f"swarmshake bench load: {error}", file=sys.stderr)
        return EXIT_UNKNOWN
    if args.json:
        import msgspec

        sys.stdout.write(msgspec.json.encode(results).decode() + "\n")
    else:
        print(
            f"{results.requests} requests, {results.errors} errors → {args.out / 'load.json'}",
            file=sys.stderr,
        )
    return EXIT_VALID


def rejoin_main(argv: list[str]) -> int:
    for module_name in (
        "swarmshake.reference_node.runtime.rejoin_bench",
        "swarmshake.chaos.bench.rejoin",
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue
        return int(module.main(argv))
    print(
        "swarmshake bench rejoin: no state-transfer benchmark in this checkout "
        "(reference_node/runtime/rejoin_bench.py is the node runtime's)",
        file=sys.stderr,
    )
    return EXIT_UNKNOWN


def kernels_main(argv: list[str]) -> int:
    module = importlib.import_module("swarmshake.kernels.bench")
    return int(module.main(argv))


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stdout if argv else sys.stderr)
        return EXIT_VALID if argv else 64
    command, rest = argv[0], argv[1:]
    handlers = {
        "recovery": recovery_main,
        "overhead": overhead_main,
        "load": load_main,
        "rejoin": rejoin_main,
        "kernels": kernels_main,
    }
    if command not in handlers:
        raise UsageError(f"unknown benchmark {command!r}; choose from {', '.join(SUBCOMMANDS)}")
    return handlers[command](rest)
