"""Running one benchmark trial on a backend: a scenario in, a run directory out.

``local`` and ``docker`` go through the harness (``chaos/runner.run_blocking``), the
same path as ``swarmshake run``; ``sim`` through the deterministic simulator.  A
backend whose entry point is missing from this checkout raises
:class:`BackendUnavailable` with the reason, so ``bench`` exits 2 (unknown) and says
what to install or build, instead of measuring nothing and calling it a result.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.chaos import faults as F
from swarmshake.chaos.scenario import Scenario

TrialRunner = Callable[[Scenario, str, Path], Path]  # (scenario, backend, out dir) -> run dir
BACKENDS = ("sim", "local", "docker")


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message names the missing part and the fix."""


def _run_harness(scenario: Scenario, backend: str, out: Path) -> Path:
    try:
        runner = importlib.import_module("swarmshake.chaos.runner")
        scenarios = importlib.import_module("swarmshake.chaos.scenario")
    except ImportError as error:
        raise BackendUnavailable(f"the harness cannot be imported: {error}") from None
    resolved = scenarios.resolve(scenario, backend=backend)
    options = runner.RunOptions(
        out=out,
        quiet=True,
        # The bench measures from the history itself and writes its own reports;
        # per-trial replay and HTML would double a trial's wall time.
        verify=False,
        reports=False,
        run_id=scenario.name,
    )
    result = runner.run_blocking(resolved, options)
    if result.status == "unknown" and not (result.run_dir / "events").is_dir():
        raise BackendUnavailable(
            f"{backend} run of {scenario.name} produced no events: {result.message}"
        )
    return result.run_dir


# The simulator starts every node at t = 0 with no steady-state wait; timed faults are
# shifted by this much so the run has a fault-free stretch to measure throughput against.
SIM_WARMUP_S = 3.0


def sim_node_names(nodes: int) -> list[str]:
    """The simulator's names, ``n0..n(N-1)`` zero-padded (``chaos/sim/engine.Simulation``)."""
    width = len(str(nodes - 1))
    return [f"n{i:0{width}d}" for i in range(nodes)]


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every string that is a node name replaced (op fields, groups, triggers)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [_renamed(item, names) for item in value]
    if isinstance(value, dict):
        return {key: _renamed(item, names) for key, item in value.items()}
    return value


def _run_sim(scenario: Scenario, backend: str, out: Path) -> Path:
    try:
        module = importlib.import_module("swarmshake.chaos.sim.run")
    except ImportError as error:
        raise BackendUnavailable(
            f"the simulator cannot be imported: {error}; use --backend local"
        ) from None
    # Scenarios name nodes n1..nN (the harness's names); the simulator's are n0..: map them.
    names = dict(zip(scenario.node_names, sim_node_names(scenario.cluster.nodes), strict=True))
    entries = []
    for entry in scenario.faults:
        raw = _renamed(msgspec.to_builtins(entry), names)
        if raw.get("at_s") is not None:
            raw["at_s"] += SIM_WARMUP_S
        entries.append(msgspec.convert(raw, F.ScheduleEntry))
    config = module.SimConfig(
        nodes=scenario.cluster.nodes,
        duration_s=SIM_WARMUP_S + scenario.duration_s + scenario.quiesce_s,
        seed=scenario.seed,
        bounds=scenario.bounds,
    )
    run_dir = out / scenario.name
    run_dir.mkdir(parents=True, exist_ok=True)
    module.run_simulation(config, F.FaultSchedule(entries=entries, seed=scenario.seed), run_dir)
    return run_dir


def default_runner(scenario: Scenario, backend: str, out: Path) -> Path:
    if backend == "sim":
        return _run_sim(scenario, backend, out)
    if backend in ("local", "docker"):
        return _run_harness(scenario, backend, out)
    raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


def supported_ops(backend: str) -> frozenset[str] | None:
    """The ops ``backend`` can inject, or ``None`` when that cannot be told here."""
    if backend == "sim":
        return F.SIM_SUPPORTED
    try:
        backends = importlib.import_module("swarmshake.chaos.backends")
        return frozenset(backends.supported_ops(backend))
    except Exception:  # noqa: BLE001 - a backend that cannot even say is tried, and fails per trial
        return None


def unsupported_ops(scenario: Scenario, backend: str) -> list[str]:
    """The ops (and heals) of ``scenario`` that ``backend`` cannot inject."""
    supported = supported_ops(backend)
    if supported is None:
        return []
    needed: set[str] = set()
    for entry in scenario.faults:
        needed.add(entry.op.name)
        heal = entry.op.heal()
        if heal is not None and entry.heal_after_s is not None:
            scope = getattr(heal, "scope", None)
            needed.add(heal.name if scope in (None, "all", "partition", "churn") else scope)
    return sorted(needed - supported)
