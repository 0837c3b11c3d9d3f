"""A small event-heap driver of FailureDetector cores for tests (not the simulator).

Every heartbeat is materialised one by one, links delay each message uniformly in
[low, high] seconds, crashed nodes stop sending and receiving, a partition drops
messages on cut directed links, and a node told it was declared dead rejoins as the
DESIGN says: a fresh detector with a higher incarnation (``rejoins`` records it).  It exists to test the
detector's contract end to end at small N with a driver written independently of the
simulator; the simulator (chaos/sim) is the fast, lazy one.
"""

from __future__ import annotations

import heapq
import random

from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.detector import (
    DeclaredDead,
    FailureDetector,
    GossipReceived,
    HeartbeatPlan,
    HeartbeatsArrived,
    Refuted,
    SelfDeclaredDead,
    SendGossip,
    Started,
    Tick,
)


class MiniCluster:
    def __init__(
        self, n: int, seed: int, delay_s=(0.025, 0.075), bugs: BugSet = NO_BUGS, config=None
    ):
        self.names = tuple(f"n{i}" for i in range(n))
        self.rng = random.Random(seed)
        self.delay_s = delay_s
        self.detectors = {
            name: FailureDetector(
                node=name, members=self.names, seed=seed, bugs=bugs, config=config
            )
            for name in self.names
        }
        self.crashed: dict[str, float] = {}
        self.plans: dict[str, HeartbeatPlan] = {}
        self.heap: list = []
        self.seq = 0
        self.now = 0.0
        self.log: list[tuple[str, object]] = []
        self.tick_at: dict[str, float] = {}  # the one live tick per node (stale ones skipped)
        self.cut: set[tuple[str, str]] = set()  # directed links a partition drops
        # Links that hold instead of drop (as the node's TCP links do: a bounded send
        # queue, flushed when the redial after the heal succeeds): link -> messages.
        self.holding: dict[tuple[str, str], list] = {}
        self.redial_s: dict[tuple[str, str], float] = {}
        self.rejoins: list[tuple[str, int, float]] = []  # (node, new incarnation, time)
        self._seed, self._bugs, self._config = seed, bugs, config
        for name in self.names:
            self._apply(name, self.detectors[name].handle(Started(), 0.0))

    def _push(self, at: float, kind: str, node: str, payload=None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, node, payload))

    def _delay(self) -> float:
        return self.rng.uniform(*self.delay_s)

    def _apply(self, node: str, actions: list) -> None:
        for action in actions:
            self.log.append((node, action))
            if isinstance(action, HeartbeatPlan):
                self.plans[node] = action
                if action.to:  # every interval_s from start_at on, as the drivers do
                    self._push(action.start_at, "beat", node, action)
            elif isinstance(action, SendGossip):
                for peer in action.to:
                    if (node, peer) in self.holding:
                        self._hold((node, peer), ("gossip", peer, action.message))
                    elif (node, peer) not in self.cut:
                        self._push(action.at + self._delay(), "gossip", peer, action.message)
            elif isinstance(action, SelfDeclaredDead):
                # membership's MustRejoin: restart the cores with a higher incarnation
                self._push(action.at, "rejoin", node, action.incarnation + 1)
        deadline = self.detectors[node].next_deadline()
        if deadline is not None and node not in self.crashed:
            deadline = max(deadline, self.now)
            scheduled = self.tick_at.get(node)
            if scheduled is None or deadline < scheduled:
                self.tick_at[node] = deadline
                self._push(deadline, "tick", node)

    # The node's control-channel queue bound (runtime/links.py drops the oldest).
    HOLD_LIMIT = 256

    def _hold(self, link: tuple[str, str], message: tuple) -> None:
        held = self.holding[link]
        held.append(message)
        if len(held) > self.HOLD_LIMIT:
            held.pop(0)

    def crash(self, node: str, at: float) -> None:
        self._push(at, "crash", node)

    def restart(self, node: str, at: float) -> None:
        """Bring a crashed node back as a new process (a higher incarnation)."""
        self._push(at, "restart", node)

    def partition(self, groups: list[list[str]], at: float, heal_at: float, **link_options) -> None:
        """Cut every link between different groups from ``at`` until ``heal_at``
        (``link_options``: see ``cut_links``)."""
        links = {
            (a, b)
            for group in groups
            for a in group
            for other in groups
            if other is not group
            for b in other
        }
        self.cut_links(links, at, heal_at, **link_options)

    def cut_links(
        self,
        links: set[tuple[str, str]],
        at: float,
        heal_at: float,
        *,
        hold: bool = False,
        redial_s: dict[tuple[str, str], float] | None = None,
    ) -> None:
        """Drop messages on these directed links from ``at`` until ``heal_at``; with
        ``hold``, queue them instead (heartbeats and gossip) and deliver the queue in
        order once the link redials, ``redial_s[link]`` (default 0) after the heal."""
        if hold:
            self.redial_s.update(redial_s or {})
            self._push(at, "hold", "", set(links))
        else:
            self._push(at, "cut", "", set(links))
        self._push(heal_at, "heal", "", set(links))

    def run(self, until: float) -> None:
        while self.heap and self.heap[0][0] <= until:
            at, _, kind, node, payload = heapq.heappop(self.heap)
            self.now = at
            if kind == "crash":
                self.crashed[node] = at
                continue
            if kind == "cut":
                self.cut |= payload
                continue
            if kind == "hold":
                for link in payload:
                    self.holding.setdefault(link, [])
                continue
            if kind == "heal":
                self.cut -= payload
                for link in sorted(payload & set(self.holding)):
                    self._push(at + self.redial_s.get(link, 0.0), "redialled", "", link)
                continue
            if kind == "redialled":
                # One connection, in order: the queue first, then what follows.
                arrive = at + self._delay()
                for index, (what, peer, body) in enumerate(self.holding.pop(payload)):
                    self._push(arrive + 1e-6 * index, what, peer, body)
                continue
            if kind == "restart":
                self.crashed.pop(node, None)
                kind, payload = "rejoin", self.detectors[node].incarnation + 1
            if node in self.crashed:
                continue
            detector = self.detectors[node]
            if kind == "rejoin":
                fresh = FailureDetector(
                    node=node,
                    members=self.names,
                    seed=self._seed,
                    bugs=self._bugs,
                    config=self._config,
                    incarnation=max(payload, detector.incarnation + 1),
                )
                self.detectors[node] = fresh
                self.rejoins.append((node, fresh.incarnation, at))
                self.tick_at.pop(node, None)
                self._apply(node, fresh.handle(Started(), at))
                continue
            if kind == "beat":
                if self.plans.get(node) is not payload:
                    continue  # superseded plan
                for peer in payload.to:
                    if (node, peer) in self.holding:
                        self._hold((node, peer), ("hb", peer, (node, payload.incarnation)))
                    elif (node, peer) not in self.cut:
                        self._push(at + self._delay(), "hb", peer, (node, payload.incarnation))
                self._push(at + payload.interval_s, "beat", node, payload)
            elif kind == "hb":
                sender, incarnation = payload
                event = HeartbeatsArrived(peer=sender, incarnation=incarnation, arrival_times=(at,))
                self._apply(node, detector.handle(event, at))
            elif kind == "gossip":
                self._apply(node, detector.handle(GossipReceived(message=payload), at))
            elif kind == "tick":
                if self.tick_at.get(node) != at:
                    continue
                del self.tick_at[node]
                self._apply(node, detector.handle(Tick(), at))

    def declarations(self):
        return [(node, a) for node, a in self.log if isinstance(a, DeclaredDead)]

    def false_positives(self):
        return [
            (node, a)
            for node, a in self.declarations()
            if a.peer not in self.crashed or a.at < self.crashed[a.peer]
        ]

    def refutations(self):
        return [(node, a) for node, a in self.log if isinstance(a, Refuted)]


# --- step commit ---------------------------------------------------------------------------

from swarmshake.reference_node.protocol import commit as C  # noqa: E402
from swarmshake.reference_node.protocol.messages import StepValue  # noqa: E402


class ConsensusModel:
    """The abstract single-decree model: per step, once a value is chosen, no other
    value may ever be chosen.  ``choose`` is the model's only transition; it refuses
    (AssertionError) what the model forbids."""

    def __init__(self) -> None:
        self.chosen: dict[int, StepValue] = {}

    def choose(self, step: int, value: StepValue, evidence: str) -> None:
        previous = self.chosen.setdefault(step, value)
        assert previous == value, (
            f"step {step}: two values chosen: {previous.agg_fp} and {value.agg_fp} ({evidence})"
        )


class CommitNet:
    """Commit cores over a lossy, reordering network with crashes and restarts.

    Acceptances are recorded as they are logged (``AcceptedValue``); a value is
    *chosen* when a majority of voters accepted it at one ballot, which is fed to the
    ``ConsensusModel``; every ``Decided``/``Committed`` value must be the chosen one.
    """

    def __init__(self, names, *, seed: int = 0, bugs: BugSet = NO_BUGS):
        self.names = tuple(names)
        self.seed = seed
        self.bugs = bugs
        self.now = 0.0
        self.cores = {
            n: C.StepCommit(node=n, voters=self.names, seed=seed, bugs=bugs) for n in names
        }
        self.persisted: dict[str, dict[int, C.AcceptorRecord]] = {n: {} for n in names}
        self.steps_done: dict[str, int] = {n: 0 for n in names}
        self.in_flight: list[tuple[str, object]] = []
        self.fetches: list[tuple[str, int, str]] = []
        self.applies: list[tuple[str, int]] = []
        self.down: set[str] = set()
        self.model = ConsensusModel()
        self.accepts: dict[tuple[int, tuple[int, int]], dict[str, StepValue]] = {}
        self.committed: list[tuple[str, int, StepValue]] = []
        # The ballot each node last logged (Promised or AcceptedValue) per step, kept
        # across restarts as History.tla keeps it: the action order must be a
        # behaviour of that spec, not only the state.
        self.logged_ballot: dict[str, dict[int, tuple[int, int]]] = {n: {} for n in names}

    def majority(self) -> int:
        return len(self.names) // 2 + 1

    def feed(self, node: str, event) -> list:
        if node in self.down:
            return []
        actions = self.cores[node].handle(event, self.now)
        for action in actions:
            self._check_log_order(node, action)
            if isinstance(action, C.Persist):
                before = self.persisted[node].get(action.record.step)
                if before is not None and before.promised is not None:
                    # A durable promise never goes back (a record written later in
                    # the same batch must not hold an older state than an earlier one).
                    assert action.record.promised is not None
                    assert tuple(action.record.promised) >= tuple(before.promised), (
                        f"{node} persisted step {action.record.step} promised "
                        f"{action.record.promised} after {before.promised}"
                    )
                self.persisted[node][action.record.step] = action.record
            elif isinstance(action, C.Send):
                assert node not in action.to
                self.in_flight.extend((to, action.message) for to in action.to)
                if isinstance(action.message, C.Decided):
                    self._check_decided(action.message.step, action.message.value, "Decided")
            elif isinstance(action, C.AcceptedValue):
                voters = self.accepts.setdefault((action.step, tuple(action.ballot)), {})
                voters[node] = action.value
                agreeing = [n for n, v in voters.items() if v == action.value]
                if len(agreeing) >= self.majority():
                    self.model.choose(
                        action.step, action.value, f"ballot {action.ballot} by {sorted(agreeing)}"
                    )
            elif isinstance(action, C.FetchAggregate):
                self.fetches.append((node, action.step, action.value_fp))
            elif isinstance(action, C.ApplyStep):
                self.applies.append((node, action.step))
            elif isinstance(action, C.Committed):
                self._check_decided(action.step, action.value, f"Committed at {node}")
                self.committed.append((node, action.step, action.value))
                self.steps_done[node] = action.step + 1
        return actions

    def _check_log_order(self, node: str, action) -> None:
        """History.tla's Promise and Accept rules, on the order the actions come out
        (the order the shells log them in): a promise or an accept at least at the
        last ballot the node logged for the step."""
        if not isinstance(action, C.Promised | C.AcceptedValue):
            return
        ballot = tuple(action.ballot)
        last = self.logged_ballot[node].get(action.step)
        if last is not None and "forget-vote" not in self.bugs:
            kind = type(action).__name__
            assert ballot >= last, (
                f"{node} logged {kind} {ballot} of step {action.step} after {last}"
            )
        self.logged_ballot[node][action.step] = ballot

    def _check_decided(self, step: int, value: StepValue, what: str) -> None:
        chosen = self.model.chosen.get(step)
        assert chosen == value, f"{what} step {step} value {value.agg_fp} but chosen is {chosen}"

    def deliver(self, index: int) -> None:
        to, message = self.in_flight.pop(index)
        self.feed(to, C.MessageReceived(message=message))

    def crash(self, node: str) -> None:
        self.down.add(node)
        self.fetches = [f for f in self.fetches if f[0] != node]
        self.applies = [a for a in self.applies if a[0] != node]

    def restart(self, node: str) -> None:
        """Back up from what was persisted, at the step its applied state reached."""
        self.down.discard(node)
        self.cores[node] = C.StepCommit(
            node=node,
            voters=self.names,
            seed=self.seed,
            bugs=self.bugs,
            first_step=self.steps_done[node],
            persisted=tuple(self.persisted[node].values()),
        )


def step_value(index: int, names) -> StepValue:
    """A few distinct candidate values (different fingerprints and contributor sets)."""
    contributors = sorted(names[: max(1, len(names) - index % 2)])
    return StepValue(agg_fp=f"a{index:02x}", contributors=contributors)


def drain(net: CommitNet, *, drop_to=frozenset(), rounds: int = 200) -> None:
    """Deliver everything (except to ``drop_to``), serve fetches and applies, until
    quiet; the clock does not move, so whatever commits here needed no timer."""
    for _ in range(rounds):
        if net.in_flight:
            to, _ = net.in_flight[0]
            if to in drop_to:
                net.in_flight.pop(0)
            else:
                net.deliver(0)
        elif net.fetches:
            node, step, fp = net.fetches.pop(0)
            net.feed(node, C.HoldsAggregate(step=step, value_fp=fp))
        elif net.applies:
            node, step = net.applies.pop(0)
            net.feed(node, C.Applied(step=step, param_fp="f" + str(step)))
        else:
            return
