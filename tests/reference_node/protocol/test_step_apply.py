"""The node core's apply: a committed value is applied once decided and held, one at a
time, and only its own answer completes it (``protocol/step_apply.py``, both shells'
one copy)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import step_apply as sa
from swarmshake.reference_node.protocol.messages import StepValue

FP = "ab" * 8
OTHER_FP = "cd" * 8
VALUE = StepValue(agg_fp=FP, contributors=["n0", "n2"])
OTHER = StepValue(agg_fp=OTHER_FP, contributors=["n0", "n1"])
KEPT_STEPS = nc.NODE_DEFAULTS.aggregates_kept_steps


def test_a_value_decided_while_held_is_applied_at_once_with_the_window_to_keep():
    apply = sa.StepApply()
    actions = apply.decided(20, VALUE, holds=True, accepted={3: OTHER_FP, 19: FP})
    assert actions == [
        sa.ApplyAggregate(
            step=20,
            value=VALUE,
            keep_from_step=21 - KEPT_STEPS,
            pinned=((3, OTHER_FP), (19, FP)),  # an accepted value stays, however old
        )
    ]
    assert apply.pending == (20, VALUE)
    done = apply.applied(20, FP)
    assert done == actions[0] and apply.pending is None
    apply.check_valid()


def test_a_value_decided_before_its_bytes_waits_for_them_and_other_bytes_do_not_apply():
    apply = sa.StepApply()
    assert apply.decided(5, VALUE, holds=False, accepted={}) == []
    assert apply.held(5, OTHER_FP, accepted={}) == []  # another value's bytes
    assert apply.held(4, FP, accepted={}) == []  # another step's
    assert [a.value for a in apply.held(5, FP, accepted={})] == [VALUE]
    assert apply.held(5, FP, accepted={}) == []  # asked once: its answer is awaited
    apply.check_valid()


def test_bytes_the_apply_finds_gone_are_asked_again_once_held_again():
    apply = sa.StepApply()
    apply.decided(5, VALUE, holds=True, accepted={})
    assert not apply.lost(5, OTHER_FP)  # not this apply's bytes: nothing to pull
    assert apply.lost(5, FP)
    assert apply.applied(5, FP) is None  # a late answer of the apply that failed
    assert apply.pending == (5, VALUE)
    assert len(apply.held(5, FP, accepted={})) == 1
    assert apply.applied(5, FP) is not None


def test_an_answer_for_an_apply_a_rejoin_dropped_completes_nothing():
    apply = sa.StepApply()
    apply.decided(5, VALUE, holds=True, accepted={})
    apply.dropped()
    assert apply.applied(5, FP) is None and not apply.lost(5, FP)
    # The next step's value, decided after the install, is not completed by the old answer.
    apply.decided(6, OTHER, holds=True, accepted={})
    assert apply.applied(5, FP) is None and apply.pending == (6, OTHER)
    apply.check_valid()


def test_a_later_decision_replaces_one_not_applied():
    apply = sa.StepApply()
    apply.decided(5, VALUE, holds=False, accepted={})
    apply.decided(5, OTHER, holds=False, accepted={})  # after a re-run of the step's rounds
    assert apply.held(5, FP, accepted={}) == []
    assert len(apply.held(5, OTHER_FP, accepted={})) == 1


class StepApplyMachine(RuleBasedStateMachine):
    """Any order of decisions, holds, answers and rejoins: at most one apply is asked
    at a time, it is always of the value pending, and every completed apply was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.apply = sa.StepApply()
        self.outstanding: sa.ApplyAggregate | None = None  # what the worker was asked

    @rule(step=st.integers(0, 3), other=st.booleans(), holds=st.booleans())
    def decide(self, step: int, other: bool, holds: bool) -> None:
        actions = self.apply.decided(step, OTHER if other else VALUE, holds=holds, accepted={})
        assert len(actions) == (1 if holds else 0)
        self.outstanding = actions[0] if actions else None

    @rule(step=st.integers(0, 3), other=st.booleans())
    def hold(self, step: int, other: bool) -> None:
        actions = self.apply.held(step, OTHER_FP if other else FP, accepted={})
        if actions:
            assert self.outstanding is None, "a second apply asked while one runs"
            assert (actions[0].step, actions[0].value) == self.apply.pending
            self.outstanding = actions[0]

    @rule(step=st.integers(0, 3), other=st.booleans())
    def answer(self, step: int, other: bool) -> None:
        done = self.apply.applied(step, OTHER_FP if other else FP)
        if done is not None:
            assert done == self.outstanding, "completed an apply never asked"
            self.outstanding = None

    @rule(step=st.integers(0, 3), other=st.booleans())
    def lose(self, step: int, other: bool) -> None:
        if self.apply.lost(step, OTHER_FP if other else FP):
            assert self.outstanding is not None
            self.outstanding = None

    @rule()
    def rejoin(self) -> None:
        self.apply.dropped()
        self.outstanding = None

    @invariant()
    def valid(self) -> None:
        self.apply.check_valid()
        assert (self.apply.asked is None) == (self.outstanding is None)


TestStepApplyMachine = StepApplyMachine.TestCase
