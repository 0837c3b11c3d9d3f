"""protocol.sharding: shard ranges, owner assignment and dead-owner replacement."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import sharding as sh
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.training.wire import WIRE_BLOCK


def test_shard_alignment_is_the_int8_wire_block():
    assert sh.SHARD_ALIGN == WIRE_BLOCK


@given(numel=st.integers(0, 5_000_000), count=st.integers(1, sh.MAX_OWNERS))
def test_bounds_cover_every_coordinate_once_on_block_boundaries(numel, count):
    bounds = sh.shard_bounds(numel, count)
    assert len(bounds) == count
    assert bounds[0][0] == 0 and bounds[-1][1] == numel
    for (_, end), (start, _) in zip(bounds, bounds[1:], strict=False):
        assert end == start
    for start, end in bounds:
        assert start <= end
        assert start % sh.SHARD_ALIGN == 0 or start == numel  # empty tail shards
        assert end % sh.SHARD_ALIGN == 0 or end == numel
    sizes = [(end - start + sh.SHARD_ALIGN - 1) // sh.SHARD_ALIGN for start, end in bounds]
    assert max(sizes) - min(sizes) <= 1  # as even as whole blocks allow


def test_bounds_of_a_1m_model_on_4_owners():
    assert sh.shard_bounds(1_000_000, 4) == (
        (0, 250_112),
        (250_112, 500_224),
        (500_224, 750_336),
        (750_336, 1_000_000),
    )


def test_bounds_reject_bad_input():
    for numel, count in ((-1, 4), (10, 0), (10, sh.MAX_OWNERS + 1)):
        with pytest.raises(LocalProtocolError):
            sh.shard_bounds(numel, count)


def test_owners_are_the_sorted_members():
    assert sh.shard_owners(["n3", "n1", "n2", "n1"]) == ("n1", "n2", "n3")
    with pytest.raises(LocalProtocolError):
        sh.shard_owners([])


def test_every_live_owner_keeps_its_own_shard():
    owners = ("n1", "n2", "n3", "n4")
    assert sh.owner_plan(owners, owners, "n1") == owners


def test_a_dead_owners_shard_goes_to_the_next_live_owner():
    owners = ("n1", "n2", "n3", "n4")
    assert sh.owner_plan(owners, ("n1", "n2", "n4"), "n1") == ("n1", "n2", "n4", "n4")
    # Wrapping: the last owner's successor is the first.
    assert sh.owner_plan(owners, ("n1", "n2", "n3"), "n2") == ("n1", "n2", "n3", "n1")
    # Two dead in a row: both shards to the next live one.
    assert sh.owner_plan(owners, ("n1", "n4"), "n1") == ("n1", "n4", "n4", "n4")


def test_the_deciding_node_counts_itself_alive():
    owners = ("n1", "n2", "n3")
    assert sh.owner_plan(owners, (), "n2") == ("n2", "n2", "n2")


def test_every_node_with_the_same_view_makes_the_same_plan():
    owners = ("a", "b", "c", "d", "e")
    alive = ("a", "c", "e")
    plans = {sh.owner_plan(owners, alive, node) for node in alive}
    assert plans == {("a", "c", "c", "e", "e")}


def test_reassigned_names_the_moved_shards():
    before = ("n1", "n2", "n3", "n4")
    after = sh.owner_plan(before, ("n1", "n2", "n4"), "n1")
    assert sh.reassigned(before, after) == (2,)
    assert sh.reassigned(after, after) == ()
    with pytest.raises(LocalProtocolError):
        sh.reassigned(before, after[:3])


def test_krum_stays_all_to_all():
    assert sh.uses_sharding("sharded", "median")
    assert sh.uses_sharding("sharded", "trimmed_mean")
    assert sh.uses_sharding("sharded", "mean")
    assert not sh.uses_sharding("sharded", "krum")
    assert not sh.uses_sharding("sharded", "multi_krum")
    assert not sh.uses_sharding("all_to_all", "median")
    with pytest.raises(LocalProtocolError):
        sh.uses_sharding("ring", "median")


def test_keys_round_trip_and_bad_keys_are_refused():
    assert sh.parse_shard_key(sh.shard_key(2, 4)) == (2, 4, None, True)
    assert sh.parse_shard_key(sh.shard_key(2, 4, finite=False)) == (2, 4, None, False)
    key = sh.aggregate_shard_key(1, 4, ["n3", "n1"])
    assert key == "1/4/n1,n3"
    assert sh.parse_shard_key(key) == (1, 4, ("n1", "n3"), True)
    bad_keys = ("", "4/4", "1/0", "x/4", "1/4/", "1/4/n3,n1", "1/4/n1,n1", "1/4/a/b", "-1/4")
    for bad in (*bad_keys, "1/4/n1!", "!", "1/4!!"):
        with pytest.raises(ValueError):
            sh.parse_shard_key(bad)


# --- the node core: a contributor whose shard a live owner never got is left out -----------

NODES = ("n0", "n1", "n2", "n3")


def _leader_with_all_arrived() -> nc.StepLeader:
    core = nc.StepLeader(node="n0")
    core.handle(nc.StepBegan(step=0, voters=NODES, members=NODES), 0.0)
    core.handle(nc.ViewChanged(alive=NODES), 0.0)
    core.handle(nc.OwnContribution(step=0), 1.0)
    core.handle(nc.ContributionArrived(step=0, sender="n1"), 1.01)
    core.handle(nc.ContributionArrived(step=0, sender="n2"), 1.02)
    assert core.handle(nc.ContributionArrived(step=0, sender="n3"), 1.03) == [
        nc.BuildProposal(step=0, contributors=NODES, first=True)
    ]
    return core


def test_a_build_missing_a_contributors_shard_is_retried_without_it():
    core = _leader_with_all_arrived()
    core.handle(nc.BuildFailed(step=0, missing=("n2",)), 2.0)
    assert core.handle(nc.Tick(), 2.0 + nc.NODE_DEFAULTS.straggler_grace_s) == [
        nc.BuildProposal(step=0, contributors=("n0", "n1", "n3"), first=True)
    ]
    core.check_valid()


def test_a_leader_never_leaves_its_own_gradient_out():
    core = _leader_with_all_arrived()
    core.handle(nc.BuildFailed(step=0, missing=("n0", "n3")), 2.0)
    assert core.handle(nc.Tick(), 2.0 + nc.NODE_DEFAULTS.straggler_grace_s) == [
        nc.BuildProposal(step=0, contributors=("n0", "n1", "n2"), first=True)
    ]
    core.check_valid()
    with pytest.raises(LocalProtocolError):
        nc.BuildFailed(step=0, missing=["n1"])  # a list, not a tuple
    with pytest.raises(LocalProtocolError):
        nc.BuildFailed(step=0, missing=("bad name",))


def test_a_build_failure_naming_most_contributors_leaves_none_out():
    # An owner that lacks everyone's shard is behind: leaving n1..n3 out would leave
    # the leader alone, below a majority; the next proposal keeps them.
    core = _leader_with_all_arrived()
    core.handle(nc.BuildFailed(step=0, missing=("n1", "n2", "n3")), 2.0)
    assert core.handle(nc.Tick(), 2.0 + nc.NODE_DEFAULTS.straggler_grace_s) == [
        nc.BuildProposal(step=0, contributors=NODES, first=True)
    ]
