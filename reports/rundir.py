"""Reading a run directory (DESIGN.md, "A run, end to end") into what the reports need.

``runs/<run-id>/`` holds ``events/*.jsonl`` (required), ``scenario.yaml`` (the resolved
scenario with its seed), ``verdict.json`` (written by ``swarmshake verify``; computed
and written here when absent), and optionally ``bounds.json``, ``baseline/events/``
(a fault-free run of the same scenario: the loss curve's reference), ``shrunk.yaml``
(an explore run's shrunk schedule) and ``load.json`` (load-under-chaos results,
:mod:`swarmshake.reports.load_model`).  Every problem with the directory is a
:class:`RunDirError` naming the file and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.reference_node.protocol.history import History, HistoryError, RunMark, Start
from swarmshake.reports.load_model import LoadResults, read_load_results
from swarmshake.verify.checkers import Bounds, Verdict, check_history

MAX_TEXT_FILE_BYTES = 1 << 20  # a scenario or schedule is written by people; 1 MiB is abuse


class RunDirError(ValueError):
    """The run directory is missing something or holds a malformed file."""


@dataclass
class RunDir:
    path: Path
    history: History
    verdict: Verdict
    bounds: Bounds
    scenario_text: str | None  # scenario.yaml as written
    scenario: dict[str, Any]  # scenario.yaml decoded ({} when absent)
    seed: int | None
    baseline: History | None
    shrunk_schedule: str | None
    load: LoadResults | None

    @property
    def status(self) -> str:
        """The run's outcome: the checkers' verdict, but ``unknown`` where it is valid and
        a scenario entry was never applied (``run_status``)."""
        return run_status(self.verdict.status, untested_entries(self.history))

    @property
    def name(self) -> str:
        named = self.scenario.get("name")
        return str(named) if named else self.path.name


def untested_entries(history: History) -> list[int]:
    """The scenario entries a run never applied, from the runner's incident marks: a
    trigger that never matched or a time past the run (``faults_never_fired``), and a
    fault the backend could not apply (``fault_skipped``)."""
    untested: set[int] = set()
    for mark in history.of_kind(RunMark):
        if mark.mark != "incident":
            continue
        data = mark.data
        kind = data.get("kind")
        if kind == "faults_never_fired":
            entries = data.get("entries")
            if isinstance(entries, list):
                untested.update(i for i in entries if type(i) is int)
        elif kind == "fault_skipped" and type(data.get("entry")) is int:
            untested.add(data["entry"])
    return sorted(untested)


def run_status(verdict_status: str, untested: list[int]) -> str:
    """A run's status from its checkers' verdict and its untested entries.  The checkers
    judge the history, which is true; a suite's verdict claims the cluster survived
    its faults, and an entry never applied was not survived but skipped (a trigger
    whose premise a timing shift removed: CI, stop 31).  So a valid verdict over a run
    with untested entries is ``unknown`` (DESIGN's exit 2, missing evidence), never a
    green run that tested less than it says; a violation stays a violation."""
    return "unknown" if untested and verdict_status == "valid" else verdict_status


def _read_text(path: Path) -> str | None:
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_TEXT_FILE_BYTES:
        raise RunDirError(f"{path}: larger than {MAX_TEXT_FILE_BYTES} bytes; is it the right file?")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RunDirError(f"{path}: cannot read as UTF-8 text: {error}") from None


def _load_history(run_dir: Path) -> History:
    try:
        return History.load(run_dir)
    except FileNotFoundError as error:
        raise RunDirError(str(error)) from None
    except HistoryError as error:
        raise RunDirError(
            f"{error} (fix or remove the line; only a torn last line is skipped)"
        ) from None


def load_bounds(run_dir: Path) -> Bounds:
    path = run_dir / "bounds.json"
    if not path.is_file():
        return Bounds()
    try:
        return msgspec.yaml.decode(path.read_bytes(), type=Bounds)
    except (msgspec.DecodeError, ValueError) as error:
        raise RunDirError(
            f"{path}: bad bounds: {error}; fields: {', '.join(Bounds.__struct_fields__)}"
        ) from None


def read_verdict(path: Path) -> Verdict:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Verdict)
    except (msgspec.DecodeError, ValueError) as error:
        raise RunDirError(
            f"{path}: not a verdict.json ({error}); delete it and rerun `swarmshake verify`"
        ) from None


def load_run_dir(run_dir: str | Path, *, write_verdict: bool = True) -> RunDir:
    """Read everything the reports show; computes ``verdict.json`` when it is missing."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory (give a run directory, e.g. runs/<id>)")
    history = _load_history(path)
    bounds = load_bounds(path)
    verdict_path = path / "verdict.json"
    if verdict_path.is_file():
        verdict = read_verdict(verdict_path)
    else:
        verdict = check_history(history, bounds)
        if write_verdict:
            verdict_path.write_bytes(verdict.to_json())
    scenario_text = _read_text(path / "scenario.yaml")
    scenario: dict[str, Any] = {}
    if scenario_text:
        try:
            decoded = msgspec.yaml.decode(scenario_text)
        except msgspec.DecodeError as error:
            raise RunDirError(f"{path / 'scenario.yaml'}: not YAML: {error}") from None
        if not isinstance(decoded, dict):
            raise RunDirError(f"{path / 'scenario.yaml'}: expected a mapping at the top level")
        scenario = decoded
    seed = scenario.get("seed")
    if not isinstance(seed, int):
        starts = [e.seed for e in history.of_kind(Start)]
        seed = starts[0] if starts else None
    baseline_dir = path / "baseline"
    baseline = _load_history(baseline_dir) if (baseline_dir / "events").is_dir() else None
    return RunDir(
        path=path,
        history=history,
        verdict=verdict,
        bounds=bounds,
        scenario_text=scenario_text,
        scenario=scenario,
        seed=seed,
        baseline=baseline,
        shrunk_schedule=_read_text(path / "shrunk.yaml"),
        load=_load_results(path / "load.json"),
    )


def _load_results(path: Path) -> LoadResults | None:
    try:
        return read_load_results(path)
    except ValueError as error:
        raise RunDirError(str(error)) from None
