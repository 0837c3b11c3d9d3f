"""Hand-built run histories with known answers, for the report and benchmark tests.

``build_history`` plays a small cluster step by step: every up node trains and commits
each step (one fingerprint per step), crashes and pauses are detected by every other
node after ``detection_s``, the next commit after a fault leaves the victim out and
comes ``stall_s`` after it, and a restarted node rejoins ``rejoin_s`` after its start.
Because the timing is set by the caller, a test knows the exact detection, recovery
and rejoin a correct measurement must find.  Loaded by path from conftest.py files
(tests folders are not packages).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

from swarmshake.reference_node.protocol.history import (
    HARNESS,
    Accept,
    Commit,
    DeclareAlive,
    DeclareDead,
    EventBase,
    Fault,
    LoopStall,
    Ready,
    RejoinBegin,
    RejoinDone,
    RunMark,
    Start,
    Suspect,
    TrainStep,
    write_history,
)

T_WALL_ORIGIN = 1_795_000_000.0  # a fixed wall clock (2026) so outputs are reproducible


@dataclass
class PlannedFault:
    op: str  # crash | pause | latency
    victim: str
    at_s: float
    heal_s: float | None = None  # crash: restart time; pause: resume time


@dataclass
class Plan:
    nodes: int = 4
    duration_s: float = 12.0
    step_s: float = 0.1
    detection_s: float = 0.25
    stall_s: float = 0.4  # fault → first commit without the victim
    rejoin_s: float = 0.8  # restart → rejoin_done with the majority's fingerprint
    faults: list[PlannedFault] = field(default_factory=list)
    false_positive_at_s: float | None = None  # n1 declares live n2 dead here (S4 breaks)
    diverge_step: int | None = None  # one node commits another fingerprint (S1 breaks)
    seed: int = 7
    loss_offset: float = 0.0
    loop_stalls: list[tuple[str, float, float]] = field(default_factory=list)  # node, at s, ms


def _fp(step: int, salt: str = "") -> str:
    return hashlib.blake2b(f"{step}{salt}".encode(), digest_size=8).hexdigest()


def build_history(plan: Plan) -> list[EventBase]:
    names = [f"n{i}" for i in range(1, plan.nodes + 1)]
    events: list[EventBase] = []
    lamport = 0

    def emit(cls: type[EventBase], t: float, node: str, **fields: object) -> None:
        nonlocal lamport
        lamport += 1
        events.append(cls(t_wall=T_WALL_ORIGIN + t, t_mono=t, node=node, lamport=lamport, **fields))

    incarnation = dict.fromkeys(names, 0)
    up = dict.fromkeys(names, True)
    paused = dict.fromkeys(names, False)
    excluded: set[str] = set()
    back_at: dict[str, float] = {}
    config = {"voters": names}
    emit(RunMark, 0.0, HARNESS, mark="run_start", data={"seed": plan.seed})
    for name in names:
        emit(
            Start,
            0.001,
            name,
            seed=plan.seed,
            git_commit="abc1234",
            torch_version="2.15",
            config=config,
        )
        emit(Ready, 0.002, name)
    stall_until = 0.0
    pending = sorted(plan.faults, key=lambda f: f.at_s)
    heals: list[tuple[float, PlannedFault]] = []
    step = 0
    t = plan.step_s
    while t < plan.duration_s:
        for f in [f for f in pending if f.at_s <= t]:
            pending.remove(f)
            emit(Fault, f.at_s, HARNESS, op=f.op, target=[f.victim], phase="inject")
            if f.op == "crash":
                up[f.victim] = False
            elif f.op == "pause":
                paused[f.victim] = True
            if f.op in ("crash", "pause"):
                excluded.add(f.victim)
                stall_until = f.at_s + plan.stall_s
                for index, observer in enumerate(n for n in names if n != f.victim and up[n]):
                    emit(
                        Suspect,
                        f.at_s + plan.detection_s * 0.6,
                        observer,
                        peer=f.victim,
                        peer_incarnation=incarnation[f.victim],
                    )
                    emit(
                        DeclareDead,
                        f.at_s + plan.detection_s - 0.001 * index,
                        observer,
                        peer=f.victim,
                        peer_incarnation=incarnation[f.victim],
                    )
            if f.heal_s is not None:
                heals.append((f.heal_s, f))
        for heal_t, f in sorted([h for h in heals if h[0] <= t], key=lambda h: h[0]):
            heals.remove((heal_t, f))
            emit(Fault, heal_t, HARNESS, op=f.op, target=[f.victim], phase="heal")
            if f.op == "crash":
                incarnation[f.victim] += 1
                emit(
                    Start,
                    heal_t + 0.05,
                    f.victim,
                    incarnation=incarnation[f.victim],
                    seed=plan.seed,
                    config=config,
                )
                emit(Ready, heal_t + 0.3, f.victim, incarnation=incarnation[f.victim])
                emit(
                    RejoinBegin,
                    heal_t + 0.31,
                    f.victim,
                    incarnation=incarnation[f.victim],
                    source="n1",
                )
                up[f.victim] = True
                # The victim catches up to the step committed at heal + 0.05 + rejoin_s.
                done_t = heal_t + 0.05 + plan.rejoin_s
                done_step = step + round((done_t - t) / plan.step_s)
                emit(
                    RejoinDone,
                    done_t,
                    f.victim,
                    incarnation=incarnation[f.victim],
                    step=done_step,
                    source="n1",
                    param_fp=_fp(done_step),
                )
                rejoin_done_at = done_t
            else:
                paused[f.victim] = False
                rejoin_done_at = heal_t
            for observer in (n for n in names if n != f.victim and up[n]):
                emit(
                    DeclareAlive,
                    heal_t + 0.1,
                    observer,
                    peer=f.victim,
                    peer_incarnation=incarnation[f.victim],
                )
            excluded.discard(f.victim)
            back_at[f.victim] = rejoin_done_at  # contributes again once caught up
        if t < stall_until:
            t = stall_until
            continue
        live = [n for n in names if up[n] and not paused[n]]
        contributors = [n for n in live if n not in excluded and t >= back_at.get(n, 0.0)]
        for node in contributors:
            loss = (
                plan.loss_offset
                + 2.0 * math.exp(-step / 40)
                + 0.02 * math.sin(step + int(node[1:]))
            )
            emit(TrainStep, t - plan.step_s / 2, node, step=step, loss=loss, samples=32)
        for node in contributors:
            emit(
                Accept,
                t - 0.01,
                node,
                step=step,
                ballot=[0, 0],
                value_fp=_fp(step, "v"),
                contributors=contributors,
                to=contributors[0],
            )
        for node in contributors:
            salt = "bad" if plan.diverge_step == step and node == names[-1] else ""
            emit(
                Commit,
                t,
                node,
                step=step,
                incarnation=incarnation[node],
                value_fp=_fp(step, "v"),
                contributors=contributors,
                param_fp=_fp(step, salt),
                voters=names,
                quorum=contributors,
            )
        step += 1
        t += plan.step_s
    if plan.false_positive_at_s is not None:
        emit(
            DeclareDead,
            plan.false_positive_at_s,
            "n1",
            peer="n2",
            peer_incarnation=incarnation["n2"],
        )
    for node, at_s, stalled_ms in plan.loop_stalls:
        emit(LoopStall, at_s, node, stalled_ms=stalled_ms, since_mono=at_s - stalled_ms / 1000)
    emit(RunMark, plan.duration_s, HARNESS, mark="run_end")
    return events


def write_run(run_dir: Path, plan: Plan, *, scenario_name: str = "crash-one") -> Path:
    events = build_history(plan)
    by_node: dict[str, list[EventBase]] = {}
    for event in events:
        by_node.setdefault(event.node, []).append(event)
    for node, node_events in by_node.items():
        write_history(
            run_dir / "events" / f"{node}.jsonl", sorted(node_events, key=lambda e: e.t_mono)
        )
    (run_dir / "scenario.yaml").write_text(
        f"name: {scenario_name}\nseed: {plan.seed}\nnodes: {plan.nodes}\nbackend: local\n"
        "faults:\n"
        + "".join(
            f"  - op: {{op: {f.op}, nodes: [{f.victim}]}}\n    at_s: {f.at_s}\n"
            for f in plan.faults
        )
    )
    return run_dir
