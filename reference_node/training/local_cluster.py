"""Several nodes' training steps run in one process, no network.

Used for the fault-free baseline that convergence is judged against, and by the
tests that build a multi-node log the way real nodes would: each simulated node
keeps its own ``Replica``, computes its own contribution, aggregates what the
step's contributor set sent and applies it to its own parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.training.aggregation import AggregationError, aggregate
from swarmshake.reference_node.training.byzantine import ByzantineSchedule
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.step import Replica
from swarmshake.reference_node.training.wire import WireEncoder

MAX_LOCAL_NODES = 256  # one process holds every replica's parameters


@dataclass
class StepRecord:
    step: int
    contributors: list[str]
    losses: dict[str, float]  # every live node's honest loss before the update
    value_fp: str
    param_fps: dict[str, str]  # after applying, per node that applied it


@dataclass
class LocalRun:
    records: list[StepRecord] = field(default_factory=list)
    replicas: dict[str, Replica] = field(default_factory=dict)
    # Why training stopped early: the step's contributions could not be aggregated
    # (e.g. every contribution non-finite after divergence); a real node stalls there.
    failure: str | None = None

    def mean_losses(self) -> list[float]:
        """Per step, the mean of the contributors' losses (the global-batch loss)."""
        return [
            sum(record.losses[node] for node in record.contributors) / len(record.contributors)
            for record in self.records
        ]


def run_local_cluster(
    config: TrainingConfig,
    nodes: Iterable[str],
    steps: int,
    *,
    byzantine: ByzantineSchedule | None = None,
    contributors_at: Callable[[int], Iterable[str]] | None = None,
    shared_replica: bool = False,
) -> LocalRun:
    """Run ``steps`` steps of ``nodes`` training together.

    ``byzantine`` switches nodes' behaviours at step boundaries.
    ``contributors_at(step)`` names whose contribution is committed (default: all);
    every node still applies the committed aggregate.  ``shared_replica`` keeps one
    parameter copy for all nodes (a baseline, where replicas cannot differ),
    saving memory and time.
    """
    names = sorted(set(nodes))
    if not 1 <= len(names) <= MAX_LOCAL_NODES:
        raise ValueError(f"need 1..{MAX_LOCAL_NODES} nodes, got {len(names)}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    replicas: dict[str, Replica] = {}
    shared: Replica | None = None
    for name in names:
        if shared_replica and shared is not None:
            replica = Replica(config, name, state=shared.state)
        else:
            replica = Replica(config, name)
            shared = replica
        replicas[name] = replica
    schedule = byzantine or ByzantineSchedule()
    unknown_byzantine = set(schedule.nodes()) - set(names)
    if unknown_byzantine:
        raise ValueError(
            f"byzantine schedule names {sorted(unknown_byzantine)}, not nodes of the run"
        )
    run = LocalRun(replicas=replicas)
    # Each node's contribution as it goes on the wire (int8 with error feedback when
    # configured): what a real worker aggregates, its own included.
    encoders = {name: WireEncoder(config) for name in names}
    for step in range(steps):
        contributors = sorted(set(contributors_at(step))) if contributors_at else names
        unknown = set(contributors) - set(names)
        if unknown:
            raise ValueError(
                f"step {step}: contributors {sorted(unknown)} are not nodes of the run"
            )
        sent = {}
        losses = {}
        for name in names:
            switch = schedule.switch_at(name, step)
            if switch is not None:
                replicas[name].set_behaviour(switch)
            result = replicas[name].contribution()
            losses[name] = result.loss
            if name in contributors:
                sent[name] = encoders[name].encode(result.gradient)[1]
        try:
            combined = aggregate(config, sent)
        except AggregationError as error:
            run.failure = f"step {step}: {error}"
            break
        param_fps = {}
        appliers = [names[0]] if shared_replica else names
        for name in appliers:
            param_fps[name] = replicas[name].apply(step, combined)
        if shared_replica:
            param_fps = dict.fromkeys(names, param_fps[names[0]])
        run.records.append(
            StepRecord(
                step=step,
                contributors=list(contributors),
                losses=losses,
                value_fp=fingerprint_hex(combined),
                param_fps=param_fps,
            )
        )
    return run
