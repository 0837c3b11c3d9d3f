"""The node core's step part (``step_node.StepNode``): three of them, wired by an
in-memory network and an instantaneous worker, commit the same values; a Hypothesis
state machine drives them through lost messages, view changes, detaches and time, and
checks every node's invariants (``check_valid``) and agreement after every rule."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from swarmshake.reference_node.protocol import aggregate_pulls as ap
from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import step_apply as sa
from swarmshake.reference_node.protocol import step_node as sn
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import Decided, StepValue

NAMES = ("n0", "n1", "n2")
CONFIG = nc.NodeConfig()


def _aggregate_fp(step: int, contributors: tuple[str, ...]) -> str:
    """The worker's aggregate of exactly these contributions: the same inputs, the same bits."""
    return hashlib.blake2b(
        f"{step}:{','.join(sorted(contributors))}".encode(), digest_size=16
    ).hexdigest()


class Cluster:
    """Three step nodes; their sends, contributions and worker answers are queued and
    delivered one at a time (``deliver``), so a test chooses the interleaving."""

    def __init__(self) -> None:
        self.now = 0.0
        self.nodes = {name: sn.StepNode(node=name, config=CONFIG, alive=NAMES) for name in NAMES}
        self.bytes: dict[str, set[tuple[int, str]]] = {name: set() for name in NAMES}
        self.params = dict.fromkeys(NAMES, "0")
        self.committed: dict[str, dict[int, str]] = {name: {} for name in NAMES}
        self.gradients_due: dict[str, int | None] = dict.fromkeys(NAMES)
        self.queue: list[tuple[str, object]] = []  # (node, event)
        self.refused: list[str] = []
        self.behind: set[str] = set()
        self.records: dict[str, dict[int, cm.AcceptorRecord]] = {name: {} for name in NAMES}
        for name in NAMES:
            self.attach(name, 0)

    def attach(self, name: str, step: int) -> None:
        persisted = tuple(r for s, r in sorted(self.records[name].items()) if s >= step)
        core = cm.StepCommit(
            node=name, voters=NAMES, first_step=step, persisted=persisted, vote_floor=-1
        )
        self.perform(name, self.nodes[name].attach(core, self.now))

    def feed(self, name: str, event: object) -> None:
        self.perform(name, self.nodes[name].handle(event, self.now))  # type: ignore[arg-type]

    def perform(self, name: str, actions: list) -> None:
        for action in actions:
            if isinstance(action, cm.Persist):
                self.records[name][action.record.step] = action.record
            elif isinstance(action, cm.Send):
                for peer in action.to:
                    self.queue.append((peer, cm.MessageReceived(message=action.message)))
            elif isinstance(action, nc.BuildValue | ap.RebuildAggregate):
                value_fp = _aggregate_fp(action.step, action.contributors)
                self.bytes[name].add((action.step, value_fp))
                held = sn.AggregateHeld(
                    step=action.step, value_fp=value_fp, contributors=action.contributors
                )
                self.queue.append((name, held))
            elif isinstance(action, ap.RequestAggregate):
                key = (action.step, action.value_fp)
                if key in self.bytes[action.source]:
                    self.bytes[name].add(key)
                    self.queue.append((name, sn.AggregateHeld(step=key[0], value_fp=key[1])))
                else:
                    unavailable = sn.AggregateUnavailable(
                        step=key[0], value_fp=key[1], source=action.source
                    )
                    self.queue.append((name, unavailable))
            elif isinstance(action, sa.ApplyAggregate):
                key = (action.step, action.value.agg_fp)
                assert key in self.bytes[name], "asked to apply bytes the worker lacks"
                self.params[name] = _aggregate_fp(action.step, (self.params[name], key[1]))
                applied = sn.AggregateApplied(
                    step=action.step, value_fp=key[1], param_fp=self.params[name]
                )
                self.queue.append((name, applied))
            elif isinstance(action, cm.Committed):
                self.committed[name][action.step] = action.value.agg_fp
            elif isinstance(action, sn.StepStarted):
                self.gradients_due[name] = action.step if action.contributes else None
            elif isinstance(action, sn.MessageRefused):
                self.refused.append(action.reason)
            elif isinstance(action, cm.Behind):
                self.behind.add(name)  # a state transfer's case: not modelled here

    def gradient(self, name: str) -> None:
        step = self.gradients_due[name]
        assert step is not None
        self.gradients_due[name] = None
        for peer in NAMES:
            if peer != name:
                self.queue.append((peer, nc.ContributionArrived(step=step, sender=name)))
        self.feed(name, nc.OwnContribution(step=step))

    def deliver(self, index: int = 0) -> None:
        name, event = self.queue.pop(index)
        self.feed(name, event)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for name, node in self.nodes.items():
            commit_due, lead_due, pulls_due = node.deadlines()
            if commit_due is not None and commit_due <= self.now:
                self.feed(name, cm.Tick())
            if lead_due is not None and lead_due <= self.now:
                self.feed(name, nc.Tick())
            if pulls_due is not None and pulls_due <= self.now:
                self.feed(name, sn.PullsDue())

    def settle(self, rounds: int = 2_000) -> None:
        """Every gradient computed and every queued event delivered, time moving on."""
        for _ in range(rounds):
            for name in NAMES:
                if self.gradients_due[name] is not None:
                    self.gradient(name)
            if self.queue:
                self.deliver()
            else:
                self.advance(0.25)

    def check(self) -> None:
        for node in self.nodes.values():
            node.check_valid()
        for step in {s for c in self.committed.values() for s in c}:
            values = {c[step] for c in self.committed.values() if step in c}
            assert len(values) == 1, f"step {step} committed as {values}"


def test_three_step_nodes_commit_the_same_steps():
    cluster = Cluster()
    cluster.settle(400)
    cluster.check()
    steps = [len(cluster.committed[name]) for name in NAMES]
    assert min(steps) >= 20, steps
    assert cluster.now == 0.0  # a healthy step waits out no timer
    assert len(set(cluster.params.values())) <= 2  # the same state, give or take the last step


def test_a_started_node_is_told_to_compute_its_first_gradient():
    cluster = Cluster()
    assert cluster.gradients_due == dict.fromkeys(NAMES, 0)


def test_a_proposal_is_built_from_the_contributions_and_proposed_once_held():
    node = sn.StepNode(node="n0", config=CONFIG, alive=NAMES)
    node.attach(cm.StepCommit(node="n0", voters=NAMES, vote_floor=-1), 0.0)
    actions = node.handle(nc.OwnContribution(step=0), 0.0)
    for sender in ("n1", "n2"):
        actions += node.handle(nc.ContributionArrived(step=0, sender=sender), 0.1)
    builds = [a for a in actions if isinstance(a, nc.BuildValue)]
    assert [b.contributors for b in builds] == [NAMES]  # every voter is in: at once
    value_fp = _aggregate_fp(0, NAMES)
    held = sn.AggregateHeld(step=0, value_fp=value_fp, contributors=NAMES)
    answered = node.handle(held, 0.2)
    proposed = [a for a in answered if isinstance(a, cm.Proposed)]
    assert [p.value.agg_fp for p in proposed] == [value_fp]
    assert (0, value_fp) in node.held
    node.check_valid()


def test_a_decision_that_came_before_its_bytes_is_applied_once_they_are_held():
    node = sn.StepNode(node="n2", config=CONFIG, alive=NAMES)
    node.attach(cm.StepCommit(node="n2", voters=NAMES, vote_floor=-1), 0.0)
    value_fp = _aggregate_fp(0, ("n0", "n1"))
    value = StepValue(agg_fp=value_fp, contributors=["n0", "n1"])
    decided = Decided(sender="n0", step=0, value=value, quorum=["n0", "n1"])
    actions = node.handle(cm.MessageReceived(message=decided), 0.0)
    asked = [a.source for a in actions if isinstance(a, ap.RequestAggregate)]
    assert len(asked) == 1 and asked[0] in ("n0", "n1")  # pulled: n2 has no contributions
    assert not [a for a in actions if isinstance(a, sa.ApplyAggregate)]  # not held yet
    held = node.handle(sn.AggregateHeld(step=0, value_fp=value_fp), 0.3)
    applies = [a for a in held if isinstance(a, sa.ApplyAggregate)]
    assert [(a.step, a.value.agg_fp) for a in applies] == [(0, value_fp)]
    node.check_valid()
    done = node.handle(sn.AggregateApplied(step=0, value_fp=value_fp, param_fp="ab"), 0.4)
    assert [a.step for a in done if isinstance(a, cm.Committed)] == [0]
    assert [a.step for a in done if isinstance(a, sn.StepStarted)] == [1]
    assert node.core_step == 1


def test_a_detached_node_feeds_no_commit_core_and_drops_its_apply():
    node = sn.StepNode(node="n0", config=CONFIG, alive=NAMES)
    node.attach(cm.StepCommit(node="n0", voters=NAMES, vote_floor=-1), 0.0)
    node.apply.decided(0, StepValue(agg_fp="ab", contributors=["n0"]), holds=False, accepted={})
    node.detach()
    assert node.core is None and node.apply.pending is None
    assert node.handle(cm.Tick(), 1.0) == []
    assert node.deadlines()[0] is None
    node.check_valid()


def test_the_step_node_refuses_an_event_it_does_not_take():
    node = sn.StepNode(node="n0", config=CONFIG)
    with pytest.raises(LocalProtocolError, match="takes no"):
        node.handle(cm.Applied(step=0, param_fp="ab"), 0.0)  # type: ignore[arg-type]


class StepNodes(RuleBasedStateMachine):
    """Deliveries in any order, losses, view changes, detaches and time: invariants hold
    and no two nodes commit different values for a step."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster()

    @precondition(lambda self: any(s is not None for s in self.cluster.gradients_due.values()))
    @rule(data=st.data())
    def gradient(self, data):
        due = [n for n in NAMES if self.cluster.gradients_due[n] is not None]
        self.cluster.gradient(data.draw(st.sampled_from(due)))

    @precondition(lambda self: self.cluster.queue)
    @rule(data=st.data())
    def deliver(self, data):
        self.cluster.deliver(data.draw(st.integers(0, len(self.cluster.queue) - 1)))

    @precondition(lambda self: self.cluster.queue)
    @rule(data=st.data())
    def lose(self, data):
        index = data.draw(st.integers(0, len(self.cluster.queue) - 1))
        name, event = self.cluster.queue[index]
        if isinstance(event, cm.MessageReceived | nc.ContributionArrived):
            del self.cluster.queue[index]  # the network's loss; a worker answer is never lost

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.5]))
    def advance(self, seconds):
        self.cluster.advance(seconds)

    @rule(name=st.sampled_from(NAMES), dead=st.sampled_from(NAMES))
    def view(self, name, dead):
        alive = tuple(n for n in NAMES if n != dead or n == name)
        self.cluster.feed(name, nc.ViewChanged(alive=alive))

    @rule(name=st.sampled_from(NAMES))
    def heal_view(self, name):
        self.cluster.feed(name, nc.ViewChanged(alive=NAMES))

    @rule(name=st.sampled_from(NAMES))
    def fetch_and_restart_core(self, name):
        """A fetch begins and ends at the node's own step (as after a checkpoint
        fallback): the step node detaches, then attaches a fresh core."""
        node = self.cluster.nodes[name]
        step = node.core_step
        if step is None:
            return
        node.detach()
        self.cluster.queue = [(n, e) for n, e in self.cluster.queue if n != name]
        self.cluster.attach(name, step)

    @invariant()
    def valid_and_agreed(self):
        self.cluster.check()

    def teardown(self):
        """Healed, every node that needs no state transfer commits on."""
        cluster = self.cluster
        for name in NAMES:
            cluster.feed(name, nc.ViewChanged(alive=NAMES))
        before = max((max(c, default=-1) for c in cluster.committed.values()), default=-1)
        cluster.settle(3_000)
        cluster.check()
        for name in set(NAMES) - cluster.behind:
            newest = max(cluster.committed[name], default=-1)
            assert newest >= before + 2, f"{name} stalled at {newest} (cluster at {before})"


TestStepNodes = StepNodes.TestCase
TestStepNodes.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_an_apply_refused_for_a_worker_at_another_step_fetches_the_state_not_the_bytes():
    """Pulling held bytes again would have the worker refuse the same apply in a loop
    as fast as it answers; the parameters, not the bytes, are wrong."""
    node = sn.StepNode(node="n2", config=CONFIG, alive=NAMES)
    node.attach(cm.StepCommit(node="n2", voters=NAMES, vote_floor=-1), 0.0)
    value_fp = _aggregate_fp(0, ("n0", "n1"))
    node.handle(sn.AggregateHeld(step=0, value_fp=value_fp), 0.0)
    value = StepValue(agg_fp=value_fp, contributors=["n0", "n1"])
    decided = Decided(sender="n0", step=0, value=value, quorum=["n0", "n1"])
    actions = node.handle(cm.MessageReceived(message=decided), 0.1)
    assert [a.step for a in actions if isinstance(a, sa.ApplyAggregate)] == [0]
    refused = sn.AggregateUnavailable(step=0, value_fp=value_fp, state_step=5)
    assert node.handle(refused, 0.2) == [sn.StateDiverged(step=0, worker_step=5)]
    assert node.handle(refused, 0.3) == []  # a second answer to the same apply: moot
    node.check_valid()
