"""Failure detector: batching is exact, detection meets its goal, bugs bite, bad input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from protocol_harness import MiniCluster

from swarmshake.reference_node.protocol import detector as D
from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.messages import MAX_MONITORS_PER_NODE, Gossip, GossipItem

MEMBERS = ("n0", "n1", "n2", "n3")


def started(node="n0", members=MEMBERS, bugs=NO_BUGS, incarnation=0):
    detector = D.FailureDetector(
        node=node, members=members, seed=3, bugs=bugs, incarnation=incarnation
    )
    detector.handle(D.Started(), 0.0)
    return detector


def one_by_one(detector, peer, incarnation, times):
    """The reference delivery: each of the peer's timers ticked at its deadline, then
    each arrival."""
    actions = []
    for t in times:
        while (deadline := detector.next_deadline(only=peer)) is not None and deadline < t:
            actions += detector.handle(D.Tick(only=peer), max(deadline, detector._clock.last))
        actions += detector.handle(
            D.HeartbeatsArrived(peer=peer, incarnation=incarnation, arrival_times=(t,)), t
        )
    return actions


gaps_s = st.lists(
    st.one_of(st.floats(0.0, 0.12), st.floats(0.12, 1.6)), min_size=1, max_size=60
).map(lambda gaps: [round(g, 6) for g in gaps])


def times_from(start, gaps):
    times, t = [], start
    for gap in gaps:
        t = t + gap
        times.append(t)
    return times


@settings(max_examples=100, deadline=None)
@given(gaps=gaps_s, incarnation=st.integers(0, 2), split=st.integers(1, 5))
def test_a_batch_has_exactly_the_effect_of_its_arrivals_one_by_one(gaps, incarnation, split):
    reference, batched = started(), started()
    times = times_from(0.01, gaps)
    expected = one_by_one(reference, "n1", incarnation, times)
    got = []
    chunk = max(1, len(times) // split)
    for start in range(0, len(times), chunk):
        part = tuple(times[start : start + chunk])
        got += batched.handle(
            D.HeartbeatsArrived(peer="n1", incarnation=incarnation, arrival_times=part), part[-1]
        )
    assert got == expected
    assert batched.snapshot() == reference.snapshot()


def test_elided_arrivals_give_the_same_state_as_delivering_them():
    reference, elided = started(), started()
    first = tuple(times_from(0.02, [0.05] * 10))
    for detector in (reference, elided):
        detector.handle(
            D.HeartbeatsArrived(peer="n1", incarnation=0, arrival_times=first), first[-1]
        )
    gaps = [0.03 + 0.001 * (i % 40) for i in range(300)]
    times = times_from(first[-1], gaps)
    reference.handle(
        D.HeartbeatsArrived(peer="n1", incarnation=0, arrival_times=tuple(times)), times[-1]
    )
    explicit = tuple(times[-65:])
    event = D.HeartbeatsArrived(
        peer="n1",
        incarnation=0,
        arrival_times=explicit,
        elided_count=len(times) - 65,
        elided_max_gap_s=0.07,
    )
    elided.handle(event, times[-1])
    assert elided.snapshot() == reference.snapshot()
    with pytest.raises(LocalProtocolError):  # too few explicit arrivals to refill the window
        D.FailureDetector.handle(
            started(),
            D.HeartbeatsArrived(
                peer="n1", incarnation=0, arrival_times=explicit[:10], elided_count=3
            ),
            times[-1],
        )


def test_monitor_groups_are_bounded_and_balanced():
    small = tuple(f"n{i}" for i in range(5))
    assert sorted(D.monitors_of("n0", 1, small, 5)) == ["n1", "n2", "n3", "n4"]
    big = tuple(f"n{i}" for i in range(200))
    watched_by = {n: D.monitors_of(n, 1, big, 5) for n in big}
    assert all(len(m) == 5 and n not in m for n, m in watched_by.items())
    for node in big:
        targets = D.targets_of(node, 1, big, 5)
        assert sorted(t for t, m in watched_by.items() if node in m) == sorted(targets)
    assert D.monitors_of("n0", 2, big, 5) != watched_by["n0"]  # the seed picks the groups


def test_a_peer_that_announces_it_watches_this_node_gets_its_heartbeats():
    """Who watches whom follows each node's own view, and views differ after a
    partition; a peer whose gossip names this node among its watches is heartbeated
    although this node's ring does not make it a monitor, and no longer once its
    gossip stops naming it."""
    members = tuple(f"n{i}" for i in range(20))
    node = started(members=members)
    outsider = next(p for p in members[1:] if p not in node.monitors)
    alive = GossipItem(subject=outsider, incarnation=0, status="alive", origin=outsider)

    def gossip(watches):
        message = Gossip(sender=outsider, items=[alive], sender_watches=watches)
        return node.handle(D.GossipReceived(message=message), 0.5)

    plans = [a for a in gossip(["n0"]) if isinstance(a, D.HeartbeatPlan)]
    assert plans and plans[-1].to == (*node.monitors, outsider)
    node.check_valid()
    assert not [a for a in gossip(["n0"]) if isinstance(a, D.HeartbeatPlan)]  # no news
    plans = [a for a in gossip([]) if isinstance(a, D.HeartbeatPlan)]
    assert plans and plans[-1].to == node.monitors
    gossip(["n0"])
    left = GossipItem(subject=outsider, incarnation=0, status="left", origin=outsider)
    node.handle(D.GossipReceived(message=Gossip(sender=outsider, items=[left])), 0.6)
    assert outsider not in node.heartbeat_targets  # a peer gone from the view is not
    node.check_valid()


def test_a_stranger_whose_heartbeats_arrive_is_heartbeated_until_it_stops():
    """A node behind its configuration (restarted on an old disk) does not know a
    member added since; that member watches it and, heard nothing, declared it dead
    (explore --leaves, 6 nodes, seed 2: S4).  Its refused heartbeats make this node
    heartbeat it (not watch it) until stranger_heartbeat_s after the last one, or
    until a configuration names it."""
    node = started()
    config = node.config
    with pytest.raises(RemoteProtocolError):
        node.handle(D.HeartbeatsArrived(peer="n7", incarnation=1, arrival_times=(0.5,)), 0.5)
    plans = [
        a for a in node.handle(D.StrangerHeard(peer="n7"), 0.5) if isinstance(a, D.HeartbeatPlan)
    ]
    assert plans and plans[-1].to == (*node.monitors, "n7")
    assert plans[-1].strangers == ("n7",)  # flagged: no joiner takes them for its add
    assert "n7" not in node.targets and "n7" not in node.status  # heartbeated, not watched
    assert node.handle(D.StrangerHeard(peer="n7"), 0.9) == []  # heard again: no news
    node.check_valid()
    # Its heartbeats stop: dropped stranger_heartbeat_s after the last one.
    ends = 0.9 + config.stranger_heartbeat_s
    assert node.next_deadline(only="n7") == ends
    node.handle(D.Tick(), ends - 0.01)
    assert "n7" in node.heartbeat_targets
    expired = [a for a in node.handle(D.Tick(), ends) if isinstance(a, D.HeartbeatPlan)]
    assert expired and "n7" not in expired[-1].to and "n7" not in node.heartbeat_targets
    node.check_valid()
    # A member is no stranger; one that becomes a member is left to the ring.
    assert node.handle(D.StrangerHeard(peer="n1"), 2.0) == []
    node.handle(D.StrangerHeard(peer="n7"), 2.0)
    changed = node.handle(D.MembersChanged(members=(*MEMBERS, "n7")), 2.1)
    assert not node._strangers and "n7" in node.targets
    plan = [a for a in changed if isinstance(a, D.HeartbeatPlan)][-1]
    assert "n7" in plan.to and plan.strangers == ()  # heartbeated as a member now
    node.check_valid()


def test_gossip_about_a_peer_before_it_is_a_member_is_replayed_when_it_becomes_one():
    """A learner catching up learns of a member's add after that member crashed; the
    other monitor's suspicion, gossiped before the add reached it, is replayed then,
    so it confirms the crash with its own watch instead of starting from nothing
    (explore --leaves, 3 nodes, seed 2: L1)."""
    node = started()
    suspicion = GossipItem(subject="n7", incarnation=3, status="suspect", origin="n1")
    message = Gossip(sender="n1", items=[suspicion])
    assert node.handle(D.GossipReceived(message=message), 0.2) == [] or "n7" not in node.status
    node.check_valid()
    actions = node.handle(D.MembersChanged(members=(*MEMBERS, "n7")), 0.5)
    assert any(isinstance(a, D.Suspected) and a.peer == "n7" for a in actions)
    assert node.status["n7"] == "suspect" and node.known_incarnation["n7"] == 3
    node.check_valid()
    # Older than start-up grace plus a suspicion timeout when the add comes (the time
    # its own watch of n7 would take): dropped, not replayed.
    late = started()
    late.handle(D.GossipReceived(message=message), 0.2)
    later = 0.2 + late.config.startup_grace_s + late.config.suspicion_timeout_s + 0.01
    late.handle(D.MembersChanged(members=(*MEMBERS, "n7")), later)
    assert late.status["n7"] == "alive" and not late._early
    late.check_valid()


def test_news_heard_before_the_add_is_replayed_for_as_long_as_it_beats_a_new_watch():
    """Two monitors' suspicions (or verdicts) about n7, gossiped 1.3 s before n7's add
    reached this node (older than a suspicion timeout), still count: its own watch of
    n7 starts from nothing and would take start-up grace plus a suspicion timeout
    (explore --leaves, 6 nodes, seed 6: L1, once with verdicts and once with the
    suspicions of verdicts formed without a quorum).  Past that horizon: dropped."""
    config = D.DetectorConfig()
    horizon_s = config.startup_grace_s + config.suspicion_timeout_s
    for status in ("suspect", "dead"):
        for age_s, replayed in ((1.3, True), (horizon_s + 0.01, False)):
            node = started()
            for origin in ("n1", "n2"):
                item = GossipItem(subject="n7", incarnation=3, status=status, origin=origin)
                node.handle(D.GossipReceived(message=Gossip(sender=origin, items=[item])), 0.2)
            node.check_valid()
            actions = node.handle(D.MembersChanged(members=(*MEMBERS, "n7")), 0.2 + age_s)
            declared = any(isinstance(a, D.DeclaredDead) and a.peer == "n7" for a in actions)
            assert declared == replayed, (status, age_s, actions)
            assert (node.status["n7"] == "dead") == replayed
            node.check_valid()


def test_strangers_are_bounded_and_a_node_that_left_heartbeats_none():
    node = started()
    limit = node.config.strangers_max
    for index in range(limit + 5):
        node.handle(D.StrangerHeard(peer=f"s{index}"), 0.1)
    assert len(node._strangers) == limit
    assert node.heartbeat_targets[-limit:] == tuple(sorted(f"s{i}" for i in range(limit)))
    node.check_valid()
    node.handle(D.LeaveRequested(), 0.2)
    assert node.handle(D.StrangerHeard(peer="s99"), 0.3) == [] and not node._strangers
    node.check_valid()


@pytest.mark.parametrize(("nodes", "watched"), [(8, 7), (16, 15), (17, 5), (40, 5)])
def test_up_to_sixteen_members_every_node_watches_every_other(nodes, watched):
    """With five monitors of seven, a node that did not watch a live peer beside it
    obeyed the verdict of two monitors cut from it (explore, 8 nodes: a majority ring
    and a bridge partition).  Up to ``watch_all_members_max`` members every node has
    its own evidence of every peer; above it the ring of five keeps the cost flat."""
    members = tuple(f"n{i}" for i in range(nodes))
    node = started(members=members)
    assert node.monitors_per_node == watched
    assert len(node.targets) == len(node.monitors) == watched
    # It follows the configured members (all nodes agree on it), not a view.
    node.handle(D.MembersChanged(members=members[:-1]), 0.1)
    fewer = nodes - 1
    assert node.monitors_per_node == (fewer - 1 if fewer <= 16 else 5)
    assert len(node.targets) == node.monitors_per_node
    node.check_valid()


def test_watch_all_members_max_is_bounded_by_the_watches_a_message_names():
    with pytest.raises(LocalProtocolError, match="watch_all_members_max"):
        D.DetectorConfig(watch_all_members_max=MAX_MONITORS_PER_NODE + 2)
    with pytest.raises(LocalProtocolError, match="watch_all_members_max"):
        D.DetectorConfig(watch_all_members_max=0)
    D.DetectorConfig(watch_all_members_max=MAX_MONITORS_PER_NODE + 1)


def test_every_gossip_message_names_the_senders_watches():
    node = started(members=tuple(f"n{i}" for i in range(8)))
    actions = node.handle(D.Tick(), 0.3)
    sent = [a for a in actions if isinstance(a, D.SendGossip)]
    assert sent and all(a.message.sender_watches == sorted(node.targets) for a in sent)


@pytest.mark.parametrize(("nodes", "direct"), [(8, True), (20, False)])
def test_a_lone_crash_confirmed_on_own_evidence_is_told_to_every_member_of_a_small_cluster(
    nodes, direct
):
    """The epidemic's second hop put 8-node crash detection p99 over 300 ms; up to
    ``direct_verdict_members_max`` members the confirming node tells every member at
    once, above it the epidemic alone carries the verdict (O(N) messages a death)."""
    cluster = MiniCluster(nodes, 1)
    cluster.crash("n1", 1.0)
    cluster.run(2.0)
    own = [  # declarations whose votes include the declaring node's own suspicion
        (node, a)
        for node, a in cluster.declarations()
        if a.peer == "n1" and node in a.reason.partition("suspicions: ")[2].split(",")
    ]
    assert own
    node, declaration = own[0]
    told = {
        peer
        for who, a in cluster.log
        if who == node
        and isinstance(a, D.SendGossip)
        and a.at == declaration.at
        and any(i.status == "dead" and i.subject == "n1" for i in a.message.items)
        for peer in a.to
    }
    everyone_else = set(cluster.names) - {node, "n1"}  # n1 itself gets a dead notice
    assert (told - {"n1"} == everyone_else) is direct


def test_crashes_are_detected_within_300ms_without_false_positives_under_jitter():
    detections = []
    for seed in range(6):
        cluster = MiniCluster(8, seed)
        crashes = {"n1": 4.0 + 0.011 * seed, "n5": 6.5 + 0.017 * seed}
        for node, at in crashes.items():
            cluster.crash(node, at)
        cluster.run(9.0)
        assert cluster.false_positives() == []
        for node, at in crashes.items():
            declared = [a.at for _, a in cluster.declarations() if a.peer == node]
            live = set(cluster.names) - set(crashes)
            assert live <= {n for n, a in cluster.declarations() if a.peer == node}  # L1
            detections.append(min(declared) - at)
    assert max(detections) <= 0.300, detections


def test_eager_dead_declares_live_nodes_dead_under_jitter():
    cluster = MiniCluster(8, 1, bugs=BugSet.parse(["eager-dead"]))
    cluster.run(3.0)
    assert cluster.false_positives()


def _suspect_then_refute(bugs: BugSet) -> list:
    observer = started(bugs=bugs)
    suspicion = GossipItem(subject="n2", incarnation=0, status="suspect", origin="n3")
    observer.handle(D.GossipReceived(message=Gossip(sender="n3", items=[suspicion])), 0.1)
    refutation = GossipItem(subject="n2", incarnation=1, status="alive", origin="n2")
    actions = observer.handle(
        D.GossipReceived(message=Gossip(sender="n2", items=[refutation])), 0.2
    )
    # Keep n1..n3's watches fed so only the suspicion timer matters.
    for peer, incarnation in (("n1", 0), ("n2", 1), ("n3", 0)):
        times = tuple(0.25 + 0.05 * i for i in range(40))
        actions += observer.handle(
            D.HeartbeatsArrived(peer=peer, incarnation=incarnation, arrival_times=times), 2.2
        )
    return actions + observer.handle(D.Tick(), 2.2)


def test_a_refutation_clears_a_suspicion_and_no_refute_ignores_it():
    actions = _suspect_then_refute(BugSet())
    assert any(isinstance(a, D.DeclaredAlive) and a.peer == "n2" for a in actions)
    assert not any(isinstance(a, D.DeclaredDead) for a in actions)
    actions = _suspect_then_refute(BugSet.parse(["no-refute"]))
    assert [a.peer for a in actions if isinstance(a, D.DeclaredDead)] == ["n2"]


def test_a_suspected_node_refutes_with_a_higher_incarnation():
    node = started(node="n2")
    item = GossipItem(subject="n2", incarnation=0, status="suspect", origin="n3")
    actions = node.handle(D.GossipReceived(message=Gossip(sender="n3", items=[item])), 0.5)
    refuted = [a for a in actions if isinstance(a, D.Refuted)]
    assert refuted == [D.Refuted(incarnation=1, suspected_by="n3", at=0.5)]
    plans = [a for a in actions if isinstance(a, D.HeartbeatPlan)]
    assert plans and plans[-1].incarnation == 1
    dead = GossipItem(subject="n2", incarnation=1, status="dead", origin="n3")
    actions = node.handle(D.GossipReceived(message=Gossip(sender="n3", items=[dead])), 0.6)
    assert D.SelfDeclaredDead(incarnation=1, declared_by="n3", at=0.6) in actions


def test_bad_input_raises_typed_errors_and_changes_nothing():
    detector = started()
    detector.handle(D.HeartbeatsArrived(peer="n1", incarnation=0, arrival_times=(0.05, 0.1)), 0.1)
    before = detector.snapshot()
    with pytest.raises(RemoteProtocolError):
        detector.handle(D.HeartbeatsArrived(peer="zz", incarnation=0, arrival_times=(0.2,)), 0.2)
    with pytest.raises(RemoteProtocolError):
        item = GossipItem(subject="n1", incarnation=0, status="dead", origin="zz")
        detector.handle(D.GossipReceived(message=Gossip(sender="zz", items=[item])), 0.2)
    with pytest.raises(LocalProtocolError):
        detector.handle(D.HeartbeatsArrived(peer="n1", incarnation=0, arrival_times=(0.3,)), 0.2)
    with pytest.raises(LocalProtocolError):
        detector.handle(D.Tick(), 0.05)
    with pytest.raises(LocalProtocolError):
        D.HeartbeatsArrived(peer="n1", incarnation=0, arrival_times=(0.3, 0.2))
    with pytest.raises(LocalProtocolError):
        D.HeartbeatsArrived(peer="n1", incarnation=-1, arrival_times=(0.3,))
    with pytest.raises(LocalProtocolError):
        D.HeartbeatsArrived(peer="bad name", incarnation=0, arrival_times=(0.3,))
    assert detector.snapshot() == before
    with pytest.raises(LocalProtocolError):
        D.FailureDetector(node="n9", members=MEMBERS, seed=0).handle(D.Tick(), 0.0)
    with pytest.raises(LocalProtocolError):
        D.FailureDetector(node="n0", members=MEMBERS, seed=0).handle(D.Tick(), 0.0)  # not started


class DetectorMachine(RuleBasedStateMachine):
    """One node's detector under random heartbeats, gossip, ticks and membership
    changes; a twin fed the same inputs one arrival at a time must stay identical."""

    def __init__(self):
        super().__init__()
        self.members = ("n0", "n1", "n2", "n3", "n4", "n5")
        self.detector = D.FailureDetector(node="n0", members=self.members, seed=5)
        self.twin = D.FailureDetector(node="n0", members=self.members, seed=5)
        self.now = 0.0
        self.detector.handle(D.Started(), 0.0)
        self.twin.handle(D.Started(), 0.0)
        self.incarnations_seen: dict[str, int] = {}

    @rule(
        peer=st.sampled_from(("n1", "n2", "n3", "n4", "n5")),
        gaps=gaps_s,
        incarnation=st.integers(0, 3),
    )
    def heartbeats(self, peer, gaps, incarnation):
        if peer not in self.detector.members:
            return
        times = times_from(self.now, gaps)
        self.now = times[-1]
        event = D.HeartbeatsArrived(peer=peer, incarnation=incarnation, arrival_times=tuple(times))
        got = self.detector.handle(event, self.now)
        expected = one_by_one(self.twin, peer, incarnation, times)
        assert got == expected

    @rule(
        subject=st.sampled_from(("n0", "n1", "n2", "n3", "n4", "n5")),
        status=st.sampled_from(("alive", "suspect", "dead", "left")),
        incarnation=st.integers(0, 3),
        origin=st.sampled_from(("n1", "n2", "n3", "n4")),
        dt=st.floats(0.0, 0.5),
        sender_incarnation=st.none() | st.integers(0, 3),
        sender_quorum=st.none() | st.booleans(),
    )
    def gossip(self, subject, status, incarnation, origin, dt, sender_incarnation, sender_quorum):
        if origin not in self.detector.members:
            return  # (a subject outside the members is early news: kept, replayed)
        self.now += dt
        event = D.GossipReceived(
            message=Gossip(
                sender=origin,
                items=[
                    GossipItem(
                        subject=subject, incarnation=incarnation, status=status, origin=origin
                    )
                ],
                sender_incarnation=sender_incarnation,
                sender_quorum=sender_quorum,
            )
        )
        self._both(event)

    @rule(dt=st.floats(0.0, 2.0))
    def tick(self, dt):
        self.now += dt
        self._both(D.Tick())

    @rule(peer=st.sampled_from(("n4", "n5", "n9")), dt=st.floats(0.0, 1.5))
    def stranger(self, peer, dt):
        """A heartbeat of a peer outside the members (n4 and n5 only after a change
        dropped them) was refused: the drivers report the stranger."""
        self.now += dt
        self._both(D.StrangerHeard(peer=peer))

    @invariant()
    def strangers_are_heartbeated_and_never_watched(self):
        detector = self.detector
        for peer in detector._strangers:
            assert peer not in detector.members and peer not in detector.targets
            if not detector.left and not detector.self_dead:
                assert peer in detector.heartbeat_targets

    @rule(drop=st.sampled_from(("n4", "n5")))
    def change_members(self, drop):
        members = tuple(m for m in self.members if m != drop)
        if members == self.detector.members:
            members = self.members
        for gone in set(self.detector.members) - set(members):
            self.incarnations_seen.pop(gone, None)  # a removed member is forgotten
        self._both(D.MembersChanged(members=members))

    def _both(self, event):
        for detector in (self.detector, self.twin):
            # A timer left overdue by a batch (which fires only its peer's timers)
            # fires at the next tick, stamped with its own time.
            while (deadline := detector.next_deadline()) is not None and deadline < self.now:
                detector.handle(D.Tick(), max(deadline, detector._clock.last))
        assert self.detector.handle(event, self.now) == self.twin.handle(event, self.now)

    @invariant()
    def twin_is_identical(self):
        assert self.detector.snapshot() == self.twin.snapshot()

    @invariant()
    def view_and_watches_are_consistent(self):
        detector = self.detector
        view = detector.alive_view()
        assert ("n0" in view) or detector.self_dead or detector.left or True
        assert set(detector.targets) <= set(view)
        assert len(detector.targets) <= detector.monitors_per_node
        for peer, status in detector.status.items():
            assert status in ("alive", "suspect", "dead", "left")
            assert (peer in detector._suspicions) == (status == "suspect")

    @invariant()
    def core_invariants_hold(self):
        self.detector.check_valid()

    @invariant()
    def incarnations_never_decrease(self):
        for peer, incarnation in self.detector.known_incarnation.items():
            assert incarnation >= self.incarnations_seen.get(peer, 0)
            self.incarnations_seen[peer] = incarnation


TestDetectorMachine = DetectorMachine.TestCase
TestDetectorMachine.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _heard_from_b_and_c_then_silent_until(t_wake: float, stalled_s: float | None) -> list:
    """Node a hears b and c steadily until t=1, then nothing until ``t_wake``, when
    b's queued heartbeat is read; ``stalled_s``: a was stalled (LocalStall first)."""
    a = D.FailureDetector(node="a", members=("a", "b", "c"), seed=1)
    a.handle(D.Started(), 0.0)
    beats = tuple(0.05 * i for i in range(1, 21))
    for peer in ("b", "c"):
        a.handle(D.HeartbeatsArrived(peer=peer, incarnation=0, arrival_times=beats), 1.0)
    actions = []
    if stalled_s is not None:
        actions += a.handle(D.LocalStall(stalled_s=stalled_s), t_wake)
    arrival = D.HeartbeatsArrived(peer="b", incarnation=0, arrival_times=(t_wake,))
    actions += a.handle(arrival, t_wake)
    return actions


def test_a_local_stall_keeps_the_wake_from_judging_the_peers():
    """Lifeguard's local health (gray suite regression): silence that fell while this
    node could not listen is no evidence.  Told nothing, b's first heartbeat read after
    4 s first fires b's own watch and suspicion timeout, which fell due in the gap:
    b is declared dead by its own heartbeat."""
    judged = (D.Suspected, D.DeclaredDead)
    told = _heard_from_b_and_c_then_silent_until(5.0, stalled_s=4.0)
    assert [x for x in told if isinstance(x, judged)] == []
    untold = _heard_from_b_and_c_then_silent_until(5.0, stalled_s=None)
    assert any(isinstance(x, D.DeclaredDead) and x.peer == "b" for x in untold), untold


def test_a_peer_silent_after_the_stall_is_still_detected_within_the_grace():
    a = D.FailureDetector(node="a", members=("a", "b", "c"), seed=1)
    a.handle(D.Started(), 0.0)
    beats = tuple(0.05 * i for i in range(1, 21))
    for peer in ("b", "c"):
        a.handle(D.HeartbeatsArrived(peer=peer, incarnation=0, arrival_times=beats), 1.0)
    a.handle(D.LocalStall(stalled_s=4.0), 5.0)
    deadline = a.next_deadline()
    assert deadline is not None and deadline <= 5.0 + a.config.stall_grace_max_s + 0.2
    with pytest.raises(LocalProtocolError):
        D.LocalStall(stalled_s=-1.0)


def test_after_a_stall_no_timer_fires_on_a_tick_until_the_grace_ends():
    """c went silent at 1 s and is suspected; a stalls for 0.3 s just before its next
    timer (a gossip round about c): a Tick inside the grace fires nothing, the next
    deadline is the grace's end, and the held timer fires then.  (The runtime's driver
    held its Tick loop itself; the simulator did not.)"""
    a = D.FailureDetector(node="a", members=("a", "b", "c"), seed=1)
    a.handle(D.Started(), 0.0)
    beats = tuple(0.05 * i for i in range(1, 21))
    for peer in ("b", "c"):
        a.handle(D.HeartbeatsArrived(peer=peer, incarnation=0, arrival_times=beats), 1.0)
    t = 1.0
    while a.status["c"] != "suspect":
        t = round(t + 0.05, 6)
        a.handle(D.HeartbeatsArrived(peer="b", incarnation=0, arrival_times=(t,)), t)
        a.handle(D.Tick(), t)
    confirm_at = a.next_deadline()
    assert confirm_at is not None
    stall_at = max(t, confirm_at - 0.1)
    a.handle(D.LocalStall(stalled_s=0.3), stall_at)
    grace_end = stall_at + 0.3
    assert a.next_deadline() == pytest.approx(grace_end)
    assert a.handle(D.Tick(), confirm_at + 0.05) == []
    held = a.handle(D.Tick(), grace_end)
    assert any(isinstance(x, D.SendGossip) for x in held), held


def test_a_stall_shorter_than_the_minimum_is_scheduling_noise():
    a = D.FailureDetector(node="a", members=("a", "b", "c"), seed=1)
    a.handle(D.Started(), 0.0)
    a.handle(D.HeartbeatsArrived(peer="b", incarnation=0, arrival_times=(0.05, 0.1)), 0.1)
    before = a.snapshot()
    assert a.handle(D.LocalStall(stalled_s=a.config.stall_min_s / 2), 0.12) == []
    assert a.snapshot()[:-1] == before[:-1]  # all but the clock's last reading


def _relayed_about(actions: list, subject: str) -> list[tuple[int, str]]:
    """(incarnation, status) of every gossip item that says ``subject`` is alive."""
    return [
        (item.incarnation, item.status)
        for action in actions
        if isinstance(action, D.SendGossip)
        for item in action.message.items
        if item.subject == subject and item.status == "alive"
    ]


def _announce(node: D.FailureDetector, incarnation: int, at: float) -> list:
    """n2 announces itself at ``incarnation``; then the gossip rounds of the next second."""
    item = GossipItem(subject="n2", incarnation=incarnation, status="alive", origin="n2")
    actions = node.handle(D.GossipReceived(message=Gossip(sender="n2", items=[item])), at)
    for tick in range(1, 11):  # a gossip round every 50 ms: all rounds of the item
        actions += node.handle(D.Tick(), at + 0.05 * tick)
    return actions


def test_a_peers_first_process_is_passed_on_only_where_it_overrides_something():
    """A node holding n2 alive with no incarnation known takes n2's first announce
    (incarnation 1) without passing it on: nothing anywhere held alive needs it, and
    passing it on made a cluster's start an epidemic of every announce to every node.
    A restart (incarnation 2) is news and is passed on, as is a first process that a
    node held suspect."""
    from swarmshake.reference_node.protocol.node_core import FIRST_INCARNATION

    assert D.FIRST_PROCESS == FIRST_INCARNATION  # one number, declared twice (no cycle)
    node = started(incarnation=1)
    assert _relayed_about(_announce(node, 1, 0.1), "n2") == []
    assert node.known_incarnation["n2"] == 1 and node.status["n2"] == "alive"
    assert (2, "alive") in _relayed_about(_announce(node, 2, 1.5), "n2")

    doubting = started(incarnation=1)
    suspicion = GossipItem(subject="n2", incarnation=0, status="suspect", origin="n3")
    doubting.handle(D.GossipReceived(message=Gossip(sender="n3", items=[suspicion])), 0.05)
    actions = _announce(doubting, 1, 0.1)
    assert (1, "alive") in _relayed_about(actions, "n2")
    assert any(isinstance(a, D.DeclaredAlive) and a.peer == "n2" for a in actions)


def test_a_stall_before_the_detector_starts_is_ignored_and_other_events_still_refused():
    """A joiner's process runs (and its loop can stall on a loaded machine) before its
    detector starts: CI, session 23, the stall report killed the joining n4 with "the
    first event must be Started()".  With nothing watched, a stall excuses nothing."""
    a = D.FailureDetector(node="a", members=("a", "b", "c"), seed=1)
    assert a.handle(D.LocalStall(stalled_s=2.0), 1.0) == []
    with pytest.raises(LocalProtocolError, match="Started"):
        a.handle(D.Tick(), 1.1)
    a.handle(D.Started(), 1.2)
    assert a.started and a.next_deadline() is not None
