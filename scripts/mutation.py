#!/usr/bin/env python3
"""Mutation testing of the protocol cores and the checkers: do our tests find bugs
nobody told them about?

Why a small sampler of our own and not mutmut or cosmic-ray: both assume the import
path of a module is its path on disk.  Our parts are folders (``reference_node/``)
installed as ``swarmshake.reference_node`` through setuptools ``package-dir`` and an
editable finder that always points at the checkout; mutmut 3 runs the tests against
a copy in ``mutants/`` that this finder never imports, and cosmic-ray mutates the
files in place, which the shared checkout (several people editing it) cannot allow.
So this script copies the tree to a scratch folder, adds ``swarmshake/<part>``
links there and puts the folder first on ``PYTHONPATH`` (a path entry wins over the
editable finder, which sits last on ``sys.meta_path``); the checkout is never touched.

Mutants are drawn from the AST, deterministically (same code + same seed = same
mutants): arithmetic operator swaps, comparison flips (``<``/``<=``, ``==``/``!=``,
``in``/``not in``, ``is``/``is not``), ``and``/``or``, integer constants ± 1,
``True``/``False``, a dropped ``not``, a negated ``if``/``while`` test, and a
simple statement replaced by ``pass``.  Docstrings, annotations and
``raise``/``assert`` lines are left alone (mutating an error message or a type hint
changes nothing a test could see).

A mutant is *killed* when the kill command fails: the fast tests of the mutated
part, then a short ``explore --backend sim`` (protocol files only: explore looks
for property violations of the running protocol, which only a protocol mutant
causes).  *timeout* (the kill command ran past its limit: an infinite loop, a
livelock) counts as killed, as mutmut and cosmic-ray count it.

    python scripts/mutation.py --sample 40 --seed 1          # a sampled score
    python scripts/mutation.py --per-file 12 --jobs 2         # a score for each file
    python scripts/mutation.py --all --json out.json          # every mutant (hours)
    python scripts/mutation.py --survivors-of out.json --at REV   # its survivors, today

``--jobs`` runs that many kill commands at once, each in its own copy of the tree
(one per core: a kill command is one pytest or explore process).

Exit status: 0 when the kill rate reaches ``--min-score`` (default 0, just report),
1 when it does not, 3 when the unmutated code already fails the kill command (the
score would mean nothing), 64 on bad arguments.
"""

from __future__ import annotations

import argparse
import ast
import copy
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PARTS = ("reference_node", "chaos", "specs", "verify", "kernels", "reports")

PROTOCOL_FILES = (
    "reference_node/protocol/commit.py",
    "reference_node/protocol/detector.py",
    "reference_node/protocol/rejoin.py",
    "reference_node/protocol/node_core.py",
    # Since issue 12's joins and leaves in the simulator: which configuration governs
    # a step, and whom a detector watches, are decided here for both shells.
    "reference_node/protocol/membership.py",
)
CHECKER_FILES = tuple(
    f"verify/checkers/{name}.py"
    for name in ("__init__", "detector", "model", "neutral", "progress", "safety", "timeline")
)
DEFAULT_FILES = PROTOCOL_FILES + CHECKER_FILES

# The fast tests that exercise each part (slow, docker and long tests excluded by
# marker).  Every mutant runs all of its part's tests: a mutant in commit.py can be
# seen by a node_core test, a checker mutant by the neutral-history tests.
PROTOCOL_TESTS = ("tests/reference_node/protocol",)
CHECKER_TESTS = (
    "tests/verify/test_checkers.py",
    "tests/verify/test_neutral_history.py",
    "tests/verify/test_convergence.py",
    "tests/verify/test_checkers_mutants.py",
    "tests/verify/test_neutral_checker_edges.py",
    "tests/verify/test_reference_checker_edges.py",
    "tests/verify/test_timeline_edges.py",
)
# A short exploration: 4 nodes (an even size: quorum ties), budget small enough to
# stay within seconds per mutant.  Explore exits non-zero when it finds a violation.
EXPLORE_ARGS = ("--backend", "sim", "--budget", "40", "--seed", "1", "--nodes", "4")

_SWAP_BINOP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_SWAP_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_SIMPLE_STMTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)


@dataclass(frozen=True)
class Mutant:
    file: str
    index: int  # position among the file's mutation sites, in AST walk order
    line: int
    kind: str
    description: str


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """Ids of nodes no mutant may touch: annotations, raise/assert statements,
    docstrings, ``__all__``, and the ``if TYPE_CHECKING:`` blocks."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(sub) for sub in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node.returns)
            for arg in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
                mark(arg.annotation)
        elif isinstance(node, ast.AnnAssign):
            skip.add(id(node))
            mark(node.annotation)
        elif isinstance(node, (ast.Raise, ast.Assert, ast.Import, ast.ImportFrom)):
            mark(node)
        elif _is_docstring(node):
            mark(node)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            mark(node)
        elif (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            mark(node)
    return skip


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, str, object]]:
    """Every (node, kind, description, how) mutation site, in a fixed order."""
    skip = _skipped_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BINOP:
            new = _SWAP_BINOP[type(node.op)]
            yield node, "binop", f"{type(node.op).__name__} -> {new.__name__}", new
        elif isinstance(node, ast.Compare):
            for position, op in enumerate(node.ops):
                new = _SWAP_CMP[type(op)]
                yield node, "compare", f"{type(op).__name__} -> {new.__name__}", (position, new)
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            yield node, "boolop", f"{type(node.op).__name__} -> {new.__name__}", new
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield node, "constant", f"{node.value} -> {not node.value}", not node.value
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield node, "constant", f"{node.value} -> {node.value + 1}", node.value + 1
            if node.value != 0:
                yield node, "constant", f"{node.value} -> {node.value - 1}", node.value - 1
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not", "drop not", None
        if isinstance(node, (ast.If, ast.While)) and id(node.test) not in skip:
            yield node, "negate", f"negate {type(node).__name__.lower()} test", None
        if isinstance(node, _SIMPLE_STMTS) and not _is_docstring(node):
            yield node, "delete", f"{type(node).__name__} -> pass", None


def list_mutants(rel_path: str, source: str | None = None) -> list[Mutant]:
    """The file's mutants; ``source``: its text at another commit (default: as it is)."""
    text = (REPO / rel_path).read_text() if source is None else source
    tree = ast.parse(text, rel_path)
    return [
        Mutant(rel_path, index, getattr(node, "lineno", 0), kind, description)
        for index, (node, kind, description, _how) in enumerate(_sites(tree))
    ]


def _identities(mutants: list[Mutant], source: str) -> dict[tuple, Mutant]:
    """Each mutant keyed by what survives an edit elsewhere in its file: the file, its
    line's text, its description, and which of the mutants with those three it is."""
    lines = source.splitlines()
    seen: dict[tuple[str, str, str], int] = {}
    keyed = {}
    for mutant in mutants:
        text = lines[mutant.line - 1].strip() if 0 < mutant.line <= len(lines) else ""
        base = (mutant.file, text, mutant.description)
        seen[base] = seen.get(base, -1) + 1
        keyed[(*base, seen[base])] = mutant
    return keyed


def survivors_now(results: list[dict], at: str) -> tuple[list[Mutant], int]:
    """The survivors of earlier runs (their ``--json`` results, mutated at commit
    ``at``) among today's mutants, matched by ``_identities``; and how many of them
    have no match (their line was edited or removed since)."""
    wanted = {(r["file"], r["index"]) for r in results if r.get("outcome") == "survived"}
    found: list[Mutant] = []
    gone = 0
    for rel_path in sorted({f for f, _ in wanted}):
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{at}:{rel_path}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if shown.returncode != 0:
            raise ValueError(f"{rel_path} at {at}: {shown.stderr.strip() or 'not found'}")
        then = _identities(list_mutants(rel_path, shown.stdout), shown.stdout)
        now_text = (REPO / rel_path).read_text() if (REPO / rel_path).is_file() else ""
        now = _identities(list_mutants(rel_path, now_text), now_text) if now_text else {}
        by_index = {m.index: key for key, m in then.items()}
        for _, index in sorted(w for w in wanted if w[0] == rel_path):
            match = now.get(by_index.get(index, ()))
            if match is None:
                gone += 1
            else:
                found.append(match)
    return found, gone


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, replacement: ast.AST) -> None:
        self.target, self.replacement = target, replacement

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return self.replacement
        return self.generic_visit(node)


def mutated_source(source: str, mutant: Mutant) -> str:
    tree = ast.parse(source, mutant.file)
    sites = list(_sites(tree))
    if not 0 <= mutant.index < len(sites):
        raise ValueError(f"{mutant.file} has no mutation site {mutant.index}")
    node, kind, _description, how = sites[mutant.index]
    new: ast.AST
    if kind == "binop":
        new = copy.copy(node)
        new.op = how()
    elif kind == "compare":
        position, op = how
        new = copy.copy(node)
        new.ops = list(node.ops)
        new.ops[position] = op()
    elif kind == "boolop":
        new = copy.copy(node)
        new.op = how()
    elif kind == "constant":
        new = ast.Constant(how)
    elif kind == "not":
        new = node.operand
    elif kind == "negate":
        new = copy.copy(node)
        new.test = ast.UnaryOp(ast.Not(), node.test)
    else:  # delete
        new = ast.Pass()
    tree = _Replace(node, ast.copy_location(new, node)).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


SCRATCH_PREFIX = "ss-mut-"
_RUNNING: set[subprocess.Popen] = set()  # kill commands in flight, stopped on SIGTERM


def _stop(signum: int, frame: object) -> None:
    """SIGTERM (a timeout, a killed CI job): stop the kill commands in flight and
    unwind like Ctrl-C, so the copies of the tree are removed."""
    for process in list(_RUNNING):
        process.kill()
    sys.exit(128 + signum)


def remove_abandoned_scratches() -> None:
    """Copies left by a run that was killed (SIGKILL, a crash): each is named after its
    run's pid, and one whose process is gone is removed (a full disk failed CI once)."""
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


def make_scratch() -> Path:
    """A copy of the tree (no .git/.venv/runs) whose ``swarmshake.<part>`` imports
    resolve to the copy once it is first on PYTHONPATH."""
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    keep = (*PARTS, "swarmshake", "tests", "suites", "pyproject.toml")
    for name in keep:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, scratch / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, scratch / name)
    for part in PARTS:
        (scratch / "swarmshake" / part).symlink_to(Path("..") / part)
    return scratch


def kill_commands(rel_path: str, python: str) -> list[list[str]]:
    pytest = [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    pytest += ["-m", "not slow and not docker and not gpu and not long", "--timeout", "120"]
    if rel_path.startswith("reference_node/"):
        # The mutated file's own tests run first and the rest after, with them left
        # out: the same tests, so the same verdict, but a mutant killed by its own
        # file's tests (most are) stops in seconds rather than after the others.
        own = own_tests(rel_path)
        first = [pytest + own] if own else []
        rest = pytest + list(PROTOCOL_TESTS) + [f"--ignore={path}" for path in own]
        return [*first, rest, [python, "-m", "swarmshake", "explore", *EXPLORE_ARGS]]
    return [pytest + list(CHECKER_TESTS)]


_PYTEST_NOTHING_RAN = 5


def own_tests(rel_path: str) -> list[str]:
    """The protocol test files named after ``rel_path``'s module (``commit.py``:
    ``test_commit.py``, ``test_commit_recovery.py``), as paths from the repository."""
    stem = Path(rel_path).stem
    return sorted(
        str(path.relative_to(REPO))
        for folder in PROTOCOL_TESTS
        for path in (REPO / folder).glob(f"test_{stem}*.py")
    )


def run_kill(scratch: Path, rel_path: str, python: str, timeout_s: float, lock: str | None) -> str:
    """'killed', 'survived' or 'timeout' for the code now in ``scratch``."""
    # The scratch goes first; a PYTHONPATH already set (wheels installed into a site
    # folder on a machine without this checkout's venv) stays behind it.
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = os.pathsep.join([str(scratch), *inherited])
    env = dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1")
    out = scratch / "runs"
    for command in kill_commands(rel_path, python):
        if "explore" in command:
            command = [*command, "--out", str(out)]
        lock_file = open(lock, "w") if lock else None  # noqa: SIM115 (held for the run)
        try:
            if lock_file:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
            with subprocess.Popen(
                command, cwd=scratch, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ) as process:
                _RUNNING.add(process)
                try:
                    returncode = process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    return "timeout"
                finally:
                    _RUNNING.discard(process)
        finally:
            if lock_file:
                lock_file.close()
            shutil.rmtree(out, ignore_errors=True)
        # pytest's 5 is "no tests collected" (an own-tests file whose tests are all
        # slow): nothing ran, so nothing was killed.
        if returncode != 0 and not (returncode == _PYTEST_NOTHING_RAN and "pytest" in command):
            return "killed"
    return "survived"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # the project's exit status for bad input
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(64)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    pick = parser.add_mutually_exclusive_group()
    pick.add_argument("--sample", type=int, default=40, help="mutants to draw (default 40)")
    pick.add_argument("--all", action="store_true", help="every mutant (hours)")
    pick.add_argument("--per-file", type=int, help="mutants to draw from each file")
    pick.add_argument(
        "--only",
        action="append",
        metavar="FILE#INDEX",
        help="these mutants alone (as --list and --json name them), e.g. a run's survivors",
    )
    pick.add_argument(
        "--survivors-of",
        action="extend",
        nargs="+",
        metavar="JSON",
        help="the survivors of earlier runs (their --json files), found in today's code by "
        "line text and mutation: re-run them after writing tests (with --at)",
    )
    parser.add_argument(
        "--at",
        default="HEAD",
        help="with --survivors-of: the commit those runs mutated (default HEAD)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="kill commands run at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per kill command")
    parser.add_argument("--min-score", type=float, default=0.0, help="fail below this kill rate")
    parser.add_argument("--lock", help="flock this file around each kill command")
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="only the K-th of N equal slices of the chosen mutants (K from 1): split a "
        "full run over several calls or machines; the slices' JSON files add up",
    )
    args = parser.parse_args(argv)
    for rel_path in args.files:
        if not (REPO / rel_path).is_file() or not rel_path.endswith(".py"):
            parser.error(f"{rel_path}: not a Python file of this repository")
    if args.sample < 1 or args.timeout_s <= 0 or not 0 <= args.min_score <= 1:
        parser.error("--sample ≥ 1, --timeout-s > 0, 0 ≤ --min-score ≤ 1")
    if args.per_file is not None and args.per_file < 1:
        parser.error("--per-file ≥ 1")
    if not 1 <= args.jobs <= (os.cpu_count() or 1):
        parser.error(f"--jobs from 1 to the {os.cpu_count()} cores of this machine")

    by_file = {rel_path: list_mutants(rel_path) for rel_path in args.files}
    mutants = [m for listed in by_file.values() for m in listed]
    if args.only:
        wanted = set()
        for name in args.only:
            rel_path, _, index = name.partition("#")
            if rel_path not in by_file or not index.isdigit():
                parser.error(f"--only {name}: FILE#INDEX with FILE among the files mutated")
            wanted.add((rel_path, int(index)))
        chosen = [m for m in mutants if (m.file, m.index) in wanted]
        if len(chosen) != len(wanted):
            parser.error("--only names a mutant index that FILE does not have")
    elif args.survivors_of:
        results: list[dict] = []
        for name in args.survivors_of:
            try:
                results += json.loads(Path(name).read_text())["results"]
            except (OSError, ValueError, KeyError, TypeError) as error:
                parser.error(f"--survivors-of {name}: not a --json result file ({error})")
        try:
            chosen, gone = survivors_now(results, args.at)
        except ValueError as error:
            parser.error(f"--survivors-of: {error}")
        chosen = [m for m in chosen if m.file in by_file]
        print(f"{len(chosen)} survivors found in today's code; {gone} gone with their line")
    elif args.all:
        chosen = mutants
    elif args.per_file is not None:
        # Seeded per file, so adding a file to the command leaves the others' draws.
        chosen = [
            m
            for rel_path, listed in by_file.items()
            for m in random.Random(f"{args.seed}:{rel_path}").sample(
                listed, min(args.per_file, len(listed))
            )
        ]
    else:
        chosen = random.Random(args.seed).sample(mutants, min(args.sample, len(mutants)))
    chosen.sort(key=lambda m: (m.file, m.index))
    if args.shard is not None:
        shard, _, shards = args.shard.partition("/")
        if not (shard.isdigit() and shards.isdigit() and 1 <= int(shard) <= int(shards)):
            parser.error(f"--shard {args.shard}: K/N with 1 ≤ K ≤ N")
        chosen = chosen[int(shard) - 1 :: int(shards)]  # interleaved: each slice spans every file
    if args.list:
        for m in chosen:
            print(f"{m.file}:{m.line} {m.file}#{m.index} {m.kind}: {m.description}")
        return 0
    python = sys.executable
    signal.signal(signal.SIGTERM, _stop)
    remove_abandoned_scratches()
    scratches = [make_scratch() for _ in range(args.jobs)]
    results: list[dict] = []
    try:
        # The unmutated code must pass, or every mutant would count as killed.
        # One file per kill command is enough: files of a part share their command.
        groups = {m.file.split("/")[0]: m.file for m in sorted(chosen, key=lambda m: m.file)}
        for rel_path in groups.values():
            baseline = run_kill(scratches[0], rel_path, python, args.timeout_s, args.lock)
            if baseline != "survived":
                print(f"unmutated {rel_path}: kill command {baseline}; no score", file=sys.stderr)
                return 3
        free = list(scratches)  # one worker per copy; a worker takes one and gives it back
        done = 0

        def judge(m: Mutant) -> dict:
            nonlocal done
            scratch = free.pop()
            target = scratch / m.file
            original = target.read_text()
            target.write_text(mutated_source(original, m))
            started = time.monotonic()
            try:
                outcome = run_kill(scratch, m.file, python, args.timeout_s, args.lock)
            finally:
                target.write_text(original)
                free.append(scratch)
            done += 1
            print(
                f"[{done}/{len(chosen)}] {outcome:8} {m.file}:{m.line} {m.file}#{m.index} "
                f"{m.kind}: {m.description}",
                flush=True,
            )
            return {
                **asdict(m),
                "outcome": outcome,
                "seconds": round(time.monotonic() - started, 1),
            }

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(judge, chosen))
    finally:
        for scratch in scratches:
            shutil.rmtree(scratch, ignore_errors=True)

    per_file: dict[str, dict[str, int]] = {}
    for r in results:
        counts = per_file.setdefault(r["file"], {"killed": 0, "survived": 0, "timeout": 0})
        counts[r["outcome"]] += 1
    killed = sum(r["outcome"] != "survived" for r in results)
    score = killed / len(results) if results else 0.0
    summary = {
        "seed": args.seed,
        "sampled": len(results),
        "of": len(mutants),
        "killed": killed,
        "score": round(score, 3),
        "per_file": per_file,
        "survivors": [r for r in results if r["outcome"] == "survived"],
        "results": results,
    }
    for rel_path, counts in sorted(per_file.items()):
        total = sum(counts.values())
        print(f"{rel_path}: {total - counts['survived']}/{total} killed")
    print(
        f"score {killed}/{len(results)} = {score:.1%} (seed {args.seed}, {len(mutants)} mutants in all)"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0 if score >= args.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
