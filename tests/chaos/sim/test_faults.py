"""The typed fault ops: loading, validation errors, heals, groupings."""

from __future__ import annotations

import json
import random

import pytest

from swarmshake.chaos import faults

CLUSTER = ["n0", "n1", "n2", "n3", "n4"]


def test_a_schedule_round_trips_through_its_yaml():
    schedule = faults.decode_schedule(
        """
        - at_s: 3
          op: {op: crash, nodes: [n1]}
          heal_after_s: 5
        - when: {node: n2, kind: agg_send, step_at_least: 10}
          op: {op: latency, src: [n2], delay_ms: 50, jitter_ms: 25, direction: one_way}
        """
    )
    assert schedule.size() == 3
    assert faults.decode_schedule(faults.schedule_to_yaml(schedule)) == schedule


def test_every_catalog_op_decodes_and_knows_its_heal():
    samples = {
        "crash": {"nodes": ["n1"]},
        "restart": {"nodes": ["n1"]},
        "pause": {"nodes": ["n1"]},
        "resume": {"nodes": ["n1"]},
        "cpu_throttle": {"nodes": ["n1"], "cpu_fraction": 0.2},
        "disk_full": {"nodes": ["n1"]},
        "checkpoint_corrupt": {"nodes": ["n1"]},
        "clock_skew": {"nodes": ["n1"], "offset_ms": 200, "drift_ppm": 50},
        "byzantine": {"nodes": ["n1"], "mode": "sign_flip"},
        "hold_bulk": {"nodes": ["n1"], "to": ["n2"]},
        "churn": {"events_per_min": 6},
        "broker_loss": {},
        "partition": {"grouping": "majority_ring"},
        "heal": {},
        "latency": {"delay_ms": 100, "jitter_ms": 20},
        "bandwidth": {"rate_kbps": 100},
        "blackhole": {"src": ["n1"], "dst": ["n2"], "direction": "one_way"},
        "reset_peer": {},
        "slicer": {},
        "limit_data": {"limit_bytes": 1000},
        "slow_close": {"delay_ms": 10},
        "netem": {"loss_pct": 5, "reorder_pct": 10, "delay_ms": 20},
    }
    assert set(samples) == set(faults.FAULT_OPS)
    undone_by = {"crash": "restart", "pause": "resume", "partition": "heal", "latency": "heal"}
    for name, fields in samples.items():
        schedule = faults.decode_schedule(json.dumps([{"at_s": 1, "op": {"op": name, **fields}}]))
        op = schedule.entries[0].op
        assert op.name == name
        if name in undone_by:
            assert op.heal().name == undone_by[name]
    assert faults.Resume(nodes=["n1"]).heal() is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "- at_s: 1\n  op: {op: crush, nodes: [n1]}",
            "scenario.yaml:2: entries[0].op.op: Invalid value 'crush'",
        ),
        (
            "- at_s: 1\n  op: {op: latency, delay_ms: 5, jitter_ms: 9}",
            "jitter_ms = 9.0 must lie in",
        ),
        ("- op: {op: crash, nodes: [n1]}", "give exactly one of at_s"),
        ("- at_s: 1\n  op: {op: crash, nodes: []}", "name at least one node"),
        ("- at_s: 1\n  op: {op: partition, grouping: isolate}", "needs nodes"),
        ("- at_s: 1\n  op: {op: resume, nodes: [n1]}\n  heal_after_s: 2", "nothing to heal"),
        ("- when: {node: n1, kind: agg-send}\n  op: {op: crash, nodes: [n1]}", "not an event kind"),
        ("- at_s: 1\n  op: {op: crash, nodes: [n1], extra: 1}", "unknown field `extra`"),
        ("just text", "scenario.yaml:1: expected a list of entries"),
    ],
)
def test_bad_schedules_name_the_entry_and_the_problem(text, problem):
    with pytest.raises(
        faults.FaultSpecError, match=problem.replace("[", r"\[").replace("$", r"\$")
    ):
        faults.decode_schedule(text, source="scenario.yaml")


def test_load_schedule_names_a_missing_file(tmp_path):
    with pytest.raises(faults.FaultSpecError, match="cannot read"):
        faults.load_schedule(tmp_path / "missing.yaml")


def test_groupings_cut_what_their_names_say():
    rng = random.Random(0)
    halves = faults.Partition(grouping="halves").cut_links(CLUSTER, rng)
    assert ("n0", "n3") in halves and ("n3", "n0") in halves and ("n0", "n1") not in halves
    one_way = faults.Partition(grouping="isolate", nodes=["n2"], direction="one_way").cut_links(
        CLUSTER, rng
    )
    assert one_way == {("n2", other) for other in CLUSTER if other != "n2"}
    ring = faults.Partition(grouping="majority_ring").cut_links(CLUSTER, rng)
    for node in CLUSTER:
        reachable = {b for b in CLUSTER if (node, b) not in ring}
        assert len(reachable) == 3  # itself and two neighbours: a majority, each different
    bridge = faults.Partition(grouping="bridge").cut_links(CLUSTER, rng)
    assert not any("n2" in link for link in bridge)  # the bridge node reaches both sides
    explicit = faults.Partition(grouping="groups", groups=[["n0", "n1"]]).cut_links(CLUSTER, rng)
    assert ("n1", "n4") in explicit and ("n2", "n4") not in explicit


def test_unsupported_ops_are_named_for_the_simulator():
    schedule = faults.decode_schedule("- at_s: 1\n  op: {op: broker_loss}")
    with pytest.raises(
        faults.FaultSpecError, match="'broker_loss' is unsupported in the simulator"
    ):
        faults.check_supported(schedule, faults.SIM_SUPPORTED, "simulator")
