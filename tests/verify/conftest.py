"""Shared fixtures for the TLA+ tests: run histories built event by event in the
schema of ``reference_node/protocol/history.py``, as a node cluster and its
harness would log them (the simulator and real runs write the same shape)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from swarmshake.reference_node.protocol import history as h


def _fp(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


class HistoryBuilder:
    """Builds a consistent strict-mode history: Paxos per step, faults by the harness.

    Each method appends the events the protocol would log, in real order, with a
    strictly increasing clock.  ``events`` is the result.
    """

    def __init__(self, nodes: int = 3) -> None:
        self.names = [f"n{index + 1}" for index in range(nodes)]
        self.events: list[h.EventBase] = []
        self.clock_s = 0.0
        self.up = dict.fromkeys(self.names, False)
        self.incarnation = dict.fromkeys(self.names, 0)
        self.side: dict[str, int] = dict.fromkeys(self.names, 0)
        self.applied = dict.fromkeys(self.names, 0)
        self.step = 0
        self.params_fp = {0: _fp("init")}

    def _emit(self, event_type: type[h.EventBase], node: str, **fields: object) -> None:
        self.clock_s += 0.001
        if node in self.incarnation and "incarnation" not in fields:
            fields["incarnation"] = self.incarnation[node]
        self.events.append(
            event_type(t_wall=1.7e9 + self.clock_s, t_mono=self.clock_s, node=node, **fields)
        )

    def start_all(self) -> HistoryBuilder:
        self._emit(h.RunMark, h.HARNESS, mark="run_start")
        for name in self.names:
            self._emit(h.Start, name, seed=7)
            self.up[name] = True
            self._emit(h.Ready, name)
        return self

    def _connected_live(self, leader: str) -> list[str]:
        return [n for n in self.names if self.up[n] and self.side[n] == self.side[leader]]

    def commit_step(self) -> HistoryBuilder:
        """One step: gradients, Paxos round of the lowest live node, commit everywhere."""
        live = [n for n in self.names if self.up[n]]
        leader = min(live, key=self.names.index)
        group = self._connected_live(leader)
        if 2 * len(group) <= len(self.names):
            return self  # no majority: strict mode stalls
        step = self.step + 1
        for name in group:
            self._emit(h.TrainStep, name, step=step, loss=1.0 / step)
            self._emit(h.AggSend, name, step=step, to=leader)
        ballot = [0, self.names.index(leader)]
        value = _fp("value", step)
        for name in group:
            self._emit(h.Promise, name, step=step, ballot=ballot, to=leader)
        self._emit(h.Propose, leader, step=step, ballot=ballot, value_fp=value, contributors=group)
        for name in group:
            self._emit(
                h.Accept,
                name,
                step=step,
                ballot=ballot,
                value_fp=value,
                contributors=group,
                to=leader,
            )
        self.params_fp[step] = _fp("params", step)
        for name in group:
            self._emit(
                h.Commit,
                name,
                step=step,
                value_fp=value,
                contributors=group,
                param_fp=self.params_fp[step],
                voters=self.names,
                quorum=group,
            )
            self.applied[name] = step
        self.step = step
        return self

    def crash(self, name: str) -> HistoryBuilder:
        self._emit(h.Fault, h.HARNESS, op="crash", target=[name], phase="inject")
        self.up[name] = False
        for peer in self.names:
            if self.up[peer]:
                self._emit(h.Suspect, peer, peer=name, peer_incarnation=self.incarnation[name])
                self._emit(
                    h.DeclareDead,
                    peer,
                    peer=name,
                    peer_incarnation=self.incarnation[name],
                    suspicions=1,
                )
        return self

    def restart(self, name: str) -> HistoryBuilder:
        self._emit(h.Fault, h.HARNESS, op="restart", target=[name], phase="inject")
        self.incarnation[name] += 1
        self._emit(h.Start, name, seed=7)
        self.up[name] = True
        self._emit(h.Ready, name)
        self._rejoin(name)
        for peer in self.names:
            if peer != name and self.up[peer]:
                self._emit(h.DeclareAlive, peer, peer=name, peer_incarnation=self.incarnation[name])
        return self

    def _rejoin(self, name: str) -> None:
        source = next(n for n in self.names if n != name and self.up[n])
        self._emit(h.RejoinBegin, name, source=source, from_step=self.applied[name])
        self._emit(
            h.RejoinDone, name, step=self.step, source=source, param_fp=self.params_fp[self.step]
        )
        self.applied[name] = self.step

    def partition(self, name: str) -> HistoryBuilder:
        self._emit(h.Fault, h.HARNESS, op="partition", target=[name], phase="inject")
        self.side[name] = 1
        for peer in self.names:
            if peer != name:
                self._emit(h.Suspect, peer, peer=name, peer_incarnation=self.incarnation[name])
                self._emit(h.Suspect, name, peer=peer, peer_incarnation=self.incarnation[peer])
        return self

    def heal(self, name: str) -> HistoryBuilder:
        self._emit(h.Fault, h.HARNESS, op="partition", target=[name], phase="heal")
        self.side[name] = 0
        for peer in self.names:
            if peer != name:
                self._emit(h.DeclareAlive, peer, peer=name, peer_incarnation=self.incarnation[name])
                self._emit(h.DeclareAlive, name, peer=peer, peer_incarnation=self.incarnation[peer])
        self._rejoin(name)
        return self

    def steps(self, count: int) -> HistoryBuilder:
        for _ in range(count):
            self.commit_step()
        return self


def scenario_history(steps_between_faults: int = 3) -> list[h.EventBase]:
    """Crash + restart, partition + heal, around committed steps."""
    builder = HistoryBuilder().start_all().steps(steps_between_faults)
    builder.crash("n3").steps(steps_between_faults).restart("n3").steps(steps_between_faults)
    builder.partition("n3").steps(steps_between_faults).heal("n3").steps(steps_between_faults)
    return builder.events


def history_of_length(events: int) -> list[h.EventBase]:
    """A faulty history of about ``events`` events (for the benchmarks)."""
    builder = HistoryBuilder().start_all()
    while len(builder.events) < events:
        builder.steps(20).crash("n3").steps(5).restart("n3").partition("n2").steps(5).heal("n2")
    return builder.events[:events]


@pytest.fixture
def make_history() -> Callable[..., list[h.EventBase]]:
    return scenario_history
