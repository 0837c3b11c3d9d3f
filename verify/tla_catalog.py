"""Which TLA+ modules and configs ``swarmshake specs check`` runs, and the spec mutants.

Specs live in ``specs/`` (the ``swarmshake.specs`` package data).  Each spec has
one or more configs per profile: ``default`` (CI, the whole check within about a
minute on 2 cores) and ``deep`` (nightly).  Each known bug of
``reference_node/protocol/bugs.py`` has a mutant config
``<Module>.mutant-<bug>.cfg`` beside its module: it turns the same mistake on
(``Bugs = {"<bug>"}``) and checks only the property the registry says it breaks,
which TLC must then violate.  The module is the one of the bug's ``core``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from pathlib import Path
from typing import Literal

import msgspec

from swarmshake.reference_node.protocol.bugs import BUGS, KnownBug
from swarmshake.verify.tla import TlcResult, default_workers, run_tlc

Profile = Literal["default", "deep"]
PROFILES: tuple[str, ...] = ("default", "deep")

# Deadlines per TLC process: far above what each config takes on 2 shared cores
# (see BENCHMARKS.md), low enough that a state-space blow-up after an edit ends as
# "unknown" instead of hanging CI.
TIMEOUT_S: dict[str, float] = {"default": 120.0, "deep": 1800.0, "mutant": 180.0}


class SpecEntry(msgspec.Struct, frozen=True):
    name: str
    module: str
    configs: dict[str, tuple[str, ...]]  # profile -> cfg file names
    about: str


SPECS: dict[str, SpecEntry] = {
    entry.name: entry
    for entry in (
        SpecEntry(
            name="detector",
            module="Detector",
            configs={
                "default": ("Detector.cfg", "Detector.partition.cfg"),
                "deep": ("Detector.deep.cfg",),
            },
            about=(
                "failure detection: suspicion, incarnations, refutation, confirmation, "
                "verdict provenance across a partition (S4, L1)"
            ),
        ),
        SpecEntry(
            name="commit",
            module="Commit",
            configs={
                "default": ("Commit.crash.cfg", "Commit.partition.cfg", "Commit.floor.cfg"),
                "deep": ("Commit.deep.cfg", "Commit.floor.deep.cfg"),
            },
            about=(
                "strict-mode step commit, Paxos per step, majority of voters; pruned "
                "acceptor records, the vote floor, rollback on restart (S1, S2, S3, L2)"
            ),
        ),
        SpecEntry(
            name="rejoin",
            module="Rejoin",
            configs={"default": ("Rejoin.cfg",), "deep": ("Rejoin.deep.cfg",)},
            about="rejoin by state transfer, checkpoint fallback (S1, L3)",
        ),
        SpecEntry(
            name="membership",
            module="Membership",
            configs={"default": ("Membership.cfg",), "deep": ("Membership.deep.cfg",)},
            about=(
                "configuration changes one node at a time through committed steps; views "
                "with epochs; a dead-declared node rejoins with a new incarnation"
            ),
        ),
    )
}

# bugs.py names the core that carries a switch; the spec of that core carries the mutant.
MODULE_OF_CORE: dict[str, str] = {
    "detector": "Detector",
    "commit": "Commit",
    "rejoin": "Rejoin",
    "membership": "Membership",
    # The node core's bug (no-vote-floor) is an acceptor's: Commit models the floor.
    "node_core": "Commit",
}


# Spec-only mutants: earlier behaviours that the cores no longer carry as a bugs.py
# switch, kept so TLC shows the spec tells them apart from the protocol.  Checked by
# ``--mutants`` like the registry's bugs (same cfg naming and rules).
SPEC_MUTANTS: dict[str, KnownBug] = {
    bug.name: bug
    for bug in (
        KnownBug(
            name="relayed-verdict",
            breaks="S4",
            core="detector",
            description=(
                "every death verdict is passed on and obeyed, even one formed by a node "
                "cut off from the subject and even by a receiver that hears the subject "
                "(the smoke demo: an isolated node's verdicts killed healthy nodes after "
                "the heal)"
            ),
        ),
    )
}


def known_mutant(bug: str) -> KnownBug:
    """A registry bug or a spec-only mutant, by name (KeyError if neither)."""
    return BUGS[bug] if bug in BUGS else SPEC_MUTANTS[bug]


class SpecCheck(msgspec.Struct):
    spec: str
    config: str
    profile: str
    result: TlcResult


class MutantCheck(msgspec.Struct):
    bug: str
    breaks: str
    config: str
    caught: bool
    result: TlcResult
    problem: str = ""  # why the mutant could not be checked (missing cfg, wrong property)


def specs_dir() -> Path:
    return Path(str(files("swarmshake.specs")))


def _check_config(
    name: str, config: str, profile: str, timeout_s: float | None, workers: int
) -> SpecCheck:
    entry = SPECS[name]
    result = run_tlc(
        specs_dir() / f"{entry.module}.tla",
        (specs_dir() / config).read_text(),
        timeout_s=timeout_s or TIMEOUT_S[profile],
        workers=workers,
    )
    return SpecCheck(spec=name, config=config, profile=profile, result=result)


def _in_parallel(tasks: Sequence[Callable[[int], object]], jobs: int | None) -> list:
    """Run ``task(workers)`` for each task, ``jobs`` TLC processes at a time.

    TLC's liveness check runs on one thread whatever ``-workers`` says, so on 2
    cores two TLC processes of one worker each finish sooner than one process of
    two workers after another (measured: the default profile's 4 configs).  The
    cores left over go to each process as workers.  Results keep the tasks' order.
    """
    cores = default_workers()
    jobs = max(1, min(jobs or cores, len(tasks) or 1))
    workers = max(1, cores // jobs)
    if jobs == 1:
        return [task(workers) for task in tasks]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(task, workers) for task in tasks]
        return [future.result() for future in futures]


def check_specs(
    names: Sequence[str],
    profile: str = "default",
    *,
    timeout_s: float | None = None,
    jobs: int | None = None,
) -> list[SpecCheck]:
    """Run every config of the named specs in one profile, ``jobs`` TLC processes at once."""
    for name in names:
        if name not in SPECS:
            raise KeyError(f"unknown spec {name!r}; known: {', '.join(SPECS)}")
    if profile not in PROFILES:
        raise KeyError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    tasks = [
        lambda workers, name=name, config=config: _check_config(
            name, config, profile, timeout_s, workers
        )
        for name in names
        for config in SPECS[name].configs[profile]
    ]
    return _in_parallel(tasks, jobs)


def check_spec(
    name: str, profile: str = "default", *, timeout_s: float | None = None
) -> list[SpecCheck]:
    """Run every config of one spec in one profile."""
    return check_specs([name], profile, timeout_s=timeout_s)


def mutant_config_name(bug: str) -> str:
    return f"{MODULE_OF_CORE.get(known_mutant(bug).core, '?')}.mutant-{bug}.cfg"


def _mutant_config_problem(bug: str, config_text: str) -> str:
    """The cfg must switch on exactly this bug and check exactly the named property."""
    expected = known_mutant(bug).breaks
    bugs_line = re.search(r"^\s*Bugs\s*=\s*\{(.*)\}\s*$", config_text, re.M)
    switched = re.findall(r'"([^"]+)"', bugs_line.group(1)) if bugs_line else []
    if switched != [bug]:
        return f'the cfg must set Bugs = {{"{bug}"}}, it sets {switched!r}'
    checked = re.findall(r"^\s*(?:INVARIANTS?|PROPERTY|PROPERTIES)\s+(.+)$", config_text, re.M)
    names = [name for line in checked for name in line.split()]
    if names != [expected]:
        return (
            f"the cfg must check exactly {expected} (bugs.py: {bug} breaks it), it checks {names}"
        )
    return ""


def check_mutant(bug: str, *, timeout_s: float | None = None, workers: int = 0) -> MutantCheck:
    """Run one bug's mutant; ``caught`` only if TLC violates the property bugs.py names."""
    known = known_mutant(bug)
    config = mutant_config_name(bug)
    path = specs_dir() / config
    module = MODULE_OF_CORE.get(known.core)
    empty = TlcResult(module=module or "?", status="unknown")
    if module is None or not path.is_file():
        problem = f"no spec mutant for bug {bug!r}: add specs/{config} (see docs/changing-the-protocol.md)"
        return MutantCheck(bug, known.breaks, config, False, empty, problem)
    config_text = path.read_text()
    problem = _mutant_config_problem(bug, config_text)
    if problem:
        return MutantCheck(bug, known.breaks, config, False, empty, f"{config}: {problem}")
    result = run_tlc(
        specs_dir() / f"{module}.tla",
        config_text,
        timeout_s=timeout_s or TIMEOUT_S["mutant"],
        workers=workers or None,
    )
    caught = result.status == "violated" and result.violated_property == known.breaks
    problem = "" if caught else _why_not_caught(result, known.breaks)
    return MutantCheck(bug, known.breaks, config, caught, result, problem)


def check_mutants(
    bugs: Sequence[str], *, timeout_s: float | None = None, jobs: int | None = None
) -> list[MutantCheck]:
    """Run the named bugs' mutants, ``jobs`` TLC processes at once, in the given order."""
    tasks = [
        lambda workers, bug=bug: check_mutant(bug, timeout_s=timeout_s, workers=workers)
        for bug in bugs
    ]
    return _in_parallel(tasks, jobs)


def _why_not_caught(result: TlcResult, expected: str) -> str:
    if result.status == "valid":
        return f"TLC found no violation of {expected}: the spec does not express this bug"
    if result.status == "violated":
        return f"TLC violated {result.violated_property or result.violation_kind}, not {expected}"
    return f"TLC gave no verdict: {result.message}"
