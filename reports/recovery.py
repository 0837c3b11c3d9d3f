"""Recovery measurements of one run, derived from its history alone.

The recovery benchmark and the run report both read these, so a number means the same
in ``bench.json`` and in ``report.html``, for simulated and real runs alike.  Per
injected fault (a harness ``fault`` event with ``phase="inject"``):

- **detection**: inject → the moment every *observer* (a node that is not a victim
  and is up at the inject) has logged ``declare_dead`` of every victim, or (systems
  without a failure detector of their own, such as torchft and TorchElastic, which
  write the neutral history of ``verify/history.py``) a ``membership`` that leaves
  every victim out; ``None`` if one never did while the fault lasted (or the fault
  is not one a detector should see, e.g. a latency spike inside the envelope).
- **recovery**: inject → the first ``commit`` (or neutral ``step_committed``) of a step above the highest step
  committed before the inject that either leaves every victim out of its
  contributors, or comes after the heal (a partition whose fault event names every
  node without its ``groups`` has no known victims: its first new commit counts); for faults that keep the victims in the
  cluster (latency, straggler, broker loss, Byzantine, clock skew) simply the next
  commit after the inject.
- **rejoin**: for a victim that restarts, its ``start`` (or ``ready``) → its first
  ``rejoin_done``/``commit`` whose ``param_fp`` equals the majority's fingerprint of
  that step (the most common ``param_fp`` among the step's commits, as L3 reads it).
  Commits are read through ``verify.history.step_commits``, so the reference node's
  ``commit`` and a neutral ``step_committed`` count alike.
- **why**: for each figure that is ``None``, the reason (``FaultMeasurement.why``),
  so a table prints "—" with it rather than a number nobody measured.
- **throughput kept**: committed steps per second during the fault window over the
  rate in the fault-free stretch before the first fault.
- **false positives**: the declarations (and forced restarts whose verdict the history
  lacks) that the S4 checker judges invalid, each on its own evidence: a live peer
  declared dead by a node whose link to it was not cut (reused from ``verify``).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from swarmshake.reference_node.protocol.history import (
    Commit,
    DeclareAlive,
    DeclareDead,
    EventBase,
    Fault,
    History,
    Ready,
    RejoinDone,
    Start,
)
from swarmshake.reports.series import ALL_NODES, fault_windows, run_origin
from swarmshake.verify.checkers import Bounds, build_timeline
from swarmshake.verify.checkers.detector import false_positive_refs
from swarmshake.verify.history import MembershipChange, StepCommitted, StepView, step_commits

# Faults after which the victims stay members that should keep contributing: recovery
# is the next commit, not one without them.
STAY_IN_OPS = frozenset(
    {"latency", "cpu_throttle", "broker_loss", "byzantine", "clock_skew", "bandwidth", "netem"}
)
# Faults a failure detector is expected to notice (its victims stop answering).
DETECTABLE_OPS = frozenset({"crash", "restart", "pause", "partition", "blackhole"})
# Ops that are the second half of another fault, not a fault of their own.
HEAL_OPS = frozenset({"heal", "resume"})


@dataclass(frozen=True)
class FaultMeasurement:
    op: str
    victims: tuple[str, ...]
    inject_t: float  # seconds since the run's first event
    inject_index: int
    detection_s: float | None
    recovery_s: float | None
    rejoin_s: float | None  # restart → majority fingerprint
    rejoin_from_ready_s: float | None  # ready → majority fingerprint
    # the harness's restart command → majority fingerprint: the same clock on every
    # system (a TorchElastic worker logs its start only once the group re-formed)
    rejoin_from_restart_s: float | None
    throughput_kept: float | None  # fault-window commit rate / steady commit rate
    # figure name ("detection", "recovery", "rejoin", "rejoin_from_ready",
    # "rejoin_from_restart", "throughput_kept") -> why it is None; figures that were measured have no entry
    why: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunMeasurement:
    faults: list[FaultMeasurement]
    false_positives: int
    steady_commits_per_s: float | None

    def to_dict(self) -> dict:
        return {
            "faults": [f.to_dict() for f in self.faults],
            "false_positives": self.false_positives,
            "steady_commits_per_s": self.steady_commits_per_s,
        }


def victims_of(event: Fault, nodes: list[str]) -> list[str]:
    """The nodes a fault takes out: its targets, or for a partition every node outside
    the largest group (the side that can keep a majority)."""
    if event.op == "partition":
        groups = event.params.get("groups")
        if not (isinstance(groups, list) and groups):
            # The harness records the links it cut (``cuts``) rather than the sides of
            # an isolate / halves / random grouping: the sides are what stays connected.
            groups = _sides_from_cuts(
                event.params.get("cuts"), sorted(set(event.target) | set(nodes))
            )
        if isinstance(groups, list) and groups and all(isinstance(g, list) for g in groups):
            named = [[str(n) for n in g] for g in groups]
            rest = sorted(set(nodes) - {n for g in named for n in g})
            if rest:
                named.append(rest)
            largest = max(named, key=len)
            return sorted(n for g in named if g is not largest for n in g)
        if set(nodes) <= set(event.target):
            # Every node named and no groups recorded: the sides are unknown, so no node
            # is a victim; recovery is then the first new commit anywhere (see module doc).
            return []
    link_victims = _link_victims(event.params.get("src"), event.params.get("dst"), nodes)
    if link_victims is not None:
        return link_victims
    # "*" (every node) names no victim: a link fault on n3's links to everyone is
    # written target ["*", "n3"] and takes out n3; a crash of "*" leaves no survivor.
    return sorted(t for t in event.target if t != ALL_NODES)


def _link_victims(src: object, dst: object, nodes: list[str]) -> list[str] | None:
    """A link fault's victims from its ``src``/``dst`` (the real harness's record,
    whose ``target`` lists every node the links touch): the side facing ``*`` (n3's
    links to everyone take out n3, in either direction), else the smaller side."""
    if not (isinstance(src, list) and isinstance(dst, list) and src and dst):
        return None
    sources = {str(n) for n in src}
    destinations = {str(n) for n in dst}
    if ALL_NODES in destinations and ALL_NODES in sources:
        return []  # every link: no node is singled out
    if ALL_NODES in destinations:
        side = sources
    elif ALL_NODES in sources:
        side = destinations
    else:
        side = sources if len(sources) <= len(destinations) else destinations
    return sorted(side & set(nodes)) if nodes else sorted(side)


def _sides_from_cuts(cuts: object, nodes: list[str]) -> list[list[str]] | None:
    """The groups of nodes still connected when the directed links ``cuts`` are down
    (a link cut in either direction counts as cut); ``None`` when ``cuts`` is not a
    list of ``[src, dst]`` pairs or leaves everything connected (a bridge, a ring)."""
    if not isinstance(cuts, list) or not all(
        isinstance(c, list) and len(c) == 2 and all(isinstance(n, str) for n in c) for c in cuts
    ):
        return None
    cut = {(a, b) for a, b in cuts} | {(b, a) for a, b in cuts}
    nodes = [n for n in nodes if n != ALL_NODES]
    sides: list[list[str]] = []
    seen: set[str] = set()
    for first in nodes:
        if first in seen:
            continue
        side, frontier = [first], [first]
        seen.add(first)
        while frontier:
            node = frontier.pop()
            for other in nodes:
                if other not in seen and (node, other) not in cut:
                    seen.add(other)
                    side.append(other)
                    frontier.append(other)
        sides.append(sorted(side))
    return sides if len(sides) > 1 else None


def _majority_fingerprints(views: list[StepView]) -> dict[int, str]:
    by_step: dict[int, Counter[str]] = defaultdict(Counter)
    for view in views:
        by_step[view.step][view.param_fp] += 1
    return {step: counts.most_common(1)[0][0] for step, counts in by_step.items()}


def _rate(times: list[float], low: float, high: float) -> float | None:
    if high - low <= 0:
        return None
    count = bisect.bisect_right(times, high) - bisect.bisect_right(times, low)
    return count / (high - low)


def measure_run(history: History, bounds: Bounds | None = None) -> RunMeasurement:
    """Every injected fault's detection, recovery, rejoin and throughput (module doc)."""
    bounds = bounds or Bounds()
    origin = run_origin(history)
    nodes = history.nodes()
    events = history.events
    views = list(step_commits(history))
    commits = [(view.t_mono - origin, view) for view in views]
    commit_times = [t for t, _ in commits]
    rise_times: list[float] = []
    top_by_position: list[int] = []  # the highest step committed up to each commit
    top = -1
    for t, commit in commits:
        if commit.step > top:
            top = commit.step
            rise_times.append(t)
        top_by_position.append(top)
    windows = {w.inject_index: w for w in fault_windows(history)}
    injects = [
        (i, e)
        for i, e in enumerate(events)
        if isinstance(e, Fault) and e.phase == "inject" and e.op not in HEAL_OPS
    ]
    first_fault_t = injects[0][1].t_mono - origin if injects else None
    steady_end = (
        first_fault_t if first_fault_t is not None else (rise_times[-1] if rise_times else 0)
    )
    steady_start = rise_times[0] if rise_times else 0.0
    steady = _rate(rise_times, steady_start, steady_end) if rise_times else None
    if steady == 0:
        steady = None
    fingerprints = _majority_fingerprints(views)
    index_ = _Index(history, origin)
    measurements: list[FaultMeasurement] = []
    for index, event in injects:
        t0 = event.t_mono - origin
        victims = victims_of(event, nodes)
        window = windows.get(index)
        heal_t = window.end if window is not None and window.healed else None
        window_end = window.end if window is not None else t0
        figures = {
            "detection": _detection(index_, t0, victims, heal_t, event.op),
            "recovery": _recovery(
                commits, commit_times, top_by_position, t0, victims, heal_t, event.op
            ),
            "rejoin": _rejoin(index_, t0, victims, fingerprints, Start),
            "rejoin_from_ready": _rejoin(index_, t0, victims, fingerprints, Ready),
            "rejoin_from_restart": _rejoin_from_restart(
                index_, event.op, t0, heal_t, victims, fingerprints
            ),
            "throughput_kept": (
                None
                if steady is None or window_end <= t0
                else min(1.0, (_rate(rise_times, t0, window_end) or 0.0) / steady)
            ),
        }
        measurements.append(
            FaultMeasurement(
                op=event.op,
                victims=tuple(victims),
                inject_t=t0,
                inject_index=index,
                detection_s=figures["detection"],
                recovery_s=figures["recovery"],
                rejoin_s=figures["rejoin"],
                rejoin_from_ready_s=figures["rejoin_from_ready"],
                rejoin_from_restart_s=figures["rejoin_from_restart"],
                throughput_kept=figures["throughput_kept"],
                why=_why_missing(figures, index_, event.op, victims, t0, steady, window_end),
            )
        )
    timeline = build_timeline(history, bounds)
    false_positives, _undecidable = false_positive_refs(history, timeline, bounds)
    return RunMeasurement(
        faults=measurements,
        false_positives=len(false_positives),
        steady_commits_per_s=steady,
    )


def _why_missing(
    figures: dict[str, float | None],
    index: _Index,
    op: str,
    victims: list[str],
    t0: float,
    steady: float | None,
    window_end: float,
) -> dict[str, str]:
    """Why each figure that is ``None`` is: what the history lacks, or what never came."""
    why: dict[str, str] = {}
    if figures["detection"] is None:
        if op not in DETECTABLE_OPS:
            why["detection"] = f"{op} is not a fault a failure detector should see"
        elif not victims:
            why["detection"] = "the fault names no victim"
        elif not (index.has_declarations or index.has_membership):
            why["detection"] = "the history has no declare_dead and no membership events"
        elif index.has_declarations:
            why["detection"] = "not every observer declared every victim dead while it lasted"
        else:
            why["detection"] = "no observer's group left the victim out while the fault lasted"
    if figures["recovery"] is None:
        why["recovery"] = (
            "no new step committed without the victims (or after the heal) before the run ended"
        )
    for name in ("rejoin", "rejoin_from_ready", "rejoin_from_restart"):
        if figures[name] is not None:
            continue
        restarted = [v for v in victims if _started_after(index, v, t0)]
        if name == "rejoin_from_restart" and op not in ("crash", "restart"):
            why[name] = f"{op} restarts no node"
        elif not restarted:
            why[name] = "no victim restarted after the fault"
        elif name == "rejoin_from_ready" and not any(
            isinstance(e, Ready) for v in restarted for _, e in index.by_node.get(v, [])
        ):
            why[name] = "the system writes no ready event"
        else:
            why[name] = "a restarted victim never matched the majority's fingerprint"
    if figures["throughput_kept"] is None:
        why["throughput_kept"] = (
            "no steady commit rate before the first fault"
            if steady is None
            else "the fault window has no length (not healed before the run ended)"
            if window_end <= t0
            else "not measured"
        )
    return why


def _started_after(index: _Index, node: str, t0: float) -> bool:
    return any(isinstance(e, Start) and t >= t0 for t, e in index.by_node.get(node, []))


class _Index:
    """The events each measurement reads, in time order, built once per run: a run of
    thousands of events and faults would otherwise be rescanned per fault."""

    def __init__(self, history: History, origin: float):
        self.nodes = history.nodes()
        # Detection reads starts, declarations (or neutral membership changes) and
        # kills; rejoin reads one node's starts, readies, rejoins and commits.
        self.detector: list[tuple[float, EventBase]] = []
        self.by_node: dict[str, list[tuple[float, EventBase]]] = defaultdict(list)
        # The reference node has a failure detector (declare_dead); a system that has
        # none says who is in the group (membership): detection is read from that.
        self.has_declarations = False
        self.has_membership = False
        for event in history.events:
            t = event.t_mono - origin
            if isinstance(event, DeclareDead):
                self.has_declarations = True
            if isinstance(event, MembershipChange):
                self.has_membership = True
            if isinstance(event, Start | DeclareDead | DeclareAlive | MembershipChange) or (
                isinstance(event, Fault)
                and event.phase == "inject"
                and event.op in ("crash", "restart")
            ):
                self.detector.append((t, event))
            if isinstance(event, Start | Ready | RejoinDone | Commit | StepCommitted):
                self.by_node[event.node].append((t, event))
        self.detector_times = [t for t, _ in self.detector]
        self.node_times = {node: [t for t, _ in items] for node, items in self.by_node.items()}


def _detection(
    index: _Index, t0: float, victims: list[str], heal_t: float | None, op: str
) -> float | None:
    if op not in DETECTABLE_OPS or not victims:
        return None
    victim_set = set(victims)
    started: set[str] = set()
    down: set[str] = set()
    # An observer that already holds a victim dead (declared after the victim's current
    # process started, not revoked) has detected it at the inject: delay 0, as L1 counts.
    standing: set[tuple[str, str]] = set()
    split = bisect.bisect_right(index.detector_times, t0)
    for _, event in index.detector[:split]:
        if isinstance(event, Start):
            started.add(event.node)
            down.discard(event.node)
            if event.node in victim_set:
                standing = {(o, v) for o, v in standing if v != event.node}
        elif isinstance(event, Fault):
            down.update(event.target)
        elif isinstance(event, DeclareDead) and event.peer in victim_set:
            standing.add((event.node, event.peer))
        elif isinstance(event, DeclareAlive) and event.peer in victim_set:
            standing.discard((event.node, event.peer))
        elif isinstance(event, MembershipChange):
            # A group that leaves a victim out holds it dead; one that names it, alive.
            members = set(event.members)
            for victim in victim_set:
                if victim in members:
                    standing.discard((event.node, victim))
                elif event.node != victim:
                    standing.add((event.node, victim))
    observers = (started or set(index.nodes)) - down - victim_set
    if not observers:
        return None
    pending = {(o, v) for o in observers for v in victims} - standing
    if not pending:
        return 0.0
    for t, event in index.detector[split:]:
        if heal_t is not None and t > heal_t and op not in ("crash", "restart"):
            return None  # healed before every observer noticed: nothing to detect
        if isinstance(event, Fault):
            # an observer that dies is no longer expected to declare anything
            pending = {(o, v) for o, v in pending if o not in event.target}
        elif isinstance(event, DeclareDead):
            pending.discard((event.node, event.peer))
        elif isinstance(event, MembershipChange):
            members = set(event.members)
            pending = {(o, v) for o, v in pending if o != event.node or v in members}
        if not pending:
            return t - t0
    return None


def _recovery(
    commits: list[tuple[float, StepView]],
    commit_times: list[float],
    top_by_position: list[int],
    t0: float,
    victims: list[str],
    heal_t: float | None,
    op: str,
) -> float | None:
    split = bisect.bisect_right(commit_times, t0)
    top_before = top_by_position[split - 1] if split else -1
    victim_set = set(victims)
    for t, commit in commits[split:]:
        if commit.step <= top_before or commit.node in victim_set:
            continue
        if op in STAY_IN_OPS or not victim_set.intersection(commit.participants):
            return t - t0
        if heal_t is not None and t >= heal_t:
            return t - t0
    return None


def _rejoin_from_restart(
    index: _Index,
    op: str,
    t0: float,
    heal_t: float | None,
    victims: list[str],
    fingerprints: dict[int, str],
) -> float | None:
    """A crash healed by a restart (or a restart op): the restart command → caught up."""
    if op == "restart":
        restart_t: float | None = t0
    elif op == "crash":
        restart_t = heal_t
    else:
        return None
    if restart_t is None:
        return None
    return _rejoin(index, restart_t, victims, fingerprints, Start, measured_from=restart_t)


def _rejoin(
    index: _Index,
    t0: float,
    victims: list[str],
    fingerprints: dict[int, str],
    since: type,
    measured_from: float | None = None,
) -> float | None:
    """Worst over the victims that restarted: ``since`` event (or ``measured_from``,
    when given) → caught up."""
    worst: float | None = None
    for victim in victims:
        items = index.by_node.get(victim, [])
        began: float | None = None
        caught: float | None = None
        for t, event in items[bisect.bisect_left(index.node_times.get(victim, []), t0) :]:
            if began is None:
                if isinstance(event, since):
                    began = t
                continue
            if (
                isinstance(event, RejoinDone | Commit | StepCommitted)
                and fingerprints.get(event.step) == event.param_fp
            ):
                caught = t
                break
        if began is None:
            continue
        if caught is None:
            return None  # a victim restarted but never caught up: the cell shows a miss
        worst = max(worst or 0.0, caught - (began if measured_from is None else measured_from))
    return worst
