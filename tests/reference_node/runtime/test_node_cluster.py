"""Real node processes on loopback with a real broker: train, crash, rejoin, lose the broker.

One cluster per test (starting four nodes costs tens of seconds on a small
machine), so each test walks through several phases in order.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import time
import urllib.request

import aiomqtt
import msgspec
import pytest

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.launcher import LocalCluster
from swarmshake.reference_node.runtime.mqtt_messages import harness_key, sign

pytestmark = pytest.mark.slow
NODES = ["n1", "n2", "n3", "n4"]
TRAINING = {"hidden": [256, 256, 256]}  # ~0.14M parameters: CI-sized


def steps(cluster: LocalCluster, nodes: list[str]) -> dict[str, int]:
    return {n: (cluster.status(n) or {}).get("step", -1) for n in nodes}


def fingerprints_by_step(cluster: LocalCluster) -> dict[int, dict[str, str]]:
    """step -> {node: param_fp after applying it} from every node's commit events."""
    table: dict[int, dict[str, str]] = {}
    for path in (cluster.run_dir / "events").glob("*.jsonl"):
        for event in history.read_events(path).events:
            if isinstance(event, history.Commit):
                table.setdefault(event.step, {})[event.node] = event.param_fp
    return table


def advance(cluster: LocalCluster, nodes: list[str], by: int, timeout_s: float, what: str) -> None:
    start = steps(cluster, nodes)
    cluster.wait_for(
        lambda: all(s >= start[n] + by for n, s in steps(cluster, nodes).items()),
        timeout_s,
        what=f"{nodes} advance {by} steps ({what}); at {steps(cluster, nodes)}",
    )


def commits_after_last_rejoin(cluster: LocalCluster, node: str) -> int:
    """Steps ``node``'s newest incarnation committed past the state it last installed."""
    events = history.read_events(cluster.run_dir / "events" / f"{node}.jsonl").events
    newest = max((e.incarnation for e in events if isinstance(e, history.Start)), default=0)
    mine = [e for e in events if e.incarnation == newest]
    done = [e for e in mine if isinstance(e, history.RejoinDone)]
    if not done:
        return 0
    return sum(1 for e in mine if isinstance(e, history.Commit) and e.step > done[-1].step)


def restarted_node_story(cluster: LocalCluster, node: str, last: int = 40) -> str:
    """``node``'s newest incarnation as a failure message: event counts, its last
    events, every node's status step and view now, and its log's tail."""
    events = history.read_events(cluster.run_dir / "events" / f"{node}.jsonl").events
    newest = max((e.incarnation for e in events if isinstance(e, history.Start)), default=0)
    mine = [e for e in events if e.incarnation == newest]
    counts = collections.Counter(kind_of(e) for e in mine)
    lines = [f"{node} incarnation {newest}: {dict(counts)}", f"its last {last} events:"]
    for event in mine[-last:]:
        fields = {k: v for k, v in msgspec.structs.asdict(event).items() if k not in SKIPPED}
        lines.append(f"  {event.t_mono:.3f} {kind_of(event)} {fields}")
    for name in NODES:
        status = cluster.status(name) or {}
        lines.append(f"{name} now: step {status.get('step')} view {status.get('view')}")
    lines.append(f"{node}'s log:\n{cluster.log_tail(node, 40)}")
    return "\n".join(lines)


SKIPPED = {"t_wall", "t_mono", "node", "incarnation", "lamport"}


def kind_of(event: history.EventBase) -> str:
    return type(event).__struct_config__.tag


@pytest.fixture
def cluster_with_broker(tmp_path, broker):
    cluster = LocalCluster(
        tmp_path / "run",
        NODES,
        training=TRAINING,
        mqtt=broker.node_mqtt("swarmshake/test", backoff_initial_s=0.1, backoff_max_s=0.5),
    )
    cluster.start_all()
    try:
        yield cluster, broker
    finally:
        cluster.stop_all()


def test_train_crash_rejoin_and_broker_loss(cluster_with_broker):
    cluster, broker = cluster_with_broker
    cluster.wait_ready(timeout_s=240)
    advance(cluster, NODES, 3, 120, "training starts")

    # Every step every node committed has one fingerprint (S1, as seen here).
    for step, by_node in fingerprints_by_step(cluster).items():
        assert len(set(by_node.values())) == 1, (step, by_node)

    # Losing the broker does not stop training.
    broker.stop()
    cluster.wait_for(
        lambda: not any((cluster.status(n) or {}).get("mqtt", {}).get("connected") for n in NODES),
        30,
        what="nodes notice the broker is gone",
    )
    advance(cluster, NODES, 5, 120, "broker down")
    broker.start()
    cluster.wait_for(
        lambda: all((cluster.status(n) or {}).get("mqtt", {}).get("connected") for n in NODES),
        30,
        what="nodes reconnect to the broker",
    )

    # SIGKILL one node: the others keep committing.
    cluster.kill("n4", signal.SIGKILL)
    advance(cluster, ["n1", "n2", "n3"], 5, 120, "n4 killed")
    dead_views = [(cluster.status(n) or {}).get("view", []) for n in ("n1", "n2", "n3")]
    assert all("n4" not in view for view in dead_views), dead_views

    # Restart it: it rejoins with the majority's fingerprint.
    cluster.start("n4")
    cluster.wait_ready(["n4"], timeout_s=240)
    advance(cluster, NODES, 3, 120, "n4 rejoined")
    # A step count that went up may be rejoins only (under load the cluster can move
    # two steps during a transfer, and the node transfers again): wait for a step n4
    # committed itself after its last rejoin, and for the others to commit too.
    try:
        cluster.wait_for(
            lambda: commits_after_last_rejoin(cluster, "n4") >= 2,
            120,
            what=f"n4 commits 2 steps after its last rejoin; at {steps(cluster, NODES)}",
        )
    except TimeoutError as error:
        # Once in CI (stop 31) n4 committed nothing after its last rejoin for 120 s and
        # the run said no more: what it was doing is what a reader needs.
        raise AssertionError(f"{error}\n{restarted_node_story(cluster, 'n4')}") from None
    n4_events = history.read_events(cluster.run_dir / "events" / "n4.jsonl").events
    # Refutations during the first run may have raised n4's incarnation above 1.
    restarted = max(e.incarnation for e in n4_events if isinstance(e, history.Start))
    assert restarted >= 2
    done = [
        e for e in n4_events if isinstance(e, history.RejoinDone) and e.incarnation == restarted
    ]
    assert done and done[-1].verified and done[-1].source in ("n1", "n2", "n3")
    table = fingerprints_by_step(cluster)
    rejoined_steps = [s for s, by_node in table.items() if "n4" in by_node and s > done[-1].step]
    assert rejoined_steps, "n4 committed nothing after rejoining"
    for step in rejoined_steps:
        assert len(set(table[step].values())) == 1, (step, table[step])
    for step, by_node in table.items():
        assert len(set(by_node.values())) == 1, (step, by_node)

    # The state n4 installed is exactly what the majority committed at that step.
    installed = done[-1].step  # the last committed step the transferred state holds
    assert done[-1].param_fp == table[installed]["n1"]
    # The restarted node runs honest from the installed state on, and says so for replay.
    honest = [
        e
        for e in n4_events
        if isinstance(e, history.ByzantineSwitch)
        and e.incarnation == restarted
        and e.mode == "honest"
    ]
    assert honest and honest[-1].step == installed + 1, honest

    # /infer runs the current model; a harness command switches n3 to sign-flip.
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.ports['n1']['http']}/infer",
        data=json.dumps({"inputs": [[0.5] * 32, [-0.5] * 32]}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        outputs = json.loads(response.read())["outputs"]
    assert len(outputs) == 2 and all(len(row) == 8 for row in outputs)
    topic = "swarmshake/test/nodes/n3/command"
    command = b'{"command": "set_byzantine", "behaviour": {"mode": "sign_flip"}}'
    key = harness_key(bytes.fromhex(cluster.run_key_hex))  # signed as the harness signs
    asyncio.run(publish(broker, topic, sign(key, topic, 1, command)))
    cluster.wait_for(
        lambda: any(
            isinstance(e, history.ByzantineSwitch) and e.mode == "sign_flip"
            for e in history.read_events(cluster.run_dir / "events" / "n3.jsonl").events
        ),
        30,
        what="n3 logs its switch to sign_flip",
    )

    ports = json.loads((cluster.run_dir / "nodes" / "n4" / "ports.json").read_text())
    assert ports["incarnation"] == restarted

    # The node dies as a whole: a killed worker takes its control process down,
    # and a SIGKILLed control process takes its worker down.
    status = cluster.status("n2")
    os.kill(status["worker_pid"], signal.SIGKILL)
    assert cluster.processes["n2"].wait(timeout=30) == 3
    status = cluster.status("n1")
    cluster.kill("n1", signal.SIGKILL)
    # Not cluster.wait_for: it fails on any node's non-kill exit, and n2's 3 is expected.
    deadline = time.monotonic() + 10
    while pid_alive(status["worker_pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(status["worker_pid"]), "n1's worker outlived its control process"


async def publish(broker, topic: str, payload: bytes) -> None:
    async with aiomqtt.Client(
        "127.0.0.1", broker.port, username=broker.user, password=broker.password, timeout=5
    ) as client:
        await client.publish(topic, payload, qos=1)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not alive either.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False
