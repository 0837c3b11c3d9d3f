"""``swarmshake bench bugs``: how often real runs catch each planted protocol bug.

Every bug of the registry (``reference_node/protocol/bugs.py``) names the property it
must break; ``BUG_SCENARIOS`` names the shipped scenario that exposes it on real
nodes (one place: this table, read by the bench and by the slow test
``tests/chaos/test_reference_node.py::test_known_bug_is_caught_by_a_real_run``).

A trial is ``swarmshake run SCENARIO --bug NAME --json`` in a child process (the
path a user's run takes, verify and reports included), bounded in time, under an
exclusive ``flock`` of ``HEAVY_LOCK`` held for that one run only: other sessions
time benchmarks under the same lock on a small machine.  Its verdict is one of
``OUTCOMES``: ``caught`` (invalid, and the bug's own property among the violated),
``invalid-other`` (invalid, but not on the bug's property), ``missed`` (valid),
``unknown`` (the checkers could not decide) or ``error`` (no verdict: the run
crashed or ran past its bound).  A control runs a scenario without any bug; its
outcome is the verdict's status (``valid`` expected), or ``error``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarmshake.reference_node.protocol.bugs import BUGS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "swarmshake.bench.bugs/1"
HEAVY_LOCK = Path("/tmp/swarmshake-heavy.lock")

# bug -> the scenario (a path under the repository) whose faults expose it on a real
# cluster.  Each scenario file says why its faults expose the bug.
BUG_SCENARIOS: dict[str, str] = {
    "no-quorum": "suites/smoke.yaml",  # the isolated n1 commits alone on its own view
    "eager-dead": "suites/gray.yaml",  # jittery latency inside the envelope: a false death
    "no-refute": "suites/bugs/false-suspicion.yaml",
    "stale-rejoin": "suites/smoke.yaml",  # n4 restarts and commits with stale parameters
    "ack-before-apply": "suites/bugs/ack-before-apply.yaml",
    "forget-vote": "suites/bugs/lost-vote.yaml",
    "no-vote-floor": "suites/bugs/stale-source.yaml",
}

BUG_OUTCOMES = ("caught", "invalid-other", "missed", "unknown", "error")
CONTROL_OUTCOMES = ("valid", "invalid", "unknown", "error")
# Beyond a scenario's own stages (steady-state wait, duration, quiesce): starting the
# cluster, tearing it down, verify, replay and reports.  The slowest seen here (a
# 50 s lost-vote run, ~37k events) takes ~60 s past its stages on 2 shared cores.
RUN_OVERHEAD_S = 240.0
TERM_GRACE_S = 20.0  # SIGTERM -> SIGKILL for a run past its bound: the runner tears down


class BugBenchError(ValueError):
    """Bad input: an unknown bug, a missing scenario; the message says the fix."""


def scenario_path(bug: str, root: Path = ROOT) -> Path:
    """The scenario file that exposes ``bug`` (an unknown name or a missing file raises)."""
    if bug not in BUGS:
        raise BugBenchError(f"unknown bug {bug!r}; known: {', '.join(sorted(BUGS))}")
    if bug not in BUG_SCENARIOS:
        raise BugBenchError(f"bug {bug!r} has no scenario in BUG_SCENARIOS (chaos/bench/bugs.py)")
    path = root / BUG_SCENARIOS[bug]
    if not path.is_file():
        raise BugBenchError(
            f"{path}: the scenario for {bug} is missing; run from a checkout of swarmshake "
            "(suites/ ships with the repository)"
        )
    return path


def parse_bugs(text: str | None) -> list[str]:
    """``--bugs a,b``'s names in registry order (default: every bug)."""
    if text is None:
        return sorted(BUGS)
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise BugBenchError(f"--bugs {text!r}: name one or more of {', '.join(sorted(BUGS))}")
    unknown = [name for name in names if name not in BUGS]
    if unknown:
        raise BugBenchError(
            f"--bugs: unknown bug {', '.join(unknown)}; known: {', '.join(sorted(BUGS))}"
        )
    return [name for name in sorted(BUGS) if name in names]


# --- judging one verdict ----------------------------------------------------------


def properties_by_status(verdict: dict[str, Any]) -> dict[str, list[str]]:
    """``{"invalid": [...], "unknown": [...]}`` from a ``verdict.json`` document."""
    results = verdict.get("results") or {}
    return {
        status: sorted(name for name, r in results.items() if r.get("status") == status)
        for status in ("invalid", "unknown")
    }


def classify(verdict: dict[str, Any] | None, breaks: str | None) -> str:
    """One outcome of ``BUG_OUTCOMES`` (``breaks``: the bug's property) or, for a
    control (``breaks`` None), of ``CONTROL_OUTCOMES``.  ``None``: no verdict."""
    if not verdict or verdict.get("status") not in ("valid", "invalid", "unknown"):
        return "error"
    status = verdict["status"]
    if breaks is None:
        return status
    if status == "valid":
        return "missed"
    if status == "unknown":
        return "unknown"
    return "caught" if breaks in properties_by_status(verdict)["invalid"] else "invalid-other"


@dataclass
class Trial:
    bug: str | None  # None: a control, the scenario without a bug
    scenario: str
    index: int
    outcome: str
    run_dir: str | None = None
    invalid: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    message: str = ""
    wall_s: float = 0.0
    lock_wait_s: float = 0.0
    exit_code: int | None = None


def judge_run_dir(
    run_dir: Path | None, bug: str | None, scenario: str, index: int, message: str = ""
) -> Trial:
    """The trial recorded in ``run_dir`` (its ``verdict.json``; absent: ``error``)."""
    verdict: dict[str, Any] | None = None
    if run_dir is not None:
        with contextlib.suppress(OSError, ValueError):
            verdict = json.loads((run_dir / "verdict.json").read_text(encoding="utf-8"))
    breaks = BUGS[bug].breaks if bug is not None else None
    outcome = classify(verdict, breaks)
    seen = properties_by_status(verdict) if verdict else {"invalid": [], "unknown": []}
    if outcome == "error" and not message:
        message = "no verdict.json" if run_dir is not None else "no run directory"
    return Trial(
        bug=bug,
        scenario=scenario,
        index=index,
        outcome=outcome,
        run_dir=str(run_dir) if run_dir is not None else None,
        invalid=seen["invalid"],
        unknown=seen["unknown"],
        message=message,
    )


# --- running one trial --------------------------------------------------------------


@contextlib.contextmanager
def heavy_lock(path: Path = HEAVY_LOCK) -> Iterator[float]:
    """Hold an exclusive flock of ``path`` (the machine's lock for heavy runs); yields
    the seconds spent waiting for it."""
    started = time.monotonic()
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_bound_s(scenario_file: Path) -> float:
    """How long one run of ``scenario_file`` may take, all stages and checks included."""
    from swarmshake.chaos.scenario import load

    scenario = load(scenario_file)
    stages = scenario.steady_state.timeout_s + scenario.duration_s + scenario.quiesce_s
    return stages + RUN_OVERHEAD_S


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM the run's process group (the runner tears its cluster down), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(
    scenario_file: Path,
    bug: str | None,
    *,
    backend: str,
    out: Path,
    index: int,
    timeout_s: float,
    lock: Path = HEAVY_LOCK,
) -> Trial:
    """``swarmshake run SCENARIO [--bug BUG] --backend B --out OUT --json`` under the lock."""
    command = [
        sys.executable, "-m", "swarmshake", "run", str(scenario_file), "--backend", backend,
        "--out", str(out), "--json", "--quiet", *(["--bug", bug] if bug else []),
    ]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CI": "1"}
    scenario = _relative(scenario_file)
    with heavy_lock(lock) as waited:
        started = time.monotonic()
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
            message = ""
        except subprocess.TimeoutExpired:
            _stop(process)
            stdout, stderr = process.communicate()
            message = f"ran past its bound of {timeout_s:.0f} s; stopped"
        wall_s = time.monotonic() - started
    result: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        result = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
    run_dir = Path(result["run_dir"]) if result.get("run_dir") else _newest_run(out)
    if not result and not message:
        message = f"exit {process.returncode}: {stderr.strip()[-400:]}"
    trial = judge_run_dir(run_dir, bug, scenario, index, message)
    trial.wall_s = round(wall_s, 1)
    trial.lock_wait_s = round(waited, 1)
    trial.exit_code = process.returncode
    if not trial.message and result.get("message"):
        trial.message = str(result["message"])[:400]
    return trial


def _newest_run(out: Path) -> Path | None:
    """A run stopped before printing its result: its directory, if it made one."""
    dirs = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()] if out.is_dir() else []
    return max(dirs, key=lambda p: p.stat().st_mtime) if dirs else None


def _relative(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(ROOT))
    return str(path)


# --- the plan and the tally ---------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    bug: str | None
    scenario_file: Path
    index: int


def plan(bugs: list[str], trials: int, controls: int, root: Path = ROOT) -> list[Planned]:
    """Round-robin: trial 1 of every bug, then trial 2, ... (a run stopped early still
    has every bug at n or n - 1 trials); the controls of each distinct scenario are
    spread evenly between the rounds (10 trials, 2 controls: after rounds 3 and 7)."""
    files = {bug: scenario_path(bug, root) for bug in bugs}
    scenarios = list(dict.fromkeys(files.values()))
    after_round = {
        max(1, min(trials, round(k * trials / (controls + 1)))) if trials >= controls else k: k
        for k in range(1, controls + 1)
    }
    order: list[Planned] = []
    control = 0
    for index in range(1, max(trials, controls) + 1):
        if index <= trials:
            order += [Planned(bug, files[bug], index) for bug in bugs]
        while control < controls and (
            after_round.get(index) == control + 1 or index == max(trials, controls)
        ):
            control += 1
            order += [Planned(None, path, control) for path in scenarios]
    return order


def tally(trials: list[Trial], bugs: list[str]) -> dict[str, Any]:
    """Per bug: counts of each outcome, properties seen invalid, run dirs; per scenario:
    the controls' outcomes."""
    per_bug: dict[str, Any] = {}
    for bug in bugs:
        mine = [t for t in trials if t.bug == bug]
        seen: dict[str, int] = {}
        for t in mine:
            for prop in t.invalid:
                seen[prop] = seen.get(prop, 0) + 1
        per_bug[bug] = {
            "property": BUGS[bug].breaks,
            "scenario": BUG_SCENARIOS[bug],
            "trials": len(mine),
            **{outcome: sum(t.outcome == outcome for t in mine) for outcome in BUG_OUTCOMES},
            "invalid_properties": dict(sorted(seen.items())),
            "run_dirs": [t.run_dir for t in mine],
            "outcomes": [t.outcome for t in mine],
        }
    controls: dict[str, Any] = {}
    for t in trials:
        if t.bug is not None:
            continue
        row = controls.setdefault(
            t.scenario,
            {"trials": 0, **dict.fromkeys(CONTROL_OUTCOMES, 0), "runs": []},
        )
        row["trials"] += 1
        row[t.outcome] += 1
        row["runs"].append(
            {"run_dir": t.run_dir, "outcome": t.outcome, "invalid": t.invalid,
             "unknown": t.unknown}
        )  # fmt: skip
    return {"bugs": per_bug, "controls": controls}


def bench_document(
    trials: list[Trial], bugs: list[str], *, command: str, backend: str, started: str
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "command": command,
        "backend": backend,
        "started": started,
        "finished": now_utc(),
        **tally(trials, bugs),
        "trials": [asdict(t) for t in trials],
    }


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _control_for(document: dict[str, Any], scenario: str) -> str:
    row = document["controls"].get(scenario)
    return f"{row['valid']}/{row['trials']}" if row else "—"


def _others(row: dict[str, Any]) -> str:
    parts = [f"{row[o]} {o}" for o in ("invalid-other", "missed", "unknown", "error") if row[o]]
    return ", ".join(parts) or "—"


def markdown(document: dict[str, Any]) -> str:
    lines = [
        f"`{document['command']}` ({document['backend']} backend, "
        f"{document['started']} – {document['finished']})",
        "",
        "| bug | property | scenario | caught | other verdicts | properties invalid (runs) "
        "| controls valid |",
        "|---|---|---|---:|---|---|---:|",
    ]
    for bug, row in document["bugs"].items():
        seen = ", ".join(f"{p} {n}" for p, n in row["invalid_properties"].items()) or "—"
        lines.append(
            f"| {bug} | {row['property']} | `{row['scenario']}` | {row['caught']}/{row['trials']} "
            f"| {_others(row)} | {seen} | {_control_for(document, row['scenario'])} |"
        )
    if document["controls"]:
        lines += ["", "| control scenario (no bug) | valid | invalid | unknown | error |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for scenario, row in document["controls"].items():
            lines.append(
                f"| `{scenario}` | {row['valid']}/{row['trials']} | {row['invalid']} "
                f"| {row['unknown']} | {row['error']} |"
            )
    lines += ["", "Runs:", ""]
    for t in document["trials"]:
        who = t["bug"] or "control"
        extra = f" (invalid: {', '.join(t['invalid'])})" if t["invalid"] else ""
        note = f" — {t['message']}" if t["outcome"] == "error" else ""
        lines.append(
            f"- {who} #{t['index']} `{t['scenario']}`: {t['outcome']}{extra}, "
            f"{t['wall_s']} s, `{t['run_dir']}`{note}"
        )
    return "\n".join(lines) + "\n"


def rich_table(document: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"planted bugs, {document['backend']} backend")
    for column in ("bug", "property", "scenario", "caught", "other", "invalid seen", "controls"):
        table.add_column(column, justify="right" if column in ("caught", "controls") else "left")
    for bug, row in document["bugs"].items():
        seen = ", ".join(f"{p}×{n}" for p, n in row["invalid_properties"].items()) or "—"
        table.add_row(
            bug, row["property"], row["scenario"], f"{row['caught']}/{row['trials']}",
            _others(row), seen, _control_for(document, row["scenario"]),
        )  # fmt: skip
    return table


def write_files(document: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bugs.json", out / "summary.md"]
    paths[0].write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(document), encoding="utf-8")
    return paths


RunOne = Callable[..., Trial]


def run_bench(
    planned: list[Planned],
    *,
    backend: str,
    out: Path,
    run_one_fn: RunOne = run_one,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    on_trial: Callable[[list[Trial]], None] = lambda trials: None,
    deadline: float | None = None,
) -> list[Trial]:
    """Every planned trial in order; ``on_trial`` after each (the bench rewrites its
    files then, so a stopped bench keeps what finished).  Past ``deadline``
    (``time.time()``), no new trial starts."""
    trials: list[Trial] = []
    bounds: dict[Path, float] = {}
    for number, item in enumerate(planned, 1):
        if deadline is not None and time.time() >= deadline:
            progress(f"deadline reached: {number - 1} of {len(planned)} trials ran")
            break
        if item.scenario_file not in bounds:
            bounds[item.scenario_file] = run_bound_s(item.scenario_file)
        who = item.bug or "control"
        runs = out / "runs" / (item.bug or "control")
        trial = run_one_fn(
            item.scenario_file, item.bug, backend=backend, out=runs, index=item.index,
            timeout_s=bounds[item.scenario_file],
        )  # fmt: skip
        trials.append(trial)
        seen = f" [{', '.join(trial.invalid)}]" if trial.invalid else ""
        progress(
            f"[{number}/{len(planned)}] {who} #{item.index} ({_relative(item.scenario_file)}): "
            f"{trial.outcome}{seen} in {trial.wall_s:.0f} s (lock wait {trial.lock_wait_s:.0f} s)"
        )
        on_trial(trials)
    return trials
