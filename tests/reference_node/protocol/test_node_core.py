"""The node core's decisions: who proposes and when, which acceptor records are kept
with which vote floor, rebuild or fetch, and the one action -> history mapping."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import rejoin as rj
from swarmshake.reference_node.protocol.bugs import BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import StepValue

VOTERS = ("n0", "n1", "n2")
VOTERS4 = ("n0", "n1", "n2", "n3")
CONFIG = nc.NODE_DEFAULTS


def leader(node: str, step: int = 0, alive=VOTERS) -> nc.StepLeader:
    core = nc.StepLeader(node=node)
    core.handle(nc.ViewChanged(alive=alive), 0.0)
    core.handle(nc.StepBegan(step=step, voters=VOTERS, members=VOTERS), 0.0)
    return core


def test_the_coordinator_proposes_once_every_voter_in_its_view_contributed():
    core = leader("n0")
    assert core.handle(nc.OwnContribution(step=0), 1.0) == []
    assert core.handle(nc.ContributionArrived(step=0, sender="n1"), 1.1) == []
    # A majority is in: the straggler bound is armed, not a proposal yet.
    assert core.next_deadline() == pytest.approx(1.1 + CONFIG.straggler_grace_s)
    actions = core.handle(nc.ContributionArrived(step=0, sender="n2"), 1.2)
    assert actions == [nc.BuildProposal(step=0, contributors=VOTERS, first=True)]
    assert core.next_deadline() is None  # one proposal a step
    assert core.handle(nc.Tick(), 5.0) == []


def test_a_straggler_costs_the_grace_after_a_majority_not_the_collect_bound():
    core = leader("n0")
    core.handle(nc.OwnContribution(step=0), 1.0)
    core.handle(nc.ContributionArrived(step=0, sender="n1"), 1.1)
    assert core.handle(nc.Tick(), 1.1 + CONFIG.straggler_grace_s - 0.01) == []
    actions = core.handle(nc.Tick(), 1.1 + CONFIG.straggler_grace_s)
    assert actions == [nc.BuildProposal(step=0, contributors=("n0", "n1"), first=True)]


def test_alone_the_coordinator_proposes_at_the_collect_bound():
    core = leader("n0")
    core.handle(nc.OwnContribution(step=0), 1.0)
    assert core.handle(nc.Tick(), 1.0 + CONFIG.collect_s - 0.01) == []
    assert core.handle(nc.Tick(), 1.0 + CONFIG.collect_s) == [
        nc.BuildProposal(step=0, contributors=("n0",), first=True)
    ]


def test_backups_take_over_in_rank_order():
    # Step 0's coordinator is n0: n1 ranks 1, n2 ranks 2.
    backup, fallback = leader("n1"), leader("n2")
    backup.handle(nc.OwnContribution(step=0), 1.0)
    fallback.handle(nc.OwnContribution(step=0), 1.0)
    assert backup.next_deadline() == pytest.approx(1.0 + CONFIG.backup_delay_s)
    assert fallback.next_deadline() == pytest.approx(
        1.0 + CONFIG.fallback_delay_s + 2 * CONFIG.fallback_rank_step_s
    )
    assert backup.handle(nc.Tick(), 1.0 + CONFIG.backup_delay_s) == [
        nc.BuildProposal(step=0, contributors=("n1",))
    ]


def median_leader(node: str, alive=VOTERS4) -> nc.StepLeader:
    """A leader of 4 voters whose aggregation rule needs 3 contributions (the median
    with f = 1)."""
    core = nc.StepLeader(node=node, config=nc.NodeConfig(min_contributors=3))
    core.handle(nc.ViewChanged(alive=alive), 0.0)
    core.handle(nc.StepBegan(step=0, voters=VOTERS4, members=VOTERS4), 0.0)
    return core


def test_no_proposal_from_fewer_contributions_than_the_rule_needs():
    """The GPU run (median, f = 1): a coordinator alone with one peer's gradient built
    from two, its worker refused, and the retry came a straggler grace later (1.4 s at
    that pace) although the third gradient had arrived meanwhile.  Now it waits for
    the third and proposes on its arrival."""
    core = median_leader("n0", alive=("n0", "n1", "n3"))  # n2 gone
    core.handle(nc.OwnContribution(step=0), 1.0)
    core.handle(nc.ContributionArrived(step=0, sender="n1"), 1.1)
    assert core.handle(nc.Tick(), 1.0 + CONFIG.collect_s) == []  # 2 < 3: nothing to build
    assert core.next_deadline() is None and core.starved
    core.check_valid()
    actions = core.handle(nc.ContributionArrived(step=0, sender="n3"), 2.5)
    assert actions == [nc.BuildProposal(step=0, contributors=("n0", "n1", "n3"), first=True)]
    core.check_valid()


def test_a_starved_takeover_proposes_when_enough_gradients_arrived():
    core = median_leader("n2")  # step 0: n0 coordinates, n1 backs up, n2 ranks 2
    core.handle(nc.OwnContribution(step=0), 1.0)
    takeover = core.next_deadline()
    assert core.handle(nc.Tick(), takeover) == [] and core.starved
    assert core.handle(nc.ContributionArrived(step=0, sender="n3"), takeover + 0.1) == []
    actions = core.handle(nc.ContributionArrived(step=0, sender="n0"), takeover + 0.2)
    assert actions == [nc.BuildProposal(step=0, contributors=("n0", "n2", "n3"))]


def test_the_mean_proposes_from_one_contribution_as_before():
    core = nc.StepLeader(node="n0", config=nc.NodeConfig(min_contributors=1))
    core.handle(nc.ViewChanged(alive=VOTERS), 0.0)
    core.handle(nc.StepBegan(step=0, voters=VOTERS, members=VOTERS), 0.0)
    core.handle(nc.OwnContribution(step=0), 1.0)
    assert core.handle(nc.Tick(), 1.0 + CONFIG.collect_s) == [
        nc.BuildProposal(step=0, contributors=("n0",), first=True)
    ]


def test_a_dead_coordinator_is_replaced_at_its_declaration():
    core = leader("n1")
    core.handle(nc.OwnContribution(step=0), 1.0)
    core.handle(nc.ContributionArrived(step=0, sender="n2"), 1.05)
    # n0 declared dead after the collect bound: n1 is rank 0 now and proposes at once.
    actions = core.handle(nc.ViewChanged(alive=("n1", "n2")), 1.0 + CONFIG.collect_s + 0.5)
    assert actions == [nc.BuildProposal(step=0, contributors=("n1", "n2"), first=True)]


@pytest.mark.parametrize("sharded", [False, True])
def test_a_dead_contributor_is_left_out_only_when_contributions_travel_sharded(sharded):
    """All-to-all, a dead node's gradient that arrived is whole at every peer: keep it.
    Sharded, its own shard's inputs died with it and no set naming it can be gathered
    (the bench's crash on medium: 1.3 s of input waits, then BuildFailed)."""
    core = nc.StepLeader(node="n1", config=nc.NodeConfig(sharded_contributions=sharded))
    core.handle(nc.ViewChanged(alive=VOTERS), 0.0)
    core.handle(nc.StepBegan(step=0, voters=VOTERS, members=VOTERS), 0.0)
    core.handle(nc.OwnContribution(step=0), 1.0)
    core.handle(nc.ContributionArrived(step=0, sender="n0"), 1.01)
    core.handle(nc.ContributionArrived(step=0, sender="n2"), 1.02)
    # n0, the coordinator, dies before it proposes: n1 leads at its declaration.
    actions = core.handle(nc.ViewChanged(alive=("n1", "n2")), 1.0 + CONFIG.collect_s + 0.5)
    expected = ("n1", "n2") if sharded else ("n0", "n1", "n2")
    assert actions == [nc.BuildProposal(step=0, contributors=expected, first=True)]
    core.check_valid()


def test_a_sharded_build_in_flight_is_rebuilt_without_a_contributor_the_view_lost():
    """The bench's sharded pause cells: the coordinator built from all four at once,
    then one was paused; its own shard never came, and the step waited 1.3-1.5 s for
    the owner's input wait and a BuildFailed.  Now the view change rebuilds at once."""
    core = nc.StepLeader(node="n0", config=nc.NodeConfig(sharded_contributions=True))
    core.handle(nc.ViewChanged(alive=VOTERS4), 0.0)
    core.handle(nc.StepBegan(step=0, voters=VOTERS4, members=VOTERS4), 0.0)
    for sender in ("n1", "n2", "n3"):
        core.handle(nc.ContributionArrived(step=0, sender=sender), 0.9)
    assert core.handle(nc.OwnContribution(step=0), 1.0) == [
        nc.BuildProposal(step=0, contributors=VOTERS4, first=True)
    ]
    rebuilt = core.handle(nc.ViewChanged(alive=("n0", "n1", "n2")), 1.14)
    assert rebuilt == [nc.BuildProposal(step=0, contributors=("n0", "n1", "n2"), first=True)]
    core.check_valid()
    # A view change that loses no contributor of the build rebuilds nothing, nor does
    # one after the decision, nor the all-to-all path (the whole gradient is here).
    assert core.handle(nc.ViewChanged(alive=("n0", "n1", "n2", "n3")), 1.2) == []
    core.handle(nc.StepDecided(step=0), 1.3)
    assert core.handle(nc.ViewChanged(alive=("n0", "n1")), 1.4) == []
    plain = nc.StepLeader(node="n0")
    plain.handle(nc.ViewChanged(alive=VOTERS4), 0.0)
    plain.handle(nc.StepBegan(step=0, voters=VOTERS4, members=VOTERS4), 0.0)
    for sender in ("n1", "n2", "n3"):
        plain.handle(nc.ContributionArrived(step=0, sender=sender), 0.9)
    plain.handle(nc.OwnContribution(step=0), 1.0)
    assert plain.handle(nc.ViewChanged(alive=("n0", "n1", "n2")), 1.14) == []


def test_a_starved_sharded_takeover_proposes_when_a_contributor_is_back_in_its_view():
    """Sharded, a contributor out of the view is not usable: a takeover whose time came
    then is starved.  Its gradient had already arrived, so no arrival would wake the
    leader again: the view change that brings it back must (the leader's invariant
    broke here before)."""
    config = nc.NodeConfig(sharded_contributions=True, min_contributors=3)
    core = nc.StepLeader(node="n2", config=config)
    core.handle(nc.ViewChanged(alive=VOTERS4), 0.0)
    core.handle(nc.StepBegan(step=0, voters=VOTERS4, members=VOTERS4), 0.0)
    core.handle(nc.ContributionArrived(step=0, sender="n3"), 0.5)
    core.handle(nc.ContributionArrived(step=0, sender="n1"), 0.6)
    core.handle(nc.OwnContribution(step=0), 1.0)
    core.handle(nc.ViewChanged(alive=("n0", "n2")), 1.1)  # n1 and n3 suspected
    assert core.handle(nc.Tick(), core.next_deadline()) == [] and core.starved
    actions = core.handle(nc.ViewChanged(alive=VOTERS4), 6.0)
    assert actions == [nc.BuildProposal(step=0, contributors=("n1", "n2", "n3"))]
    core.check_valid()


def decided_steps(core: nc.StepLeader, latencies_s: list[float], start: float = 1.0) -> float:
    """Run ``core`` through one step per latency, each moving on that long after its
    gradient; returns the time of the last step's start."""
    now = start
    for latency in latencies_s:
        core.handle(nc.OwnContribution(step=core.step), now)
        now += latency
        core.handle(nc.StepBegan(step=core.step + 1, voters=VOTERS, members=VOTERS), now)
        now += 0.1
    return now


def test_slow_healthy_steps_shift_the_takeovers_by_the_median_latency():
    # A 100M-parameter step decides ~10 s after its gradient: with the nominal
    # delays every rank took over a healthy coordinator (session 20, 7 proposals).
    backup = leader("n1")
    now = decided_steps(backup, [12.0, 3.0, 6.0, 40.0, 6.0])  # ends at step 5
    assert backup.pace() == pytest.approx(6.0 / CONFIG.decision_latency_nominal_s)
    shift = CONFIG.takeover_latencies * 6.0 - CONFIG.backup_delay_s
    assert backup.takeover_shift_s() == pytest.approx(shift)
    backup.handle(nc.StepBegan(step=6, voters=VOTERS, members=VOTERS), now)  # n1 is rank 1
    backup.handle(nc.OwnContribution(step=6), now)
    # The backup waits longer than a median healthy step takes ...
    assert backup.next_deadline() == pytest.approx(now + CONFIG.takeover_latencies * 6.0)
    assert backup.handle(nc.Tick(), now + 6.0) == []
    assert backup.handle(nc.Tick(), now + CONFIG.takeover_latencies * 6.0) == [
        nc.BuildProposal(step=6, contributors=("n1",))
    ]


def test_later_ranks_are_shifted_not_multiplied_so_a_stuck_coordinator_is_replaced_soon():
    """The GPU run (5.5 s steps): fallbacks multiplied by the pace put rank 2 at 29 s,
    and a coordinator alive but unable to lead held its step for 20 s (L2 invalid)."""
    fallback = leader("n2")  # step 0: n0 leads, n2 ranks 2
    now = decided_steps(fallback, [5.5] * 5)  # ends at step 5: n2 leads ...
    fallback.handle(nc.StepBegan(step=6, voters=VOTERS, members=VOTERS), now)  # ... n2 ranks 2
    fallback.handle(nc.OwnContribution(step=6), now)
    delay = fallback.next_deadline() - now
    nominal = CONFIG.fallback_delay_s + 2 * CONFIG.fallback_rank_step_s
    assert delay == pytest.approx(nominal + fallback.takeover_shift_s())
    assert delay < nominal * fallback.pace() / 2
    # The coordinator's own wait for contributions is still multiplied.
    coordinator = leader("n0")
    now = decided_steps(coordinator, [5.5] * 5)
    coordinator.handle(nc.StepBegan(step=6, voters=VOTERS, members=VOTERS), now)  # n0: rank 0
    coordinator.handle(nc.OwnContribution(step=6), now)
    assert coordinator.next_deadline() == pytest.approx(now + CONFIG.collect_s * coordinator.pace())


def slow_leader_with_n3_gone(now: float = 1.0) -> tuple[nc.StepLeader, float]:
    """n0 after five 5.5 s steps (the GPU run at 100M), n3 alive at first and then
    declared dead; at step 7, which n3 coordinates, n0 computed its gradient at the
    returned time and leads (rank 0, its paced collect bound armed)."""
    core = nc.StepLeader(node="n0")
    core.handle(nc.ViewChanged(alive=VOTERS4), 0.0)
    for step in range(5):
        core.handle(nc.StepBegan(step=step, voters=VOTERS4, members=VOTERS4), now)
        core.handle(nc.OwnContribution(step=step), now)
        now += 5.5
    core.handle(nc.ViewChanged(alive=("n0", "n1", "n2")), now - 1.0)  # n3 crashed
    core.handle(nc.StepBegan(step=7, voters=VOTERS4, members=VOTERS4), now)
    core.handle(nc.OwnContribution(step=7), now)
    assert core.rank() == 0 and core.next_deadline() > now + 7.0  # the paced collect bound
    return core, now


def test_a_node_back_in_the_view_ranks_nowhere_until_its_gradient_arrives():
    """The GPU run at 100M (5.5 s steps): the restarted n3 was alive in the view 5.4 s
    before its worker was up and 3 s more before its state was current; ranked first,
    it held the steps it coordinated until a backup took over (L2: 10.2-11.5 s without
    a commit, R = 10 s)."""
    core, now = slow_leader_with_n3_gone()
    core.handle(nc.ViewChanged(alive=VOTERS4), now + 0.5)  # n3 restarted: alive, not ready
    assert core.returning() == {"n3"} and core.rank() == 0
    # n3 is not waited for either: the others' gradients are the whole step.
    core.handle(nc.ContributionArrived(step=7, sender="n1"), now + 0.6)
    actions = core.handle(nc.ContributionArrived(step=7, sender="n2"), now + 0.7)
    assert actions == [nc.BuildProposal(step=7, contributors=("n0", "n1", "n2"), first=True)]
    # Its first gradient (of any step in the window) makes it ready: it ranks again.
    core.handle(nc.StepBegan(step=8, voters=VOTERS4, members=VOTERS4), now + 5.0)
    core.handle(nc.ContributionArrived(step=9, sender="n3"), now + 5.1)
    assert core.returning() == frozenset()
    core.handle(nc.StepBegan(step=11, voters=VOTERS4, members=VOTERS4), now + 6.0)
    core.handle(nc.OwnContribution(step=11), now + 6.0)
    assert core.rank() == 1  # n3 coordinates step 11


def test_a_coordinator_displaced_by_a_ready_node_waits_as_its_new_rank():
    core, now = slow_leader_with_n3_gone()
    core.handle(nc.ViewChanged(alive=VOTERS4), now + 0.5)  # back, not ready: n0 leads
    assert core.rank() == 0 and core.next_deadline() > now + 7.0
    core.handle(nc.ContributionArrived(step=7, sender="n3"), now + 2.0)  # ready: n3 leads
    assert core.rank() == 1
    # Neither the coordinator's paced bound nor a proposal at once (a duel with n3):
    # the backup's delay from its own gradient.
    takeover = now + CONFIG.backup_delay_s + core.takeover_shift_s()
    assert core.next_deadline() == pytest.approx(takeover)
    assert core.handle(nc.Tick(), takeover - 0.01) == []
    assert core.handle(nc.Tick(), takeover) == [nc.BuildProposal(step=7, contributors=("n0", "n3"))]


def test_nodes_seen_for_the_first_time_rank_at_once():
    """A cluster's start (and a restarted node's own view): a node this one never saw
    alive is not back from anywhere, so the rotation is the plain one."""
    core = nc.StepLeader(node="n1")
    core.handle(nc.ViewChanged(alive=("n1",)), 0.0)
    core.handle(nc.ViewChanged(alive=("n0", "n1")), 0.1)
    core.handle(nc.ViewChanged(alive=("n0", "n1", "n2")), 0.2)
    core.handle(nc.StepBegan(step=0, voters=VOTERS, members=VOTERS), 0.3)
    core.handle(nc.OwnContribution(step=0), 0.3)
    assert core.returning() == frozenset() and core.rank() == 1
    # Gone and back again while still without a gradient: still returning; gone for
    # good: forgotten.
    core.handle(nc.ViewChanged(alive=("n1", "n2")), 1.0)
    core.handle(nc.ViewChanged(alive=("n0", "n1", "n2")), 2.0)
    assert core.returning() == {"n0"} and core.rank() == 0
    core.handle(nc.ViewChanged(alive=("n1", "n2")), 3.0)
    assert core.returning() == frozenset()
    core.check_valid()


def test_fast_steps_keep_the_nominal_delays_and_the_pace_is_bounded():
    fast = leader("n1")
    decided_steps(fast, [0.05] * 7)
    assert fast.pace() == 1.0 and fast.takeover_shift_s() == 0.0
    assert len(fast.decision_latencies) == CONFIG.decision_latency_samples
    stuck = leader("n1")
    decided_steps(stuck, [3600.0] * 3)
    assert stuck.pace() == CONFIG.pace_max  # a stuck coordinator is still taken over
    assert stuck.takeover_shift_s() <= CONFIG.takeover_latencies * 30 * 0.75
    with pytest.raises(LocalProtocolError):
        nc.NodeConfig(pace_max=0.5)


def test_only_the_step_this_node_computed_for_is_timed():
    core = leader("n0")
    core.handle(nc.StepBegan(step=1, voters=VOTERS, members=VOTERS), 50.0)  # no gradient
    core.handle(nc.OwnContribution(step=1), 51.0)
    core.handle(nc.StepBegan(step=9, voters=VOTERS, members=VOTERS), 90.0)  # a rejoin
    assert core.decision_latencies == [] and core.pace() == 1.0


def test_a_restarted_acceptor_reproposes_its_stored_value_when_it_holds_the_bytes():
    value = StepValue(agg_fp="ab" * 8, contributors=["n0", "n1"])
    core = nc.StepLeader(node="n2")
    began = nc.StepBegan(step=4, voters=VOTERS, members=VOTERS, stored=value, held=(value.agg_fp,))
    assert core.handle(began, 0.0) == [nc.ProposeStored(step=4, value=value)]
    core.handle(nc.OwnContribution(step=4), 1.0)
    assert core.handle(nc.Tick(), 100.0) == []  # the stored value was this step's proposal
    without_bytes = nc.StepBegan(step=5, voters=VOTERS, members=VOTERS, stored=value, held=())
    assert core.handle(without_bytes, 100.0) == []


def test_a_step_decided_before_the_node_got_to_it_is_neither_computed_nor_led():
    """The GPU-free stand-in for the pause run (28M parameters on the CPU): n3 came
    back one step behind and, for every step it caught up on, computed a gradient no
    peer counted (the step was decided) before it could apply: 6 steps, 26 s, always
    one behind.  A step the commit core already learnt is fetched and applied only."""
    core = leader("n0")  # step 6's coordinator (rank 0)
    decided = nc.StepBegan(step=6, voters=VOTERS, members=VOTERS, decided=True)
    assert core.handle(decided, 10.0) == []
    assert not core.contributes() and core.next_deadline() is None
    assert core.handle(nc.OwnContribution(step=6), 11.0) == []  # asked before it knew
    for sender in VOTERS:
        assert core.handle(nc.ContributionArrived(step=6, sender=sender), 11.0) == []
    assert core.handle(nc.Tick(), 100.0) == [] and core.decision_latencies == []
    core.check_valid()
    # The next step, not yet decided, is computed and led as usual.
    core.handle(nc.StepBegan(step=7, voters=VOTERS, members=VOTERS), 101.0)
    assert core.contributes()
    core.handle(nc.OwnContribution(step=7), 102.0)
    assert core.next_deadline() is not None


def test_once_the_step_is_decided_nobody_leads_it():
    """The GPU run: a node back one step behind got step 15's decision just after it
    began the step, computed its gradient meanwhile, and then built an aggregate of it
    alone every 0.3 s for 12 s (each build refused).  Once the commit core has the
    decision, the leader's timers and failed builds propose nothing more."""
    backup = leader("n1")  # rank 1 of step 0
    backup.handle(nc.OwnContribution(step=0), 1.0)
    assert backup.next_deadline() is not None
    assert backup.handle(nc.StepDecided(step=0), 1.5) == []
    assert backup.next_deadline() is None and not backup.leads()
    assert backup.handle(nc.Tick(), 100.0) == []
    coordinator = leader("n0")
    coordinator.handle(nc.OwnContribution(step=0), 1.0)
    [build] = coordinator.handle(nc.Tick(), 1.0 + CONFIG.collect_s)
    coordinator.handle(nc.StepDecided(step=0), 2.0)  # a peer's value won meanwhile
    assert coordinator.handle(nc.BuildFailed(step=0), 2.5) == []
    assert coordinator.handle(nc.Tick(), 100.0) == [] and coordinator.next_deadline() is None
    coordinator.handle(nc.StepDecided(step=5), 100.0)  # another step's: no effect here
    coordinator.check_valid()
    # The next step is led as usual, and the decided one was still timed.
    coordinator.handle(nc.StepBegan(step=1, voters=VOTERS, members=VOTERS), 101.0)
    assert coordinator.leads() and coordinator.decision_latencies == [100.0]


def test_a_failed_build_is_retried_with_what_arrives_next():
    core = leader("n0")
    core.handle(nc.OwnContribution(step=0), 1.0)
    core.handle(nc.Tick(), 1.0 + CONFIG.collect_s)
    core.handle(nc.BuildFailed(step=0), 2.5)
    assert core.handle(nc.Tick(), 2.5 + CONFIG.straggler_grace_s) == [
        nc.BuildProposal(step=0, contributors=("n0",), first=True)
    ]


def test_events_are_validated_and_time_never_goes_back():
    with pytest.raises(LocalProtocolError):
        nc.StepBegan(step=0, voters=["n0"], members=VOTERS)
    with pytest.raises(LocalProtocolError):
        nc.StepBegan(step=0, voters=(), members=VOTERS)
    with pytest.raises(LocalProtocolError):
        nc.StepBegan(step=0, voters=("n0", "n3"), members=VOTERS)
    core = leader("n0")
    core.handle(nc.Tick(), 2.0)
    with pytest.raises(LocalProtocolError):
        core.handle(nc.Tick(), 1.0)
    with pytest.raises(LocalProtocolError):
        nc.NodeConfig(collect_s=0.0)


class LeaderMachine(RuleBasedStateMachine):
    """Any interleaving of steps, gradients, arrivals, view changes and timers: at most
    one proposal per step, over members only, with this node's own gradient in it."""

    def __init__(self):
        super().__init__()
        self.core = nc.StepLeader(node="n1")
        self.now = 0.0

    @initialize(minimum=st.integers(1, 4), sharded=st.booleans())
    def rule_minimum(self, minimum, sharded):
        # The aggregation rule's fewest contributions: 1 (mean) up to all 3 members.
        config = nc.NodeConfig(min_contributors=minimum, sharded_contributions=sharded)
        self.core = nc.StepLeader(node="n1", config=config)
        self.proposed: dict[tuple[int, int], int] = {}  # (epoch of StepBegan, step) -> count
        self.epoch = 0
        self.built: tuple[str, ...] | None = None  # the last BuildProposal's contributors

    def _feed(self, event) -> None:
        for action in self.core.handle(event, self.now):
            key = (self.epoch, action.step)
            rebuild = isinstance(event, nc.ViewChanged) and self.proposed.get(key, 0) > 0
            if rebuild:
                # Sharded only: the build in flight named a node the view lost.
                assert self.core.config.sharded_contributions and self.built is not None
                assert set(self.built) - set(event.alive) - {"n1"}
            else:
                self.proposed[key] = self.proposed.get(key, 0) + 1
            if isinstance(action, nc.BuildProposal):
                self.built = action.contributors
                assert action.step == self.core.step
                assert set(action.contributors) <= set(self.core.members)
                assert "n1" in action.contributors
                assert len(action.contributors) >= self.core.config.min_contributors
                assert action.contributors == tuple(sorted(action.contributors))
                if self.core.config.sharded_contributions:
                    assert set(action.contributors) <= set(self.core.alive) | {"n1"}

    @rule(step=st.integers(0, 20), learner=st.booleans(), decided=st.booleans())
    def begin(self, step, learner, decided):
        voters = ("n0", "n2") if learner else VOTERS
        self.epoch += 1
        self._feed(nc.StepBegan(step=step, voters=voters, members=VOTERS, decided=decided))
        if decided:
            assert not self.core.contributes() and self.core.next_deadline() is None

    @precondition(lambda self: self.core.step >= 0)
    @rule(ahead=st.integers(-1, 1))
    def decided(self, ahead):
        self._feed(nc.StepDecided(step=max(0, self.core.step + ahead)))
        if ahead == 0:
            assert not self.core.leads() and self.core.next_deadline() is None

    @precondition(lambda self: self.core.step >= 0)
    @rule()
    def own(self):
        self._feed(nc.OwnContribution(step=self.core.step))

    @precondition(lambda self: self.core.step >= 0)
    @rule(sender=st.sampled_from(VOTERS), ahead=st.integers(-2, 10))
    def arrive(self, sender, ahead):
        self._feed(nc.ContributionArrived(step=max(0, self.core.step + ahead), sender=sender))

    @rule(alive=st.sets(st.sampled_from(VOTERS)))
    def view(self, alive):
        self._feed(nc.ViewChanged(alive=tuple(sorted(alive))))

    @rule(seconds=st.floats(0.0, 5.0))
    def tick(self, seconds):
        self.now += seconds
        self._feed(nc.Tick())

    @invariant()
    def valid(self):
        self.core.check_valid()

    @invariant()
    def one_proposal_per_step(self):
        # Besides a sharded rebuild after a contributor left the view (``_feed``).
        assert all(count == 1 for count in self.proposed.values()), self.proposed


TestLeaderMachine = LeaderMachine.TestCase


# --- acceptor records and the vote floor ------------------------------------------------------


def test_records_beyond_the_kept_window_are_pruned_and_the_floor_rises():
    kept = CONFIG.records_kept
    steps = range(kept + 5)
    pruning = nc.prune_records(steps, -1)
    assert pruning.steps == tuple(range(5))
    assert pruning.floor == 4
    assert nc.prune_records(range(5, kept + 6), 4).floor == 5
    assert nc.prune_records(range(kept), 7) == nc.Pruning(steps=(), floor=7)  # never falls


def test_no_vote_floor_prunes_the_same_records_but_never_raises_the_floor():
    bugs = BugSet.parse(["no-vote-floor"])
    pruning = nc.prune_records(range(CONFIG.records_kept + 5), -1, bugs=bugs)
    assert pruning.steps == tuple(range(5)) and pruning.floor == -1


def test_one_records_kept_number_the_commit_cores_window():
    assert CONFIG.records_kept == cm.CommitConfig().retained_steps


# --- aggregates, membership, rejoin ------------------------------------------------------------


def test_rejoin_sources_are_the_peers_known_to_be_ahead():
    assert nc.rejoin_sources("n1", VOTERS, VOTERS, {}, 5, None) == ("n0", "n2")
    # n0's messages carried step 3 and n2's step 9: only n2 can hand over a later
    # state; a peer not heard from may be at this node's own step.
    assert nc.rejoin_sources("n1", VOTERS, VOTERS, {"n2": 9, "n0": 3}, 5, "n0") == ("n2",)
    assert nc.rejoin_sources("n1", VOTERS, VOTERS, {"n2": 9}, 5, "n2") == ("n2",)
    assert nc.rejoin_sources("n1", ("n1",), VOTERS, {}, 5, "n0") == ("n0",)
    assert nc.rejoin_sources("n3", VOTERS, VOTERS, {}, 5, "n0", joining=True) == ("n0",)


def test_a_live_peer_two_steps_ahead_is_the_rejoin_evidence():
    gap = cm.CommitConfig().state_transfer_gap_steps
    assert nc.peer_ahead(5, {"n0": 6, "n2": 6}, VOTERS, gap, VOTERS) is None  # one ahead
    assert nc.peer_ahead(5, {"n0": 7, "n2": 9}, VOTERS, gap, VOTERS) == "n2"  # the furthest
    assert nc.peer_ahead(5, {"n0": 7, "n2": 9}, ("n0", "n1"), gap, VOTERS) == "n0"  # live
    assert nc.peer_ahead(5, {"n0": 7, "n2": 7}, VOTERS, gap, VOTERS) == "n2"  # ties: by name
    assert nc.peer_ahead(5, {"n2": 9}, ("n1",), gap, VOTERS) is None
    # A peer removed here, still in the detector's view: its claim is no evidence.
    assert nc.peer_ahead(5, {"n0": 7, "n2": 9}, VOTERS, gap, ("n0", "n1")) == "n0"
    assert nc.peer_ahead(5, {"n2": 9}, VOTERS, gap, ("n0", "n1")) is None


def test_a_restart_rejoins_first_and_a_first_start_begins_at_once():
    # Both shells ask this one function (the runtime with incarnation <= 1 as the
    # first start, the simulator with nothing on the node's disk).
    assert nc.rejoins_at_start(first_start=False, joining=False)
    assert not nc.rejoins_at_start(first_start=True, joining=False)
    assert not nc.rejoins_at_start(first_start=False, joining=True)  # a joiner waits


def test_a_rejoin_knows_the_cluster_step_from_its_evidence_and_genesis_only_at_genesis():
    def start(evidence, peer_steps, at_genesis=False, joining=False):
        return nc.rejoin_start(
            "n1",
            alive=VOTERS,
            members=VOTERS,
            peer_steps=peer_steps,
            own_step=5,
            evidence=evidence,
            at_genesis=at_genesis,
            genesis_param_fp="g" * 16,
            joining=joining,
        )

    # A peer sends messages of the step it runs: it committed the one before.
    behind = start("n0", {"n0": 9, "n2": 12})
    assert (behind.cluster_step, behind.sources) == (8, ("n0", "n2"))
    assert start(None, {"n0": 9, "n2": 12}).cluster_step == 11  # the highest heard
    assert start(None, {}).cluster_step == -1  # a restart has heard nothing yet
    assert start(None, {}).genesis_param_fp == ""  # holds a later state: no genesis
    assert start(None, {}, at_genesis=True).genesis_param_fp == "g" * 16
    assert start("n0", {"n0": 9}, at_genesis=True, joining=True).genesis_param_fp == ""


def test_the_accepted_values_of_kept_records_outlive_the_aggregate_window():
    kept = nc.aggregates_to_keep({3: "aa", 9: "bb"}, 10, config=nc.NODE_DEFAULTS)
    # The window: the last aggregates_kept_steps steps up to the applied one, and later.
    assert kept.from_step == 10 + 1 - nc.NODE_DEFAULTS.aggregates_kept_steps
    assert kept.pinned == ((3, "aa"), (9, "bb"))
    with pytest.raises(LocalProtocolError):
        nc.NodeConfig(aggregates_kept_steps=0)


# --- history ---------------------------------------------------------------------------------------


VALUE = StepValue(agg_fp="ab" * 8, contributors=["n0", "n1"])
LOGGED = [
    cm.Proposed(step=1, ballot=(0, 0), value=VALUE),
    cm.Promised(step=1, ballot=(0, 0), to="n0"),
    cm.AcceptedValue(step=1, ballot=(0, 0), value=VALUE, to="n0", holds_bytes=True),
    cm.Committed(
        step=1, value=VALUE, param_fp="cd" * 8, voters=VOTERS, learners=(), quorum=("n0", "n1")
    ),
    rj.RequestState(source="n0", attempt=0, deadline=3.0, from_step=-1),
    rj.LoadCheckpoint(path="c/step-9", step=9, param_fp="cd" * 8),
    rj.RejoinDone(source="n0", step=9, param_fp="cd" * 8, nbytes=10, verified=True),
    det.Suspected(peer="n0", peer_incarnation=0, reason="gap", at=1.0),
    det.DeclaredDead(peer="n0", peer_incarnation=0, suspicions=1, reason="gap", at=1.0),
    det.DeclaredAlive(peer="n0", peer_incarnation=1, at=1.0),
    det.Refuted(incarnation=2, suspected_by="n0", at=1.0),
    det.SelfDeclaredDead(incarnation=2, declared_by="n0", at=1.0),
    det.ViewChanged(epoch=3, alive=("n1",), at=1.0),
]


@pytest.mark.parametrize("action", LOGGED, ids=lambda a: type(a).__name__)
def test_every_logged_action_maps_to_a_valid_history_event(action):
    mapped = nc.history_of(action, node="n1", step=7)
    assert mapped is not None
    cls, fields = mapped
    fields.setdefault("step", -1)
    event = cls(t_wall=0.0, t_mono=0.0, node="n1", **fields)
    line = history.encode_event(event)  # as written: a tuple is a JSON array too
    assert history.encode_event(history.decode_event(line)) == line


def test_sends_and_timers_are_not_history():
    assert nc.history_of(cm.Tick(), node="n1") is None
    assert nc.history_of(nc.Tick(), node="n1") is None


def test_a_node_replaying_a_stored_value_sends_no_gradient_for_that_step():
    value = StepValue(agg_fp="ab" * 8, contributors=["n0", "n1"])
    core = nc.StepLeader(node="n2")
    core.handle(nc.StepBegan(step=4, voters=VOTERS, members=VOTERS), 0.0)
    assert core.contributes()
    began = nc.StepBegan(step=5, voters=VOTERS, members=VOTERS, stored=value, held=(value.agg_fp,))
    core.handle(began, 1.0)
    assert not core.contributes()
    core.handle(nc.StepBegan(step=6, voters=VOTERS, members=VOTERS), 2.0)
    assert core.contributes()


# --- joins and clean leaves (Enrolment) -------------------------------------------------------


def enrolment(joining: bool) -> nc.Enrolment:
    return nc.Enrolment(joining=joining, now=0.0, join_timeout_s=10.0, leave_timeout_s=5.0)


def test_a_joiner_asks_every_join_retry_then_fetches_from_the_member_that_added_it():
    core = enrolment(joining=True)
    tick = {"voters": ("n0", "n1"), "join_voters": ("n0", "n1"), "fetching": False}
    assert core.tick(0.0, **tick) == [nc.SendJoinRequest(to=("n0", "n1"))]
    assert core.tick(0.5, **tick) == []  # join_retry_s = 1 s
    assert core.tick(1.0, **tick) == [nc.SendJoinRequest(to=("n0", "n1"))]
    assert core.evidence("n9", members=("n0", "n1")) == []  # not a member: no evidence
    assert core.evidence("n1", members=("n0", "n1", "me")) == [nc.StartDetector()]
    assert core.evidence("n0", members=("n0", "n1", "me")) == []  # the detector runs already
    assert core.tick(1.2, **tick) == [nc.FetchStateFrom(peer="n0")]
    assert core.tick(1.3, **{**tick, "fetching": True}) == []
    assert not core.takes_requests
    assert core.installed(member=True, from_peer=True) == [nc.StartDetector()]
    assert core.takes_requests


def test_a_joiners_own_checkpoint_does_not_make_it_a_member():
    """A joiner's checkpoint names it from before its removal: installing it (its fetch
    fell back to the checkpoint) leaves it a joiner; only a peer's state adds it."""
    core = enrolment(joining=True)
    assert not core.held_as_member  # no member's traffic yet: it watches itself only
    core.evidence("n1", members=("n0", "n1"))
    assert core.installed(member=True, from_peer=False) == [] and core.joining
    # The members that added it still watch it: so does it them (restart_at).
    assert core.held_as_member
    assert core.installed(member=False, from_peer=True) == [] and core.joining
    assert core.installed(member=True, from_peer=True) == [nc.StartDetector()]
    assert not core.joining and core.evidence_source is None
    assert not core.held_as_member  # a member: its configuration says whom it watches


def test_a_joiner_gives_up_after_its_timeout_even_while_fetching():
    core = enrolment(joining=True)
    stop = core.tick(10.5, voters=(), join_voters=("n0",), fetching=True)
    assert stop == [nc.StopNode(reason="join: not added within 10.0s", join_failed=True)]


def test_a_clean_leave_repeats_its_notice_and_stops_at_its_timeout():
    core = enrolment(joining=False)
    assert core.begin_leave("asked", 1.0, member=True, last_voter=False) == [nc.RequestRemoval()]
    tick = {"voters": ("n0", "me"), "join_voters": (), "fetching": False}
    assert core.tick(1.0, **tick) == [nc.SendLeaveNotice(to=("n0", "me"))]
    assert core.tick(1.5, **tick) == []
    assert core.tick(2.0, **tick) == [nc.SendLeaveNotice(to=("n0", "me"))]
    assert core.removed_reason() == "asked"
    (stop,) = core.tick(6.5, **tick)
    assert isinstance(stop, nc.StopNode) and "not committed within 5.0s" in stop.reason


def test_nothing_to_leave_stops_at_once_and_a_removed_leaver_stops_on_install():
    assert enrolment(joining=True).begin_leave("x", 0.0, member=False, last_voter=False) == [
        nc.StopNode(reason="x")
    ]
    assert enrolment(joining=False).begin_leave("x", 0.0, member=True, last_voter=True) == [
        nc.StopNode(reason="x")
    ]
    leaver = enrolment(joining=False)
    leaver.begin_leave("asked", 0.0, member=True, last_voter=False)
    (stop,) = leaver.installed(member=False, from_peer=True)
    assert isinstance(stop, nc.StopNode) and stop.reason.startswith("asked")


def test_the_next_deadline_is_what_tick_will_act_on():
    """Both shells wake at ``next_deadline`` (the simulator only then): it must be the
    earliest moment ``tick`` does something, and never a moment it does nothing."""
    member = enrolment(joining=False)
    assert member.next_deadline(fetching=False) is None  # nothing under way
    member.begin_leave("asked", 2.0, member=True, last_voter=False)
    assert member.next_deadline(fetching=False) == 2.0  # the first notice
    tick = {"voters": ("n0", "me"), "join_voters": (), "fetching": False}
    member.tick(2.0, **tick)
    assert member.next_deadline(fetching=False) == 3.0  # the next, one leave_retry_s on
    member.next_leave_notice = 99.0
    assert member.next_deadline(fetching=True) == 7.0  # the leave's timeout
    joiner = enrolment(joining=True)
    assert joiner.next_deadline(fetching=False) == 0.0
    joiner.tick(0.0, voters=(), join_voters=("n0",), fetching=False)
    assert joiner.next_deadline(fetching=False) == 1.0
    # While it fetches, a joiner's requests pause: only its timeout is due (a shell
    # that woke for the paused request would spin at the same instant).
    assert joiner.next_deadline(fetching=True) == 10.0
    assert joiner.tick(1.0, voters=(), join_voters=("n0",), fetching=True) == []


def test_a_member_names_the_step_that_removed_a_peer_and_only_then():
    from swarmshake.reference_node.protocol import membership as mb

    initial = mb.Configuration(step=-1, voters=("a", "b", "c"))
    configs = mb.Configurations(initial)
    assert nc.removal_step(configs, "c") is None  # a member
    assert nc.removal_step(configs, "z") is None  # a stranger
    configs.record(mb.Configuration(step=4, voters=("a", "b")))
    configs.record(mb.Configuration(step=6, voters=("a", "b"), learners=("d",)))
    assert nc.removal_step(configs, "c") == 4  # the step of the first configuration without it
    assert nc.removal_step(configs, "d") is None and nc.removal_step(configs, "z") is None
    configs.record(mb.Configuration(step=9, voters=("a", "b")))
    assert nc.removal_step(configs, "d") == 9 and nc.removal_step(configs, "c") == 4
    # Back in (a join after the leave): a member again, nothing to confirm.
    configs.record(mb.Configuration(step=12, voters=("a", "b"), learners=("c",)))
    assert nc.removal_step(configs, "c") is None


def test_a_committed_removal_is_told_to_the_removed_peer_and_stops_the_removed_node():
    from swarmshake.reference_node.protocol.messages import ConfigChangeRequest

    member = enrolment(joining=False)
    remove = ConfigChangeRequest(change="remove", peer="n2", incarnation=1)
    assert member.configuration_committed(7, remove, node="me") == [nc.ConfirmRemoval(peer="n2")]
    add = ConfigChangeRequest(change="add", peer="n2", incarnation=2)
    assert member.configuration_committed(8, add, node="me") == []
    own = ConfigChangeRequest(change="remove", peer="me", incarnation=1)
    assert member.configuration_committed(9, own, node="me") == [
        nc.StopNode(reason="removed from the configuration by the cluster: removed at step 9")
    ]
    member.begin_leave("asked", 0.0, member=True, last_voter=False)
    assert member.configuration_committed(9, own, node="me") == [
        nc.StopNode(reason="asked: removed at step 9")
    ]


def test_a_leaver_stops_when_a_member_confirms_its_removal():
    leaver = enrolment(joining=False)
    confirmed = {"step": 4, "recorded": True}
    leaver.begin_leave("asked", 0.0, member=True, last_voter=False)
    assert leaver.removal_confirmed("n9", members=("n0", "n1"), **confirmed) == []  # no member
    assert leaver.removal_confirmed("n1", members=("n0", "n1"), **confirmed) == [
        nc.StopNode(reason="asked: removal confirmed by n1")
    ]


def test_a_member_that_missed_its_own_removal_restarts_as_a_joiner():
    """Restarted before the step that removed it committed, a node runs as a member;
    a member's word that it was removed (news to it: ``recorded``) restarts it as a
    joiner.  An old removal it was re-added after (not news) changes nothing."""
    member = enrolment(joining=False)
    members = ("n0", "n1")
    assert member.removal_confirmed("n1", members, step=4, recorded=False) == []
    assert member.removal_confirmed("n9", members, step=4, recorded=True) == []
    (restart,) = member.removal_confirmed("n1", members, step=4, recorded=True)
    assert isinstance(restart, nc.RestartAsJoiner) and "at step 4" in restart.reason


def test_a_joiner_whose_evidence_came_from_a_stale_member_restarts():
    """A member that had not learned the joiner's removal heartbeated it (evidence, so
    its detector started); once that member learns the removal and says so, the
    evidence is void: the joiner restarts.  Another member's word is no such news."""
    joiner = enrolment(joining=True)
    members = ("n0", "n1", "n2")
    assert joiner.removal_confirmed("n1", members, step=4, recorded=False) == []  # no evidence
    joiner.evidence("n2", members)
    assert joiner.removal_confirmed("n1", members, step=4, recorded=False) == []
    (restart,) = joiner.removal_confirmed("n2", members, step=4, recorded=False)
    assert isinstance(restart, nc.RestartAsJoiner) and "n2" in restart.reason


def test_a_removed_peer_is_answered_at_most_once_an_interval():
    from swarmshake.reference_node.protocol import membership as mb

    configs = mb.Configurations(mb.Configuration(step=-1, voters=("a", "b", "c")))
    answers = nc.RemovalAnswers(nc.NodeConfig(removal_answer_interval_s=0.5))
    assert answers.refused("c", "unknown-peer", configs, 0.0) is None  # still a member
    configs.record(mb.Configuration(step=3, voters=("a", "b")))
    assert answers.refused("z", "unknown-peer", configs, 0.0) is None  # a stranger
    assert answers.refused("c", "unknown-peer", configs, 1.0) == 3
    assert answers.refused("c", "unknown-peer", configs, 1.4) is None
    assert answers.refused("c", "unknown-peer", configs, 1.5) == 3
    answers.check_valid()


def test_a_state_offer_says_which_configuration_its_state_runs_under():
    from swarmshake.reference_node.protocol import membership as mb

    taken = nc.offered_configuration(["b", "a"], ["c"], 7, node="c", joining=True)
    assert taken == nc.OfferedConfiguration(
        configuration=mb.Configuration(step=7, voters=("a", "b"), learners=("c",))
    )
    # A joiner's source that has not added it yet: try the next one.
    assert nc.offered_configuration(["a", "b"], [], 7, node="c", joining=True).refused == (
        nc.NOT_ADDED_THERE
    )
    # A member takes whatever configuration came with the state (a removal too).
    assert nc.offered_configuration(["a", "b"], [], 7, node="c", joining=False).configuration
    assert nc.offered_configuration(["a"], ["a"], 7, node="a", joining=False).refused == (
        nc.BAD_OFFER
    )
    assert nc.offered_configuration([], [], -1, node="a", joining=True) == (
        nc.OfferedConfiguration()
    )


def test_a_commit_core_of_a_configuration_without_the_node_holds_it_as_a_learner():
    assert nc.commit_roles(("a", "b"), ("c",), "a") == (("a", "b"), ("c",))
    assert nc.commit_roles(("a", "b"), ("c",), "c") == (("a", "b"), ("c",))
    assert nc.commit_roles(("b", "c"), ("d",), "a") == (("b", "c"), ("a", "d"))
    assert nc.commit_roles(("b", "c"), (), "z") == (("b", "c"), ("z",))


class EnrolmentMachine(RuleBasedStateMachine):
    """Any interleaving of ticks, evidence, installs and leaves: requests and notices
    never come faster than their retry, a fetch only after a member's evidence, and
    a stop only for a reason the core knows."""

    def __init__(self):
        super().__init__()
        self.core = enrolment(joining=True)
        self.now = 0.0
        self.sent: dict[type, float] = {}
        self.evidence = False

    @rule(seconds=st.floats(0.0, 3.0), fetching=st.booleans())
    def tick(self, seconds, fetching):
        self.now += seconds
        for action in self.core.tick(
            self.now, voters=("n0",), join_voters=("n0",), fetching=fetching
        ):
            if isinstance(action, nc.SendJoinRequest | nc.SendLeaveNotice):
                last = self.sent.get(type(action))
                assert last is None or self.now - last >= 1.0 - 1e-9
                self.sent[type(action)] = self.now
            elif isinstance(action, nc.FetchStateFrom):
                assert self.evidence and not fetching
                self.evidence = False

    @rule(peer=st.sampled_from(("n0", "n9")))
    def heard(self, peer):
        self.core.evidence(peer, members=("n0", "me"))
        self.evidence = self.evidence or (self.core.joining and peer == "n0")

    @rule(member=st.booleans(), from_peer=st.booleans())
    def install(self, member, from_peer):
        self.core.installed(member=member, from_peer=from_peer)
        self.evidence = self.evidence and self.core.joining

    @rule()
    def leave(self):
        self.core.begin_leave("asked", self.now, member=not self.core.joining, last_voter=False)

    @invariant()
    def valid(self):
        self.core.check_valid()


TestEnrolmentMachine = EnrolmentMachine.TestCase


# --- checkpoints and incarnations --------------------------------------------------------------


def test_the_first_incarnation_is_one_and_every_start_is_above_the_last():
    assert nc.next_incarnation(0) == nc.FIRST_INCARNATION == 1
    assert nc.next_incarnation(4) == 5
    assert nc.is_first_start(1) and not nc.is_first_start(2)


def test_a_restart_and_every_declared_death_are_failures_the_young_daly_policy_counts():
    config = nc.CheckpointConfig(policy="young-daly", min_interval_s=1.0, max_interval_s=600.0)
    restarted = nc.Checkpointing(config, 0.0, restarted=True)
    first = nc.Checkpointing(config, 0.0, restarted=False)
    assert (restarted.failures_observed, first.failures_observed) == (1, 0)
    first.failure(1.0)
    assert (
        first.status(2.0)["mtbf_s"]
        < nc.Checkpointing(config, 0.0, restarted=False).status(2.0)["mtbf_s"]
    )
    with pytest.raises(LocalProtocolError, match="fixed or young-daly"):
        nc.CheckpointConfig(policy="sometimes")


def test_a_non_member_refused_as_such_is_a_stranger():
    """Any sender refused as a non-member's is heartbeated back (a node this one
    removed may have been added again in a configuration it has not learnt)."""
    assert nc.heartbeats_stranger("n9", "unknown-peer")
    assert not nc.heartbeats_stranger("n9", "forged-ballot")  # not a non-member's
    assert not nc.heartbeats_stranger("", "unknown-peer")  # no sender known


def test_a_step_that_changes_the_configuration_is_checkpointed_at_once():
    """A restart from a checkpoint older than a configuration change runs under the
    older configuration and may never commit the steps it lost (explore --leaves,
    3 nodes, seed 2: L2), so such a step is written whatever the interval."""
    every = nc.Checkpointing(nc.CheckpointConfig(every_steps=50), 0.0, restarted=False)
    assert every.committed(3, 1.0) is None
    write = every.committed(4, 1.1, changes_configuration=True)
    assert write is not None and write.step == 4 and "configuration change" in write.reason
    assert every.writes_requested == 1 and every.status(1.2)["last_reason"] == write.reason
    assert every.committed(5, 1.3) is None  # the interval goes on as before
    assert every.committed(50, 1.4) is not None  # steps that are multiples of 50
    off = nc.Checkpointing(nc.CheckpointConfig(every_steps=0), 0.0, restarted=False)
    assert off.committed(4, 1.0, changes_configuration=True) is None  # only when asked


def test_a_fetch_suspends_the_step_and_a_failed_one_is_retried_after_the_interval():
    fetch = nc.StateFetch(nc.NodeConfig(rejoin_retry_s=2.0))
    assert fetch.steps
    fetch.begun()
    assert not fetch.steps and fetch.retry_at is None
    assert fetch.failed(10.0, joining=False) == 12.0
    fetch.check_valid()
    assert not fetch.steps  # still suspended until the retry's fetch installs a state
    assert not fetch.retry_due(11.9) and fetch.retry_due(12.0)
    fetch.begun()
    assert fetch.retry_at is None
    fetch.installed()
    assert fetch.steps


def test_a_joiners_failed_fetch_is_left_to_its_enrolment():
    fetch = nc.StateFetch()
    fetch.begun()
    assert fetch.failed(5.0, joining=True) is None
    assert fetch.steps and not fetch.retry_due(1e9)


def test_a_joiners_pending_evidence_is_due_once_its_fetch_ended():
    enrolment = nc.Enrolment(joining=True, now=0.0, join_timeout_s=60.0, leave_timeout_s=30.0)
    enrolment.tick(0.0, voters=(), join_voters=("n1",), fetching=False)  # asks to join
    enrolment.evidence("n1", ("n1", "n2"))
    # While a fetch runs the evidence waits; once it ended the next fetch is due at once.
    assert enrolment.next_deadline(fetching=True) == 60.0
    assert enrolment.next_deadline(fetching=False) <= 0.5
    assert enrolment.tick(0.5, voters=(), join_voters=("n1",), fetching=False) == [
        nc.FetchStateFrom(peer="n1")
    ]


def test_only_commit_messages_show_the_step_their_sender_runs():
    from swarmshake.reference_node.protocol import messages as msgs

    assert nc.running_step(msgs.Prepare(sender="n1", step=7, ballot=(1, 1))) == 7
    assert (
        nc.running_step(msgs.StateOffer(sender="n1", step=9, param_fp="ab" * 16, nbytes=1)) is None
    )
    assert nc.running_step(msgs.LeaveConfirmed(sender="n1", step=4)) is None
    assert nc.running_step(msgs.AggregateRequest(sender="n1", step=9, value_fp="ab" * 16)) is None


def test_a_restart_asks_the_live_members_of_the_newest_configuration_it_knows():
    """Its checkpoint's configuration named n0 and n1 (n1 left since, n2 joined): the
    members of the newest configuration it recorded may serve too."""
    start = nc.rejoin_start(
        "n0",
        alive=("n0", "n2"),
        members=("n0", "n1"),
        newest_members=("n0", "n2"),
        peer_steps={},
        own_step=1,
        evidence=None,
        at_genesis=False,
        genesis_param_fp="",
    )
    assert start.sources == ("n2",)


# --- Proposer: one proposal a step -----------------------------------------------------------


def _proposer(step: int = 3) -> nc.Proposer:
    proposer = nc.Proposer()
    proposer.step_began(step)
    return proposer


def test_a_build_asked_by_the_leader_becomes_the_steps_one_proposal():
    proposer = _proposer()
    build = nc.BuildProposal(step=3, contributors=("n0", "n1"), first=True)
    assert proposer.lead(build, core_step=3) == [nc.BuildValue(step=3, contributors=("n0", "n1"))]
    change = None
    actions = proposer.built(3, "ab" * 8, ("n0", "n1"), core_step=3, change=change)
    value = StepValue(agg_fp="ab" * 8, contributors=["n0", "n1"])
    assert actions == [nc.Propose(step=3, value=value, first=True)]
    # One proposal a step: a later build (a sharded rebuild) or a stored value is moot.
    assert proposer.lead(nc.BuildProposal(step=3, contributors=("n0",)), core_step=3) == []
    stored = nc.ProposeStored(step=3, value=value)
    assert proposer.lead(stored, core_step=3) == []
    proposer.check_valid()
    # The next step proposes again.
    proposer.step_began(4)
    assert proposer.lead(nc.ProposeStored(step=4, value=value), core_step=4) == [
        nc.Propose(step=4, value=value)
    ]


def test_only_the_build_asked_last_is_proposed_and_only_at_the_cores_step():
    proposer = _proposer()
    proposer.lead(nc.BuildProposal(step=3, contributors=("n0", "n1", "n2")), core_step=3)
    # The leader left n2 out (it died): the first build's answer is not proposed.
    proposer.lead(nc.BuildProposal(step=3, contributors=("n0", "n1")), core_step=3)
    assert proposer.built(3, "ab" * 8, ("n0", "n1", "n2"), core_step=3, change=None) == []
    # Its failure is not the leader's business either; the second build's is.
    assert proposer.build_failed(3, ("n2", "n1", "n0"), ("n2",)) == []
    assert proposer.build_failed(3, ("n1", "n0"), ("n1",)) == [
        nc.BuildFailed(step=3, missing=("n1",))
    ]
    assert proposer.building is None
    # A build whose step the core left (a commit, an install) is not proposed.
    proposer.lead(nc.BuildProposal(step=3, contributors=("n0", "n1")), core_step=3)
    assert proposer.built(3, "ab" * 8, ("n0", "n1"), core_step=4, change=None) == []
    assert not proposer.proposed
    proposer.check_valid()


def test_nothing_is_built_or_proposed_while_the_step_does_not_run():
    proposer = _proposer()
    build = nc.BuildProposal(step=3, contributors=("n0", "n1"))
    assert proposer.lead(build, core_step=None) == []  # fetching the state, or joining
    assert proposer.lead(build, core_step=2) == []  # the core is elsewhere
    proposer.lead(build, core_step=3)
    assert proposer.built(3, "ab" * 8, ("n0", "n1"), core_step=None, change=None) == []
    assert proposer.building == (3, ("n0", "n1"))  # proposed once the step runs again


def test_a_stored_value_proposed_while_a_build_runs_makes_the_build_moot():
    """The state machine below found it: the build's failure then went to the leader of
    a step already proposed, and the invariant (no build after a proposal) broke."""
    proposer = _proposer()
    proposer.lead(nc.BuildProposal(step=3, contributors=("n0", "n1")), core_step=3)
    value = StepValue(agg_fp="ab" * 8, contributors=["n0", "n1", "n2"])
    assert proposer.lead(nc.ProposeStored(step=3, value=value), core_step=3) == [
        nc.Propose(step=3, value=value)
    ]
    assert proposer.building is None
    assert proposer.build_failed(3, ("n0", "n1"), ()) == []
    assert proposer.built(3, "cd" * 8, ("n0", "n1"), core_step=3, change=None) == []
    proposer.check_valid()


class ProposerMachine(RuleBasedStateMachine):
    """Any order of leader actions, build answers and step changes: at most one
    proposal a step, only for the step the core is at, only from the build asked last
    (or a stored value), and the Proposer's own invariants (``check_valid``)."""

    def __init__(self):
        super().__init__()
        self.proposer = nc.Proposer()
        self.core_step: int | None = 0
        self.proposer.step_began(0)
        self.proposals: dict[int, int] = {}
        self.asked: tuple[int, tuple[str, ...]] | None = None  # the last BuildValue

    def _record(self, actions):
        for action in actions:
            if isinstance(action, nc.Propose):
                assert action.step == self.core_step
                self.proposals[action.step] = self.proposals.get(action.step, 0) + 1
                assert self.proposals[action.step] == 1, "two proposals for one step"
            else:
                self.asked = (action.step, action.contributors)

    @rule(
        contributors=st.sets(st.sampled_from(VOTERS), min_size=1).map(lambda c: tuple(sorted(c))),
        stored=st.booleans(),
        offset=st.integers(-1, 1),
    )
    def lead(self, contributors, stored, offset):
        step = (self.proposer.step or 0) + offset
        if step < 0:
            return
        if stored:
            action = nc.ProposeStored(
                step=step, value=StepValue(agg_fp="ab" * 8, contributors=list(contributors))
            )
        else:
            action = nc.BuildProposal(step=step, contributors=contributors)
        self._record(self.proposer.lead(action, core_step=self.core_step))

    @rule(fail=st.booleans(), last=st.booleans())
    def answer(self, fail, last):
        if self.asked is None:
            return
        step, contributors = self.asked
        if not last:
            contributors = contributors[:-1] or ("n9",)  # another build's answer
        if fail:
            events = self.proposer.build_failed(step, contributors, ())
            assert all(e.step == step for e in events)
        else:
            actions = self.proposer.built(
                step, "cd" * 8, contributors, core_step=self.core_step, change=None
            )
            for action in actions:
                assert (action.step, tuple(action.value.contributors)) == self.asked
            self._record(actions)

    @rule(runs=st.booleans())
    def suspend(self, runs):
        self.core_step = self.proposer.step if runs else None

    @rule()
    def next_step(self):
        step = (self.proposer.step or 0) + 1
        self.proposer.step_began(step)
        self.core_step = step
        self.asked = None

    @invariant()
    def valid(self):
        self.proposer.check_valid()


TestProposerMachine = ProposerMachine.TestCase
