"""Real node processes: membership changes through committed steps (DESIGN).

A node started with ``join = true`` becomes a learner through a committed ``add``,
fetches the state, and is promoted to voter through a committed ``promote`` once it
has caught up; a clean leave (the harness's MQTT ``leave`` command) removes the
node through a committed ``remove`` before it stops.  One cluster walks through all
of it (starting nodes costs tens of seconds on a small machine).
"""

from __future__ import annotations

import asyncio
import tomllib

import aiomqtt
import pytest

from swarmshake.reference_node.config import to_toml
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.launcher import LocalCluster
from swarmshake.reference_node.runtime.mqtt_messages import Leave, harness_key, sign

pytestmark = pytest.mark.slow
TRAINING = {"hidden": [64, 64]}  # small: the protocol is under test, not the model
PREFIX = "swarmshake/membership-test"


def events_of(cluster: LocalCluster, node: str) -> list[history.EventBase]:
    return history.read_events(cluster.run_dir / "events" / f"{node}.jsonl").events


def rewrite_config(cluster: LocalCluster, node: str, **node_fields: object) -> None:
    raw = tomllib.loads(cluster.config_path(node).read_text())
    raw["node"].update(node_fields)
    cluster.config_path(node).write_text(to_toml(raw))


def membership(cluster: LocalCluster, node: str) -> dict:
    return ((cluster.status(node) or {}).get("commit") or {}).get("membership") or {}


def step_of(cluster: LocalCluster, node: str) -> int:
    return (cluster.status(node) or {}).get("step", -1)


def advance(cluster: LocalCluster, nodes: list[str], by: int, what: str) -> None:
    start = {n: step_of(cluster, n) for n in nodes}
    cluster.wait_for(
        lambda: all(step_of(cluster, n) >= start[n] + by for n in nodes),
        90,
        what=f"{nodes} advance {by} steps ({what})",
    )


async def publish(broker, topic: str, payload: bytes) -> None:
    async with aiomqtt.Client(
        "127.0.0.1", broker.port, username=broker.user, password=broker.password, timeout=5
    ) as client:
        await client.publish(topic, payload, qos=1)


def test_join_as_learner_promote_then_clean_leave(tmp_path, broker):
    cluster = LocalCluster(
        tmp_path / "run",
        ["n1", "n2", "n3", "n4"],
        training=TRAINING,
        mqtt=broker.node_mqtt(PREFIX),
    )
    # n1-n3 form the configured cluster; n4 knows their addresses and asks to join.
    for node in ("n1", "n2", "n3"):
        rewrite_config(cluster, node, members=["n1", "n2", "n3"])
    rewrite_config(cluster, "n4", join=True)
    try:
        for node in ("n1", "n2", "n3"):
            cluster.start(node)
        cluster.wait_ready(["n1", "n2", "n3"], timeout_s=180)
        advance(cluster, ["n1", "n2", "n3"], 3, "the first three train")

        cluster.start("n4")
        cluster.wait_for(
            lambda: (
                membership(cluster, "n1").get("voters") == ["n1", "n2", "n3", "n4"]
                and membership(cluster, "n4").get("role") == "voter"
            ),
            120,
            what="n4 added, caught up and promoted",
        )
        advance(cluster, ["n1", "n2", "n3", "n4"], 3, "four voters")

        changes = [e for e in events_of(cluster, "n1") if isinstance(e, history.ConfigChange)]
        assert [(c.change, c.peer) for c in changes] == [("add", "n4"), ("promote", "n4")]
        added, promoted = changes
        assert added.voters == ["n1", "n2", "n3"] and added.learners == ["n4"]
        assert promoted.voters == ["n1", "n2", "n3", "n4"] and promoted.learners == []
        assert added.step < promoted.step
        # Every node logged the same changes at the same steps (they are committed).
        for node in ("n2", "n3"):
            theirs = [
                (e.step, e.change, e.peer)
                for e in events_of(cluster, node)
                if isinstance(e, history.ConfigChange)
            ]
            assert theirs == [(c.step, c.change, c.peer) for c in changes]
        # The joiner fetched the state (never trained from step 0) and then voted.
        n4_events = events_of(cluster, "n4")
        done = [e for e in n4_events if isinstance(e, history.RejoinDone)]
        assert done and done[0].source in ("n1", "n2", "n3") and done[0].step >= added.step
        assert not any(isinstance(e, history.TrainStep) and e.step <= added.step for e in n4_events)
        assert any(isinstance(e, history.Accept) for e in n4_events)
        # Commits after the promotion count n4 among the voters; one fingerprint per step.
        by_step: dict[int, set[str]] = {}
        for node in cluster.nodes:
            for event in events_of(cluster, node):
                if isinstance(event, history.Commit):
                    by_step.setdefault(event.step, set()).add(event.param_fp)
                    if event.step > promoted.step:
                        assert "n4" in event.voters, event
                    elif event.step <= added.step:
                        assert event.voters == ["n1", "n2", "n3"], event
        assert all(len(fps) == 1 for fps in by_step.values()), by_step

        # A clean leave: n2 is removed through a committed step, then stops by itself.
        # Signed as the harness signs (MAC under the run key, a sequence number).
        topic = f"{PREFIX}/nodes/n2/command"
        leave = sign(harness_key(bytes.fromhex(cluster.run_key_hex)), topic, 1, Leave())
        asyncio.run(publish(broker, topic, leave))
        assert cluster.processes["n2"].wait(timeout=60) == 0
        removed = [
            e
            for e in events_of(cluster, "n1")
            if isinstance(e, history.ConfigChange) and e.change == "remove"
        ]
        assert len(removed) == 1 and removed[0].peer == "n2"
        assert removed[0].voters == ["n1", "n3", "n4"]
        n2_stop = [e for e in events_of(cluster, "n2") if isinstance(e, history.Stop)]
        # It saw the step that removed it, or a member told it first (LeaveConfirmed
        # is sent when the removal commits): both are its removal.
        reason = n2_stop[-1].reason if n2_stop else ""
        assert "removed at step" in reason or "removal confirmed by n" in reason, reason
        advance(cluster, ["n1", "n3", "n4"], 3, "after n2 left")
        assert membership(cluster, "n3").get("voters") == ["n1", "n3", "n4"]
    finally:
        cluster.stop_all()
