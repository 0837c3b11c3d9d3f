"""``swarmshake bench recovery|overhead|load|rejoin|harness|bugs|kernels|sim [--quick] [--json] ...``.

Every benchmark takes the same two flags (``_args.bench_flags``): ``--quick`` runs
its CI size, ``--json`` prints one JSON document on stdout (progress on stderr).

- ``recovery [--system reference,torchft,torchelastic] [--backend sim|local|docker]
  [--faults A,B] [--sizes 4,8] [--trials N] [--seed S] [--model M]
  [--system-option SYSTEM.KEY=VALUE] [--training KEY=VALUE] [--links proxied|direct]
  [--out DIR]``: the recovery
  matrix; writes ``bench.json``, ``report.html``, ``junit.xml`` and ``summary.md`` into
  ``--out``; ``--json`` prints the results keyed by fault type.  Several systems run
  the same faults (trial *t* hits the same victim at the same moment on each) one
  after the other, and ``side_by_side.{json,md,svg}`` compares them, with ratios to
  the first system named (the reference node when it is named); a system other than
  the reference node needs a real backend (``--backend`` defaults to local then).  ``--quick`` runs 3 trials per cell on the
  simulator and 1 on real backends (each real trial is a cluster brought up, faulted
  and torn down: ~25 s here, so 11 fault types x 1 trial is the few minutes CI affords).
- ``overhead [--world 4] [--steps N]``: steady-state cost of fault tolerance against
  a plain ``torch.distributed`` gloo all-reduce of the same model (``--quick``: 1M
  parameters, a 10 s run).
- ``load --target URL ... [--users N] [--duration 30s] [--out RUN_DIR]``: Locust
  users posting ``/infer``; per-fault-window availability and latency into the run
  (``--quick``: 2 users for 10 s unless given).
- ``rejoin [--params 100M]``: the node's state transfer (``--quick``: 1M, one repeat).
- ``harness [--backend local|docker] [--nodes 8] [--trials 3] [--capacity 4,8,12]
  [--model tiny|small|medium|node-default]``: the harness's own numbers: up to
  steady state, fault call → effect, and how many real nodes the machine holds
  (``--quick``: 4 nodes, one trial, no capacity ramp unless given).
- ``sim``: the simulator's speed (``chaos/bench/sim_speed.py``): 1,000 nodes x 600 s
  with churn and no training, 10 and 64 nodes x 600 s with training (``--quick``:
  60 s of virtual time).
- ``bugs [--bugs a,b] [--trials N] [--controls [N]] [--backend local|docker] [--out DIR]
  [--budget 90m]``: every planted protocol bug (``reference_node/protocol/bugs.py``)
  run on real nodes with its scenario (``chaos/bench/bugs.BUG_SCENARIOS``), N trials
  each (default 10, ``--quick`` 1), each one ``swarmshake run SCENARIO --bug NAME``
  under ``flock /tmp/swarmshake-heavy.lock``; counts caught / invalid-other / missed /
  unknown / error per bug, and with ``--controls`` runs each scenario without a bug
  (2 per scenario unless given).  Writes ``bugs.json`` and ``summary.md`` into
  ``--out`` after every trial; ``--json`` prints ``bugs.json``.
- ``kernels``: the GPU kernel benchmarks (``swarmshake.kernels.bench``; ``--quick``:
  fewer shapes and repetitions).

Exit codes: 0 done, 2 could not measure (a backend missing, every trial failed),
64 bad usage.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
from pathlib import Path

from swarmshake.chaos.commands._args import (
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
    bench_flags,
    parse_duration_s,
)

SUBCOMMANDS = ("recovery", "overhead", "load", "rejoin", "harness", "bugs", "kernels", "sim")


def _csv_ints(text: str, flag: str = "--sizes") -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: write cluster sizes like 4,8,16") from None
    if not values or any(v < 1 or v > 64 for v in values):
        raise UsageError(f"{flag} {text!r}: each size must lie in [1, 64]")
    return values


def recovery_parser() -> ArgumentParser:
    from swarmshake.chaos.bench import matrix
    from swarmshake.chaos.scenario import MODEL_SIZES, Cluster

    parser = ArgumentParser(
        prog="swarmshake bench recovery",
        description="the recovery matrix",
        epilog="--quick: few sizes, short runs, 3 trials (sim) or 1 (real); --json: the "
        "results keyed by fault type",
        parents=[bench_flags()],
    )
    parser.add_argument(
        "--system",
        default="reference",
        help="systems under test, comma-separated: reference, torchft, torchelastic or "
        "pkg.module:Class (default: reference)",
    )
    parser.add_argument(
        "--backend",
        help="sim, local or docker; several comma-separated (default: sim for the "
        "reference node alone, local with another system)",
    )
    parser.add_argument("--faults", help=f"subset of: {', '.join(matrix.FAULT_TYPES)}")
    parser.add_argument("--sizes", help="cluster sizes, e.g. 4,8 (default: per backend)")
    parser.add_argument(
        "--trials",
        type=int,
        help="trials per cell (default: 20; --quick 3 on sim, 1 on real backends)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model",
        choices=sorted(MODEL_SIZES),
        default=Cluster().model,
        help=f"the model every system trains (cluster.model; default {Cluster().model})",
    )
    parser.add_argument(
        "--system-option",
        action="append",
        default=[],
        metavar="SYSTEM.KEY=VALUE",
        help="a system's option over the bench's own, e.g. torchft.step_interval_s=0 "
        "(repeat; VALUE is read as JSON, else as text)",
    )
    parser.add_argument(
        "--training",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a cluster.training field of every trial, e.g. aggregation_path=sharded "
        "(repeat; VALUE is read as JSON, else as text); torchft and TorchElastic read "
        "its model shape only (their own settings are --system-option)",
    )
    parser.add_argument(
        "--links",
        choices=("proxied", "direct"),
        default=Cluster().links,
        help="cluster.links: direct dials the reference node's peers without the "
        "Toxiproxy hop (local backend, no link faults); default proxied",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench-recovery"))
    parser.add_argument(
        "--combine",
        metavar="BENCH_JSON,...",
        help="run nothing: write side_by_side.{json,md,svg} into --out from these bench.json "
        "files (one sitting split into several calls); ratios to the first --system",
    )
    return parser


MAX_COMBINED = 64  # bench.json files one side-by-side reads; more is not one sitting
MAX_BENCH_JSON_BYTES = 64 * 1024 * 1024  # a 10k-trial matrix is a few MB


def _combine(text: str, out: Path, reference: str) -> int:
    """``--combine``: the side-by-side of bench.json files written by earlier calls."""
    from swarmshake.chaos.bench import recovery

    paths = [Path(part.strip()) for part in text.split(",") if part.strip()]
    if not 1 <= len(paths) <= MAX_COMBINED:
        raise UsageError(f"--combine {text!r}: name 1 to {MAX_COMBINED} bench.json files")
    documents = []
    for path in paths:
        try:
            if path.stat().st_size > MAX_BENCH_JSON_BYTES:
                raise UsageError(f"--combine: {path}: larger than {MAX_BENCH_JSON_BYTES} bytes")
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise UsageError(f"--combine: {path}: {error}; name a bench.json file") from None
        if not isinstance(document, dict) or document.get("schema") != recovery.SCHEMA:
            raise UsageError(
                f"--combine: {path}: not a recovery benchmark (schema {recovery.SCHEMA}); "
                "name the bench.json that `swarmshake bench recovery` wrote"
            )
        documents.append(document)
    merged = recovery.merge_documents(documents)
    written = recovery.write_side_by_side_files(merged, out, reference=reference)
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return EXIT_VALID


MAX_SYSTEMS = 16  # a side-by-side of more systems than this is not a table anyone reads
MAX_SYSTEM_OPTIONS = 64  # more overrides than any system has options is a typo


def _system_options(texts: list[str], systems: list[str]) -> dict[str, dict[str, object]]:
    """``--system-option SYSTEM.KEY=VALUE``s by system, each checked by the system
    itself (an unknown key or a value out of range is exit 64, naming it)."""
    from swarmshake.chaos.bench.matrix import TrialSetup
    from swarmshake.chaos.systems import SystemConfigError, load_system

    if len(texts) > MAX_SYSTEM_OPTIONS:
        raise UsageError(f"--system-option: at most {MAX_SYSTEM_OPTIONS}")
    options: dict[str, dict[str, object]] = {}
    for text in texts:
        name, dot, rest = text.partition(".")
        key, equals, raw = rest.partition("=")
        if not (dot and equals and name and key):
            raise UsageError(f"--system-option {text!r}: write SYSTEM.KEY=VALUE")
        if name not in systems:
            raise UsageError(
                f"--system-option {text!r}: {name!r} is not one of --system {','.join(systems)}"
            )
        options.setdefault(name, {})[key] = _json_or_text(raw)
    merged = TrialSetup(options=options)  # the bench's own options, these over them
    for name in options:
        try:
            load_system(name, merged.system_options(name))
        except SystemConfigError as error:
            raise UsageError(f"--system-option: {error}") from None
    return options


MAX_TRAINING_FIELDS = 32  # more than TrainingConfig has fields is a typo


def _key_values(texts: list[str], flag: str) -> dict[str, object]:
    """``KEY=VALUE``s of ``flag``, each VALUE read as JSON, else as text."""
    if len(texts) > MAX_TRAINING_FIELDS:
        raise UsageError(f"{flag}: at most {MAX_TRAINING_FIELDS}")
    values: dict[str, object] = {}
    for text in texts:
        key, equals, raw = text.partition("=")
        if not (equals and key.strip()):
            raise UsageError(f"{flag} {text!r}: write KEY=VALUE")
        values[key.strip()] = _json_or_text(raw)
    return values


def _json_or_text(raw: str) -> object:
    """A flag's VALUE: JSON (numbers, booleans, lists) when it parses, else the text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _systems(text: str) -> list[str]:
    """``--system``'s names, each one a system this environment knows (else exit 64
    naming it) and each one installed (else exit 2 saying what to install)."""
    from swarmshake.chaos.systems import SystemConfigError, load_system

    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or len(names) > MAX_SYSTEMS:
        raise UsageError(f"--system {text!r}: name 1 to {MAX_SYSTEMS} systems, comma-separated")
    if len(set(names)) != len(names):
        raise UsageError(f"--system {text!r}: a system is named twice")
    for name in names:
        try:
            system = load_system(name)
        except SystemConfigError as error:
            raise UsageError(f"--system {name!r}: {error}") from None
        problems = system.check()
        if problems:
            raise SystemUnavailable(f"system {name} cannot run here: {'; '.join(problems)}")
    return names


class SystemUnavailable(RuntimeError):
    """A known system that is not installed here; the message says what to install."""


def recovery_main(argv: list[str]) -> int:
    try:
        return _recovery_main(argv)
    except SystemUnavailable as error:
        print(f"swarmshake bench recovery: cannot measure: {error}", file=sys.stderr)
        return EXIT_UNKNOWN


def _recovery_main(argv: list[str]) -> int:
    from swarmshake.chaos.bench import matrix, recovery
    from swarmshake.chaos.bench.trials import BACKENDS, BackendUnavailable

    args = recovery_parser().parse_args(argv)
    systems = _systems(args.system)
    if args.combine is not None:
        return _combine(args.combine, args.out, systems[0])
    setup = matrix.TrialSetup(
        model=args.model,
        options=_system_options(args.system_option, systems),
        training=_key_values(args.training, "--training"),
        links=args.links,
    )
    from swarmshake.chaos.systems import load_system

    loaded = [load_system(name) for name in systems]
    all_simulated = all(system.simulated for system in loaded)
    backend_text = args.backend if args.backend is not None else "sim" if all_simulated else "local"
    backends = [b.strip() for b in backend_text.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        raise UsageError(f"--backend {backend_text!r}: choose from {', '.join(BACKENDS)}")
    if "sim" in backends and not all_simulated:
        others = ", ".join(system.name for system in loaded if not system.simulated)
        raise UsageError(
            f"--backend sim runs the node core's systems only, not {others}: use --backend local"
        )
    faults = (
        [f.strip() for f in args.faults.split(",")] if args.faults else list(matrix.FAULT_TYPES)
    )
    # Every system gets the quiesce of the slowest to settle, so the cells compare.
    timing = matrix.QUICK_TIMING if args.quick else matrix.full_timing(loaded)
    plan: list[tuple[list[matrix.Cell], int]] = []  # (cells, trials per cell) per backend
    try:
        for backend in backends:
            sizes = (
                _csv_ints(args.sizes)
                if args.sizes
                else (matrix.QUICK_SIZES if args.quick else matrix.BACKEND_SIZES)[backend]
            )
            trials = (
                args.trials
                if args.trials is not None
                else matrix.default_trials(backend, quick=args.quick)
            )
            plan.append((recovery.cells_for(faults, sizes, [backend], systems), trials))
        for cells, _ in plan:
            for cell in cells:  # the scenario checks --training and --links against the cell
                try:
                    matrix.trial_scenario(cell, 0, args.seed, timing, setup)
                except ValueError as error:
                    raise ValueError(f"cell {cell.key} with --training/--links: {error}") from None
    except ValueError as error:
        raise UsageError(str(error)) from None
    results: list[recovery.CellResult] = []
    errors: list[dict[str, object]] = []
    try:
        for cells, trials in plan:
            done, failed = recovery.run_matrix(
                cells, trials, args.out, timing=timing, seed=args.seed, setup=setup
            )
            results += done
            errors += failed
    except BackendUnavailable as error:
        print(f"swarmshake bench recovery: cannot measure: {error}", file=sys.stderr)
        return EXIT_UNKNOWN
    except ValueError as error:
        raise UsageError(str(error)) from None
    command = shlex.join(["swarmshake", "bench", "recovery", *argv])
    document = recovery.bench_document(
        results,
        errors,
        command=command,
        quick=args.quick,
        seed=args.seed,
        timing=timing,
        setup=setup,
    )
    paths = recovery.write_bench_files(document, args.out)
    if len(systems) > 1:
        paths += recovery.write_side_by_side_files(document, args.out, reference=systems[0])
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(document["results"], indent=2) + "\n")
    unsafe = [entry for r in results for entry in r.unsafe]
    if unsafe:
        # A trial that broke a safety property is a finding, not a slow recovery: say
        # so, and exit as `swarmshake run` does for an invalid run (its figures are
        # left out, chaos/bench/judged.py).
        for entry in unsafe:
            print(
                f"swarmshake bench recovery: UNSAFE trial {entry['run_dir']}: "
                f"{', '.join(entry['violated'])}: {entry['message']}",
                file=sys.stderr,
            )
        return EXIT_INVALID
    measured = sum(r.trials for r in results)
    return EXIT_VALID if measured else EXIT_UNKNOWN


def overhead_parser() -> ArgumentParser:
    from swarmshake.chaos.bench import overhead

    return overhead.build_parser()


def overhead_main(argv: list[str]) -> int:
    from swarmshake.chaos.bench import overhead

    return overhead.main(argv)


def load_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="swarmshake bench load",
        description="Locust users on /infer",
        epilog="--quick: 2 users for 10 s (unless --users/--duration say otherwise)",
        parents=[bench_flags()],
    )
    parser.add_argument(
        "--target", action="append", required=True, help="a node's HTTP base URL (repeat)"
    )
    parser.add_argument("--users", type=int, help="Locust users (default 8, quick 2)")
    parser.add_argument(
        "--duration", type=parse_duration_s, help="how long, e.g. 30s (default 30s, quick 10s)"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="the run directory to add load.json to"
    )
    return parser


def load_main(argv: list[str]) -> int:
    from swarmshake.chaos.bench import load

    args = load_parser().parse_args(argv)
    if args.users is None:
        args.users = 2 if args.quick else 8
    if args.duration is None:
        args.duration = 10.0 if args.quick else 30.0
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


def rejoin_parser() -> ArgumentParser:
    from swarmshake.chaos.bench import rejoin

    return rejoin.build_parser()


def rejoin_main(argv: list[str]) -> int:
    from swarmshake.chaos.bench import rejoin

    return int(rejoin.main(argv))


def harness_parser() -> ArgumentParser:
    from swarmshake.chaos.scenario import MODEL_SIZES

    parser = ArgumentParser(
        prog="swarmshake bench harness",
        description="up to steady state, fault call-to-effect latency, node capacity",
        epilog="--quick: 4 nodes, one trial, no capacity ramp (unless given)",
        parents=[bench_flags()],
    )
    parser.add_argument("--backend", choices=("local", "docker"), default="local")
    parser.add_argument(
        "--nodes", type=int, help="cluster size for start-up and faults (default 8, quick 4)"
    )
    parser.add_argument(
        "--trials", type=int, help="start-ups, and injections per op (default 3, quick 1)"
    )
    parser.add_argument(
        "--capacity",
        default="",
        help="sizes to ramp through, e.g. 4,8,12,16 (stops at the first that does not hold)",
    )
    parser.add_argument(
        "--model",
        choices=(*MODEL_SIZES, "node-default"),
        default="node-default",
        help="the nodes' model: a scenario size, or the node's default (~0.8M parameters)",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser


def harness_main(argv: list[str]) -> int:
    from swarmshake.chaos.backends.base import BackendError
    from swarmshake.chaos.bench import harness
    from swarmshake.chaos.scenario import MODEL_SIZES

    args = harness_parser().parse_args(argv)
    if args.nodes is None:
        args.nodes = 4 if args.quick else 8
    if args.trials is None:
        args.trials = 1 if args.quick else 3
    if not 2 <= args.nodes <= 64:
        raise UsageError(f"--nodes {args.nodes}: must lie in [2, 64]")
    if not 1 <= args.trials <= 50:
        raise UsageError(f"--trials {args.trials}: must lie in [1, 50]")
    sizes = _csv_ints(args.capacity, "--capacity") if args.capacity else []
    try:
        hidden = MODEL_SIZES.get(args.model)
        result = harness.run(args.backend, args.nodes, args.trials, sizes, args.seed, hidden)
    except BackendError as error:
        print(f"bench harness: could not measure: {error}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(json.dumps(result, indent=None if args.json else 2))
    return EXIT_VALID


def bugs_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="swarmshake bench bugs",
        description="how often real runs catch each planted protocol bug",
        epilog="--quick: 1 trial per bug; --json: bugs.json on stdout. Each trial runs "
        "`swarmshake run SCENARIO --bug NAME` under flock /tmp/swarmshake-heavy.lock",
        parents=[bench_flags()],
    )
    parser.add_argument("--bugs", help="comma-separated bug names (default: every bug)")
    parser.add_argument("--trials", type=int, help="runs per bug (default 10, --quick 1)")
    parser.add_argument(
        "--controls",
        type=int,
        nargs="?",
        const=2,
        default=0,
        metavar="N",
        help="also run each distinct scenario without a bug, N times (default N: 2)",
    )
    parser.add_argument("--backend", choices=("local", "docker"), default="local")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-bugs"))
    parser.add_argument(
        "--budget",
        type=parse_duration_s,
        help="start no trial after this long, e.g. 90m (what finished is reported as n of m)",
    )
    return parser


MAX_BUG_TRIALS = 100  # per bug; each is a real cluster for a minute or two


def bugs_main(argv: list[str]) -> int:
    import time

    from rich.console import Console

    from swarmshake.chaos.bench import bugs

    args = bugs_parser().parse_args(argv)
    trials = args.trials if args.trials is not None else 1 if args.quick else 10
    if not 1 <= trials <= MAX_BUG_TRIALS:
        raise UsageError(f"--trials {trials}: must lie in [1, {MAX_BUG_TRIALS}]")
    if not 0 <= args.controls <= MAX_BUG_TRIALS:
        raise UsageError(f"--controls {args.controls}: must lie in [0, {MAX_BUG_TRIALS}]")
    try:
        names = bugs.parse_bugs(args.bugs)
        planned = bugs.plan(names, trials, args.controls)
    except bugs.BugBenchError as error:
        raise UsageError(str(error)) from None
    # A log file is read wider than rich's 80-column default for what is not a terminal.
    console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)
    command = shlex.join(["swarmshake", "bench", "bugs", *argv])
    started = bugs.now_utc()
    deadline = time.time() + args.budget if args.budget is not None else None

    def document(done: list[bugs.Trial]) -> dict:
        return bugs.bench_document(
            done, names, command=command, backend=args.backend, started=started
        )

    console.print(
        f"{len(planned)} runs ({len(names)} bugs x {trials}, {args.controls} controls per "
        f"scenario) on {args.backend}, each under flock {bugs.HEAVY_LOCK}; out: {args.out}"
    )
    done = bugs.run_bench(
        planned,
        backend=args.backend,
        out=args.out,
        progress=console.print,
        on_trial=lambda done: bugs.write_files(document(done), args.out),
        deadline=deadline,
    )
    final = document(done)
    paths = bugs.write_files(final, args.out)
    console.print(bugs.rich_table(final))
    console.print(f"wrote {', '.join(str(p) for p in paths)}")
    if args.json:
        sys.stdout.write(json.dumps(final, indent=2) + "\n")
    measured = [t for t in done if t.outcome != "error"]
    return EXIT_VALID if measured else EXIT_UNKNOWN


def kernels_parser() -> argparse.ArgumentParser:
    return importlib.import_module("swarmshake.kernels.bench").build_parser()


def kernels_main(argv: list[str]) -> int:
    module = importlib.import_module("swarmshake.kernels.bench")
    return int(module.main(argv))


def _sim_speed():  # noqa: ANN202 - the module, imported when asked for
    from swarmshake.chaos.bench import sim_speed

    return sim_speed


# Each benchmark's parser, for ``--help`` and for the test that holds them all to the
# same --quick and --json.
PARSERS = {
    "recovery": recovery_parser,
    "overhead": overhead_parser,
    "load": load_parser,
    "rejoin": rejoin_parser,
    "harness": harness_parser,
    "bugs": bugs_parser,
    "kernels": kernels_parser,
    "sim": lambda: _sim_speed().parser(),
}


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
        "harness": harness_main,
        "bugs": bugs_main,
        "kernels": kernels_main,
        "sim": lambda rest: _sim_speed().main(rest),
    }
    if command not in handlers:
        raise UsageError(f"unknown benchmark {command!r}; choose from {', '.join(SUBCOMMANDS)}")
    return handlers[command](rest)
