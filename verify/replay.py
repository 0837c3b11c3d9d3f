"""Deterministic replay: recompute a run's committed log in one process, bit for bit.

For every committed step ``s`` (from the ``commit`` events), the replay computes
each contributor's gradient at the replayed parameters (``training.step``, with
the node's Byzantine behaviour from the ``byzantine`` events), aggregates them in
node-id order and applies the optimizer — the same ops, dtype and order a node
runs (``reference_node.training.step`` documents that contract).  After each step
it compares its aggregate fingerprint with every node's ``commit.value_fp`` and
its parameter fingerprint with every node's ``commit.param_fp``.

Verdicts: ``valid`` when every committed fingerprint matches and the final one
equals every live replica's; ``invalid`` naming the first diverging step (and the
node, and whether the aggregate or the applied parameters differ); ``unknown``
when the log cannot be replayed (a step no node logged, nodes committing different
contributor sets — an S1 matter for the safety checker — or no training config),
or when a mismatch comes from a machine whose torch version, thread count, CPU
flags or training device differ from this one (DESIGN promises bit-exactness only
where they match).  The replay runs on the CPU unless asked for another device
(``device=``), whatever device the run trained on: a CPU replay of a GPU run is
attempted, and matching bits are still ``valid``, but a mismatch there is
``unknown`` (a GPU sums matmuls in another order), never ``invalid``.

What a node must log for its run to be replayable: a ``start`` event carrying
``config["training"] = TrainingConfig.to_dict()`` and its environment facts
(``training.environment.environment_facts``); a ``byzantine`` event whenever it
switches behaviour (at a step boundary, ``step`` = the behaviour's ``since_step``);
and per step a ``commit`` with the contributor set, ``value_fp`` (fingerprint of
the aggregate it applied) and ``param_fp`` (after applying).
``history_of_local_run`` writes exactly that for nodes simulated in one process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.protocol.history import (
    ByzantineSwitch,
    Commit,
    EventBase,
    History,
    Start,
    TrainStep,
)
from swarmshake.reference_node.training.aggregation import AggregationError, aggregate
from swarmshake.reference_node.training.byzantine import ByzantineBehaviour, ByzantineSchedule
from swarmshake.reference_node.training.config import TrainingConfig, TrainingConfigError
from swarmshake.reference_node.training.device import device_kind
from swarmshake.reference_node.training.environment import (
    EnvironmentFacts,
    configure_torch,
    environment_facts,
)
from swarmshake.reference_node.training.local_cluster import LocalRun
from swarmshake.reference_node.training.model import FlatMLP
from swarmshake.reference_node.training.step import (
    ContributionSource,
    apply_committed,
    initial_state,
)

Status = Literal["valid", "invalid", "unknown"]
# A replay holds one parameter copy plus one gradient per contributor; this bounds the
# log it accepts (a longer run is checked from a checkpoint, not from step 0).
MAX_REPLAY_STEPS = 1_000_000


class Divergence(msgspec.Struct, kw_only=True, frozen=True):
    step: int
    node: str
    what: Literal["value_fp", "param_fp"]  # the aggregate, or the parameters after applying
    replayed: str
    logged: str


class ReplicaCheck(msgspec.Struct, kw_only=True, frozen=True):
    node: str
    last_step: int
    param_fp: str
    replayed_fp: str
    equal: bool


class ReplayResult(msgspec.Struct, kw_only=True):
    status: Status
    message: str
    steps_replayed: int = 0
    final_param_fp: str = ""
    first_divergence: Divergence | None = None
    replicas: list[ReplicaCheck] = []
    environment_mismatches: list[str] = []


@dataclass
class CommittedStep:
    """What the log says about one step: its contributors and each node's fingerprints."""

    step: int
    contributors: list[str]
    value_fps: dict[str, str] = field(default_factory=dict)  # node -> commit.value_fp
    param_fps: dict[str, str] = field(default_factory=dict)  # node -> commit.param_fp


class LogError(ValueError):
    """The committed log cannot be replayed; the message says what is missing."""


def committed_log(history: History) -> list[CommittedStep]:
    """Steps ``0..last`` from the ``commit`` events, contiguous, one contributor set each."""
    steps: dict[int, CommittedStep] = {}
    for event in history.of_kind(Commit):
        assert isinstance(event, Commit)
        contributors = sorted(event.contributors)
        entry = steps.setdefault(event.step, CommittedStep(event.step, contributors))
        if entry.contributors != contributors:
            raise LogError(
                f"step {event.step}: {event.node} committed contributors {contributors}, "
                f"another node {entry.contributors} (an S1 agreement violation; "
                f"the replay needs one log)"
            )
        entry.value_fps[event.node] = event.value_fp
        entry.param_fps[event.node] = event.param_fp
    if not steps:
        raise LogError("the history has no commit events")
    last = max(steps)
    missing = [step for step in range(last + 1) if step not in steps]
    if missing:
        raise LogError(
            f"no node logged the commit of step {missing[0]} ({len(missing)} steps missing)"
        )
    if last + 1 > MAX_REPLAY_STEPS:
        raise LogError(f"{last + 1} steps exceed the replay limit {MAX_REPLAY_STEPS}")
    return [steps[step] for step in range(last + 1)]


def byzantine_schedule(history: History) -> ByzantineSchedule:
    schedule = ByzantineSchedule()
    for event in history.of_kind(ByzantineSwitch):
        assert isinstance(event, ByzantineSwitch)
        schedule.add(
            event.node,
            ByzantineBehaviour(
                mode=event.mode,  # type: ignore[arg-type]
                seed=event.seed,
                magnitude=event.magnitude,
                noise_std=event.noise_std,
                since_step=event.step,
            ),
        )
    return schedule


def training_config(history: History) -> TrainingConfig:
    """The run's training config, from the ``start`` events' ``config["training"]``."""
    configs = [
        event.config["training"]
        for event in history.of_kind(Start)
        if isinstance(event, Start) and "training" in event.config
    ]
    if not configs:
        raise LogError("no start event carries config['training']; pass the config explicitly")
    if any(other != configs[0] for other in configs[1:]):
        raise LogError("nodes started with different training configs")
    return TrainingConfig.from_dict(configs[0])


def recorded_environments(history: History) -> dict[str, EnvironmentFacts]:
    """Per node, the facts its latest ``start`` event recorded.

    The device: ``config["device"]`` where a node recorded its device fact (GPU model
    and CUDA runtime), else the kind from ``config["training"]["device"]`` ("cpu" or
    "cuda"; a bare "cuda" never equals a replay's full fact, so a GPU run whose GPU
    model is not recorded is never promised bit-exact)."""
    facts: dict[str, EnvironmentFacts] = {}
    for event in history.of_kind(Start):
        assert isinstance(event, Start)
        training = event.config.get("training")
        configured = training.get("device", "cpu") if isinstance(training, dict) else "cpu"
        recorded_device = event.config.get("device") or device_kind(str(configured))
        facts[event.node] = EnvironmentFacts(
            seed=event.seed,
            torch_version=event.torch_version,
            threads=event.threads,
            cpu_flags=event.cpu_flags,
            machine=str(event.config.get("machine", "")),
            deterministic=bool(event.config.get("deterministic", True)),
            device=str(recorded_device),
        )
    return facts


def replay_history(
    history: History,
    config: TrainingConfig | None = None,
    *,
    schedule: ByzantineSchedule | None = None,
    device: str = "cpu",
) -> ReplayResult:
    """Replay the run in ``history`` on ``device`` (default the CPU, whatever device the
    run trained on); never raises for a bad history (that is ``unknown``)."""
    try:
        config = config if config is not None else training_config(history)
        config = msgspec.structs.replace(config, device=device)
        log = committed_log(history)
        schedule = schedule if schedule is not None else byzantine_schedule(history)
        here = environment_facts(config.seed, config.device)
    except (LogError, TrainingConfigError, ValueError) as error:
        return ReplayResult(status="unknown", message=str(error))
    if config.wire_dtype != "fp32":
        # Each node's error-feedback residual shaped what it sent, and is in no log.
        return ReplayResult(
            status="unknown",
            message=f"wire_dtype={config.wire_dtype!r}: contributions carry each node's "
            "error-feedback residual, which the history does not record (training.wire)",
        )
    result = replay_log(config, log, schedule)
    mismatched = sorted(
        {
            f"{node}: {name}"
            for node, facts in recorded_environments(history).items()
            for name in _replay_relevant(facts.mismatches(here))
        }
    )
    result.environment_mismatches = mismatched
    if result.status == "invalid" and mismatched:
        result.status = "unknown"
        result.message += (
            "; not a verdict: the run's environment differs from the replay's "
            f"({', '.join(mismatched)}), where bit-exact replay is not promised"
        )
    return result


def _replay_relevant(names: list[str]) -> list[str]:
    # ``machine`` and ``deterministic`` are recorded in config by convention only; an
    # empty value means "not recorded", not a mismatch.
    return [name for name in names if name not in ("machine", "deterministic")]


def replay_log(
    config: TrainingConfig,
    log: list[CommittedStep],
    schedule: ByzantineSchedule | None = None,
) -> ReplayResult:
    """Recompute ``log`` from the initial state and compare every logged fingerprint."""
    configure_torch(config.threads)
    schedule = schedule or ByzantineSchedule()
    model = FlatMLP(config)
    state = initial_state(config)
    nodes = sorted({node for entry in log for node in entry.contributors} | set(schedule.nodes()))
    sources: Mapping[str, ContributionSource] = {
        node: ContributionSource(model, node) for node in nodes
    }
    replayed_fps: list[str] = []
    first: Divergence | None = None
    for entry in log:
        step = entry.step
        for node, source in sources.items():
            switch = schedule.switch_at(node, step)
            if switch is not None:
                source.set_behaviour(switch)
            source.observe(state.params, step)
        sent = {
            node: sources[node].contribution(state.params, step).gradient
            for node in entry.contributors
        }
        try:
            combined = aggregate(config, sent)
        except AggregationError as error:
            return ReplayResult(
                status="invalid",
                message=f"step {step}: the committed contributor set cannot be aggregated: {error}",
                steps_replayed=step,
                first_divergence=first,
            )
        value_fp = fingerprint_hex(combined)
        param_fp = apply_committed(config, state, step, combined)
        replayed_fps.append(param_fp)
        if first is None:
            first = _first_mismatch(entry, value_fp, param_fp)
    replicas = _final_replicas(log, replayed_fps)
    final_fp = replayed_fps[-1]
    if first is None and all(check.equal for check in replicas):
        return ReplayResult(
            status="valid",
            message=(
                f"replayed {len(log)} steps; every committed fingerprint and every live "
                f"replica's final fingerprint equals the replay's {final_fp}"
            ),
            steps_replayed=len(log),
            final_param_fp=final_fp,
            replicas=replicas,
        )
    assert first is not None  # a final mismatch is also a per-step mismatch
    return ReplayResult(
        status="invalid",
        message=(
            f"first divergence at step {first.step}: {first.node}'s {first.what} is "
            f"{first.logged}, the replay computed {first.replayed}"
        ),
        steps_replayed=len(log),
        final_param_fp=final_fp,
        first_divergence=first,
        replicas=replicas,
    )


def _first_mismatch(entry: CommittedStep, value_fp: str, param_fp: str) -> Divergence | None:
    for node in sorted(entry.value_fps):
        if entry.value_fps[node] != value_fp:
            return Divergence(
                step=entry.step,
                node=node,
                what="value_fp",
                replayed=value_fp,
                logged=entry.value_fps[node],
            )
    for node in sorted(entry.param_fps):
        if entry.param_fps[node] != param_fp:
            return Divergence(
                step=entry.step,
                node=node,
                what="param_fp",
                replayed=param_fp,
                logged=entry.param_fps[node],
            )
    return None


def _final_replicas(log: list[CommittedStep], replayed_fps: list[str]) -> list[ReplicaCheck]:
    """Each node's last committed fingerprint against the replay's at that step."""
    last: dict[str, tuple[int, str]] = {}
    for entry in log:
        for node, fp in entry.param_fps.items():
            last[node] = (entry.step, fp)
    return [
        ReplicaCheck(
            node=node,
            last_step=step,
            param_fp=fp,
            replayed_fp=replayed_fps[step],
            equal=fp == replayed_fps[step],
        )
        for node, (step, fp) in sorted(last.items())
    ]


def history_of_local_run(
    run: LocalRun,
    config: TrainingConfig,
    schedule: ByzantineSchedule | None = None,
    *,
    with_config: bool = True,
) -> History:
    """The events each simulated node of ``run`` would have logged (a known-good log).

    For tests and benchmarks of the replay and convergence checks: nodes that ran in
    one process (``training.local_cluster``) get the history real nodes write.

    Each node logs ``start`` (with the training config and environment facts),
    then per step its ``train_step`` loss, any ``byzantine`` switch, and its
    ``commit`` with the value and parameter fingerprints it computed itself.
    """
    facts = environment_facts(config.seed)
    nodes = sorted(run.replicas)
    events: list[EventBase] = []
    clock = iter(float(tick) for tick in range(1, 10**9))
    for node in nodes:
        t = next(clock)
        events.append(
            Start(
                t_wall=t,
                t_mono=t,
                node=node,
                seed=facts.seed,
                torch_version=facts.torch_version,
                threads=facts.threads,
                cpu_flags=facts.cpu_flags,
                config={"training": config.to_dict()} if with_config else {},
            )
        )
    for record in run.records:
        for node in nodes:
            behaviour = schedule.switch_at(node, record.step) if schedule else None
            if behaviour is not None:
                t = next(clock)
                events.append(
                    ByzantineSwitch(
                        t_wall=t,
                        t_mono=t,
                        node=node,
                        step=record.step,
                        mode=behaviour.mode,
                        seed=behaviour.seed,
                        magnitude=behaviour.magnitude,
                        noise_std=behaviour.noise_std,
                    )
                )
            t = next(clock)
            events.append(
                TrainStep(t_wall=t, t_mono=t, node=node, step=record.step, loss=record.losses[node])
            )
        for node, param_fp in record.param_fps.items():
            t = next(clock)
            events.append(
                Commit(
                    t_wall=t,
                    t_mono=t,
                    node=node,
                    step=record.step,
                    value_fp=record.value_fp,
                    contributors=record.contributors,
                    param_fp=param_fp,
                    voters=nodes,
                )
            )
    return History.from_events(events)
