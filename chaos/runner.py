"""Runs one scenario on a real backend, end to end (DESIGN.md, "A run, end to end").

up → wait for steady state → start load (a scenario's ``load:``: Locust users on
``/infer``) → apply the fault schedule (timed entries and event triggers) → heal
everything and quiesce → stop load → collect → down → verify (history checkers,
convergence, replay) → report hook.  Writes the run directory::

    runs/<run-id>/scenario.yaml   the resolved scenario (seed, drawn faults): rerunnable
    runs/<run-id>/run.json        environment (git commit, torch, threads, CPU flags),
                                  timings, incidents, outcome
    runs/<run-id>/bounds.json     the checker bounds (``swarmshake verify`` reads them)
    runs/<run-id>/events/         <node>.jsonl and harness.jsonl
    runs/<run-id>/checkpoints/    <node>/…
    runs/<run-id>/logs/           node, broker, Toxiproxy and zygote output
    runs/<run-id>/load/           with load: every request (requests.jsonl), Locust's log
    runs/<run-id>/load.json       with load: availability and latency per fault window
    runs/<run-id>/verdict.json    (and convergence.json, replay.json, reports)

and points ``runs/latest`` at it.  Exit codes: 0 valid, 1 violated, 2 unknown (the
run could not decide: steady state never reached, a backend failure, a timeout, a
scenario entry that never fired or could not be applied), 64 bad input.  Every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import importlib.metadata
import os
import platform
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from swarmshake.chaos import cleanup
from swarmshake.chaos import faults as F
from swarmshake.chaos.backends import make_backend
from swarmshake.chaos.backends.base import (
    NODE_MODULE,
    Backend,
    BackendError,
    ClusterSpec,
    UnsupportedFault,
)
from swarmshake.chaos.nemesis import FaultNotApplicable, Nemesis
from swarmshake.chaos.node_status import save_statuses
from swarmshake.chaos.progress import Progress, live_allowed
from swarmshake.chaos.scenario import Scenario, dumps
from swarmshake.chaos.systems import load_system
from swarmshake.reference_node.protocol.history import HARNESS, EventBase, EventWriter, RunMark
from swarmshake.reports.rundir import run_status
from swarmshake.verify.checkers import Verdict

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_USAGE = 0, 1, 2, 64
EXIT_BY_STATUS = {"valid": EXIT_VALID, "invalid": EXIT_INVALID, "unknown": EXIT_UNKNOWN}
POLL_INTERVAL_S = 0.02  # event-trigger latency: a trigger fires within ~20 ms of its event
DOWN_DEADLINE_S = 60.0  # stopping 64 nodes, the broker and Toxiproxy; each step has its own
VERIFY_DEADLINE_S = 600.0  # replay of a long run re-trains every step on the CPU
MAX_PENDING_HEALS = 10_000  # one per schedule entry at most (faults.MAX_SCHEDULE_ENTRIES)
LOAD_START_TIMEOUT_S = 30.0  # Locust imports gevent and spawns users: seconds on a busy 2-core box
# Locust's own --run-time outlasts the fault phase and quiesce by this much: a backstop
# only, the harness stops it at the end of the quiesce.
LOAD_BACKSTOP_S = 60.0


class RunAborted(RuntimeError):
    """The run could not go on (its verdict is ``unknown``); the message says why."""


@dataclass
class RunOptions:
    out: Path = Path("runs")
    json_mode: bool = False
    quiet: bool = False
    node_program: str = NODE_MODULE
    verify: bool = True
    reports: bool = True
    run_id: str | None = None


@dataclass
class RunResult:
    run_dir: Path
    status: str  # valid | invalid | unknown
    exit_code: int
    message: str = ""
    verdict: Verdict | None = None
    violated: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "status": self.status,
            "exit_code": self.exit_code,
            "message": self.message,
            "violated": self.violated,
            "timings": self.timings,
            "verdict": msgspec.to_builtins(self.verdict) if self.verdict else None,
        }


def verdict_message(verdict: Verdict) -> str:
    """One line for a run's outcome: the violated properties' findings, else the
    undecided ones', else that every property held."""
    violated = verdict.violated()
    undecided = [n for n, r in verdict.results.items() if r.status == "unknown"]
    return (
        "; ".join(f"{name}: {verdict.results[name].message}" for name in violated)
        or "; ".join(f"{n} unknown: {verdict.results[n].message}" for n in undecided)
        or f"every property {verdict.status}"
    )


def describe_entry(entry: F.ScheduleEntry) -> str:
    """A scenario entry in a few words: its op, its targets and when it was to fire."""
    targets = ",".join(entry.op.targets())
    what = f"{entry.op.name} {targets}" if targets else entry.op.name
    when = entry.when
    if when is None:
        return f"{what} at {entry.at_s:g} s"
    step = f" of step >= {when.step_at_least}" if when.step_at_least >= 0 else ""
    return f"{what} when {when.node} logs {when.kind}{step}"


def with_untested(
    status: str, message: str, scenario: Scenario, untested: list[int]
) -> tuple[str, str]:
    """A run's outcome and message once the entries it never applied (``untested``:
    indices into ``scenario.faults``) are counted: the rule is the reports'
    (``reports.rundir.run_status``: a valid verdict becomes unknown), and the message
    names each entry."""
    if not untested:
        return status, message
    described = "; ".join(
        f"entry {index} ({describe_entry(scenario.faults[index])})" for index in untested
    )
    note = f"not tested, never applied: {described}"
    changed = run_status(status, untested)
    if changed != status:
        return changed, note  # the note is the whole story of a valid verdict
    return status, f"{message}; {note}" if message else note


def new_run_id(scenario: Scenario) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{scenario.name}-s{scenario.seed}-{secrets.token_hex(2)}"


def environment_record(scenario: Scenario) -> dict[str, Any]:
    """What bit-exact replay depends on (DESIGN: seed, commit, torch, threads, CPU flags)."""

    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent, check=False,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        commit = ""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].strip()
                break
    return {
        "seed": scenario.seed,
        "git_commit": commit or "unknown",
        "torch_version": version("torch"),
        "python": platform.python_version(),
        "threads": int(scenario.cluster.training.get("threads", 1)),
        "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def point_latest(out: Path, run_dir: Path) -> None:
    latest = out / "latest"
    tmp = out / f".latest-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, latest)


class Harness:
    """One run's moving parts; ``execute`` drives them in order."""

    def __init__(self, scenario: Scenario, options: RunOptions):
        self.scenario = scenario
        self.options = options
        self.run_id = options.run_id or new_run_id(scenario)
        self.run_dir = (options.out / self.run_id).resolve()
        self.timings: dict[str, float] = {}
        self.incidents: list[dict[str, Any]] = []
        # Scenario entries never applied (never fired, or skipped): see with_untested.
        self.untested: list[int] = []
        self.lamport = 0
        self.started = time.monotonic()
        self.writer: EventWriter | None = None
        self.backend: Backend | None = None
        self.nemesis: Nemesis | None = None
        self.registry: cleanup.Registry | None = None
        self.load: Any = None  # chaos.bench.load.LoadProcess once Locust started
        self.load_stopped = False
        self.progress = Progress(
            live=live_allowed(options.json_mode) and not options.quiet,
            quiet=options.quiet or options.json_mode,
            title=f"{scenario.name} ({scenario.cluster.backend}, seed {scenario.seed})",
        )

    # --- bookkeeping --------------------------------------------------------------------

    def mark(self, mark: str, **data: Any) -> None:
        self.lamport += 1
        self.timings[mark] = round(time.monotonic() - self.started, 3)
        if self.writer is not None:
            self.writer.write(
                RunMark(
                    t_wall=time.time(),
                    t_mono=time.monotonic(),
                    node=HARNESS,
                    lamport=self.lamport,
                    mark=mark,
                    data=data,
                )  # fmt: skip
            )
        self.progress.milestone(mark.replace("_", " ") + (f" {data}" if data else ""))

    def incident(self, kind: str, **data: Any) -> None:
        self.incidents.append(
            {"kind": kind, "t": round(time.monotonic() - self.started, 3), **data}
        )
        self.mark("incident", kind=kind, **data)

    def prepare(self) -> None:
        leftovers = cleanup.reap_stale()
        self.run_dir.mkdir(parents=True, exist_ok=False)
        (self.run_dir / "scenario.yaml").write_text(dumps(self.scenario))
        (self.run_dir / "bounds.json").write_bytes(msgspec.json.encode(self.scenario.bounds))
        self._write_record({})
        point_latest(self.options.out, self.run_dir)
        self.registry = cleanup.Registry.create(self.run_id, self.run_dir)
        self.writer = EventWriter(self.run_dir / "events" / "harness.jsonl")
        if any(leftovers.values()):
            self.incident("removed_leftovers", **leftovers)

    def _write_record(self, outcome: dict[str, Any]) -> None:
        record = {
            "run_id": self.run_id,
            "scenario": self.scenario.name,
            "backend": self.scenario.cluster.backend,
            "system": self.scenario.system,
            "produces": sorted(
                load_system(self.scenario.system, self.scenario.system_options).produces
            ),
            "nodes": self.scenario.node_names,
            "bugs": self.scenario.cluster.bugs,
            "environment": environment_record(self.scenario),
            "timings_s": self.timings,
            "incidents": self.incidents,
            **outcome,
        }
        (self.run_dir / "run.json").write_bytes(
            msgspec.json.format(msgspec.json.encode(record), indent=2)
        )

    # --- phases -------------------------------------------------------------------------

    def build_backend(self) -> Backend:
        scenario = self.scenario
        spec = ClusterSpec(
            run_id=self.run_id,
            run_dir=self.run_dir,
            nodes=tuple(scenario.node_names),
            seed=scenario.seed,
            node_config={
                "training": scenario.cluster.training_section(scenario.seed),
                **({"detector": scenario.cluster.detector} if scenario.cluster.detector else {}),
                **({"step": scenario.cluster.step} if scenario.cluster.step else {}),
            },
            bugs=tuple(scenario.cluster.bugs),
            node_program=self.options.node_program,
            direct_links=scenario.cluster.links == "direct",
            system=load_system(scenario.system, scenario.system_options),
        )
        backend = make_backend(scenario.cluster.backend, spec, self.registry)
        self.nemesis = Nemesis(backend, self.writer, seed=scenario.seed)
        for index, entry in enumerate(scenario.faults):
            try:
                self.nemesis.check_supported(entry.op)
                heal = entry.op.heal()
                if heal is not None and entry.heal_after_s is not None:
                    self.nemesis.check_supported(heal)
            except UnsupportedFault as error:
                raise UnsupportedFault(f"faults[{index}]: {error}") from None
        return backend

    async def wait_steady(self, backend: Backend) -> None:
        steady = self.scenario.steady_state
        deadline = time.monotonic() + steady.timeout_s
        while True:
            backend.events.poll()
            self.progress.update(backend.events)
            if backend.system.steady(backend.events, steady.min_commit_step):
                return
            if not any(backend.node(n).is_running() for n in backend.spec.nodes):
                log = self.run_dir / "logs" / f"{backend.spec.nodes[0]}.log"
                tail = log.read_text(errors="replace")[-600:].strip() if log.exists() else ""
                raise RunAborted(f"every node exited before steady state; {log} ends with:\n{tail}")
            if time.monotonic() > deadline:
                steps = {n: s.last_commit_step for n, s in backend.events.summaries.items()}
                raise RunAborted(
                    f"steady state (every node committed step ≥ {steady.min_commit_step}) not "
                    f"reached within {steady.timeout_s}s; last commits: {steps}"
                )
            await asyncio.sleep(0.05)

    async def run_schedule(self, backend: Backend, nemesis: Nemesis) -> None:
        scenario = self.scenario
        t0 = time.monotonic()
        heals: set[asyncio.Task[None]] = set()
        fired = [False] * len(scenario.faults)
        failures: list[BaseException] = []

        async def fire(index: int, entry: F.ScheduleEntry) -> None:
            fired[index] = True
            try:
                await nemesis.inject(entry.op)
            except FaultNotApplicable as error:
                self.incident("fault_skipped", entry=index, reason=str(error))
                self.untested.append(index)
                return
            except BackendError as error:
                failures.append(error)
                return
            if entry.heal_after_s is not None and len(heals) < MAX_PENDING_HEALS:
                task = asyncio.create_task(heal_later(index, entry))
                heals.add(task)
                task.add_done_callback(heals.discard)

        async def heal_later(index: int, entry: F.ScheduleEntry) -> None:
            await asyncio.sleep(entry.heal_after_s or 0.0)
            try:
                await nemesis.heal(entry.op)
            except BackendError as error:
                failures.append(error)

        counts: dict[int, int] = {}
        pending_triggers = {i: e for i, e in enumerate(scenario.faults) if e.when is not None}
        triggered: list[int] = []

        def on_event(event: EventBase) -> None:
            for index, entry in list(pending_triggers.items()):
                when = entry.when
                assert when is not None
                if (
                    event.node == when.node
                    and event.__struct_config__.tag == when.kind
                    and event.step >= when.step_at_least
                ):
                    counts[index] = counts.get(index, 0) + 1
                    if counts[index] >= when.count:
                        del pending_triggers[index]
                        triggered.append(index)

        backend.events.subscribe(on_event)
        timed = sorted(
            (entry.at_s or 0.0, i, entry)
            for i, entry in enumerate(scenario.faults)
            if entry.at_s is not None
        )
        running: set[asyncio.Task[None]] = set()
        try:
            end = t0 + scenario.duration_s
            while time.monotonic() < end:
                backend.events.poll()
                now = time.monotonic() - t0
                while timed and timed[0][0] <= now:
                    _, index, entry = timed.pop(0)
                    running.add(asyncio.create_task(fire(index, entry)))
                while triggered:
                    index = triggered.pop(0)
                    running.add(asyncio.create_task(fire(index, scenario.faults[index])))
                running = {t for t in running if not t.done()}
                if failures:
                    raise RunAborted(f"a fault could not be applied: {failures[0]}")
                self.progress.update(backend.events)
                await asyncio.sleep(POLL_INTERVAL_S)
            if running:
                await asyncio.wait(running, timeout=30.0)
        finally:
            backend.events.unsubscribe(on_event)
            for task in [*running, *heals]:
                task.cancel()
            for task in [*running, *heals]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        never = [i for i, was in enumerate(fired) if not was]
        if never:
            self.incident("faults_never_fired", entries=never)
            self.untested.extend(never)

    async def start_load(self, backend: Backend) -> None:
        """Start the scenario's Locust users and wait until requests flow, so the fault
        phase runs under load.  Load is the run's companion, not its subject: a load
        that cannot start is an incident, and the run goes on without it."""
        spec = self.scenario.load
        if spec is None:
            return
        # Imported here: only scenarios with load need it (Locust itself never is).
        from swarmshake.chaos.bench import load as load_module
        from swarmshake.reference_node.training.config import TrainingConfig

        scenario = self.scenario
        try:
            targets, networks = load_module.node_http_targets(backend)
            self.load = load_module.start_load(
                targets,
                allowed_networks=networks,
                users=spec.users,
                spawn_rate=spec.spawn_rate,
                rate_per_user=spec.rate_per_user,
                batch=spec.batch,
                input_dim=TrainingConfig(
                    **scenario.cluster.training_section(scenario.seed)
                ).input_dim,
                duration_s=min(
                    scenario.duration_s + scenario.quiesce_s + LOAD_BACKSTOP_S,
                    load_module.MAX_DURATION_S,
                ),
                run_dir=self.run_dir,
            )
        except (load_module.LoadConfigError, OSError) as error:
            self.incident("load_failed", reason=str(error))
            return
        if self.registry is not None:
            self.registry.add_process("locust", self.load.process.pid)
        deadline = time.monotonic() + LOAD_START_TIMEOUT_S
        while load_module.records_so_far(self.load) == 0:
            backend.events.poll()
            self.progress.update(backend.events)
            if self.load.process.poll() is not None or time.monotonic() > deadline:
                log = (
                    self.load.log.read_text(errors="replace")[-600:]
                    if self.load.log.exists()
                    else ""
                )
                await self.stop_load(record=False)
                self.incident(
                    "load_failed",
                    reason=f"no request recorded within {LOAD_START_TIMEOUT_S:.0f}s; "
                    f"Locust's log ends with: {log.strip()}",
                )
                self.load = None
                return
            await asyncio.sleep(0.05)
        self.mark("load_start", users=spec.users, targets=len(targets), pid=self.load.process.pid)

    async def stop_load(self, *, record: bool = True) -> None:
        """Stop Locust (bounded: stop_load escalates to SIGKILL) without blocking the loop."""
        if self.load is None or self.load_stopped:
            return
        self.load_stopped = True
        from swarmshake.chaos.bench import load as load_module

        exit_status = await asyncio.to_thread(load_module.stop_load, self.load, stop_now=True)
        if self.registry is not None:
            self.registry.remove_process("locust")
        if record:
            self.mark(
                "load_stop", requests=load_module.records_so_far(self.load), exit_status=exit_status
            )

    def write_load_results(self) -> None:
        """``load.json``, once the history is complete (after down)."""
        if self.load is None:
            return
        from swarmshake.chaos.bench import load as load_module

        try:
            load_module.write_load_results(self.load, self.run_dir)
        except (load_module.LoadRunError, ValueError, OSError) as error:
            self.incident("load_failed", reason=str(error))

    async def quiesce(self, backend: Backend, nemesis: Nemesis) -> None:
        await nemesis.heal_all()
        self.mark("quiesce", seconds=self.scenario.quiesce_s)
        end = time.monotonic() + self.scenario.quiesce_s
        while time.monotonic() < end:
            backend.events.poll()
            self.progress.update(backend.events)
            await asyncio.sleep(0.1)
        await self.stop_load()

    async def execute(self) -> RunResult:
        status, message = "unknown", ""
        backend: Backend | None = None
        interrupted = False
        try:
            try:
                self.prepare()
                self.mark("run_start", run_id=self.run_id, seed=self.scenario.seed)
                backend = self.backend = self.build_backend()
                with self.progress:
                    await backend.up()
                    self.mark("cluster_up", **getattr(backend, "timings", {}))
                    await self.wait_steady(backend)
                    self.mark("steady_state")
                    await self.start_load(backend)
                    assert self.nemesis is not None
                    await self.run_schedule(backend, self.nemesis)
                    self.mark("faults_end")
                    await self.quiesce(backend, self.nemesis)
                    self.mark("run_end")
                    backend.events.poll()
            except (RunAborted, BackendError) as error:
                message = str(error)
                self.incident("aborted", reason=message)
                if backend is not None:
                    await self._save_statuses(backend)
            except asyncio.CancelledError:
                interrupted = True  # Ctrl-C or SIGTERM
                raise
            except Exception as error:  # noqa: BLE001 - a harness bug: the run is undecided
                message = f"harness error: {type(error).__name__}: {error}"
                self.incident("harness_error", reason=message)
        finally:
            # An aborted or interrupted run stops its load before the cluster goes down.
            await asyncio.shield(self.stop_load(record=not interrupted))
            if backend is not None:
                await self._down(backend)
            if interrupted:
                self.incident("interrupted")
                if self.writer is not None:
                    self.writer.close()
                if self.run_dir.is_dir():
                    self._write_record(
                        {"status": "unknown", "exit_code": EXIT_UNKNOWN, "message": "interrupted"}
                    )
                if self.registry is not None:
                    self.registry.close()
        return await self.finish(status, message)

    async def _save_statuses(self, backend: Backend) -> None:
        """Each node's own status page, kept before the cluster goes down
        (chaos/node_status.py says why); recorded as an incident naming the files."""
        try:
            saved = await save_statuses(backend, self.run_dir)
        except (BackendError, OSError) as error:
            saved = {"*": f"not saved: {error}"}
        if saved:
            self.incident("node_status_saved", nodes=saved)

    async def _down(self, backend: Backend) -> None:
        try:
            async with asyncio.timeout(DOWN_DEADLINE_S):
                await asyncio.shield(backend.down())
        except (TimeoutError, BackendError) as error:
            self.incident("down_failed", reason=repr(error))
        for incident in getattr(backend, "incidents", []):
            self.incident(
                incident.get("kind", "backend"),
                **{k: v for k, v in incident.items() if k != "kind"},
            )
        self.mark("cluster_down")

    async def finish(self, status: str, message: str) -> RunResult:
        verdict: Verdict | None = None
        aborted = bool(message)
        await asyncio.to_thread(self.write_load_results)
        if self.options.verify and not aborted:
            verdict = await asyncio.wait_for(asyncio.to_thread(self._verify), VERIFY_DEADLINE_S)
            status = verdict.status
        elif self.options.verify:
            # An aborted run is still checked: a violation seen before the abort counts.
            with contextlib.suppress(Exception):
                verdict = await asyncio.wait_for(asyncio.to_thread(self._verify), VERIFY_DEADLINE_S)
                if verdict.status == "invalid":
                    status = "invalid"
        violated = verdict.violated() if verdict else []
        if verdict and not message:
            message = verdict_message(verdict)
        status, message = with_untested(status, message, self.scenario, sorted(self.untested))
        self.mark("verdict", status=status, violated=violated)
        if self.writer is not None:
            self.writer.close()
        if self.options.reports:
            self._report_hook()
        exit_code = EXIT_BY_STATUS[status]
        self._write_record(
            {"status": status, "exit_code": exit_code, "message": message, "violated": violated}
        )
        if self.registry is not None:
            self.registry.close()
        return RunResult(self.run_dir, status, exit_code, message, verdict, violated, self.timings)

    def _verify(self) -> Verdict:
        from swarmshake.chaos.commands.verify import verify_run_dir

        verdict = verify_run_dir(self.run_dir, self.scenario.bounds)
        self._extra_checks()
        return verdict

    def _extra_checks(self) -> None:
        """Convergence against the fault-free baseline and deterministic replay.

        Informational files next to the verdict; a crash in them is recorded, never
        turned into a pass (Jepsen's rule: a checker that throws says unknown)."""
        from swarmshake.reference_node.protocol.history import History
        from swarmshake.reference_node.training.config import TrainingConfig

        if not load_system(self.scenario.system, self.scenario.system_options).replays_training:
            # Both re-run the reference training code; a system with its own
            # training loop is not reproduced here, so neither can decide.
            reason = (
                f"system {self.scenario.system}: convergence and replay re-run the reference "
                "node's training, which this system does not run"
            )
            for name in ("convergence", "replay"):
                (self.run_dir / f"{name}.json").write_bytes(
                    msgspec.json.encode({"status": "unknown", "message": reason})
                )
            return
        history = History.load(self.run_dir)
        checks: dict[str, Callable[[], Any]] = {}
        try:
            from swarmshake.verify.convergence import check_history_convergence
            from swarmshake.verify.replay import replay_history

            config = TrainingConfig(**self.scenario.cluster.training_section(self.scenario.seed))
            checks["convergence"] = lambda: check_history_convergence(
                history, config, nodes=self.scenario.node_names
            )
            checks["replay"] = lambda: replay_history(history, config)
        except ImportError as error:
            self.incidents.append({"kind": "checks_unavailable", "reason": str(error)})
        for name, check in checks.items():
            try:
                result = check()
                (self.run_dir / f"{name}.json").write_bytes(
                    msgspec.json.format(msgspec.json.encode(result), indent=2)
                )
            except Exception as error:  # noqa: BLE001 - recorded as unknown, never a pass
                (self.run_dir / f"{name}.json").write_bytes(
                    msgspec.json.encode(
                        {"status": "unknown", "message": f"{type(error).__name__}: {error}"}
                    )
                )

    def _report_hook(self) -> None:
        try:
            reports = importlib.import_module("swarmshake.reports")
        except ImportError:
            return
        write = getattr(reports, "write_run_reports", None)
        if write is None:
            return
        try:
            write(self.run_dir)
        except Exception as error:  # noqa: BLE001 - a report failure must not change the verdict
            self.incidents.append(
                {"kind": "report_failed", "reason": f"{type(error).__name__}: {error}"}
            )


async def run_scenario(scenario: Scenario, options: RunOptions) -> RunResult:
    """Run a *resolved* scenario (``scenario.resolve``); never leaves processes behind."""
    harness = Harness(scenario, options)
    return await harness.execute()


T = TypeVar("T")


def run_until_stopped(work: Coroutine[Any, Any, T]) -> T:
    """``work`` under ``asyncio.run`` with SIGTERM treated like Ctrl-C: the work is
    cancelled, every cluster it started comes down (the runner's ``finally``), and
    ``KeyboardInterrupt`` is raised to the caller.  Every blocking entry point that
    starts clusters goes through here: ``timeout 1200 swarmshake explore`` once
    killed explore mid-run and left its torchft nodes, Lighthouse and namespaces
    running (session 8), since explore had no SIGTERM handler of its own."""

    async def main() -> T:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        return await work

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


def run_blocking(scenario: Scenario, options: RunOptions) -> RunResult:
    """``run_scenario`` until it ends or SIGTERM / Ctrl-C stops it (``run_until_stopped``)."""
    return run_until_stopped(run_scenario(scenario, options))
