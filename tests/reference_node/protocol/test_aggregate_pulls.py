"""The node core's aggregate pulls: rebuild or pull a value's bytes, from whom, and
when a pull moves on (``protocol/aggregate_pulls.py``, both shells' one copy)."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from swarmshake.reference_node.protocol import aggregate_pulls as ap
from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import node_core as nc

VOTERS = ("n0", "n1", "n2")
TIMEOUT_S = nc.NODE_DEFAULTS.fetch_timeout_s
FP = "ab" * 8
OTHER_FP = "cd" * 8


def fetch(step: int = 3, value_fp: str = FP, sources=("n0", "n2", "n1")) -> cm.FetchAggregate:
    return cm.FetchAggregate(step=step, value_fp=value_fp, sources=sources)


def wanted(pulls, action=None, *, contributors=("n2", "n0"), arrived=(), alive=VOTERS, now=0.0):
    """The commit core asks for ``action``'s bytes; a peer named the value's
    ``contributors`` before (None: nobody did)."""
    action = action or fetch()
    if contributors is not None:
        pulls.value_seen(action.step, action.value_fp, contributors, core_step=action.step)
    return pulls.wanted(action, arrived=arrived, alive=alive, holds=False, now=now)


def test_a_value_over_held_contributions_is_rebuilt_and_its_pull_ends_when_built():
    pulls = ap.AggregatePulls(node="n1")
    actions = wanted(pulls, arrived={"n0", "n1", "n2"})
    assert actions == [ap.RebuildAggregate(step=3, contributors=("n0", "n2"))]  # sorted
    # A rebuild that gives nothing moves on to a pull at the deadline.
    assert pulls.next_deadline() == pytest.approx(TIMEOUT_S)
    assert pulls.built(3, FP, ("n2", "n0"), alive=VOTERS, now=0.1) == []
    assert (3, FP) not in pulls and pulls.next_deadline() is None
    pulls.check_valid()


def test_a_value_whose_contributions_are_missing_is_pulled_live_sources_first():
    pulls = ap.AggregatePulls(node="n1")
    assert wanted(pulls, alive=("n1", "n2")) == [
        ap.RequestAggregate(step=3, value_fp=FP, source="n2")
    ]
    assert pulls.asked((3, FP)) == "n2"
    assert pulls.tick(TIMEOUT_S - 0.01, ("n1", "n2")) == []  # not yet
    # Unanswered for fetch_timeout_s: the next source, at the instant.
    assert pulls.tick(TIMEOUT_S, VOTERS) == [ap.RequestAggregate(step=3, value_fp=FP, source="n0")]
    # The peer asked has no bytes: the next one at once.
    assert pulls.missing(3, FP, source="n2", alive=VOTERS, now=1.1) == []  # asked before
    assert pulls.missing(3, FP, source="n0", alive=VOTERS, now=1.2) == [
        ap.RequestAggregate(step=3, value_fp=FP, source="n2")
    ]
    assert pulls.next_deadline() == pytest.approx(1.2 + TIMEOUT_S)
    pulls.held(3, FP)
    assert not pulls.pending and pulls.missing(3, FP, source="n2", alive=VOTERS, now=1.3) == []
    pulls.check_valid()


def test_a_held_value_or_one_already_pulled_starts_nothing():
    pulls = ap.AggregatePulls(node="n1")
    action = fetch()
    assert pulls.wanted(action, arrived=(), alive=VOTERS, holds=True, now=0) == []
    assert not pulls.pending
    assert len(wanted(pulls, action)) == 1
    assert wanted(pulls, action, now=0.5) == []  # under way: not asked twice


def test_a_contribution_that_completes_a_waiting_value_turns_its_pull_into_a_rebuild_once():
    pulls = ap.AggregatePulls(node="n1")
    wanted(pulls, arrived={"n0"})  # n2's gradient is still on its way: pulled
    assert pulls.contribution(3, {"n0"}) == []
    assert pulls.contribution(4, {"n0", "n2"}) == []  # another step's
    rebuild = [ap.RebuildAggregate(step=3, contributors=("n0", "n2"))]
    assert pulls.contribution(3, {"n0", "n2"}) == rebuild
    assert pulls.contribution(3, {"n0", "n1", "n2"}) == []  # that build is under way
    assert pulls.built(3, FP, ("n0", "n2"), alive=VOTERS, now=0.2) == []
    assert not pulls.pending


def test_a_rebuild_that_gives_other_bytes_pulls_the_value_at_once():
    pulls = ap.AggregatePulls(node="n1")
    wanted(pulls, arrived={"n0", "n2"})
    actions = pulls.built(3, OTHER_FP, ("n0", "n2"), alive=VOTERS, now=0.1)
    assert actions == [ap.RequestAggregate(step=3, value_fp=FP, source="n0")]
    assert pulls.mismatches == 1
    pulls.check_valid()


def test_a_rebuild_that_cannot_run_pulls_at_once_not_at_the_deadline():
    pulls = ap.AggregatePulls(node="n1")
    wanted(pulls, arrived={"n0", "n2"})
    actions = pulls.rebuild_failed(3, ("n2", "n0"), alive=VOTERS, now=0.1)
    assert actions == [ap.RequestAggregate(step=3, value_fp=FP, source="n0")]
    assert pulls.rebuild_failed(3, ("n0", "n2"), alive=VOTERS, now=0.2) == []


def test_a_pull_whose_peer_leaves_the_view_asks_the_next_source_at_once():
    pulls = ap.AggregatePulls(node="n1")
    wanted(pulls)  # asks n0
    wanted(pulls, fetch(value_fp=OTHER_FP), arrived={"n0", "n2"})  # rebuilt: asks nobody
    assert pulls.view_changed(("n1", "n2"), 0.4) == [
        ap.RequestAggregate(step=3, value_fp=FP, source="n2")
    ]
    assert pulls.view_changed(("n1", "n2"), 0.5) == []


def test_bytes_an_apply_found_missing_are_pulled_from_the_voters_but_not_this_node():
    pulls = ap.AggregatePulls(node="n1")
    actions = pulls.lost(3, FP, VOTERS, alive=VOTERS, now=0.0)
    assert actions == [ap.RequestAggregate(step=3, value_fp=FP, source="n0")]
    assert pulls.lost(3, FP, VOTERS, alive=VOTERS, now=0.1) == []  # under way
    pulls.check_valid()


def test_the_pulls_of_steps_the_node_left_are_forgotten():
    pulls = ap.AggregatePulls(node="n1")
    wanted(pulls, fetch(step=3))
    wanted(pulls, fetch(step=5), arrived={"n0", "n2"})
    pulls.forget_below(4)
    assert pulls.keys() == [(5, FP)]
    # The rebuild of step 5 is still expected: its answer ends the pull.
    assert pulls.built(5, FP, ("n0", "n2"), alive=VOTERS, now=0.1) == []
    assert not pulls.pending


def test_only_values_of_the_commit_cores_window_are_remembered_and_steps_left_forget_them():
    pulls = ap.AggregatePulls(node="n1")
    ahead = nc.NODE_DEFAULTS.steps_ahead_max
    pulls.value_seen(3, FP, ("n2", "n0"), core_step=None)  # no core runs: a fetch, a joiner
    pulls.value_seen(3 + ahead + 1, FP, ("n0",), core_step=3)  # past the window
    pulls.value_seen(2, FP, ("n0",), core_step=3)  # a step the node left
    assert pulls.contributors(3, FP) is None
    assert pulls.contributors(3 + ahead + 1, FP) is None and pulls.contributors(2, FP) is None
    pulls.value_seen(3 + ahead, FP, ("n2", "n0"), core_step=3)
    assert pulls.contributors(3 + ahead, FP) == ("n0", "n2")  # sorted
    # Without its contributors a value is pulled, not rebuilt, whatever arrived.
    assert wanted(pulls, contributors=None, arrived=set(VOTERS)) == [
        ap.RequestAggregate(step=3, value_fp=FP, source="n0")
    ]
    pulls.forget_below(3 + ahead + 1)
    assert pulls.contributors(3 + ahead, FP) is None
    pulls.check_valid()


def test_remembered_values_are_bounded():
    pulls = ap.AggregatePulls(node="n1")
    for index in range(ap.MAX_VALUES + 5):
        pulls.value_seen(3, f"{index:016x}", ("n0",), core_step=3)
    assert pulls.contributors(3, f"{ap.MAX_VALUES - 1:016x}") == ("n0",)
    assert pulls.contributors(3, f"{ap.MAX_VALUES:016x}") is None
    pulls.check_valid()


def test_pulls_are_bounded():
    pulls = ap.AggregatePulls(node="n1")
    for step in range(ap.MAX_PULLS + 3):
        wanted(pulls, fetch(step=step))
    assert len(pulls.keys()) == ap.MAX_PULLS and pulls.refused == 3
    pulls.check_valid()


def test_a_pull_moves_on_when_its_source_leaves_the_view():
    asked = {(3, "ab"): "n1", (3, "cd"): "n2", (4, "ef"): None}  # None: rebuilding first
    assert ap.pulls_to_move_on(asked, ("n0", "n2")) == [(3, "ab")]
    assert ap.pulls_to_move_on(asked, ()) == [(3, "ab"), (3, "cd")]
    assert ap.pulls_to_move_on(asked, ("n1", "n2")) == []


def test_rebuild_when_every_contribution_is_held_else_pull_live_first():
    fetch = cm.FetchAggregate(step=3, value_fp="ab" * 8, sources=("n0", "n2", "n1"))
    plan = ap.plan_aggregate("n1", fetch, ("n0", "n2"), {"n0", "n1", "n2"}, VOTERS)
    assert plan.rebuild
    plan = ap.plan_aggregate("n1", fetch, ("n0", "n2"), {"n0", "n1"}, ("n1", "n2"))
    assert not plan.rebuild
    assert plan.sources == ("n2", "n0")  # live first, never itself
    assert not ap.plan_aggregate("n1", fetch, None, VOTERS, VOTERS).rebuild  # value unknown


def test_a_pull_goes_round_robin_over_live_sources_and_never_gives_up():
    sources = ("n0", "n1", "n2")
    # n1 pulls: live sources first, round-robin, for as many attempts as it takes.
    assert [ap.fetch_source("n1", sources, a, VOTERS) for a in range(5)] == [
        "n0", "n2", "n0", "n2", "n0",
    ]  # fmt: skip
    assert ap.fetch_source("n1", sources, 7, ("n1", "n2")) == "n2"
    # Nobody alive in this node's view: ask them all the same (a cut may be healing).
    assert ap.fetch_source("n1", sources, 1, ("n1",)) == "n2"
    assert ap.fetch_source("n1", ("n1",), 0, VOTERS) is None


NAMES = ("n0", "n1", "n2", "n3")
FPS = (FP, OTHER_FP)


class PullsMachine(RuleBasedStateMachine):
    """Any order of the shells' reports keeps the core's invariants (``check_valid``),
    every request goes to another node among the value's sources, and no pull is
    left without a way on: each is either waiting for a rebuild or has asked a peer."""

    def __init__(self):
        super().__init__()
        self.pulls = ap.AggregatePulls(node="n1")
        self.now = 0.0
        self.alive = NAMES
        self.sources: dict[tuple[int, str], tuple[str, ...]] = {}

    def _check(self, actions):
        for action in actions:
            if isinstance(action, ap.RequestAggregate):
                key = (action.step, action.value_fp)
                assert action.source != "n1"
                assert action.source in self.sources[key]

    @rule(
        step=st.integers(0, 3),
        value_fp=st.sampled_from(FPS),
        sources=st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True),
        contributors=st.none() | st.sets(st.sampled_from(NAMES), min_size=1),
        arrived=st.sets(st.sampled_from(NAMES)),
        holds=st.booleans(),
    )
    def want(self, step, value_fp, sources, contributors, arrived, holds):
        action = cm.FetchAggregate(step=step, value_fp=value_fp, sources=tuple(sources))
        if (step, value_fp) not in self.pulls:  # else the pull under way keeps its sources
            self.sources[(step, value_fp)] = tuple(sources)
        if contributors is not None:
            self.pulls.value_seen(step, value_fp, contributors, core_step=step)
        actions = self.pulls.wanted(
            action, arrived=arrived, alive=self.alive, holds=holds, now=self.now
        )
        self._check(actions)

    @rule(step=st.integers(0, 3), arrived=st.sets(st.sampled_from(NAMES)))
    def contribution(self, step, arrived):
        self._check(self.pulls.contribution(step, arrived))

    @rule(
        step=st.integers(0, 3),
        value_fp=st.sampled_from(FPS),
        contributors=st.sets(st.sampled_from(NAMES), min_size=1),
        failed=st.booleans(),
    )
    def built(self, step, value_fp, contributors, failed):
        if failed:
            actions = self.pulls.rebuild_failed(step, contributors, alive=self.alive, now=self.now)
        else:
            actions = self.pulls.built(step, value_fp, contributors, alive=self.alive, now=self.now)
        self._check(actions)

    @rule(
        step=st.integers(0, 3),
        value_fp=st.sampled_from(FPS),
        held=st.booleans(),
        source=st.sampled_from(NAMES),
    )
    def answer(self, step, value_fp, held, source):
        key = (step, value_fp)
        if held:
            self.pulls.held(step, value_fp)
            assert key not in self.pulls
            return
        asked = self.pulls.asked(key)
        actions = self.pulls.missing(step, value_fp, source=source, alive=self.alive, now=self.now)
        if source != asked:
            assert actions == [] and self.pulls.asked(key) == asked  # a stale refusal: moot
        self._check(actions)

    @rule(alive=st.sets(st.sampled_from(NAMES)))
    def view(self, alive):
        self.alive = tuple(sorted(alive | {"n1"}))
        self._check(self.pulls.view_changed(self.alive, self.now))

    @rule(seconds=st.floats(0, 2.5))
    def tick(self, seconds):
        self.now += seconds
        due = self.pulls.next_deadline()
        self._check(self.pulls.tick(self.now, self.alive))
        if due is not None and self.now >= due:
            later = self.pulls.next_deadline()
            assert later is None or later > self.now  # every due pull moved on

    @rule(step=st.integers(0, 4))
    def forget(self, step):
        self.pulls.forget_below(step)
        assert all(key[0] >= step for key in self.pulls.keys())

    @invariant()
    def valid(self):
        self.pulls.check_valid()


TestPullsMachine = PullsMachine.TestCase
