"""Exploration: Hypothesis draws fault schedules, the simulator runs each, the
checkers judge the history; a failing schedule is shrunk to the smallest one that
still fails (``hypothesis.find``), which only works because a simulated run is a pure
function of (seed, schedule).

The fault space is the simulator's subset of the catalog, in small building blocks
that shrink well: timed crashes (healed by a restart or not), event-triggered crashes
("crash n1 when it logs its first ``accept`` of step >= 3, 10 ms later"), pauses,
partitions (Jepsen groupings and one-way isolation), one-way black holes, latency
with jitter, clock skew.  Times are whole centiseconds, so shrinking moves them in
steps a person can read.  All faults fall in the first ``fault_window_s`` seconds and
the run continues long enough after for the liveness bounds to be judged.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import hypothesis
from hypothesis import strategies as st

from swarmshake.chaos import faults
from swarmshake.chaos.sim.run import SimConfig, SimRun, run_simulation

TRIGGER_KINDS = ("agg_send", "propose", "accept", "commit", "rejoin_done")
SAFETY_AND_DETECTOR = ("S1", "S2", "S3", "S4")


def _seconds(low_cs: int, high_cs: int) -> st.SearchStrategy[float]:
    return st.integers(low_cs, high_cs).map(lambda cs: cs / 100)


def schedules(
    nodes: list[str], fault_window_s: float = 20.0, max_entries: int = 6
) -> st.SearchStrategy[faults.FaultSchedule]:
    """Schedules over ``nodes`` with faults in ``[0.5, fault_window_s]`` seconds."""
    node = st.sampled_from(nodes)
    at = _seconds(50, int(fault_window_s * 100))
    optional_heal = st.one_of(st.none(), _seconds(10, 800))

    crash = st.builds(
        lambda n, t, h: faults.ScheduleEntry(op=faults.Crash(nodes=[n]), at_s=t, heal_after_s=h),
        node,
        at,
        optional_heal,
    )
    triggered_crash = st.builds(
        lambda n, watched, kind, step, delay, h: faults.ScheduleEntry(
            op=faults.Crash(nodes=[n]),
            when=faults.OnEvent(node=watched, kind=kind, step_at_least=step, delay_s=delay),
            heal_after_s=h,
        ),
        node,
        node,
        st.sampled_from(TRIGGER_KINDS),
        st.integers(0, 12),
        st.sampled_from((0.0, 0.01)),
        optional_heal,
    )
    pause = st.builds(
        lambda n, t, h: faults.ScheduleEntry(op=faults.Pause(nodes=[n]), at_s=t, heal_after_s=h),
        node,
        at,
        _seconds(5, 300),
    )
    partition = st.builds(
        lambda grouping, t, h: faults.ScheduleEntry(
            op=faults.Partition(grouping=grouping), at_s=t, heal_after_s=h
        ),
        st.sampled_from(("halves", "random_halves", "majority_ring", "bridge")),
        at,
        _seconds(50, 800),
    )
    isolate = st.builds(
        lambda n, one_way, t, h: faults.ScheduleEntry(
            op=faults.Partition(
                grouping="isolate", nodes=[n], direction="one_way" if one_way else "both"
            ),
            at_s=t,
            heal_after_s=h,
        ),
        node,
        st.booleans(),
        at,
        _seconds(50, 800),
    )
    blackhole = st.builds(
        lambda pair, t, h: faults.ScheduleEntry(
            op=faults.Blackhole(src=[pair[0]], dst=[pair[1]], direction="one_way"),
            at_s=t,
            heal_after_s=h,
        ),
        st.tuples(node, node).filter(lambda pair: pair[0] != pair[1]),
        at,
        _seconds(50, 1500),
    )
    latency = st.builds(
        lambda a, delay, jitter, t, h: faults.ScheduleEntry(
            op=faults.Latency(src=[a], delay_ms=delay, jitter_ms=min(jitter, delay)),
            at_s=t,
            heal_after_s=h,
        ),
        node,
        st.integers(10, 400).map(float),
        st.integers(0, 200).map(float),
        at,
        _seconds(50, 800),
    )
    skew = st.builds(
        lambda n, offset_drift, t, h: faults.ScheduleEntry(
            op=faults.ClockSkew(nodes=[n], offset_ms=offset_drift[0], drift_ppm=offset_drift[1]),
            at_s=t,
            heal_after_s=h,
        ),
        node,
        st.tuples(st.integers(-500, 500).map(float), st.integers(-5000, 5000).map(float)).filter(
            lambda pair: pair != (0.0, 0.0)
        ),
        at,
        _seconds(50, 800),
    )
    entry = st.one_of(crash, triggered_crash, pause, partition, isolate, blackhole, latency, skew)
    return st.lists(entry, min_size=1, max_size=max_entries).map(
        lambda entries: faults.FaultSchedule(entries=entries)
    )


def violated(run: SimRun, properties: tuple[str, ...] | None) -> list[str]:
    names = run.verdict.violated()
    return names if properties is None else [p for p in names if p in properties]


def explore(
    config: SimConfig,
    budget: int,
    seed: int,
    properties: tuple[str, ...] | None = None,
    fault_window_s: float = 20.0,
    progress: Callable[[int, faults.FaultSchedule, list[str]], None] | None = None,
) -> tuple[faults.FaultSchedule, SimRun] | None:
    """Search ``budget`` schedules; return the shrunk failing schedule and its run,
    or ``None``.  ``properties`` limits what counts as a failure (default: any)."""
    nodes = [f"n{i:0{len(str(config.nodes - 1))}d}" for i in range(config.nodes)]
    runs = {"count": 0}

    def fails(schedule: faults.FaultSchedule) -> bool:
        runs["count"] += 1
        run = run_simulation(config, schedule)
        bad = violated(run, properties)
        if progress is not None:
            progress(runs["count"], schedule, bad)
        return bool(bad)

    settings = hypothesis.settings(
        max_examples=budget,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=(hypothesis.Phase.generate, hypothesis.Phase.shrink),
    )
    try:
        schedule = hypothesis.find(
            schedules(nodes, fault_window_s), fails, settings=settings, random=random.Random(seed)
        )
    except hypothesis.errors.NoSuchExample:
        return None
    return schedule, run_simulation(config, schedule)
