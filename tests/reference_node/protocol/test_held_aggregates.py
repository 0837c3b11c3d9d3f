"""The node core's record of the aggregates a node holds, and what a new commit core is
told of them (``protocol/held_aggregates.py``, both shells' one copy)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import held_aggregates as ha
from swarmshake.reference_node.protocol import node_core as nc

FP = "ab" * 8
OTHER_FP = "cd" * 8
AHEAD = nc.NODE_DEFAULTS.steps_ahead_max


def test_a_new_commit_core_is_told_of_every_aggregate_held_in_its_window_in_order():
    held = ha.HeldAggregates()
    for step, value_fp in [(9, OTHER_FP), (4, FP), (9, FP), (3, FP), (4 + AHEAD + 1, FP)]:
        held.add(step, value_fp)
    assert held.announce(4) == [
        cm.HoldsAggregate(step=4, value_fp=FP),
        cm.HoldsAggregate(step=9, value_fp=FP),
        cm.HoldsAggregate(step=9, value_fp=OTHER_FP),
    ]  # step 3 is past, step 4 + AHEAD + 1 too far ahead
    assert held.in_window(4 + AHEAD, 4) and not held.in_window(3, 4)
    assert (9, OTHER_FP) in held and (9, "ef" * 8) not in held and (7, FP) not in held
    assert held.at(9) == {FP, OTHER_FP} and held.at(7) == frozenset()


def test_an_apply_window_and_lost_bytes_forget_what_the_worker_no_longer_holds():
    held = ha.HeldAggregates()
    for step in range(6):
        held.add(step, FP)
    held.forget_below(3)
    assert held.steps() == [3, 4, 5]
    held.discard(4, FP)
    held.discard(4, FP)  # twice: nothing to forget
    assert held.steps() == [3, 5]
    held.check_valid()


def test_the_record_is_bounded_and_keeps_the_newest_steps():
    held = ha.HeldAggregates()
    for step in range(ha.MAX_HELD_STEPS + 10):
        held.add(step, FP)
    assert held.steps() == list(range(10, ha.MAX_HELD_STEPS + 10))
    held.check_valid()


class HeldMachine(RuleBasedStateMachine):
    """Against a plain set: what is held is what was added and not forgotten since (as
    long as the bound is not reached), and ``announce`` is its window, sorted."""

    def __init__(self) -> None:
        super().__init__()
        self.held = ha.HeldAggregates()
        self.model: set[tuple[int, str]] = set()

    @rule(step=st.integers(0, 20), other=st.booleans())
    def add(self, step: int, other: bool) -> None:
        self.held.add(step, OTHER_FP if other else FP)
        self.model.add((step, OTHER_FP if other else FP))

    @rule(step=st.integers(0, 20), other=st.booleans())
    def discard(self, step: int, other: bool) -> None:
        self.held.discard(step, OTHER_FP if other else FP)
        self.model.discard((step, OTHER_FP if other else FP))

    @rule(step=st.integers(0, 20))
    def forget_below(self, step: int) -> None:
        self.held.forget_below(step)
        self.model = {k for k in self.model if k[0] >= step}

    @rule(core_step=st.integers(0, 20))
    def announce(self, core_step: int) -> None:
        expected = sorted(k for k in self.model if core_step <= k[0] <= core_step + AHEAD)
        assert [(e.step, e.value_fp) for e in self.held.announce(core_step)] == expected

    @invariant()
    def valid(self) -> None:
        self.held.check_valid()
        assert {(s, fp) for s in self.held.steps() for fp in self.held.at(s)} == self.model


TestHeldMachine = HeldMachine.TestCase
