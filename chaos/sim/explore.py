"""Exploration: Hypothesis draws fault schedules, the simulator runs each, the
checkers judge the history; a failing schedule is shrunk to the smallest one that
still fails (``hypothesis.find``), which only works because a simulated run is a pure
function of (seed, schedule).

The fault space is the simulator's subset of the catalog, in small building blocks
that shrink well: timed crashes (healed by a restart or not), event-triggered crashes
("crash n1 when it logs its first ``accept`` of step >= 3, 10 ms later"), pauses,
partitions (Jepsen groupings and one-way isolation), one-way black holes, latency
with jitter, clock skew, and churn of clean leaves (each leaver removed through a
committed step, back later as a joiner: configuration changes).  Times are whole centiseconds, so shrinking moves them in
steps a person can read.  All faults fall in the first ``fault_window_s`` seconds and
the run continues long enough after for the liveness bounds to be judged.

Compound entries are several schedule entries drawn as one block, aimed at a moment
of the protocol that independent draws almost never line up (their chance is the
product of each part's).  ``lost_vote`` is Paxos's classic trap for an acceptor that
forgets: cut the step's coordinator off from one voter before the step starts, crash
the other voter 10 ms after it accepted the coordinator's value (its reply is sent,
so that value is chosen) and restart it within 0.3 s, so that the cut-off voter's
next ballot can gather a majority with the restarted one.  A correct acceptor reports
its accept in its promise and the ballot adopts the chosen value; one that forgot
lets a second value be chosen (``forget-vote`` breaks S1).  ``lost_bytes`` is the
trap for an acceptor that votes without the aggregate's bytes: every node sends its
gradient to every other, so an acceptor normally rebuilds the aggregate itself; cut
the two other nodes off from each other (the step's coordinator bridges them, so
each misses the other's gradient and cannot rebuild), and crash the coordinator as
it commits, before the acceptors' pulls of its bytes are answered.  Correct
acceptors accepted only once the bytes arrived and hold the value; ones that voted
without them hold nothing
(``ack-before-apply`` breaks S2).  ``stale_source`` is the trap for an acceptor that
prunes its records without a vote floor: a node restarted while its only reachable
source is one far behind its pruned records (``no-vote-floor`` breaks S1; see
``stale_source``).  Shrinking removes a block whole or simplifies its parts, like
any other entry.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import hypothesis
import msgspec
from hypothesis import strategies as st

from swarmshake.chaos import faults
from swarmshake.chaos.sim import hypothesis_provider
from swarmshake.chaos.sim.app import AppSettings
from swarmshake.chaos.sim.run import SimConfig, SimRun, run_simulation
from swarmshake.reference_node.protocol.node_core import NODE_DEFAULTS

TRIGGER_KINDS = ("agg_send", "propose", "accept", "commit", "rejoin_done")
SAFETY_AND_DETECTOR = ("S1", "S2", "S3", "S4")


def _seconds(low_cs: int, high_cs: int) -> st.SearchStrategy[float]:
    return st.integers(low_cs, high_cs).map(lambda cs: cs / 100)


def schedules(
    nodes: list[str], fault_window_s: float = 20.0, max_entries: int = 6, leaves: bool = False
) -> st.SearchStrategy[faults.FaultSchedule]:
    """Schedules over ``nodes`` with timed faults in ``[0.5, fault_window_s]`` seconds, of
    at most ``max_entries`` drawn blocks (one entry, or a compound block of a few);
    ``leaves``: churn of clean leaves among the single entries too (configuration
    changes).  Off by default for now: adding an entry kind changes what every seed
    draws, and the first draws with it found failures on correct code that the
    crash-only space had not reached (BENCHMARKS.md, session 14), not yet worked
    through; CI's explorations stay on the space they have been cleared on."""
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
    # Joins and clean leaves (issue 12): a churn whose departures are leaves (or half
    # of them), each leaver back as a joiner after ``down_s``.  The only entry that
    # reaches a configuration change; the simulator refused it before.
    leave_churn = st.builds(
        lambda rate, crash_fraction, down, t, h: faults.ScheduleEntry(
            op=faults.Churn(events_per_min=rate, crash_fraction=crash_fraction, down_s=down),
            at_s=t,
            heal_after_s=h,
        ),
        st.integers(4, 30).map(float),
        st.sampled_from((0.0, 0.5)),
        _seconds(100, 800),
        at,
        _seconds(200, 2000),
    )
    kinds = [crash, triggered_crash, pause, partition, isolate, blackhole, latency, skew]
    single = st.one_of(*kinds, *([leave_churn] if leaves else [])).map(lambda one: [one])
    blocks = (
        st.one_of(single, lost_vote(nodes), lost_bytes(nodes), stale_source(nodes))
        if len(nodes) >= 3
        else single
    )
    return st.lists(blocks, min_size=1, max_size=max_entries).map(
        lambda drawn: faults.FaultSchedule(entries=[e for block in drawn for e in block])
    )


def lost_vote(nodes: list[str]) -> st.SearchStrategy[list[faults.ScheduleEntry]]:
    """The compound entry of the module docstring, for step ``k`` (drawn).

    The target is the coordinator of ``k``: the core's ``voters[k % len(voters)]`` with
    every node a voter (the simulator's start), so the block is aimed, not hoped for.
    The cut starts when the coordinator commits step ``k - 1`` (for ``k = 0``: when it
    starts), i.e. before any of step ``k``'s messages leave it; a cut triggered by the
    coordinator's ``propose`` would come after its accept requests were on the wire.
    """
    ordered = sorted(nodes)

    def block(
        step: int, pair: tuple[str, str], restart_s: float, heal_s: float | None
    ) -> list[faults.ScheduleEntry]:
        coordinator = ordered[step % len(ordered)]
        cut_off, forgetful = pair
        watch = (
            faults.OnEvent(node=coordinator, kind="commit", step_at_least=step - 1)
            if step > 0
            else faults.OnEvent(node=coordinator, kind="start")
        )
        return [
            faults.ScheduleEntry(
                op=faults.Blackhole(src=[coordinator], dst=[cut_off], direction="one_way"),
                when=watch,
                heal_after_s=heal_s,
            ),
            faults.ScheduleEntry(
                op=faults.Crash(nodes=[forgetful]),
                # 10 ms after its accept: the reply is on the wire, the node is gone.
                when=faults.OnEvent(
                    node=forgetful, kind="accept", step_at_least=step, delay_s=0.01
                ),
                heal_after_s=restart_s,
            ),
        ]

    def other_two(step: int) -> st.SearchStrategy[tuple[str, str]]:
        rest = [n for n in ordered if n != ordered[step % len(ordered)]]
        return st.permutations(rest).map(lambda names: (names[0], names[1]))

    step = st.integers(0, 12)
    return step.flatmap(
        lambda k: st.builds(
            block,
            st.just(k),
            other_two(k),
            _seconds(10, 30),  # restarted within 0.3 s: before the next ballot reaches it
            st.one_of(st.none(), _seconds(200, 800)),  # the cut outlasts that ballot
        )
    )


def _before_step(node: str, step: int) -> faults.OnEvent:
    """When ``node`` commits ``step - 1`` (for step 0: when it starts): before any of
    ``step``'s messages leave it."""
    if step > 0:
        return faults.OnEvent(node=node, kind="commit", step_at_least=step - 1)
    return faults.OnEvent(node=node, kind="start")


def lost_bytes(nodes: list[str]) -> st.SearchStrategy[list[faults.ScheduleEntry]]:
    """The ``lost_bytes`` compound entry of the module docstring, for step ``k`` (drawn),
    aimed at ``k``'s coordinator like ``lost_vote``."""
    ordered = sorted(nodes)

    def block(step: int, pair: tuple[str, str], heal_s: float | None) -> list:
        coordinator = ordered[step % len(ordered)]
        return [
            faults.ScheduleEntry(
                op=faults.Blackhole(src=[pair[0]], dst=[pair[1]], direction="both"),
                when=_before_step(coordinator, step),
                heal_after_s=heal_s,
            ),
            faults.ScheduleEntry(
                op=faults.Crash(nodes=[coordinator]),
                when=faults.OnEvent(node=coordinator, kind="commit", step_at_least=step),
            ),
        ]

    def other_two(step: int) -> st.SearchStrategy[tuple[str, str]]:
        rest = [n for n in ordered if n != ordered[step % len(ordered)]]
        return st.permutations(rest).map(lambda names: (names[0], names[1]))

    return st.integers(0, 12).flatmap(
        lambda k: st.builds(
            block,
            st.just(k),
            other_two(k),
            st.one_of(st.none(), _seconds(200, 800)),  # the cut outlasts the pull
        )
    )


def stale_source(nodes: list[str]) -> st.SearchStrategy[list[faults.ScheduleEntry]]:
    """The ``stale_source`` compound entry of the module docstring.

    Node ``b`` crashes just after its first checkpoint (when it commits step ``k``,
    1 to 3) and stays down while the others commit more steps than an acceptor
    keeps records of (``records_kept``), so ``a``'s oldest records are pruned.  When ``a`` commits step
    ``k + gap``, ``c`` is cut off, ``b`` restarts (it finds no live source and loads
    its old checkpoint), and ``a`` crashes and restarts ``restart_s`` later: its only
    reachable source is ``b``, far behind ``a``'s pruned records.  A correct node
    refuses that state (its vote floor) and loads its own checkpoint; one without the
    floor installs it and votes again on steps it helped decide (``no-vote-floor``
    breaks S1)."""
    # ``b`` holds a checkpoint from its first commit on (the policy writes at every
    # multiple of the interval, step 0 included), so it crashes early: the block
    # then fits well inside a run with time left to recover (a crash at step ~30 of
    # a 40 s run left the survivors too little time to re-commit, which the S2
    # checker judges a loss).
    interval = AppSettings().checkpoint.every_steps
    records_kept = NODE_DEFAULTS.records_kept

    def block(
        roles: tuple[str, ...], k: int, gap: int, restart_s: float, cut_s: float
    ) -> list[faults.ScheduleEntry]:
        a, b, c = roles[:3]
        trigger = faults.OnEvent(node=a, kind="commit", step_at_least=k + gap)
        return [
            faults.ScheduleEntry(
                op=faults.Crash(nodes=[b]),
                when=faults.OnEvent(node=b, kind="commit", step_at_least=k),
            ),
            faults.ScheduleEntry(
                op=faults.Partition(grouping="isolate", nodes=[c]), when=trigger, heal_after_s=cut_s
            ),
            faults.ScheduleEntry(op=faults.Restart(nodes=[b]), when=trigger),
            faults.ScheduleEntry(op=faults.Crash(nodes=[a]), when=trigger, heal_after_s=restart_s),
        ]

    return st.builds(
        block,
        st.permutations(sorted(nodes)),
        st.integers(1, min(3, interval)),
        st.integers(records_kept + 1, records_kept + 5),
        # b's rejoin gives up on its two silent sources (1 s offer timeout each) and
        # loads its checkpoint within ~2.2 s: a restarts after that.
        _seconds(230, 300),
        _seconds(500, 800),  # the cut outlasts a's rejoin
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
    leaves: bool = False,
) -> tuple[faults.FaultSchedule, SimRun] | None:
    """Search ``budget`` schedules; return the shrunk failing schedule and its run,
    or ``None``.  ``properties`` limits what counts as a failure (default: any);
    ``leaves``: draw churn of clean leaves too (``schedules``)."""
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
        # Stop generating at the first failure and shrink it.  With the default (True)
        # Hypothesis keeps generating after a failure, for at most 10 s of wall time,
        # so what it shrinks depended on the machine's load: CI (session 8) shrank
        # no-vote-floor's find to 8 entries where an idle machine got 6.
        report_multiple_bugs=False,
        # Draws from the seed alone, whatever this process imported (the module).
        backend=hypothesis_provider.register(),
    )
    try:
        schedule = hypothesis.find(
            schedules(nodes, fault_window_s, leaves=leaves),
            fails,
            settings=settings,
            random=random.Random(seed),
        )
    except hypothesis.errors.NoSuchExample:
        return None
    schedule = without_needless_entries(schedule, fails)
    return schedule, run_simulation(config, schedule)


def without_needless_entries(
    schedule: faults.FaultSchedule, fails: Callable[[faults.FaultSchedule], bool]
) -> faults.FaultSchedule:
    """Drop each entry, last first, whose schedule still fails without it.

    Hypothesis shrinks the draws, and an entry drawn in front of a block can outlive
    that though the schedule fails without it (no-vote-floor, seed 1, once start-up
    gossip changed: a 0.5 s isolate kept in front of the stale-source block, 8 entries
    where 6 fail).  One run per entry, so bounded by the schedule's length."""
    entries = list(schedule.entries)
    for index in reversed(range(len(entries))):
        if len(entries) == 1:
            break
        trial = msgspec.structs.replace(schedule, entries=entries[:index] + entries[index + 1 :])
        if fails(trial):
            entries = list(trial.entries)
    return msgspec.structs.replace(schedule, entries=entries)
