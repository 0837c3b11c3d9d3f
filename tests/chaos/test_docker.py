"""The Docker backend: faults observable on containers, and Ctrl-C leaves nothing behind.

Stand-in heartbeat nodes run in the node image on a project network; Toxiproxy and
Mosquitto run in containers too.  Needs dockerd; the node image's code layer is
built on demand (seconds) when the tree changed.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmshake.chaos import faults as F
from swarmshake.chaos.backends.base import UnsupportedFault
from swarmshake.chaos.backends.session import ClusterSession
from swarmshake.chaos.cleanup import RUN_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def docker_client():
    from swarmshake.chaos.backends.docker import docker_available

    reason = docker_available()
    status = ROOT / ".cache" / "docker-unavailable"
    if reason or status.exists():
        pytest.skip(f"Docker unavailable on this machine: {reason or status.read_text().strip()}")
    import docker

    client = docker.from_env(timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="module")
def docker_cluster(docker_client, tmp_path_factory):
    from swarmshake.chaos.backends.base import ClusterSpec

    spec = ClusterSpec(
        run_id=f"dtest-{os.getpid()}",
        run_dir=tmp_path_factory.mktemp("docker") / "run",
        nodes=("n1", "n2", "n3"),
        node_program=str(Path(__file__).with_name("heartbeat_node.py")),
        node_config={"training": {"hidden": [16]}},
    )
    with ClusterSession("docker", spec) as session:
        session.wait_until_steady(min_commit_step=-1, timeout_s=90)
        time.sleep(1.0)  # links dialled through the proxies
        yield session
    leftovers = docker_client.containers.list(
        all=True, filters={"label": f"{RUN_LABEL}={spec.run_id}"}
    )
    assert leftovers == []


def observed(session, node, since, kind=None):
    path = session.run_dir / "nodes" / node / "observed.jsonl"
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["t"] >= since and (kind is None or record["kind"] == kind):
            records.append(record)
    return records


def heartbeats(session, receiver, sender, since):
    return [r for r in observed(session, receiver, since, "hb") if r["peer"] == sender]


def wait_for(predicate, timeout_s=10.0, what=""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"not observed within {timeout_s}s: {what}")


def test_partition_and_heal_on_containers(docker_cluster):
    session = docker_cluster
    session.heal_all()
    session.inject(F.Partition(grouping="isolate", nodes=["n1"]))
    t = time.monotonic() + 0.3
    time.sleep(1.0)
    assert heartbeats(session, "n2", "n1", t) == [] and heartbeats(session, "n1", "n3", t) == []
    assert heartbeats(session, "n2", "n3", t)
    session.heal(F.Partition(grouping="isolate", nodes=["n1"]))
    t = time.monotonic()
    wait_for(lambda: heartbeats(session, "n2", "n1", t), what="n1→n2 after heal")


def test_latency_on_containers(docker_cluster):
    session = docker_cluster
    session.heal_all()
    t = time.monotonic()
    time.sleep(0.5)
    before = statistics.median(r["delay_ms"] for r in heartbeats(session, "n2", "n1", t))
    session.inject(F.Latency(src=["n1"], dst=["n2"], direction="one_way", delay_ms=100))
    t = time.monotonic() + 0.3
    time.sleep(1.0)
    after = statistics.median(r["delay_ms"] for r in heartbeats(session, "n2", "n1", t))
    assert 80 <= after - before <= 200, (before, after)


def test_pause_crash_restart_and_cpu_on_containers(docker_cluster):
    session = docker_cluster
    session.heal_all()
    node = session.backend.node("n3")
    session.inject(F.Pause(nodes=["n3"]))
    node.container.reload()
    assert node.container.status == "paused"
    session.inject(F.Resume(nodes=["n3"]))
    session.inject(F.Crash(nodes=["n3"]))
    assert not node.is_running()
    session.heal(F.Crash(nodes=["n3"]))
    t = time.monotonic()
    wait_for(lambda: heartbeats(session, "n1", "n3", t), what="n3 back after restart")
    session.inject(F.CpuThrottle(nodes=["n3"], cpu_fraction=0.25))
    node.container.reload()
    assert node.container.attrs["HostConfig"]["CpuQuota"] == 25_000


def test_broker_loss_and_commands_on_containers(docker_cluster):
    session = docker_cluster
    session.heal_all()
    t = time.monotonic()
    session.inject(F.ClockSkew(nodes=["n2"], offset_ms=300))
    wait_for(lambda: observed(session, "n2", t, "command"), what="set_clock reaches n2")
    session.inject(F.BrokerLoss())
    wait_for(lambda: observed(session, "n1", t, "mqtt_lost"), what="n1 loses the broker")
    session.heal(F.BrokerLoss())
    t2 = time.monotonic()
    wait_for(
        lambda: observed(session, "n1", t2, "mqtt_connected"), timeout_s=20, what="n1 reconnects"
    )


def test_netem_acts_in_the_container_or_says_why_not(docker_cluster):
    session = docker_cluster
    session.heal_all()
    try:
        session.inject(F.Netem(src=["n1"], dst=["n2"], direction="one_way", loss_pct=20))
    except UnsupportedFault as error:
        assert "sch_netem" in str(error)  # this machine's kernel lacks the qdisc
        return
    shown = session.call(session.backend.node("n1").exec(["tc", "qdisc", "show", "dev", "eth0"]))
    assert "netem" in shown and "loss 20%" in shown


def test_ctrl_c_during_a_docker_run_leaves_nothing(docker_client, tmp_path):
    suite = tmp_path / "standin.yaml"
    suite.write_text(
        "name: dockerint\ncluster: {nodes: 2, backend: docker}\n"
        "steady_state: {min_commit_step: -1, timeout_s: 120}\nduration_s: 120\nquiesce_s: 1\n"
        "faults:\n  - {at_s: 60, op: {op: crash, nodes: [n2]}}\n"
    )
    env = {**os.environ, "SWARMSHAKE_STATE_DIR": str(tmp_path / "state"), "CI": "1"}
    out = tmp_path / "runs"
    program = str(Path(__file__).with_name("heartbeat_node.py"))
    process = subprocess.Popen(
        [sys.executable, "-m", "swarmshake", "run", str(suite), "--out", str(out), "--node-program", program],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    harness = out / "latest" / "events" / "harness.jsonl"
    wait_for(
        lambda: harness.exists() and b'"steady_state"' in harness.read_bytes(),
        timeout_s=180,
        what="steady",
    )
    run_id = json.loads((out / "latest" / "run.json").read_text())["run_id"]
    label = {"label": f"{RUN_LABEL}={run_id}"}
    containers = docker_client.containers.list(filters=label)
    # 2 nodes, the two Toxiproxy servers, the broker, and the network holders of
    # the nodes, the broker and Toxiproxy
    assert len(containers) == 9
    # Anonymous volumes carry no label: follow them through the containers' mounts.
    volumes = {
        mount["Name"]
        for container in containers
        for mount in container.attrs["Mounts"]
        if mount["Type"] == "volume"
    }
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    assert docker_client.containers.list(all=True, filters=label) == []
    assert docker_client.networks.list(filters=label) == []
    assert volumes.isdisjoint(v.name for v in docker_client.volumes.list())
    assert list((tmp_path / "state" / "active").glob("*.json")) == []


def test_every_link_toxic_on_the_container_toxiproxy(docker_cluster):
    session = docker_cluster
    session.heal_all()
    session.inject(F.Blackhole(src=["n2"], dst=["n3"], direction="one_way"))
    t = time.monotonic() + 0.3
    time.sleep(1.0)
    assert heartbeats(session, "n3", "n2", t) == [] and heartbeats(session, "n2", "n3", t)
    ops = [
        F.Bandwidth(src=["n1"], dst=["n3"], direction="one_way", rate_kbps=64),
        F.ResetPeer(src=["n1"], dst=["n2"], direction="one_way", timeout_ms=100),
        F.Slicer(src=["n3"], dst=["n1"], direction="one_way"),
        F.LimitData(src=["n3"], dst=["n2"], direction="one_way", limit_bytes=4096),
        F.SlowClose(src=["n2"], dst=["n1"], direction="one_way", delay_ms=200),
    ]
    toxiproxy = session.backend.toxiproxy  # control and bulk proxies on two servers
    for op in ops:
        session.inject(op)
        (src,), (dst,) = op.src, op.dst
        for channel in ("control", "bulk"):
            name = f"{src}__{dst}__{channel}"
            toxics = session.call(toxiproxy.server_for(name).client.toxics(name))
            assert [t.name for t in toxics] == [op.name], (op.name, channel, toxics)
    t = time.monotonic()
    wait_for(lambda: [r for r in observed(session, "n1", t, "link_broken") if r["peer"] == "n2"],
             what="reset_peer breaks n1→n2")  # fmt: skip
    session.heal_all()
    for src, dst in (("n1", "n3"), ("n2", "n3")):
        assert session.call(toxiproxy.control.client.toxics(f"{src}__{dst}__control")) == []


def test_churn_byzantine_and_checkpoint_corrupt_on_containers(docker_cluster):
    session = docker_cluster
    session.heal_all()
    t = time.monotonic()
    session.inject(F.Byzantine(nodes=["n1"], mode="sign_flip", scale=5))
    command = wait_for(
        lambda: observed(session, "n1", t, "command"), what="set_byzantine reaches n1"
    )
    assert command[0]["command"]["behaviour"]["mode"] == "sign_flip"
    session.inject(F.Pause(nodes=["n2"]))  # no new checkpoint while we look
    newest = max(session.spec.checkpoint_dir("n2").glob("ckpt-*.bin"))
    session.inject(F.CheckpointCorrupt(nodes=["n2"], mode="truncate"))
    assert newest.stat().st_size == 4096
    session.inject(F.Resume(nodes=["n2"]))
    session.inject(F.Churn(events_per_min=300, down_s=0.5, min_alive=2))
    time.sleep(3.0)
    session.heal(F.Churn(events_per_min=300))
    departures = [
        op for _, op, phase in session.nemesis.applied if op == "crash" and phase == "inject"
    ]
    assert departures and all(session.backend.node(n).is_running() for n in session.spec.nodes)
