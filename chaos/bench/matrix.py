"""The recovery matrix: which fault each cell injects, on which node, when.

Every fault type is one function ``(nodes, rng, timing) -> [ScheduleEntry]`` built
from the fault catalog (``chaos/faults.py``), so a cell is an ordinary scenario that
any backend can run.  The victim is drawn from the trial's seed, never ``n1`` (on
real backends ``n1`` often proposes first; a crash there and a crash elsewhere are
different cells, and "crash inside the aggregation round" covers the proposer case
on purpose).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from swarmshake.chaos import faults as F
from swarmshake.chaos.scenario import Cluster, Scenario, SteadyState
from swarmshake.chaos.systems import DEFAULT_SYSTEM, System
from swarmshake.reference_node.training.config import TrainingConfig


@dataclass(frozen=True)
class Timing:
    fault_window_s: tuple[float, float]  # the fault fires at a seeded moment in this range
    hold_s: float  # how long a healable fault lasts before its heal
    duration_s: float  # the fault phase of the scenario
    quiesce_s: float  # after the heal: room for rejoin and L2/L3


QUICK_TIMING = Timing(fault_window_s=(1.0, 2.0), hold_s=2.0, duration_s=4.0, quiesce_s=4.0)
FULL_TIMING = Timing(fault_window_s=(2.0, 5.0), hold_s=4.0, duration_s=10.0, quiesce_s=8.0)


def full_timing(systems: Iterable[System]) -> Timing:
    """FULL_TIMING with the quiesce of the slowest system to settle (``System.settle_s``):
    seen here, a TorchElastic group stalls for its 10 s gloo timeout, then restarts from
    a checkpoint through a new rendezvous, and had committed nothing new 14 s after the
    fault when an 8 s quiesce ended; every system of a sitting gets the same timing."""
    settle_s = max((system.settle_s for system in systems), default=FULL_TIMING.quiesce_s)
    return dataclasses.replace(FULL_TIMING, quiesce_s=max(FULL_TIMING.quiesce_s, settle_s))


Builder = Callable[[list[str], random.Random, Timing], list[F.ScheduleEntry]]


def _victim(nodes: list[str], rng: random.Random) -> str:
    return rng.choice(nodes[1:] if len(nodes) > 1 else nodes)


def _at(rng: random.Random, timing: Timing) -> float:
    low, high = timing.fault_window_s
    return round(rng.uniform(low, high), 3)


def _timed(
    op: F.FaultOp, rng: random.Random, timing: Timing, *, heal: bool = True
) -> list[F.ScheduleEntry]:
    return [
        F.ScheduleEntry(op=op, at_s=_at(rng, timing), heal_after_s=timing.hold_s if heal else None)
    ]


def crash(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    return _timed(F.Crash(nodes=[_victim(nodes, rng)]), rng, timing, heal=False)


def crash_in_aggregation(
    nodes: list[str], rng: random.Random, timing: Timing
) -> list[F.ScheduleEntry]:
    """Killed as it logs its gradient send: where peers wait longest for a contribution."""
    victim = _victim(nodes, rng)
    trigger = F.OnEvent(node=victim, kind="agg_send", step_at_least=3 + rng.randrange(3))
    return [F.ScheduleEntry(op=F.Crash(nodes=[victim]), when=trigger)]


def pause(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    return _timed(F.Pause(nodes=[_victim(nodes, rng)]), rng, timing)


def partition_minority(
    nodes: list[str], rng: random.Random, timing: Timing
) -> list[F.ScheduleEntry]:
    minority = rng.sample(nodes[1:], k=max(1, (len(nodes) - 1) // 2))
    return _timed(F.Partition(grouping="isolate", nodes=sorted(minority)), rng, timing)


def isolate(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    """One node cut off from every other (the smoke suites' "isolate one node")."""
    return _timed(F.Partition(grouping="isolate", nodes=[_victim(nodes, rng)]), rng, timing)


def partition_majority(
    nodes: list[str], rng: random.Random, timing: Timing
) -> list[F.ScheduleEntry]:
    """Split so that no side holds a majority: every side stalls until the heal."""
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    parts = 2 if len(nodes) % 2 == 0 else 3
    groups = [sorted(shuffled[i::parts]) for i in range(parts)]
    return _timed(F.Partition(grouping="groups", groups=groups), rng, timing)


def blackhole(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    victim = _victim(nodes, rng)
    return _timed(F.Blackhole(src=[victim], dst=[F.ALL]), rng, timing)


def latency_spike(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    victim = _victim(nodes, rng)
    return _timed(F.Latency(src=[victim], dst=[F.ALL], delay_ms=250.0, jitter_ms=50.0), rng, timing)


def straggler(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    return _timed(F.CpuThrottle(nodes=[_victim(nodes, rng)], cpu_fraction=0.2), rng, timing)


def broker_loss(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    return _timed(F.BrokerLoss(), rng, timing)


def byzantine(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    return _timed(F.Byzantine(nodes=[_victim(nodes, rng)], mode="sign_flip"), rng, timing)


def restart(nodes: list[str], rng: random.Random, timing: Timing) -> list[F.ScheduleEntry]:
    """Crash, then start again after ``hold_s``: the rejoin cell."""
    return _timed(F.Crash(nodes=[_victim(nodes, rng)]), rng, timing)


FAULT_TYPES: dict[str, Builder] = {
    "crash": crash,
    "crash_in_aggregation": crash_in_aggregation,
    "pause": pause,
    "partition_minority": partition_minority,
    "isolate": isolate,
    "partition_majority": partition_majority,
    "blackhole": blackhole,
    "latency_spike": latency_spike,
    "straggler": straggler,
    "broker_loss": broker_loss,
    "byzantine": byzantine,
    "restart": restart,
}

# What each backend can inject (the harness's and simulator's supported sets), and the
# cluster sizes of its cells: 4, 8 and the largest it holds on this kind of machine.
# (The scenario schema caps a cluster at 64 nodes, chaos/scenario.MAX_NODES.)
BACKEND_SIZES: dict[str, list[int]] = {"sim": [4, 8, 64], "local": [4, 8, 16], "docker": [4, 8, 16]}
QUICK_SIZES: dict[str, list[int]] = {"sim": [4, 8], "local": [4], "docker": [4]}
FULL_TRIALS = 20
# --quick must fit a CI job (a few minutes): a simulated trial takes a second, a real
# one ~25 s (up, steady state, fault, quiesce, down), so real backends get one trial
# per cell — a smoke test of every fault type, not a distribution.
QUICK_TRIALS: dict[str, int] = {"sim": 3, "local": 1, "docker": 1}


def default_trials(backend: str, *, quick: bool) -> int:
    return QUICK_TRIALS.get(backend, 1) if quick else FULL_TRIALS


# The options each system runs with in the bench, as in its smoke suite
# (suites/torchft-smoke.yaml, suites/torchelastic-smoke.yaml): torchft's Lighthouse
# waits 5 s (not its default 60 s) for stragglers before it forms a quorum, so a
# restarted group is let in within a trial; TorchElastic's gloo timeout is 10 s and
# its restarted node does not deadlock the rendezvous (share_rendezvous_store: false,
# chaos/systems/torchelastic.py says why).  Everything else is the system's default.
BENCH_SYSTEM_OPTIONS: dict[str, dict[str, object]] = {
    "reference": {},
    "torchft": {"join_timeout_ms": 5000},
    "torchelastic": {"collective_timeout_s": 10.0, "share_rendezvous_store": False},
}


@dataclass(frozen=True)
class TrialSetup:
    """What every trial of a matrix runs besides its cell: the model preset
    (``Cluster.model``: every system trains the same MLP) and, per system, options over
    the bench's own (``BENCH_SYSTEM_OPTIONS``): a throughput side-by-side wants
    torchft's ``step_interval_s`` at 0, which the recovery cells keep at 0.2 s so four
    groups share two cores."""

    model: str = Cluster().model
    options: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    # ``cluster.training`` fields over the preset's, for every system (the reference
    # node's aggregation_path, a learning rate): TrainingConfig checks them.
    training: Mapping[str, object] = field(default_factory=dict)
    # ``cluster.links``: "direct" measures the node without the harness's proxy hop
    # (torchft's and TorchElastic's links never take one: netns); no link faults then.
    links: str = Cluster().links

    def cluster(self, nodes: int, backend: str) -> Cluster:
        """The cluster of one trial (``ValueError`` names a field the preset refuses)."""
        return Cluster(
            nodes=nodes,
            backend="docker" if backend == "docker" else "local",
            model=self.model,
            training=dict(self.training),
            links=self.links,  # type: ignore[arg-type]  # checked by Cluster
        )

    def system_options(self, system: str) -> dict[str, object]:
        return {**BENCH_SYSTEM_OPTIONS.get(system, {}), **self.options.get(system, {})}


DEFAULT_SETUP = TrialSetup()


@dataclass(frozen=True)
class Cell:
    fault: str
    nodes: int
    backend: str
    system: str = "reference"

    @property
    def fault_key(self) -> str:
        """The cell without its system: trials of every system draw the same faults."""
        return f"{self.fault}/{self.backend}/{self.nodes}"

    @property
    def key(self) -> str:
        # The reference node's cells keep the key they had before systems existed.
        return (
            self.fault_key if self.system == DEFAULT_SYSTEM else f"{self.system}/{self.fault_key}"
        )


def trial_scenario(
    cell: Cell, trial: int, base_seed: int, timing: Timing, setup: TrialSetup = DEFAULT_SETUP
) -> Scenario:
    """The scenario of one trial; its seed fixes the victim, the moment and the run.

    The draw does not depend on the system, so trial *t* of a cell hits the same
    victim at the same moment on every system (the side-by-side compares like with like)."""
    seed = (base_seed * 1_000_003 + trial) % (2**63)
    rng = random.Random(f"{cell.fault_key}/{seed}")
    names = [f"n{i}" for i in range(1, cell.nodes + 1)]  # Scenario.node_names
    entries = FAULT_TYPES[cell.fault](names, rng, timing)
    system_part = "" if cell.system == DEFAULT_SYSTEM else f"{cell.system}-"
    return Scenario(
        name=f"bench-{system_part}{cell.fault}-{cell.backend}-{cell.nodes}-t{trial}",
        description=f"recovery benchmark cell {cell.key}, trial {trial}",
        seed=seed,
        system=cell.system,
        system_options=setup.system_options(cell.system),
        cluster=setup.cluster(cell.nodes, cell.backend),
        steady_state=SteadyState(min_commit_step=2, timeout_s=120.0),
        duration_s=timing.duration_s,
        quiesce_s=timing.quiesce_s,
        faults=entries,
    )


def model_description(cluster: Cluster | None = None) -> dict[str, object]:
    """The model every trial trains (``Cluster.model``; the torchft and TorchElastic
    workloads build the same MLP shape from the same training section)."""
    cluster = cluster or Cluster()
    config = TrainingConfig(**cluster.training_section(0))
    return {
        "preset": cluster.model,
        "layers": [config.input_dim, *config.hidden, config.output_dim],
        "parameters": config.parameter_count(),
        "batch_per_node": config.batch_per_node,
    }
