"""A small event-heap driver of FailureDetector cores for tests (not the simulator).

Every heartbeat is materialised one by one, links delay each message uniformly in
[low, high] seconds, crashed nodes stop sending and receiving.  It exists to test the
detector's contract end to end at small N with a driver written independently of the
simulator; the simulator (chaos/sim) is the fast, lazy one.
"""

from __future__ import annotations

import heapq
import random

from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.detector import (
    DeclaredDead,
    DetectorConfig,
    FailureDetector,
    GossipReceived,
    HeartbeatPlan,
    HeartbeatsArrived,
    Refuted,
    SendGossip,
    Started,
    Tick,
)


class MiniCluster:
    def __init__(self, n: int, seed: int, delay_s=(0.025, 0.075), bugs: BugSet = NO_BUGS, config=None):
        self.names = tuple(f"n{i}" for i in range(n))
        self.rng = random.Random(seed)
        self.delay_s = delay_s
        self.detectors = {
            name: FailureDetector(node=name, members=self.names, seed=seed, bugs=bugs, config=config)
            for name in self.names
        }
        self.crashed: dict[str, float] = {}
        self.plans: dict[str, HeartbeatPlan] = {}
        self.heap: list = []
        self.seq = 0
        self.now = 0.0
        self.log: list[tuple[str, object]] = []
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
                if action.to:
                    self._push(action.start_at + action.interval_s, "beat", node, action)
            elif isinstance(action, SendGossip):
                for peer in action.to:
                    self._push(action.at + self._delay(), "gossip", peer, action.message)
        deadline = self.detectors[node].next_deadline()
        if deadline is not None:
            self._push(max(deadline, self.now), "tick", node)

    def crash(self, node: str, at: float) -> None:
        self._push(at, "crash", node)

    def run(self, until: float) -> None:
        while self.heap and self.heap[0][0] <= until:
            at, _, kind, node, payload = heapq.heappop(self.heap)
            self.now = at
            if kind == "crash":
                self.crashed[node] = at
                continue
            if node in self.crashed:
                continue
            detector = self.detectors[node]
            if kind == "beat":
                if self.plans.get(node) is not payload:
                    continue  # superseded plan
                for peer in payload.to:
                    self._push(at + self._delay(), "hb", peer, (node, payload.incarnation))
                self._push(at + payload.interval_s, "beat", node, payload)
            elif kind == "hb":
                sender, incarnation = payload
                event = HeartbeatsArrived(peer=sender, incarnation=incarnation, arrival_times=(at,))
                self._apply(node, detector.handle(event, at))
            elif kind == "gossip":
                self._apply(node, detector.handle(GossipReceived(message=payload), at))
            elif kind == "tick":
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


__all__ = ["MiniCluster", "DetectorConfig"]
