"""Held-back watches (``lazy_watch_allowed`` + ``Tick.vouched``): a driver that holds a
healthy peer's heartbeats back and hands them over later gets exactly the state and
decisions of one-by-one delivery."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmshake.reference_node.protocol import detector as D
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import Gossip, GossipItem

MEMBERS = ("n0", "n1", "n2", "n3")
PEER = "n1"


def started():
    detector = D.FailureDetector(node="n0", members=MEMBERS, seed=3)
    detector.handle(D.Started(), 0.0)
    return detector


def beat(detector, t, incarnation=0, peer=PEER):
    return detector.handle(
        D.HeartbeatsArrived(peer=peer, incarnation=incarnation, arrival_times=(t,)), t
    )


def decisions(actions):
    return [a for a in actions if not isinstance(a, D.HeartbeatPlan | D.SendGossip)]


def test_a_watch_is_held_back_only_while_nothing_but_arrivals_can_change_it():
    detector = started()
    assert not detector.lazy_watch_allowed(PEER, 0)  # nothing heard yet
    beat(detector, 0.05)
    assert detector.lazy_watch_allowed(PEER, 0)
    assert not detector.lazy_watch_allowed(PEER, 1)  # another incarnation's stream
    suspicion = GossipItem(subject=PEER, incarnation=0, status="suspect", origin="n2")
    detector.handle(D.GossipReceived(message=Gossip(sender="n2", items=[suspicion])), 0.06)
    assert not detector.lazy_watch_allowed(PEER, 0)  # its suspicion timeout is pending


def test_a_vouched_watch_does_not_fire_and_the_others_do():
    detector = started()
    for t in (0.05, 0.10):
        beat(detector, t)
        beat(detector, t, peer="n2")
    actions = detector.handle(D.Tick(vouched=(PEER,)), 0.5)
    suspected = {a.peer for a in actions if isinstance(a, D.Suspected)}
    assert "n2" in suspected and PEER not in suspected
    assert detector.status[PEER] == "alive"


@pytest.mark.parametrize(
    "vouched, problem", [(["n1"], "tuple"), (("",), "Tick.vouched"), (("n 1",), "Tick.vouched")]
)
def test_a_bad_vouched_list_is_a_local_protocol_error(vouched, problem):
    with pytest.raises(LocalProtocolError, match=problem):
        D.Tick(vouched=vouched)


# One op per step: a heartbeat of PEER after a gap (under the floor, as a vouching
# driver guarantees), gossip about some member, or a tick.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("beat"), st.floats(0.0, 0.15)),
        st.tuples(
            st.just("gossip"),
            st.sampled_from(("n1", "n2", "n3")),
            st.sampled_from(("suspect", "alive", "dead")),
            st.integers(0, 2),
            st.sampled_from(("n2", "n3")),
        ),
        st.tuples(st.just("tick"), st.floats(0.0, 0.15)),
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops)
def test_holding_arrivals_back_while_allowed_equals_one_by_one(ops):
    eager, lazy = started(), started()
    got_eager, got_lazy = [], []
    backlog: list[float] = []
    holding = False
    t = 0.01
    got_eager += beat(eager, t)  # the first arrival: a lazy watch needs one
    got_lazy += beat(lazy, t)
    last_beat = t

    def flush(now):
        nonlocal backlog
        if backlog:
            event = D.HeartbeatsArrived(peer=PEER, incarnation=0, arrival_times=tuple(backlog))
            got_lazy.extend(lazy.handle(event, now))
            backlog = []

    for op in ops:
        if op[0] == "beat":
            t = max(t, last_beat + op[1])
            last_beat = t
            got_eager.extend(beat(eager, t))
            if holding:
                backlog.append(t)
            else:
                got_lazy.extend(beat(lazy, t))
        elif op[0] == "gossip":
            _, subject, status, incarnation, origin = op
            # between two heartbeats: never past the next one's deadline
            t = min(t + 0.001, last_beat + 0.15)
            item = GossipItem(
                subject=subject, incarnation=incarnation, status=status, origin=origin
            )
            event = D.GossipReceived(message=Gossip(sender=origin, items=[item]))
            got_eager.extend(eager.handle(event, t))
            if subject == PEER:  # an event naming the peer: hand the backlog over first
                flush(t)
                holding = False
            got_lazy.extend(lazy.handle(event, t))
        else:
            t = min(t + op[1], last_beat + 0.15)
            got_eager.extend(eager.handle(D.Tick(), t))
            vouched = (PEER,) if holding else ()
            got_lazy.extend(lazy.handle(D.Tick(vouched=vouched), t))
        if not holding and lazy.lazy_watch_allowed(PEER, 0):
            holding = True  # everything up to now is delivered: hold from here
    flush(t)
    assert decisions(got_lazy) == decisions(got_eager)
    assert lazy.snapshot() == eager.snapshot()
