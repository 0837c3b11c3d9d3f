"""The heartbeat grid is one rule (``detector.heartbeat_slot``) that both shells follow:
the runtime's heartbeat loop calls it at every wake, the simulator's stream at a new
plan and at a resume.  Written in each shell, the two disagreed: the runtime sent a
slot it reached late, the simulator skipped it, and a live node re-planned three times
in 80 ms was declared dead in the simulator only (deep explore, 8 nodes, seed 7)."""

from __future__ import annotations

import pytest

from swarmshake.chaos.sim.clocks import NodeClock
from swarmshake.chaos.sim.network import LinkProfile, Network
from swarmshake.chaos.sim.rng import RngStreams
from swarmshake.chaos.sim.streams import HeartbeatStream
from swarmshake.reference_node.protocol.detector import heartbeat_slot

INTERVAL_S = 0.05


@pytest.mark.parametrize(
    ("due", "now", "expected"),
    [
        (0, 0.0, (True, 1)),  # on time
        (0, -0.01, (False, 0)),  # not yet
        (0, 0.03, (True, 1)),  # a plan performed late: one send now
        (0, 0.17, (True, 4)),  # three slots missed (0, 0.05, 0.10, 0.15): one send, then 0.20
        (4, 0.17, (False, 4)),  # slot 4 (0.20) not reached
        (1, 0.05 + 1e-12, (True, 2)),  # on a slot within float noise
    ],
)
def test_the_grid_rule_sends_a_reached_slot_once_and_skips_the_missed(due, now, expected):
    assert heartbeat_slot(0.0, INTERVAL_S, due, now) == expected


def _stream() -> tuple[HeartbeatStream, Network, NodeClock]:
    rngs = RngStreams(1)
    network = Network(LinkProfile(delay_ms=10.0, jitter_ms=0.0), rngs)
    return HeartbeatStream("n0", "n1", rngs.get("heartbeat", "n0", "n1")), network, NodeClock()


def _sends(stream: HeartbeatStream, network: Network, until: float) -> list[float]:
    stream.materialise(until, network)
    return [round(arrival - 0.010, 6) for arrival, _ in stream.pending]


def test_a_plan_performed_after_its_start_sends_at_once_then_on_its_grid():
    stream, network, clock = _stream()
    stream.plan(0.13, 1, 0.10, INTERVAL_S, clock, network, settle_s=0.0)
    assert _sends(stream, network, 0.31) == [0.13, 0.15, 0.20, 0.25, 0.30]


def test_a_plan_on_time_is_its_grid():
    stream, network, clock = _stream()
    stream.plan(0.10, 1, 0.10, INTERVAL_S, clock, network, settle_s=0.0)
    assert _sends(stream, network, 0.26) == [0.10, 0.15, 0.20, 0.25]


def test_a_resume_after_a_pause_sends_the_missed_slot_once_and_keeps_the_phase():
    """A SIGSTOPped loop wakes past its deadline: one heartbeat at the resume (the
    runtime's loop does so), none for the other slots missed, then the old grid."""
    stream, network, clock = _stream()
    stream.plan(0.0, 1, 0.0, INTERVAL_S, clock, network, settle_s=0.0)
    stream.stop(0.12, network, settle_s=0.0)  # paused at 0.12: sent 0, 0.05, 0.10
    stream.resume(0.33, clock, settle_s=0.0)  # missed 0.15 .. 0.30
    assert _sends(stream, network, 0.41) == [0.0, 0.05, 0.10, 0.33, 0.35, 0.40]
    short = _stream()
    short[0].plan(0.0, 1, 0.0, INTERVAL_S, short[2], short[1], settle_s=0.0)
    short[0].stop(0.11, short[1], settle_s=0.0)
    short[0].resume(0.14, short[2], settle_s=0.0)  # no slot missed: nothing extra
    assert _sends(short[0], short[1], 0.21) == [0.0, 0.05, 0.10, 0.15, 0.20]
