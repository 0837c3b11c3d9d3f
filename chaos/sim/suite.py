"""A chaos suite on the simulator: ``swarmshake run SUITE.yaml --backend sim``.

The suite's faults, bounds, bugs and node settings run on the simulator's shell of
the node core (the node that ships, DESIGN "one sans-IO node core with two shells"),
and the run directory gets what a real run's gets: the resolved ``scenario.yaml``
(it repeats the run, bit for bit), ``run.json``, ``events/``, ``verdict.json`` and the
reports.  How each part of a suite maps, one decision a line:

- nodes: the suite's names (n1..nN), as on the real backends, so a suite's faults
  name the same nodes on every backend;
- steady state: the runner's (every node has committed step >= ``min_commit_step``
  within ``timeout_s``), found by a first run of the same seed without faults.  The
  faults then fire ``at_s`` after that instant and triggers are armed until
  ``duration_s`` after it, as the runner does; the two runs are the same up to it
  (nothing differs but the faults, and none fires before it);
- ``cluster.step`` and ``cluster.detector``: the node core's ``NodeConfig`` and
  ``CheckpointConfig`` (through the node's own ``StepSection``, so its defaults:
  a checkpoint every 50 steps) and the detector's ``DetectorConfig``; the
  aggregation rule's fewest contributors (``TrainingConfig.min_contributors``), which
  the node core's step leader waits for;
- not modelled, and said in ``run.json`` (``not_simulated``) and on stderr, never
  silently: the model and the aggregation rule's arithmetic (the simulator's workload
  moves abstract tensors of fixed size, ``AppSettings``), other ``cluster.training`` fields,
  ``links`` (every message crosses the simulated network) and ``load`` (no HTTP
  server: a client's view needs the real backends);
- refused (exit 64): a system other than the reference node, and a fault op the
  simulator cannot inject.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.chaos import faults
from swarmshake.chaos.runner import (
    EXIT_BY_STATUS,
    RunResult,
    environment_record,
    new_run_id,
    point_latest,
    verdict_message,
    with_untested,
)
from swarmshake.chaos.scenario import Scenario, dumps
from swarmshake.chaos.sim.app import AppSettings
from swarmshake.chaos.sim.run import RunPhases, SimConfig, SimRun, run_simulation
from swarmshake.chaos.systems import load_system
from swarmshake.chaos.systems.reference import node_settings
from swarmshake.reference_node.protocol.history import Commit, History
from swarmshake.reports import write_run_reports


class SuiteError(ValueError):
    """The suite cannot run on the simulator; the message names the field and the fix."""


@dataclass(frozen=True)
class SimSuite:
    """A resolved scenario turned into the simulator's terms (``plan``)."""

    scenario: Scenario
    config: SimConfig
    schedule: faults.FaultSchedule
    not_simulated: tuple[str, ...]


def plan(scenario: Scenario) -> SimSuite:
    """Check ``scenario`` for the simulator and build its configuration; ``SuiteError``
    names what cannot run here."""
    if not load_system(scenario.system, scenario.system_options).simulated:
        raise SuiteError(
            f"system: {scenario.system!r} has no simulator (the simulator runs the reference "
            "node's core); fix: use --backend local or docker"
        )
    schedule = faults.FaultSchedule(entries=list(scenario.faults), seed=scenario.seed)
    try:
        faults.check_simulable(schedule)
    except faults.FaultSpecError as error:
        raise SuiteError(f"faults: {error}; fix: use --backend local or docker") from None
    cluster = scenario.cluster
    try:
        # As the node reads them (the aggregation rule's fewest contributors too).
        settings = node_settings(
            cluster.step, cluster.detector, cluster.training_section(scenario.seed)
        )
    except ValueError as error:
        raise SuiteError(str(error)) from None
    try:
        config = SimConfig(
            nodes=cluster.nodes,
            names=tuple(scenario.node_names),
            seed=scenario.seed,
            bugs=tuple(cluster.bugs),
            app=AppSettings(node=settings.node, checkpoint=settings.checkpoint),
            detector=settings.detector,
            bounds=scenario.bounds,
            # The steady-state probe's length; the run's own replaces it (``_run``).
            duration_s=max(scenario.steady_state.timeout_s, 1.0),
        )
    except (ValueError, msgspec.ValidationError) as error:
        raise SuiteError(f"cluster: {error}") from None
    return SimSuite(scenario, config, schedule, _not_simulated(scenario))


def _not_simulated(scenario: Scenario) -> tuple[str, ...]:
    cluster = scenario.cluster
    notes = [
        f"cluster.model {cluster.model!r} and aggregation "
        f"{cluster.aggregation or 'the default'!r}: the simulator's workload moves "
        "abstract tensors (chaos/sim/app.py AppSettings); only the rule's fewest "
        "contributors is the node's (a step leader waits for that many)"
    ]
    if cluster.training:
        notes.append(f"cluster.training {sorted(cluster.training)}: not modelled")
    if cluster.links != "proxied":
        notes.append(
            f"cluster.links {cluster.links!r}: every message crosses the simulated network"
        )
    if scenario.load is not None:
        notes.append(
            "load: no HTTP server in the simulator; run a real backend for a client's view"
        )
    return tuple(notes)


def steady_state_s(suite: SimSuite) -> float | None:
    """When every node has committed step >= ``min_commit_step`` in a run of the suite's
    seed without faults, within ``timeout_s`` (``plan``'s run length); None if some
    node never does."""
    history = run_simulation(suite.config).history
    return first_steady_s(history, suite.config.names, suite.scenario.steady_state.min_commit_step)


def first_steady_s(history: History, nodes: tuple[str, ...], min_commit_step: int) -> float | None:
    """The instant the last of ``nodes`` first committed a step >= ``min_commit_step``."""
    reached: dict[str, float] = {}
    for event in history.events:
        if (
            isinstance(event, Commit)
            and event.step >= min_commit_step
            and event.node not in reached
        ):
            reached[event.node] = event.t_mono
    if any(node not in reached for node in nodes):
        return None
    return max(reached.values())


def run_suite(suite: SimSuite, out: Path, *, quiet: bool = False) -> RunResult:
    """Run ``suite`` into a new run directory under ``out`` and write its reports."""
    scenario = suite.scenario
    run_dir = (out / new_run_id(scenario)).resolve()
    run_dir.mkdir(parents=True, exist_ok=False)
    point_latest(out, run_dir)
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr))
    for note in suite.not_simulated:
        say(f"not simulated: {note}")
    record: dict[str, Any] = {
        "run_id": run_dir.name,
        "scenario": scenario.name,
        "backend": "sim",
        "system": scenario.system,
        "produces": sorted(load_system(scenario.system, scenario.system_options).produces),
        "nodes": scenario.node_names,
        "bugs": scenario.cluster.bugs,
        "environment": environment_record(scenario),
        "not_simulated": list(suite.not_simulated),
    }
    try:
        return _run(suite, run_dir, record, say)
    except KeyboardInterrupt:
        # As the runner records an interrupted run: the directory says what it is.
        (run_dir / "scenario.yaml").write_text(dumps(scenario))
        _write_json(run_dir / "run.json", {**record, "status": "unknown",
                                           "exit_code": EXIT_BY_STATUS["unknown"],
                                           "message": "interrupted"})  # fmt: skip
        raise


def _run(
    suite: SimSuite, run_dir: Path, record: dict[str, Any], say: Callable[[str], None]
) -> RunResult:
    scenario = suite.scenario
    steady_s = steady_state_s(suite)
    if steady_s is None:
        return _not_steady(suite, run_dir, record)
    # The phases in whole microseconds: the figure a reader sees is the one that ran.
    steady_s = math.ceil(steady_s * 1e6) / 1e6
    phases = RunPhases(steady_state_s=steady_s, faults_end_s=steady_s + scenario.duration_s)
    config = msgspec.structs.replace(
        suite.config, duration_s=phases.faults_end_s + scenario.quiesce_s
    )
    say(f"{scenario.name} (sim, seed {scenario.seed}): steady state at {steady_s:.3f} s virtual")
    run: SimRun = run_simulation(config, suite.schedule, run_dir, phases)
    timings = {"steady_state": steady_s, "faults_end": phases.faults_end_s,
               "run_end": config.duration_s, "wall": run.result.wall_seconds}  # fmt: skip
    extra = {"timings_s": timings, "digest": run.result.digest,
             "faults_injected": run.result.faults_injected}  # fmt: skip
    verdict = run.verdict
    status, message = with_untested(verdict.status, verdict_message(verdict), scenario,
                                    run.result.faults_never_fired)  # fmt: skip
    if run.result.faults_never_fired:
        extra["faults_never_fired"] = run.result.faults_never_fired
    return _finish(suite, run_dir, {**record, **extra}, status, message, run, timings)


def _not_steady(suite: SimSuite, run_dir: Path, record: dict[str, Any]) -> RunResult:
    """Steady state never came: the fault-free run up to the timeout is the run (as the
    runner's aborted run is), still judged: a violation seen in it counts."""
    steady = suite.scenario.steady_state
    run = run_simulation(suite.config, None, run_dir)  # the probe again, into the run dir
    message = (
        f"steady state (every node committed step ≥ {steady.min_commit_step}) not reached "
        f"within {steady.timeout_s}s of virtual time"
    )
    violated = run.verdict.violated()
    if violated:
        message += "; " + verdict_message(run.verdict)
    return _finish(suite, run_dir, record, "invalid" if violated else "unknown", message, run)


def _finish(
    suite: SimSuite,
    run_dir: Path,
    record: dict[str, Any],
    status: str,
    message: str,
    run: SimRun,
    timings: dict[str, float] | None = None,
) -> RunResult:
    """The run directory's ``scenario.yaml`` (the resolved suite: it repeats this run;
    not the simulator's own record of its knobs), ``run.json`` and reports."""
    (run_dir / "scenario.yaml").write_text(dumps(suite.scenario))
    violated = run.verdict.violated()
    exit_code = EXIT_BY_STATUS[status]
    _write_json(run_dir / "run.json", {**record, "status": status, "exit_code": exit_code,
                                       "message": message, "violated": violated})  # fmt: skip
    write_run_reports(run_dir)
    return RunResult(run_dir, status, exit_code, message, run.verdict, violated, timings or {})


def _write_json(path: Path, record: dict[str, Any]) -> None:
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
