"""Every fault op on the local backend, with its effect observed by the nodes themselves.

Stand-in heartbeat nodes send a heartbeat every 20 ms on both channels of every
directed link; the tests inject an op through the nemesis and check what the
receiving node saw (or the process state the kernel reports).
"""

from __future__ import annotations

import hashlib
import statistics
import time

import pytest

from swarmshake.chaos import faults as F
from swarmshake.chaos.backends.base import UnsupportedFault
from swarmshake.chaos.cleanup import process_state
from swarmshake.reference_node.protocol.history import Fault, read_events

pytestmark = pytest.mark.slow


def settle() -> float:
    time.sleep(0.3)
    return time.monotonic()


def test_partition_cuts_both_channels_across_groups_only(healed, observed):
    healed.inject(F.Partition(grouping="groups", groups=[["n1"], ["n2", "n3", "n4"]]))
    t = settle()
    time.sleep(0.5)
    for other in ("n2", "n3", "n4"):
        assert observed.heartbeats("n1", other, t) == []
        assert observed.heartbeats(other, "n1", t) == []
    assert len(observed.heartbeats("n2", "n3", t, "control")) > 10
    assert len(observed.heartbeats("n3", "n2", t, "bulk")) > 10
    healed.heal(F.Partition(grouping="groups", groups=[["n1"], ["n2", "n3", "n4"]]))
    t = time.monotonic()
    observed.wait_for(
        lambda: observed.heartbeats("n1", "n2", t, "control"), what="n2→n1 after heal"
    )
    observed.wait_for(lambda: observed.heartbeats("n2", "n1", t, "bulk"), what="n1→n2 after heal")


def test_one_way_partition_cuts_one_direction(healed, observed):
    healed.inject(F.Partition(grouping="groups", groups=[["n1"]], direction="one_way"))
    t = settle()
    time.sleep(0.4)
    assert observed.heartbeats("n2", "n1", t) == []
    assert len(observed.heartbeats("n1", "n2", t)) > 10


def test_latency_shows_in_measured_heartbeat_delay(healed, observed):
    t = time.monotonic()
    time.sleep(0.4)
    before = statistics.median(r["delay_ms"] for r in observed.heartbeats("n2", "n1", t, "control"))
    healed.inject(F.Latency(src=["n1"], dst=["n2"], delay_ms=120, direction="one_way"))
    t = settle()
    time.sleep(0.5)
    after = statistics.median(r["delay_ms"] for r in observed.heartbeats("n2", "n1", t, "control"))
    assert 100 <= after - before <= 200, (before, after)
    # The other direction and other links are untouched.
    reverse = statistics.median(
        r["delay_ms"] for r in observed.heartbeats("n1", "n2", t, "control")
    )
    assert reverse < before + 30


def test_blackhole_swallows_data(healed, observed):
    healed.inject(F.Blackhole(src=["n3"], dst=["n4"], direction="one_way"))
    t = settle()
    time.sleep(0.4)
    assert observed.heartbeats("n4", "n3", t) == []
    assert observed.heartbeats("n3", "n4", t)


def test_reset_peer_breaks_connections(healed, observed):
    t = time.monotonic()
    healed.inject(F.ResetPeer(src=["n1"], dst=["n3"], direction="one_way", timeout_ms=50))
    observed.wait_for(
        lambda: [r for r in observed.of("n1", t, "link_broken") if r["peer"] == "n3"],
        what="n1 sees its link to n3 reset",
    )


def test_limit_data_closes_after_the_limit(healed, observed):
    t = time.monotonic()
    healed.inject(F.LimitData(src=["n2"], dst=["n4"], direction="one_way", limit_bytes=200))
    observed.wait_for(
        lambda: len([r for r in observed.of("n2", t, "link_broken") if r["peer"] == "n4"]) >= 2,
        what="n2's connections to n4 closed again and again after 200 bytes",
    )


def test_slicer_and_bandwidth_delay_heartbeats(healed, observed):
    healed.inject(
        F.Slicer(
            src=["n1"],
            dst=["n4"],
            direction="one_way",
            average_size=1,
            size_variation=0,
            delay_us=5000,
        )
    )
    healed.inject(F.Bandwidth(src=["n2"], dst=["n4"], direction="one_way", rate_kbps=1))
    t = settle()
    time.sleep(1.0)
    sliced = [r["delay_ms"] for r in observed.heartbeats("n4", "n1", t, "control")]
    throttled = [r["delay_ms"] for r in observed.heartbeats("n4", "n2", t, "control")]
    normal = [r["delay_ms"] for r in observed.heartbeats("n4", "n3", t, "control")]
    assert statistics.median(sliced) > statistics.median(normal) + 50
    assert statistics.median(throttled) > statistics.median(normal) + 50


def test_slow_close_is_installed_on_both_channels(healed):
    healed.inject(F.SlowClose(src=["n1"], dst=["n2"], direction="one_way", delay_ms=300))
    toxiproxy = healed.backend.toxiproxy
    for channel in ("control", "bulk"):
        name = f"n1__n2__{channel}"
        toxics = healed.call(toxiproxy.server_for(name).client.toxics(name))
        assert [(t.type, t.attributes["delay"]) for t in toxics] == [("slow_close", 300)]
    healed.heal(F.SlowClose(src=["n1"], dst=["n2"], direction="one_way", delay_ms=300))
    assert healed.call(toxiproxy.control.client.toxics("n1__n2__control")) == []


def test_crash_and_restart(healed, observed):
    node = healed.backend.node("n3")
    old_pid = node.pid
    healed.inject(F.Crash(nodes=["n3"]))
    assert not node.is_running() and process_state(old_pid) in (None, "Z")
    t = settle()
    assert observed.heartbeats("n1", "n3", t) == []
    healed.heal(F.Crash(nodes=["n3"]))
    assert node.is_running() and node.pid != old_pid
    t2 = time.monotonic()
    observed.wait_for(lambda: observed.heartbeats("n1", "n3", t2), what="n3 back after restart")
    faults = [
        e
        for e in read_events(healed.run_dir / "events" / "harness.jsonl").events
        if isinstance(e, Fault)
    ]
    assert [(f.op, f.phase) for f in faults if f.target == ["n3"]][-2:] == [
        ("crash", "inject"),
        ("crash", "heal"),
    ]


def test_pause_and_resume(healed, observed):
    node = healed.backend.node("n2")
    healed.inject(F.Pause(nodes=["n2"]))
    assert process_state(node.pid) == "T"
    t = settle()
    assert observed.heartbeats("n1", "n2", t) == []
    healed.inject(F.Resume(nodes=["n2"]))
    t2 = time.monotonic()
    observed.wait_for(
        lambda: observed.heartbeats("n1", "n2", t2), what="n2 heartbeats after resume"
    )


def test_cpu_throttle_stops_the_node_most_of_the_time(healed):
    node = healed.backend.node("n4")
    healed.inject(F.CpuThrottle(nodes=["n4"], cpu_fraction=0.25))
    time.sleep(0.1)
    states = []
    for _ in range(200):
        states.append(process_state(node.pid))
        time.sleep(0.003)
    stopped = states.count("T") / len(states)
    assert 0.5 <= stopped <= 0.95, stopped
    healed.heal(F.CpuThrottle(nodes=["n4"], cpu_fraction=0.25))
    time.sleep(0.1)
    assert process_state(node.pid) != "T"


def test_disk_full_makes_checkpoint_writes_fail(healed, observed):
    healed.inject(F.DiskFull(nodes=["n1"]))
    t = time.monotonic()
    observed.wait_for(
        lambda: [r for r in observed.of("n1", t, "checkpoint") if not r["ok"] and r["errno"] == 28],
        what="ENOSPC on n1's checkpoint write",
    )
    healed.heal(F.DiskFull(nodes=["n1"]))
    t2 = time.monotonic()
    observed.wait_for(
        lambda: [r for r in observed.of("n1", t2, "checkpoint") if r["ok"]],
        what="writes work again",
    )


def test_checkpoint_corrupt_damages_the_newest_checkpoint(healed):
    folder = healed.spec.checkpoint_dir("n2")
    healed.inject(F.Pause(nodes=["n2"]))  # no new checkpoint while we look
    files = sorted(folder.glob("ckpt-*.bin"))
    newest = files[-1]
    before = hashlib.sha256(newest.read_bytes()).hexdigest()
    healed.inject(F.CheckpointCorrupt(nodes=["n2"], mode="flip_bytes"))
    assert hashlib.sha256(newest.read_bytes()).hexdigest() != before
    healed.inject(F.CheckpointCorrupt(nodes=["n2"], mode="truncate"))
    assert newest.stat().st_size == 4096


def test_clock_skew_and_byzantine_reach_the_node_as_commands(healed, observed):
    t = time.monotonic()
    healed.inject(F.ClockSkew(nodes=["n1"], offset_ms=250, drift_ppm=100))
    healed.inject(F.Byzantine(nodes=["n2"], mode="noise", scale=3.0))
    clock = observed.wait_for(lambda: observed.of("n1", t, "command"), what="set_clock at n1")
    command = clock[0]["command"]
    assert (command["command"], command["offset_s"], command["drift_ppm"]) == (
        "set_clock",
        0.25,
        100.0,
    )
    byz = observed.wait_for(lambda: observed.of("n2", t, "command"), what="set_byzantine at n2")
    behaviour = byz[0]["command"]["behaviour"]
    assert byz[0]["command"]["command"] == "set_byzantine" and behaviour["mode"] == "gaussian_noise"
    assert behaviour["noise_std"] == 3.0


def test_broker_loss_disconnects_every_node_and_heals(healed, observed):
    t = time.monotonic()
    healed.inject(F.BrokerLoss())
    observed.wait_for(lambda: observed.of("n3", t, "mqtt_lost"), what="n3 loses the broker")
    healed.heal(F.BrokerLoss())
    t2 = time.monotonic()
    observed.wait_for(
        lambda: observed.of("n3", t2, "mqtt_connected"), timeout_s=10, what="n3 reconnects"
    )


def test_churn_crashes_and_brings_back_nodes(healed, observed):
    healed.inject(F.Churn(events_per_min=600, down_s=0.3, min_alive=3))
    time.sleep(1.5)
    healed.heal(F.Churn(events_per_min=600))
    churned = healed.nemesis.applied
    assert sum(1 for _, op, phase in churned if op == "crash" and phase == "inject") >= 2
    assert all(healed.backend.node(n).is_running() for n in healed.spec.nodes)


def test_netem_is_unsupported_on_the_local_backend(healed):
    with pytest.raises(UnsupportedFault, match="netem.*local"):
        healed.inject(F.Netem(src=["n1"], dst=["n2"], loss_pct=10))


def test_fault_op_latency_call_to_effect(healed, observed):
    """Call → effect for a partition (the last heartbeat crossing the cut) and a crash.

    DESIGN's goal is ≤ 50 ms.  A 2×2 partition is 16 proxy calls, which Toxiproxy
    serialises; on a loaded 2-core machine each costs ~10 ms, so the assertion is the
    bound a schedule can rely on anywhere (one second); the printed numbers are the
    measurement for BENCHMARKS.md."""
    partition_ms, crash_ms = [], []
    for _ in range(3):
        healed.heal_all()
        time.sleep(0.3)
        start = time.monotonic()
        healed.inject(F.Partition(grouping="groups", groups=[["n1", "n2"], ["n3", "n4"]]))
        call_ms = (time.monotonic() - start) * 1000
        time.sleep(0.4)
        crossing = [
            r["t"] for receiver, sender in (("n3", "n1"), ("n1", "n3"), ("n4", "n2"))
            for r in observed.heartbeats(receiver, sender, start)
        ]  # fmt: skip
        effect_ms = (max(crossing) - start) * 1000 if crossing else 0.0
        partition_ms.append(max(call_ms, effect_ms))
        start = time.monotonic()
        healed.inject(F.Crash(nodes=["n4"]))
        crash_ms.append((time.monotonic() - start) * 1000)
    link_ms = []
    for _ in range(3):
        healed.heal_all()
        start = time.monotonic()
        healed.inject(F.Blackhole(src=["n1"], dst=["n2"], direction="one_way"))
        link_ms.append((time.monotonic() - start) * 1000)
    print(f"one-link toxic (2 proxies) call ms: {[round(x, 1) for x in link_ms]}")
    print(f"partition (16 proxies) call→effect ms: {[round(x, 1) for x in partition_ms]}")
    print(f"crash call→process gone ms: {[round(x, 1) for x in crash_ms]}")
    assert statistics.median(partition_ms) <= 1000
    assert statistics.median(crash_ms) <= 50
    assert statistics.median(link_ms) <= 50


def test_direct_links_carry_heartbeats_without_proxies_and_refuse_link_faults(direct_stand_in):
    """``links: direct`` (what ``bench overhead`` runs): every node hears every peer on
    both channels with no Toxiproxy in the run, and a link fault says why it cannot act."""
    session, observed = direct_stand_in
    assert session.backend.describe()["toxiproxy"] is None
    nodes = session.backend.spec.nodes
    for receiver in nodes:
        for sender in (n for n in nodes if n != receiver):
            for channel in ("control", "bulk"):
                observed.wait_for(
                    lambda r=receiver, s=sender, c=channel: observed.heartbeats(r, s, 0.0, c),
                    timeout_s=10,
                    what=f"{sender}→{receiver} {channel} heartbeat",
                )
    with pytest.raises(UnsupportedFault, match="links: proxied"):
        session.inject(F.Latency(src=["n1"], dst=["n2"], delay_ms=10))
