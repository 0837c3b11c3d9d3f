"""Exploration on real backends: the hook ``swarmshake explore --backend local|docker`` calls.

``run_schedule`` runs one fault schedule as a scenario on a real cluster and returns
its verdict; ``confirm`` re-runs a failing schedule to tell a reproducible violation
from real-world noise; ``explore`` draws schedules (seeded), and on a violation
shrinks it and prints a scenario that ``swarmshake run`` replays.  The run directory
of the last run that confirmed the shrunk scenario's violation gets ``shrunk.yaml``
(that scenario) and its reports regenerated to show it (``chaos/shrunk.py``).

A system that writes its own history kinds (``System.produces``, e.g. torchft's
``collective``) gets event-triggered faults as well as timed ones: a drawn crash or
pause fires, half the time, when its target logs a kind the system writes
(:func:`with_triggers`), so a schedule can land a kill inside an all-reduce or a
quorum change, which a timed fault hits only by luck.

Why a greedy shrinker rather than Hypothesis's: one real run costs tens of seconds,
and Hypothesis's shrinker spends hundreds of examples; removing one entry at a
time, each candidate confirmed by re-runs, finds a small schedule in a few dozen
runs.  (Heal delays and trigger steps are kept as drawn: shortening them would
double the runs a shrink costs.)  The simulator's explore (thousands of cheap
runs) keeps Hypothesis.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from swarmshake.chaos import faults as F
from swarmshake.chaos.backends.base import NODE_MODULE
from swarmshake.chaos.runner import RunOptions, RunResult, run_scenario
from swarmshake.chaos.scenario import GENERATOR_OPS, Generator, Scenario, draw, dumps, resolve
from swarmshake.chaos.shrunk import point_latest, write_shrunk

# Kinds that cannot usefully trigger a fault on the node that logs them: the harness's
# own records, and a node's start, stop or death (a fault there hits nothing running).
UNTRIGGERABLE_KINDS = frozenset({"fault", "run_mark", "start", "stop", "node_error"})
TRIGGER_OPS = ("crash", "pause")  # the drawn ops that become event-triggered
TRIGGER_SHARE = 0.5  # of those, how many fire on an event rather than at a time
# ``step_at_least`` is drawn from this range: past steady state (a step or two) and
# early enough that a workload at a few steps a second reaches it within the run.
TRIGGER_STEPS = (5, 60)
CONFIRM_ATTEMPTS = 3  # a real violation that shows 0 of 3 times is treated as noise
MAX_SHRINK_RUNS = 40  # bounds the shrink phase's cost (each run is tens of seconds)


@dataclass
class RealOutcome:
    status: str  # valid | invalid | unknown
    violated: list[str]
    run_dir: Path
    message: str

    @classmethod
    def of(cls, result: RunResult) -> RealOutcome:
        return cls(result.status, result.violated, result.run_dir, result.message)


@dataclass
class ExploreResult:
    runs: int = 0
    failing: Scenario | None = None  # the shrunk scenario, when a violation was confirmed
    violated: list[str] = field(default_factory=list)
    outcomes: list[RealOutcome] = field(default_factory=list)
    run_dir: Path | None = None  # a failing run of ``failing``, holding shrunk.yaml

    def scenario_yaml(self) -> str:
        return dumps(self.failing) if self.failing else ""


def with_triggers(
    entries: list[F.ScheduleEntry], kinds: list[str], seed: int
) -> list[F.ScheduleEntry]:
    """``entries`` with about ``TRIGGER_SHARE`` of the crashes and pauses fired on an event.

    The entry fires when its target first logs one of ``kinds`` at a step of at least
    a drawn ``step_at_least``, instead of at its drawn time (pure: same inputs, same
    list).  No kind to trigger on: ``entries`` unchanged."""
    usable = sorted(set(kinds) - UNTRIGGERABLE_KINDS)
    if not usable:
        return list(entries)
    rng = random.Random(seed)
    out: list[F.ScheduleEntry] = []
    for entry in entries:
        targets = entry.op.targets()
        if entry.op.name in TRIGGER_OPS and len(targets) == 1 and rng.random() < TRIGGER_SHARE:
            when = F.OnEvent(
                node=targets[0], kind=rng.choice(usable), step_at_least=rng.randint(*TRIGGER_STEPS)
            )
            entry = msgspec.structs.replace(entry, at_s=None, when=when)
        out.append(entry)
    return out


def scenario_for(
    schedule: F.FaultSchedule,
    *,
    backend: str,
    nodes: int,
    seed: int,
    bugs: list[str] | None = None,
    duration_s: float | None = None,
    base: Scenario | None = None,
    name: str = "explore",
) -> Scenario:
    """A runnable scenario around ``schedule`` (``base`` supplies cluster, bounds …)."""
    latest = (
        max((e.at_s or 0.0) + (e.heal_after_s or 0.0) for e in schedule.entries)
        if schedule.entries
        else 0.0
    )
    template = base or Scenario(name=name)
    scenario = msgspec.structs.replace(
        template,
        name=name,
        seed=seed,
        faults=list(schedule.entries),
        generator=None,
        duration_s=duration_s if duration_s is not None else max(template.duration_s, latest + 1.0),
    )
    return resolve(scenario, nodes=nodes, backend=backend, bugs=bugs or [])


async def run_schedule(
    schedule: F.FaultSchedule,
    *,
    backend: str = "local",
    nodes: int = 4,
    seed: int = 0,
    bugs: list[str] | None = None,
    out: Path = Path("runs"),
    base: Scenario | None = None,
    quiet: bool = True,
    node_program: str = NODE_MODULE,
) -> RealOutcome:
    """Run ``schedule`` on a real cluster; the outcome names the violated properties."""
    scenario = scenario_for(schedule, backend=backend, nodes=nodes, seed=seed, bugs=bugs, base=base)
    options = RunOptions(out=out, quiet=quiet, json_mode=quiet, node_program=node_program)
    result = await run_scenario(scenario, options)
    return RealOutcome.of(result)


async def confirm(
    scenario: Scenario, *, out: Path, attempts: int = CONFIRM_ATTEMPTS
) -> tuple[bool, list[RealOutcome]]:
    """Re-run ``scenario`` up to ``attempts`` times; confirmed once any run is invalid."""
    outcomes: list[RealOutcome] = []
    for _ in range(attempts):
        result = await run_scenario(scenario, RunOptions(out=out, quiet=True, json_mode=True))
        outcomes.append(RealOutcome.of(result))
        if result.status == "invalid":
            return True, outcomes
    return False, outcomes


async def shrink(
    scenario: Scenario,
    *,
    out: Path,
    attempts: int = CONFIRM_ATTEMPTS,
    failing_run: Path | None = None,
) -> tuple[Scenario, int, Path | None]:
    """Greedy one-entry-at-a-time removal, each candidate confirmed on the real backend.

    Returns the smallest confirmed scenario, the runs spent, and the run directory of
    a run that showed its violation (``failing_run``, that of ``scenario``, when no
    candidate was confirmed)."""
    current = scenario
    runs = 0
    changed = True
    while changed and runs < MAX_SHRINK_RUNS:
        changed = False
        for index in range(len(current.faults)):
            candidate = msgspec.structs.replace(
                current, faults=[e for i, e in enumerate(current.faults) if i != index]
            )
            failed, outcomes = await confirm(candidate, out=out, attempts=attempts)
            runs += len(outcomes)
            if failed:
                current, changed = candidate, True
                failing_run = outcomes[-1].run_dir
                break
            if runs >= MAX_SHRINK_RUNS:
                break
    return current, runs, failing_run


async def explore(
    *,
    backend: str = "local",
    budget: int = 5,
    seed: int = 0,
    nodes: int = 4,
    bugs: list[str] | None = None,
    out: Path = Path("runs"),
    base: Scenario | None = None,
    ops: list[str] | None = None,
    trigger_kinds: list[str] | None = None,
    confirm_attempts: int = CONFIRM_ATTEMPTS,
    generator: Generator | None = None,
) -> ExploreResult:
    """Draw up to ``budget`` schedules; stop at the first confirmed violation and shrink it.

    ``trigger_kinds``: the history kinds the system writes; drawn crashes and pauses
    then fire on them too (:func:`with_triggers`).  ``confirm_attempts``: runs of a
    shrink candidate before it counts as not violating (fewer: a cheaper shrink that
    may keep an entry it could have dropped; every kept candidate did violate).
    ``generator``: how faults are drawn (ops, rate, how long each lasts); default:
    ``ops`` at 8 a minute, 5 s each."""
    result = ExploreResult()
    rng = random.Random(seed)
    template = base or Scenario(name="explore", duration_s=30.0, quiesce_s=15.0)
    generator = generator or Generator(
        ops=list(ops or ("crash", "pause", "partition", "latency")), rate_per_min=8.0
    )
    for _ in range(budget):
        run_seed = rng.randrange(1 << 31)
        entries = draw(
            generator, [f"n{i}" for i in range(1, nodes + 1)], template.duration_s, run_seed
        )
        if trigger_kinds:
            entries = with_triggers(entries, trigger_kinds, run_seed)
        scenario = scenario_for(
            F.FaultSchedule(entries=entries),
            backend=backend,
            nodes=nodes,
            seed=run_seed,
            bugs=bugs,
            base=template,
        )
        outcome = RealOutcome.of(
            await run_scenario(scenario, RunOptions(out=out, quiet=True, json_mode=True))
        )
        result.runs += 1
        result.outcomes.append(outcome)
        if outcome.status == "invalid":
            shrunk, runs, run_dir = await shrink(
                scenario, out=out, attempts=confirm_attempts, failing_run=outcome.run_dir
            )
            result.runs += runs
            result.failing = shrunk
            result.violated = outcome.violated
            if run_dir is not None:
                write_shrunk(run_dir, result.scenario_yaml())
                point_latest(out, run_dir)
                result.run_dir = run_dir
            return result
    return result


def explore_blocking(**kwargs) -> ExploreResult:  # noqa: ANN003 - same keywords as explore()
    """``explore`` until it ends or SIGTERM / Ctrl-C stops it (the run in flight comes
    down first: ``runner.run_until_stopped``)."""
    from swarmshake.chaos.runner import run_until_stopped

    return run_until_stopped(explore(**kwargs))


__all__ = ["GENERATOR_OPS", "ExploreResult", "RealOutcome", "confirm", "explore", "explore_blocking",
           "run_schedule", "scenario_for", "shrink", "with_triggers"]  # fmt: skip
