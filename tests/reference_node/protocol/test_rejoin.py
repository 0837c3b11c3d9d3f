"""Rejoin policy and checkpoint policy."""

from __future__ import annotations

import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from swarmshake.reference_node.protocol import checkpoint_policy as CP
from swarmshake.reference_node.protocol import rejoin as R
from swarmshake.reference_node.protocol.bugs import BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError

CHECKPOINT = R.CheckpointInfo(path="ckpt/n0-12.pt", step=12, param_fp="c0ffee")
PEERS = ("n1", "n2", "n3", "n4")


def rejoin(**kwargs):
    return R.Rejoin(
        node="n0",
        incarnation=2,
        seed=9,
        local_checkpoint=CHECKPOINT,
        local_param_fp="5ta1e",
        **kwargs,
    )


def test_state_comes_from_a_live_peer_and_is_verified_by_fingerprint():
    core = rejoin()
    [request] = core.handle(R.Begin(live_peers=PEERS, busy=("n2",)), 0.0)
    assert request.source in PEERS and request.source != "n2"
    core.handle(R.StateOffered(source=request.source, step=40, param_fp="abc", nbytes=10), 0.1)
    [done] = core.handle(
        R.StateReceived(source=request.source, step=40, computed_fp="abc", nbytes=10), 0.5
    )
    assert done == R.RejoinDone(
        source=request.source, step=40, param_fp="abc", nbytes=10, verified=True
    )


def test_a_mismatch_or_timeout_moves_on_with_longer_timeouts_then_falls_back_to_the_checkpoint():
    core = rejoin(config=R.RejoinConfig(fetch_timeout_s=1.0, sources_max=2))
    [first] = core.handle(R.Begin(live_peers=PEERS), 0.0)
    core.handle(R.StateOffered(source=first.source, step=40, param_fp="abc", nbytes=10), 0.1)
    [second] = core.handle(
        R.StateReceived(source=first.source, step=40, computed_fp="bad", nbytes=10), 0.2
    )
    assert second.source != first.source and second.deadline - 0.2 == pytest.approx(2.0)
    # Until the source answers, only the offer's timeout applies; then the transfer's.
    assert core.next_deadline() == pytest.approx(0.2 + core.config.offer_timeout_s)
    core.handle(R.StateOffered(source=second.source, step=40, param_fp="abc", nbytes=10), 0.3)
    assert core.next_deadline() == second.deadline
    [load] = core.handle(R.Tick(), second.deadline)
    assert load == R.LoadCheckpoint(path=CHECKPOINT.path, step=12, param_fp="c0ffee")
    [done] = core.handle(R.CheckpointLoaded(step=12, computed_fp="c0ffee"), 3.0)
    assert done.source == "checkpoint" and done.verified


def test_a_source_behind_the_vote_floor_is_skipped_never_installed():
    """A node never installs a state whose next steps it can no longer vote on (their
    acceptor records were pruned): such an offer moves on, and the checkpoint is the
    fallback.  A source behind the node but above the floor is installed."""
    core = rejoin(config=R.RejoinConfig(sources_max=2), vote_floor=20)
    [first] = core.handle(R.Begin(live_peers=PEERS), 0.0)
    [second] = core.handle(
        R.StateOffered(source=first.source, step=19, param_fp="old", nbytes=10), 0.1
    )
    assert isinstance(second, R.RequestState) and second.source != first.source
    [load] = core.handle(
        R.StateOffered(source=second.source, step=19, param_fp="old", nbytes=10), 0.2
    )
    assert load == R.LoadCheckpoint(path=CHECKPOINT.path, step=CHECKPOINT.step, param_fp="c0ffee")
    above = rejoin(vote_floor=8)  # the checkpoint is at step 12
    [request] = above.handle(R.Begin(live_peers=PEERS), 0.0)
    assert (
        above.handle(R.StateOffered(source=request.source, step=10, param_fp="ok", nbytes=1), 0.1)
        == []
    )
    [done] = above.handle(
        R.StateReceived(source=request.source, step=10, computed_fp="ok", nbytes=1), 0.2
    )
    assert isinstance(done, R.RejoinDone) and done.step == 10


def test_restarting_nodes_spread_over_sources():
    sources = {
        R.Rejoin(node=f"m{i}", incarnation=1, seed=9)
        .handle(R.Begin(live_peers=PEERS), 0.0)[0]
        .source
        for i in range(16)
    }
    assert len(sources) >= 3


def test_stale_rejoin_skips_the_transfer():
    core = rejoin(cluster_step=40, bugs=BugSet.parse(["stale-rejoin"]))
    [done] = core.handle(R.Begin(live_peers=PEERS), 0.0)
    assert done == R.RejoinDone(source="local", step=40, param_fp="5ta1e", nbytes=0, verified=False)
    honest = rejoin(cluster_step=40).handle(R.Begin(live_peers=PEERS), 0.0)
    assert [type(a) for a in honest] == [R.RequestState]


def test_bad_input_raises_and_changes_nothing():
    core = rejoin()
    [request] = core.handle(R.Begin(live_peers=PEERS), 0.0)
    before = core.snapshot()
    with pytest.raises(RemoteProtocolError):
        core.handle(R.StateReceived(source=request.source, step=1, computed_fp="x", nbytes=1), 0.1)
    with pytest.raises(LocalProtocolError):
        core.handle(R.Begin(live_peers=PEERS), 0.2)
    with pytest.raises(LocalProtocolError):
        core.handle(R.CheckpointLoaded(step=12, computed_fp="c0ffee"), 0.2)
    with pytest.raises(LocalProtocolError):
        R.Begin(live_peers=("ok", "not ok"))
    assert core.snapshot() == before


class RejoinMachine(RuleBasedStateMachine):
    """Random offers, transfers, failures and ticks: a RejoinDone is only ever a
    verified state from the source that offered it, or the verified checkpoint."""

    def __init__(self):
        super().__init__()
        self.core = rejoin(config=R.RejoinConfig(fetch_timeout_s=0.5, sources_max=3))
        self.now = 0.0
        self.offers: dict[str, tuple[int, str]] = {}
        self.done: list[R.RejoinDone] = []
        self.requests: list[R.RequestState] = []
        self._apply(self.core.handle(R.Begin(live_peers=PEERS), 0.0))

    def _apply(self, actions):
        for action in actions:
            if isinstance(action, R.RequestState):
                self.requests.append(action)
            elif isinstance(action, R.RejoinDone):
                self.done.append(action)
            elif isinstance(action, R.LoadCheckpoint):
                self._apply(
                    self.core.handle(
                        R.CheckpointLoaded(step=action.step, computed_fp=action.param_fp), self.now
                    )
                )

    @rule(source=st.sampled_from(PEERS), step=st.integers(10, 12), fp=st.sampled_from(("aa", "bb")))
    def offer(self, source, step, fp):
        self.now += 0.01
        # An offer behind the local checkpoint moves on to the next source.
        self._apply(
            self.core.handle(
                R.StateOffered(source=source, step=step, param_fp=fp, nbytes=5), self.now
            )
        )
        if self.core.phase == "fetching" and source == self.core.source:
            self.offers[source] = (step, fp)

    @rule(source=st.sampled_from(PEERS), step=st.integers(10, 12), fp=st.sampled_from(("aa", "bb")))
    def receive(self, source, step, fp):
        self.now += 0.01
        try:
            self._apply(
                self.core.handle(
                    R.StateReceived(source=source, step=step, computed_fp=fp, nbytes=5), self.now
                )
            )
        except RemoteProtocolError:
            assert self.core.offer is None

    @rule(source=st.sampled_from(PEERS))
    def fail(self, source):
        self.now += 0.01
        self._apply(self.core.handle(R.FetchFailed(source=source, reason="reset"), self.now))

    @rule(dt=st.floats(0.0, 3.0))
    def tick(self, dt):
        self.now += dt
        self._apply(self.core.handle(R.Tick(), self.now))

    @invariant()
    def core_is_valid(self):
        self.core.check_valid()

    @invariant()
    def only_verified_state_is_installed(self):
        assert len(self.done) <= 1
        for done in self.done:
            assert done.verified
            if done.source == "checkpoint":
                assert (done.step, done.param_fp) == (CHECKPOINT.step, CHECKPOINT.param_fp)
            else:
                assert self.offers[done.source] == (done.step, done.param_fp)
        assert len({r.source for r in self.requests}) == len(self.requests) <= 3
        assert [r.attempt for r in self.requests] == list(range(len(self.requests)))


TestRejoinMachine = RejoinMachine.TestCase
TestRejoinMachine.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)


def test_young_daly_follows_sqrt_2_c_mtbf_within_bounds():
    policy = CP.YoungDaly(
        checkpoint_cost_s=2.0, prior_mtbf_s=3600.0, min_interval_s=10.0, max_interval_s=600.0
    )
    assert policy.interval_s(0.0) == pytest.approx(math.sqrt(2 * 2.0 * 3600.0))
    for minute in range(1, 11):
        policy.handle(CP.FailureObserved(), 60.0 * minute)
    # 10 failures in 600 s of observation + 3600 s prior: MTBF = 4200 / 11.
    assert policy.mtbf_s(600.0) == pytest.approx(4200.0 / 11)
    assert policy.interval_s(600.0) == pytest.approx(math.sqrt(2 * 2.0 * 4200.0 / 11))
    policy.handle(CP.CheckpointCost(seconds=500.0), 600.0)
    assert policy.interval_s(600.0) == 600.0  # clamped at the maximum


def test_checkpoints_are_written_at_step_boundaries_by_interval():
    policy = CP.YoungDaly(
        checkpoint_cost_s=0.5, prior_mtbf_s=100.0, min_interval_s=10.0, max_interval_s=600.0
    )
    written = []
    for step in range(1, 200):
        written += policy.handle(CP.StepCommitted(step=step), step * 1.0)
    steps = [w.step for w in written]
    assert steps and all(b - a >= 10 for a, b in zip(steps, steps[1:], strict=False))
    fixed = CP.FixedInterval(every_steps=25)
    assert [
        a.step for s in range(1, 101) for a in fixed.handle(CP.StepCommitted(step=s), float(s))
    ] == [25, 50, 75, 100]
    with pytest.raises(LocalProtocolError):
        CP.FixedInterval(every_steps=0)
    with pytest.raises(LocalProtocolError):
        policy.handle(CP.StepCommitted(step=1), 0.0)  # time went backwards


def test_a_source_without_any_commit_answers_genesis_and_the_node_starts_before_step_0():
    """Regression (explore): a node restarted before the first commit waited out every
    source and, with no checkpoint, could never rejoin; L2/L3 broke for the rest of
    the run.  A genesis offer matching the initial fingerprint is installed at once."""
    core = R.Rejoin(node="n0", incarnation=1, seed=9, genesis_param_fp="1717")
    [request] = core.handle(R.Begin(live_peers=PEERS), 0.0)
    [done] = core.handle(
        R.StateOffered(source=request.source, step=-1, param_fp="1717", nbytes=0), 0.1
    )
    assert done == R.RejoinDone(
        source=request.source, step=-1, param_fp="1717", nbytes=0, verified=True
    )


def test_a_genesis_offer_is_refused_with_a_checkpoint_a_wrong_fingerprint_or_an_old_driver():
    for core in (
        rejoin(genesis_param_fp="1717"),  # holds a checkpoint at step 12: not behind that
        R.Rejoin(node="n0", incarnation=1, seed=9, genesis_param_fp="1717"),  # wrong fp below
        R.Rejoin(node="n0", incarnation=1, seed=9),  # a driver that knows no genesis
    ):
        [first] = core.handle(R.Begin(live_peers=PEERS), 0.0)
        fp = "bad0" if core.genesis_param_fp and core.local_checkpoint is None else "1717"
        [second] = core.handle(
            R.StateOffered(source=first.source, step=-1, param_fp=fp, nbytes=0), 0.1
        )
        assert isinstance(second, R.RequestState) and second.source != first.source


def test_silent_sources_cost_the_offer_timeout_and_genesis_is_the_last_fallback():
    core = R.Rejoin(node="n0", incarnation=1, seed=9, genesis_param_fp="1717")
    [first] = core.handle(R.Begin(live_peers=("n1", "n2")), 0.0)
    offer_timeout = core.config.offer_timeout_s
    [second] = core.handle(R.Tick(), offer_timeout)
    assert second.source != first.source
    [done] = core.handle(R.Tick(), 2 * offer_timeout)
    assert done == R.RejoinDone(source="genesis", step=-1, param_fp="1717", nbytes=0, verified=True)
    # Without genesis support the old outcome stands: nothing to load, the node stalls.
    old = R.Rejoin(node="n0", incarnation=1, seed=9)
    old.handle(R.Begin(live_peers=("n1",)), 0.0)
    [failed] = old.handle(R.Tick(), offer_timeout)
    assert isinstance(failed, R.RejoinFailed)


class YoungDalyMachine(RuleBasedStateMachine):
    """Commits, failures and measured costs in any order: the interval stays inside
    its clamp and the policy's memory stays bounded (``check_valid``)."""

    def __init__(self):
        super().__init__()
        self.core = CP.YoungDaly(min_interval_s=5.0, max_interval_s=600.0, prior_mtbf_s=900.0)
        self.now = 0.0
        self.step = 0
        self.writes: list[CP.WriteCheckpoint] = []

    @rule(dt=st.floats(0.0, 60.0))
    def commit(self, dt):
        self.now += dt
        self.writes += self.core.handle(CP.StepCommitted(step=self.step), self.now)
        self.step += 1

    @rule(dt=st.floats(0.0, 60.0))
    def failure(self, dt):
        self.now += dt
        self.core.handle(CP.FailureObserved(), self.now)

    @rule(seconds=st.floats(0.0, 100.0))
    def cost(self, seconds):
        self.core.handle(CP.CheckpointCost(seconds=seconds), self.now)

    @invariant()
    def core_is_valid(self):
        self.core.check_valid()

    @invariant()
    def writes_are_at_least_the_minimum_interval_apart(self):
        assert [w.step for w in self.writes] == sorted({w.step for w in self.writes})


TestYoungDalyMachine = YoungDalyMachine.TestCase
TestYoungDalyMachine.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
