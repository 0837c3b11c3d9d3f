"""Failure detector across partitions: the dead are told, mutual deaths resolve to one
side rejoining, and a cut-off node's stale suspicions never kill live nodes (S4).

Regression tests for what ``swarmshake explore --backend sim`` found: a node declared
dead during a short partition was never told (nobody heartbeats or gossips to a dead
node), kept suspecting the others after the heal, and its suspicions got live nodes
declared dead (shrunk schedule: partition halves at 0.5 s healed after 0.5 s, 3 nodes).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from protocol_harness import MiniCluster

from swarmshake.reference_node.protocol import detector as D
from swarmshake.reference_node.protocol.bugs import BugSet
from swarmshake.reference_node.protocol.errors import RemoteProtocolError
from swarmshake.reference_node.protocol.messages import (
    Gossip,
    GossipItem,
    decode_message,
    encode_message,
)

# A wrongly suspected node that is reachable refutes within a notice and a reply: two
# envelope delays (2 x 75 ms) plus handling; after that a declaration of it is wrong.
REFUTE_WINDOW_S = 0.25


def beats(detector: D.FailureDetector, peer: str, first: float, last: float) -> list:
    """Heartbeats of ``peer`` at incarnation 0 every 50 ms from ``first`` to ``last``."""
    count = round((last - first) / 0.05) + 1
    times = tuple(round(first + 0.05 * i, 6) for i in range(count))
    return detector.handle(
        D.HeartbeatsArrived(peer=peer, incarnation=0, arrival_times=times), times[-1]
    )


def hold_dead(detector: D.FailureDetector, subject: str, claimer: str, at: float) -> None:
    """Make ``detector`` hold ``subject`` dead on ``claimer``'s word: its own watch of
    ``subject`` times out first (start-up grace, nothing heard), since a relayed death
    of a peer whose watch has not timed out is only a suspicion (receiver's evidence)."""
    detector.handle(D.Tick(only=subject), at)
    dead = GossipItem(subject=subject, incarnation=0, status="dead", origin=claimer)
    detector.handle(D.GossipReceived(message=Gossip(sender=claimer, items=[dead])), at)
    assert detector.status[subject] == "dead"


def wrong_declarations(cluster: MiniCluster, healed_at: float):
    """New verdicts after the heal (plus the refutation window) that a node which never
    crashed is dead: the S4 violations the explorer reported.  As the S4 checker does,
    a (peer, incarnation) already declared during the partition is judged there;
    passing that verdict on later (to a restarted node, say) is not a new one."""
    before = {
        (a.peer, a.peer_incarnation)
        for _, a in cluster.declarations()
        if a.at <= healed_at + REFUTE_WINDOW_S
    }
    return [
        (node, action)
        for node, action in cluster.declarations()
        if action.at > healed_at + REFUTE_WINDOW_S
        and action.peer not in cluster.crashed
        and (action.peer, action.peer_incarnation) not in before
    ]


def final_views(cluster: MiniCluster) -> dict[str, tuple[str, ...]]:
    return {name: detector.alive_view() for name, detector in cluster.detectors.items()}


def test_the_shrunk_schedule_from_explore_no_longer_kills_live_nodes():
    cluster = MiniCluster(3, 1)
    cluster.partition([["n0", "n1"], ["n2"]], at=0.5, heal_at=1.0)
    cluster.run(6.0)
    assert wrong_declarations(cluster, healed_at=1.0) == []
    # n2 was declared dead by both others; it was told and rejoined once, newer.
    assert [(node, inc) for node, inc, _ in cluster.rejoins] == [("n2", 1)]
    assert all(view == cluster.names for view in final_views(cluster).values())


def test_a_long_partition_has_only_the_minority_rejoin():
    """Both sides confirm deaths while cut off (suspicion timeouts); after the heal
    the majority side ignores the minority's claims and only the minority rejoins."""
    cluster = MiniCluster(5, 2)
    cluster.partition([["n0", "n1", "n2"], ["n3", "n4"]], at=1.0, heal_at=4.0)
    cluster.run(9.0)
    assert sorted({node for node, _, _ in cluster.rejoins}) == ["n3", "n4"]
    assert wrong_declarations(cluster, healed_at=4.0) == []
    assert all(view == cluster.names for view in final_views(cluster).values())


def test_a_split_without_majority_resolves_to_exactly_one_side_rejoining():
    cluster = MiniCluster(4, 3)
    cluster.partition([["n0", "n1"], ["n2", "n3"]], at=1.0, heal_at=4.0)
    cluster.run(9.0)
    # Equal views: the side with the smaller names keeps its incarnations.
    assert sorted({node for node, _, _ in cluster.rejoins}) == ["n2", "n3"]
    assert all(view == cluster.names for view in final_views(cluster).values())


@settings(max_examples=12, deadline=None)
# Found by this property: views stayed split (a rejoined node held a peer dead on a
# local verdict the peer ignored), and a 2-of-5 side exported its verdicts because
# the subject counted towards its quorum.
@example(nodes=4, seed=0, start_cs=76, length_cs=28, cut=2)
@example(nodes=5, seed=690, start_cs=295, length_cs=30, cut=3)
@given(
    nodes=st.integers(3, 6),
    seed=st.integers(0, 1000),
    start_cs=st.integers(30, 300),
    length_cs=st.integers(20, 400),
    cut=st.integers(1, 5),
)
def test_after_any_partition_heals_no_live_node_is_declared_dead_and_views_converge(
    nodes, seed, start_cs, length_cs, cut
):
    cluster = MiniCluster(nodes, seed)
    names = list(cluster.names)
    minority = names[: min(cut, nodes - 1)]
    start, heal = start_cs / 100, (start_cs + length_cs) / 100
    cluster.partition([minority, names[len(minority) :]], at=start, heal_at=heal)
    cluster.run(heal + 8.0)
    assert wrong_declarations(cluster, healed_at=heal) == []
    assert all(view == cluster.names for view in final_views(cluster).values())
    # Rejoins are bounded: each node at most once per partition.
    rejoined = [node for node, _, _ in cluster.rejoins]
    assert len(rejoined) == len(set(rejoined))


def test_a_dead_node_that_heartbeats_is_told_at_a_bounded_rate():
    detector = D.FailureDetector(node="n0", members=("n0", "n1", "n2"), seed=1)
    detector.handle(D.Started(), 0.0)
    beats(detector, "n2", 0.05, 1.0)
    hold_dead(detector, "n1", "n2", 1.0)
    actions = beats(detector, "n1", 1.1, 2.05)  # one second of heartbeats
    notices = [a for a in actions if isinstance(a, D.SendGossip) and a.to == ("n1",)]
    assert notices and all(n.message.items[0].status == "dead" for n in notices)
    assert all(n.message.items[0].subject == "n1" for n in notices)
    gaps = [b.at - a.at for a, b in zip(notices, notices[1:], strict=False)]
    assert min(gaps) >= detector.config.dead_notice_gap_s - 1e-9
    # A newer incarnation is a rejoin: taken back, no notice.
    actions = detector.handle(
        D.HeartbeatsArrived(peer="n1", incarnation=1, arrival_times=(2.1,)), 2.1
    )
    assert any(isinstance(a, D.DeclaredAlive) for a in actions)
    assert not any(
        isinstance(a, D.SendGossip)
        and "n1" in a.to
        and any(item.status == "dead" for item in a.message.items)
        for a in actions
    )


def test_suspicions_and_deaths_claimed_by_a_node_held_dead_are_not_evidence():
    detector = D.FailureDetector(node="n0", members=("n0", "n1", "n2"), seed=1)
    detector.handle(D.Started(), 0.0)
    beats(detector, "n1", 0.05, 1.0)
    hold_dead(detector, "n2", "n1", 1.0)
    before = detector.status["n1"]
    for status, at in (("suspect", 1.05), ("dead", 1.2)):  # answers are rate-limited
        beats(detector, "n1", at - 0.05, at)
        claim = GossipItem(subject="n1", incarnation=0, status=status, origin="n2")
        actions = detector.handle(D.GossipReceived(message=Gossip(sender="n2", items=[claim])), at)
        assert not any(isinstance(a, D.DeclaredDead | D.Suspected) for a in actions)
        # ...and the dead sender is told it is dead.
        assert any(isinstance(a, D.SendGossip) and a.to == ("n2",) for a in actions)
    assert detector.status["n1"] == before == "alive"


def test_a_stale_notice_from_a_claimer_that_rejoined_since_is_ignored():
    detector = D.FailureDetector(node="n0", members=("n0", "n1", "n2"), seed=1)
    detector.handle(D.Started(), 0.0)
    alive = GossipItem(subject="n1", incarnation=2, status="alive", origin="n1")
    detector.handle(D.GossipReceived(message=Gossip(sender="n1", items=[alive])), 0.1)
    claim = GossipItem(subject="n0", incarnation=0, status="dead", origin="n1")
    stale = Gossip(sender="n1", items=[claim], sender_view_size=1, sender_incarnation=1)
    assert not any(
        isinstance(a, D.SelfDeclaredDead)
        for a in detector.handle(D.GossipReceived(message=stale), 0.2)
    )
    fresh = Gossip(sender="n1", items=[claim], sender_view_size=1, sender_incarnation=2)
    assert any(
        isinstance(a, D.SelfDeclaredDead)
        for a in detector.handle(D.GossipReceived(message=fresh), 0.3)
    )


@pytest.mark.parametrize("bug", ["eager-dead", "no-refute"])
def test_the_bug_switches_still_kill_live_nodes(bug):
    cluster = MiniCluster(3, 1, bugs=BugSet.parse([bug]))
    if bug == "eager-dead":
        cluster.run(3.0)  # one missed heartbeat under jitter is enough
        assert cluster.false_positives()
        return
    # One link fails briefly: n2 suspects n1, n1 refutes, n2 ignores the refutation
    # (and its own fresh heartbeats) and its suspicion times out on a live node.
    cluster.cut_links({("n1", "n2")}, at=0.5, heal_at=0.75)
    cluster.run(4.0)
    assert [a for _, a in cluster.declarations() if a.at > 0.75 and a.peer == "n1"]


def test_without_the_bug_a_brief_link_failure_kills_nobody():
    cluster = MiniCluster(3, 1)
    cluster.cut_links({("n1", "n2")}, at=0.5, heal_at=0.75)
    cluster.run(4.0)
    assert cluster.declarations() == [] and cluster.rejoins == []


def test_dead_notices_round_trip_and_bad_sizes_are_rejected():
    item = GossipItem(subject="n1", incarnation=3, status="dead", origin="n0")
    notice = Gossip(sender="n0", items=[item], sender_view_size=2, sender_incarnation=1)
    assert decode_message(encode_message(notice)) == notice
    legacy = Gossip(sender="n0", items=[item])  # drivers that never set them
    assert decode_message(encode_message(legacy)).sender_view_size is None
    bad = Gossip(sender="n0", items=[item], sender_view_size=0)
    with pytest.raises(RemoteProtocolError):
        decode_message(encode_message(bad))


def test_a_restarted_peer_gets_a_fresh_watch_with_the_start_up_grace():
    """Regression (explore, seed 2): n0 crashed for good, n1 crashed and restarted
    0.17 s later; n2, its only monitor, kept the old incarnation's watch deadline and
    declared incarnation 1 dead 50 ms after the restart, before its first heartbeat."""
    detector = D.FailureDetector(node="n2", members=("n0", "n1", "n2"), seed=2)
    detector.handle(D.Started(), 0.0)
    beats(detector, "n1", 0.65, 0.95)
    hold_dead(detector, "n0", "n1", 1.0)
    beats(detector, "n1", 1.0, 1.4)
    back = GossipItem(subject="n1", incarnation=1, status="alive", origin="n1")
    detector.handle(D.GossipReceived(message=Gossip(sender="n1", items=[back])), 1.45)
    assert detector.deadline_for("n1") == pytest.approx(1.45 + detector.config.startup_grace_s)
    actions = detector.handle(D.Tick(), 1.7)
    assert not any(isinstance(a, D.Suspected | D.DeclaredDead) for a in actions)


def test_a_restarted_node_learns_the_deaths_it_missed_and_is_not_suspected():
    """Regression (sim, 8 nodes, crash n1 and n5 for good, then crash and restart n6):
    the restarted n6 chose its monitors from a ring that still held n1 and n5, so the
    right monitors got no heartbeats and declared the live n6 dead.  The receivers of
    its announce now push it the dead members."""
    for seed in range(4):
        cluster = MiniCluster(8, seed)
        cluster.crash("n1", 1.0)
        cluster.crash("n5", 2.0)
        cluster.crash("n6", 4.0)
        cluster.restart("n6", 6.0)
        cluster.run(10.0)
        late = [(n, a) for n, a in cluster.declarations() if a.peer == "n6" and a.at > 6.0]
        assert late == [], late
        assert cluster.detectors["n6"].alive_view() == ("n0", "n2", "n3", "n4", "n6", "n7")
