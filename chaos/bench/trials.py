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
        raise BackendUnavailable(f"{backend} run of {scenario.name} produced no events: {result.message}")
    return result.run_dir


def _run_sim(scenario: Scenario, backend: str, out: Path) -> Path:
    try:
        module = importlib.import_module("swarmshake.chaos.sim.run")
    except ImportError:
        raise BackendUnavailable(
            "the simulator has no scenario entry point in this checkout "
            "(swarmshake.chaos.sim.run.run_scenario); use --backend local"
        ) from None
    run_dir = out / scenario.name
    module.run_scenario(scenario, run_dir)
    return run_dir


def default_runner(scenario: Scenario, backend: str, out: Path) -> Path:
    if backend == "sim":
        return _run_sim(scenario, backend, out)
    if backend in ("local", "docker"):
        return _run_harness(scenario, backend, out)
    raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
