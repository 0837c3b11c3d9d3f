"""One simulated run: build the cluster, apply the schedule, check the history.

``run_simulation(config, schedule) -> SimRun`` is what ``swarmshake sim`` and
``swarmshake explore --backend sim`` call.  Everything the run does follows from
``config`` (its seed, every knob) and ``schedule``: the ``digest`` over the history
lines is equal for equal inputs, in any process (no ``hash()``, no wall clock, no
unsorted set iteration anywhere in the simulator or the cores).
"""

from __future__ import annotations

import functools
import gc
import math
import operator
import time
from pathlib import Path

import msgspec

from swarmshake.chaos import faults
from swarmshake.chaos.sim.app import AppSettings, NodeApp, NodeDisk
from swarmshake.chaos.sim.engine import NodeProcess, Simulation
from swarmshake.chaos.sim.nemesis import Nemesis
from swarmshake.chaos.sim.network import LinkProfile, Network
from swarmshake.chaos.sim.recorder import Recorder
from swarmshake.chaos.sim.rng import RngStreams
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol.bugs import BugSet
from swarmshake.reference_node.protocol.detector import DetectorConfig
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.history import HARNESS, Commit, History, RunMark
from swarmshake.reference_node.protocol.structs import check_name
from swarmshake.verify.checkers import Bounds, Verdict, build_timeline, check_history
from swarmshake.verify.checkers.detector import detection_delays_s, false_positive_refs
from swarmshake.verify.checkers.model import overall_status

_T_MONO = operator.attrgetter("t_mono")
MAX_NODES = 2048  # the cores' MAX_CLUSTER_NODES
DETECTOR_PROPERTIES = ("S4", "L1")  # what a run without training can judge
MAX_DURATION_S = 7 * 86_400.0  # a week of virtual time: beyond that say what you want


class SimConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    nodes: int = 8
    duration_s: float = 60.0
    seed: int = 0
    bugs: tuple[str, ...] = ()
    delay_ms: float = 50.0
    jitter_ms: float = 25.0
    training: bool = True  # False: detector and membership only (no step commits)
    # False: the simulator vouches for no heartbeat stream (every heartbeat is handed
    # over before each event, every watch deadline wakes its node): slow, for tests
    # that check the lazy path against it.
    lazy: bool = True
    app: AppSettings = AppSettings()
    detector: DetectorConfig = DetectorConfig()
    bounds: Bounds = Bounds()
    # The nodes' names; empty: n0..n{nodes-1}, zero-padded.  A suite names its own
    # (``swarmshake run --backend sim``: n1..nN, as on the real backends).
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes = {self.nodes} must lie in [1, {MAX_NODES}]")
        if self.names:
            if len(self.names) != self.nodes or len(set(self.names)) != self.nodes:
                raise ValueError(f"names must be {self.nodes} distinct node names")
            for name in self.names:  # the node core's own rule for a name
                try:
                    check_name(name, "node name")
                except LocalProtocolError as error:
                    raise ValueError(str(error)) from None
        if not 0.0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"duration_s = {self.duration_s} must lie in (0, {MAX_DURATION_S}]")
        if not 0 <= self.seed < 2**63:
            raise ValueError("seed must be a non-negative 63-bit integer")
        if self.jitter_ms < 0 or self.delay_ms < self.jitter_ms:
            raise ValueError("need 0 <= jitter_ms <= delay_ms")
        BugSet.parse(list(self.bugs))


class RunPhases(msgspec.Struct, frozen=True):
    """A suite's phases in virtual seconds, as the real runner has them: its fault
    schedule counts from ``steady_state_s`` (every node committing) and its triggers
    are armed until ``faults_end_s``; both are logged as the runner's harness marks
    (``steady_state`` starts the L2 window)."""

    steady_state_s: float
    faults_end_s: float

    def marks(self) -> tuple[tuple[float, str], ...]:
        return ((self.steady_state_s, "steady_state"), (self.faults_end_s, "faults_end"))


class DetectionMs(msgspec.Struct, frozen=True):
    p50: float | None
    p99: float | None
    max: float | None


class Violation(msgspec.Struct, frozen=True):
    property: str
    message: str
    evidence: list[dict]


class SimResult(msgspec.Struct, frozen=True):
    nodes: int
    sim_seconds: float
    wall_seconds: float
    events: int
    commits: int
    violations: list[Violation]
    detection_ms: DetectionMs
    false_positives: int
    digest: str
    status: str  # the verdict: valid | invalid | unknown
    seed: int
    bugs: list[str]
    faults_injected: int
    run_dir: str | None = None
    # The schedule's entries never applied (a trigger that never matched, a time past
    # the run): a suite's verdict is unknown with them (chaos.runner.with_untested).
    faults_never_fired: list[int] = []


class SimRun(msgspec.Struct):
    result: SimResult
    history: History
    verdict: Verdict


def _percentile(sorted_values: list[float], fraction: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def run_simulation(
    config: SimConfig,
    schedule: faults.FaultSchedule | None = None,
    out_dir: Path | None = None,
    phases: RunPhases | None = None,
) -> SimRun:
    """``phases``: the fault window of a suite's run (``chaos/sim/suite.py``); without
    it the schedule counts from the run's start and no phase is marked."""
    # The cyclic garbage collector is paused for the whole run: the loop makes
    # millions of short-lived containers and almost no cycles (a crashed process and
    # its app, one pair per crash, cut by ``Simulation.release``), so its collections
    # found nothing yet walked every live object of the growing history (10 nodes: 9%
    # of the run), and after the loop they walked the finished history again while
    # the checkers read it (10 nodes x 600 s: 20-55 ms, 3-7% of the run).  Nothing
    # here has a finalizer or a weak reference, so collecting later changes nothing
    # else; a caller that drops the run frees it by reference counting.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _simulate(config, schedule, out_dir, phases)
    finally:
        if collecting:
            gc.enable()


def _simulate(
    config: SimConfig,
    schedule: faults.FaultSchedule | None,
    out_dir: Path | None,
    phases: RunPhases | None,
) -> SimRun:
    schedule = schedule or faults.FaultSchedule()
    wall_start = time.perf_counter()
    bugs = BugSet.parse(list(config.bugs))
    rngs = RngStreams(config.seed)
    recorder = Recorder(out_dir)
    network = Network(LinkProfile(delay_ms=config.delay_ms, jitter_ms=config.jitter_ms), rngs)
    disks: dict[str, NodeDisk] = {}

    def make_app(sim: Simulation, proc: NodeProcess) -> NodeApp:
        disk = disks.setdefault(proc.name, NodeDisk())
        return NodeApp(sim, proc, config.app, disk, nc.is_first_start(proc.incarnation))

    sim = Simulation(
        nodes=config.nodes,
        seed=config.seed,
        bugs=bugs,
        network=network,
        rngs=rngs,
        recorder=recorder,
        app_factory=make_app if config.training else None,
        vouch=config.lazy,
        detector_config=config.detector,
        names=config.names,
    )
    window = (phases.steady_state_s, phases.faults_end_s) if phases else (0.0, math.inf)
    nemesis = Nemesis(sim, schedule, rngs.get("nemesis"), window=window)
    mark = RunMark(
        t_wall=0.0, t_mono=0.0, node=HARNESS, mark="run_start", data={"seed": config.seed}
    )
    recorder.log(mark)
    if phases is not None:
        for t_mark, name in phases.marks():
            sim.call_at(t_mark, functools.partial(_log_mark, recorder, t_mark, name))
    for name in sim.names:
        sim.start(name, 0.0)
    sim.run(config.duration_s)
    never_fired = nemesis.never_fired()
    if never_fired and phases is not None:
        # As the real runner records it (an incident mark), so the reports list it;
        # stamped at the run's end, the harness's last instant (its marks stay in order).
        incident = {"kind": "faults_never_fired", "entries": never_fired}
        _log_mark(recorder, config.duration_s, "incident", incident)
    _log_mark(recorder, config.duration_s, "run_end")
    recorder.close()
    sim.release()
    # History's order is (t_mono, lamport, node).  The recorder's events are in Lamport
    # order (one counter for the run, each event logged as it is stamped; run_start is
    # 0), so a stable sort on t_mono alone gives that order, five times faster than
    # the three-field key (tests/chaos/sim/test_sim_digest.py checks it).
    history = History(events=sorted(recorder.events, key=_T_MONO))
    try:
        timeline = build_timeline(history, config.bounds)
    except Exception:  # noqa: BLE001 - check_history builds it again and says unknown
        timeline = None
    verdict = check_history(history, config.bounds, timeline=timeline)
    if not config.training:
        # Without steps only the detector's properties say anything about this run.
        verdict.results = {p: r for p, r in verdict.results.items() if p in DETECTOR_PROPERTIES}
        verdict.status = overall_status(verdict.results)
    if timeline is None:
        timeline = build_timeline(history, config.bounds)  # raises, as it did before
    delays, _ = detection_delays_s(history, timeline, config.bounds)
    delays_ms = sorted(d * 1000.0 for d in delays)
    false_positives, _ = false_positive_refs(history, timeline, config.bounds)
    violations = [
        Violation(
            property=name,
            message=result.message,
            evidence=[msgspec.to_builtins(ref) for ref in result.evidence[:5]],
        )
        for name, result in verdict.results.items()
        if result.status == "invalid"
    ]
    result = SimResult(
        nodes=config.nodes,
        sim_seconds=config.duration_s,
        wall_seconds=round(time.perf_counter() - wall_start, 3),
        events=recorder.count,
        commits=len(history.indexed(Commit)),
        violations=violations,
        detection_ms=DetectionMs(
            p50=_round(_percentile(delays_ms, 0.5)),
            p99=_round(_percentile(delays_ms, 0.99)),
            max=_round(delays_ms[-1] if delays_ms else None),
        ),
        false_positives=len(false_positives),
        digest=recorder.digest(),
        status=verdict.status,
        seed=config.seed,
        bugs=list(config.bugs),
        faults_injected=nemesis.injected,
        faults_never_fired=never_fired,
        run_dir=str(out_dir) if out_dir is not None else None,
    )
    if out_dir is not None:
        _write_run_dir(out_dir, config, schedule, verdict)
    return SimRun(result=result, history=history, verdict=verdict)


def _log_mark(recorder: Recorder, t: float, name: str, data: dict | None = None) -> None:
    lamport = recorder.next_lamport(HARNESS)
    recorder.log(
        RunMark(t_wall=t, t_mono=t, node=HARNESS, lamport=lamport, mark=name, data=data or {})
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _write_run_dir(
    out_dir: Path, config: SimConfig, schedule: faults.FaultSchedule, verdict: Verdict
) -> None:
    resolved = {
        "backend": "sim",
        "seed": config.seed,
        "config": msgspec.to_builtins(config),
        "faults": msgspec.to_builtins(schedule)["entries"],
    }
    (out_dir / "scenario.yaml").write_bytes(msgspec.yaml.encode(resolved))
    (out_dir / "bounds.json").write_bytes(msgspec.json.encode(config.bounds))
    (out_dir / "verdict.json").write_bytes(verdict.to_json())
