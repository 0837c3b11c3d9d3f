"""The simulator's nemesis: applies a ``FaultSchedule`` (chaos/faults.py) to a
``Simulation`` and logs every inject and heal as a harness ``fault`` event.

Timed entries fire at ``at_s``; triggered entries (``when``) fire the moment the
watched node logs the matching event.  A triggered *crash* takes effect at once,
between the node's log line and the action it announced (DESIGN: an action's event is
logged before the action, so a crash can lose the effect but never the event); other
triggered ops take effect right after the handler that logged the event.

Event conventions the checkers rely on (verify/checkers/timeline.py):
``crash`` inject = the process died; ``crash`` heal = it was started again (its
``start`` event follows); ``restart`` inject/heal = a running node killed and started;
``pause`` inject/heal = SIGSTOP/SIGCONT; link and partition faults are healed by a
``heal`` of the same op name, or by ``op="heal"`` (everything network-related).
"""

from __future__ import annotations

import math
import random
from typing import Any

from swarmshake.chaos import faults
from swarmshake.chaos.sim.engine import Simulation
from swarmshake.reference_node.protocol.history import HARNESS, EventBase, Fault

CHURN_EVENTS_MAX = 100_000  # per churn op: a rate typo must not flood the heap


class Nemesis:
    """``window``: timed entries fire ``at_s`` after its start, and triggers count the
    events logged inside it, as the real runner arms its schedule at steady state and
    stops it at the end of ``duration_s`` (a run without a suite: the whole run)."""

    def __init__(
        self,
        sim: Simulation,
        schedule: faults.FaultSchedule,
        rng: random.Random,
        window: tuple[float, float] = (0.0, math.inf),
    ):
        faults.check_simulable(schedule)
        self.sim = sim
        self.schedule = schedule
        self.rng = rng
        self.cluster = list(sim.names)
        self._validate_names()
        self._partitions = 0
        self._churn_active: dict[int, bool] = {}
        self._triggers: list[tuple[int, faults.ScheduleEntry, int]] = []  # (index, entry, seen)
        self.injected = 0
        self.fired: set[int] = set()  # the schedule's entries applied (never-fired: the rest)
        self._window = window
        for index, entry in enumerate(schedule.entries):
            if entry.at_s is not None:
                sim.call_at(window[0] + entry.at_s, lambda i=index, e=entry: self._fire(i, e))
            else:
                self._triggers.append((index, entry, 0))
        if self._triggers:
            sim.recorder.watchers.append(self._watch)

    def _validate_names(self) -> None:
        known = set(self.cluster)
        for index, entry in enumerate(self.schedule.entries):
            names = set(entry.op.targets()) - {faults.ALL}
            if entry.when is not None:
                names.add(entry.when.node)
            unknown = sorted(names - known)
            if unknown:
                raise faults.FaultSpecError(
                    f"entry {index}: unknown node(s) {', '.join(unknown)}; this cluster has "
                    f"{self.cluster[0]}..{self.cluster[-1]}"
                )

    # --- triggers -----------------------------------------------------------------------

    def _watch(self, event: EventBase) -> None:
        if event.node == HARNESS or not self._triggers:
            return
        if not self._window[0] <= event.t_mono < self._window[1]:
            return
        kind = event.__struct_config__.tag
        remaining = []
        fired = []
        for index, entry, seen in self._triggers:
            when = entry.when
            assert when is not None
            if when.node == event.node and when.kind == kind and event.step >= when.step_at_least:
                seen += 1
                if seen >= when.count:
                    fired.append((index, entry))
                    continue
            remaining.append((index, entry, seen))
        self._triggers = remaining
        for index, entry in fired:
            delay = entry.when.delay_s if entry.when is not None else 0.0
            if isinstance(entry.op, faults.Crash) and delay == 0.0:
                self._fire(index, entry)
            else:
                self.sim.call_at(self.sim.now + delay, lambda i=index, e=entry: self._fire(i, e))

    def never_fired(self) -> list[int]:
        """The schedule's entries not applied so far (a suite run's untested entries)."""
        return [i for i in range(len(self.schedule.entries)) if i not in self.fired]

    # --- firing -------------------------------------------------------------------------

    def _fire(self, index: int, entry: faults.ScheduleEntry) -> None:
        t = self.sim.now
        self.injected += 1
        self.fired.add(index)
        self.apply(entry.op, t, index)
        if entry.heal_after_s is not None:
            heal = entry.op.heal()
            if heal is not None:
                self.sim.call_at(
                    t + entry.heal_after_s, lambda h=heal: self.apply(h, self.sim.now, index)
                )

    def log_fault(self, t: float, op: str, target: list[str], phase: str, **params: Any) -> None:
        recorder = self.sim.recorder
        recorder.log(
            Fault(
                t_wall=t,
                t_mono=t,
                node=HARNESS,
                lamport=recorder.next_lamport(HARNESS),
                op=op,
                target=target,
                params=params,
                phase=phase,  # type: ignore[arg-type]
            )
        )

    def _nodes(self, nodes: list[str]) -> list[str]:
        return list(self.cluster) if faults.ALL in nodes else list(nodes)

    def apply(self, op: faults.FaultOp, t: float, index: int = -1) -> None:
        sim = self.sim
        if isinstance(op, faults.Crash):
            for name in self._nodes(op.nodes):
                proc = sim.processes.get(name)
                if proc is not None and proc.up:
                    self.log_fault(t, "crash", [name], "inject")
                    sim.crash(name, t)
        elif isinstance(op, faults.Restart):
            for name in self._nodes(op.nodes):
                self.restart(name, t)
        elif isinstance(op, faults.Pause):
            for name in self._nodes(op.nodes):
                proc = sim.processes.get(name)
                if proc is not None and proc.up and not proc.paused:
                    self.log_fault(t, "pause", [name], "inject")
                    sim.pause(name, t)
        elif isinstance(op, faults.Resume):
            for name in self._nodes(op.nodes):
                proc = sim.processes.get(name)
                if proc is not None and proc.up and proc.paused:
                    self.log_fault(t, "pause", [name], "heal")
                    sim.resume(name, t)
        elif isinstance(op, faults.Partition):
            links = op.cut_links(self.cluster, self.rng)
            self._partitions += 1
            self._network(
                t, links, lambda: sim.network.set_cut(f"partition-{self._partitions}", links)
            )
            self.log_fault(
                t,
                "partition",
                op.targets() or [faults.ALL],
                "inject",
                grouping=op.grouping,
                direction=op.direction,
                cuts=sorted(map(list, links)),
            )
        elif isinstance(op, faults.Heal):
            self.heal(op, t)
        elif isinstance(op, faults.Latency):
            links = op.directed_links(self.cluster)
            self._network(
                t, links, lambda: sim.network.set_latency(links, op.delay_ms, op.jitter_ms)
            )
            self.log_fault(
                t, "latency", op.targets(), "inject", delay_ms=op.delay_ms, jitter_ms=op.jitter_ms
            )
        elif isinstance(op, faults.Bandwidth):
            links = op.directed_links(self.cluster)
            self._network(t, links, lambda: sim.network.set_bandwidth(links, op.rate_kbps))
            self.log_fault(t, "bandwidth", op.targets(), "inject", rate_kbps=op.rate_kbps)
        elif isinstance(op, faults.Blackhole):
            links = op.directed_links(self.cluster)
            self._network(t, links, lambda: sim.network.set_blackhole(f"blackhole-{index}", links))
            self.log_fault(t, "blackhole", op.targets(), "inject", direction=op.direction)
        elif isinstance(op, faults.ClockSkew):
            phase = "heal" if op.offset_ms == 0.0 and op.drift_ppm == 0.0 else "inject"
            for name in self._nodes(op.nodes):
                self.log_fault(
                    t, "clock_skew", [name], phase, offset_ms=op.offset_ms, drift_ppm=op.drift_ppm
                )
                sim.skew(name, t, op.offset_ms, op.drift_ppm)
        elif isinstance(op, faults.CpuThrottle):
            phase = "heal" if op.cpu_fraction >= 1.0 else "inject"
            for name in self._nodes(op.nodes):
                self.log_fault(t, "cpu_throttle", [name], phase, cpu_fraction=op.cpu_fraction)
                sim.throttle(name, t, op.cpu_fraction)
        elif isinstance(op, faults.DiskFull):
            for name in self._nodes(op.nodes):
                self.log_fault(t, "disk_full", [name], "inject" if op.full else "heal")
                if op.full:
                    sim.full_disks.add(name)
                else:
                    sim.full_disks.discard(name)
        elif isinstance(op, faults.Churn):
            self._start_churn(op, t, index)
        else:  # check_supported rejected it up front; reaching here is a bug
            raise faults.FaultSpecError(f"op {op.name!r} is unsupported in the simulator")

    def restart(self, name: str, t: float) -> None:
        proc = self.sim.processes.get(name)
        if proc is not None and proc.up:
            self.log_fault(t, "restart", [name], "inject")
            self.sim.crash(name, t)
            self.sim.start(name, t)
            self.log_fault(t, "restart", [name], "heal")
        else:
            self.log_fault(t, "crash", [name], "heal")
            self.sim.start(name, t)

    def _network(self, t: float, links: set[tuple[str, str]] | None, change) -> None:  # noqa: ANN001
        self.sim.before_network_change(t, links)
        change()
        self.sim.after_network_change(t, links)

    def heal(self, op: faults.Heal, t: float) -> None:
        sim = self.sim
        if op.scope == "churn":
            for key in self._churn_active:
                self._churn_active[key] = False
            self.log_fault(t, "churn", [faults.ALL], "heal")
            return
        links = None
        if op.scope not in ("all", "partition"):
            links = faults.Latency(
                src=op.src, dst=op.dst, direction=op.direction, delay_ms=0.0
            ).directed_links(self.cluster)
        self._network(t, links, lambda: sim.network.heal(op.scope, links))
        name = "heal" if op.scope == "all" else op.scope
        target = [faults.ALL] if links is None else sorted(set(op.src) | set(op.dst))
        self.log_fault(t, name, target, "heal")

    # --- churn --------------------------------------------------------------------------

    def _start_churn(self, op: faults.Churn, t: float, index: int) -> None:
        self._churn_active[index] = True
        self.log_fault(t, "churn", op.targets(), "inject", events_per_min=op.events_per_min)
        if op.events_per_min <= 0:
            return
        rng = self.sim.rngs.get("churn", index)
        state = {"count": 0}
        first = t + rng.expovariate(op.events_per_min / 60.0)
        self.sim.call_at(first, lambda: self._next_departure(op, index, rng, state, self.sim.now))

    def _next_departure(
        self, op: faults.Churn, index: int, rng: random.Random, state: dict, now: float
    ) -> None:
        # A method, not a closure that calls itself: such a closure is a reference
        # cycle that kept the whole finished simulation alive until the cyclic
        # collector came round.
        if not self._churn_active.get(index) or state["count"] >= CHURN_EVENTS_MAX:
            return
        state["count"] += 1
        self._depart(op, now, rng)
        gap = rng.expovariate(op.events_per_min / 60.0)
        self.sim.call_at(
            now + gap, lambda: self._next_departure(op, index, rng, state, self.sim.now)
        )

    def _depart(self, op: faults.Churn, t: float, rng: random.Random) -> None:
        sim = self.sim
        pool = self._nodes(op.nodes)
        up = [n for n in self.cluster if (p := sim.processes.get(n)) is not None and p.up]
        floor = op.min_alive * len(self.cluster) if op.min_alive < 1 else op.min_alive
        candidates = [n for n in pool if n in up]
        if not candidates or len(up) - 1 < math.ceil(floor):
            return
        name = candidates[rng.randrange(len(candidates))]
        # Drawn only when some departures are leaves: a crash-only churn draws what
        # it always drew (pinned digests).
        crash = op.crash_fraction >= 1.0 or rng.random() < op.crash_fraction
        if crash:
            self.log_fault(t, "crash", [name], "inject", by="churn")
            sim.crash(name, t)
        else:
            # A clean leave, logged as the local and Docker backends log it.
            self.log_fault(t, "restart", [name], "inject", by="churn", leave=True)
            sim.leave(name, t, "churn")
        sim.call_at(t + op.down_s, lambda: self._churn_return(name))

    def _churn_return(self, name: str) -> None:
        """The departed node comes back: a crashed one restarts; a leaver, stopped
        once its removal committed, starts again and joins (still running -- its
        removal did not commit -- it is restarted, as the real backends do)."""
        sim = self.sim
        proc = sim.processes.get(name)
        if proc is None:
            return
        if proc.up:
            if not proc.app or proc.app.enrolment.leaving is None:
                return  # not one of churn's leavers (it came back some other way)
            sim.crash(name, sim.now)
        self.log_fault(sim.now, "crash", [name], "heal", by="churn")
        sim.start(name, sim.now)
