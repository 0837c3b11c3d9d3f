"""Nobody but the harness steers a cluster over MQTT (issue 16, DESIGN.md "MQTT").

The broker takes no anonymous client, and its ACL lets a node publish only its own
announcement and telemetry; commands and address books carry the harness's MAC and
a sequence number.  The last test is the attack of issue 16 against a real cluster:
an anonymous client, a node's credentials, a forged MAC and a replayed command, each
refused and counted, with training undisturbed.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import stat
import time
import tomllib
import urllib.request

import aiomqtt
import pytest

from swarmshake.chaos.backends import node_config
from swarmshake.chaos.backends.base import ClusterSpec
from swarmshake.chaos.backends.session import ClusterSession
from swarmshake.chaos.mosquitto import HARNESS_USER, BrokerAuth, MosquittoBroker
from swarmshake.reference_node import config as reference_config
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.links import PeerAddress
from swarmshake.reference_node.runtime.mqtt_messages import (
    AddressBookUpdate,
    ForceCheckpoint,
    Leave,
    SetByzantine,
    Topics,
    encode,
    harness_key,
    sign,
)
from swarmshake.reference_node.training.behaviour import ByzantineBehaviour

PREFIX = "swarmshake/acl-test"
DEADLINE_S = 10.0


def client(port: int, user: str | None = None, password: str | None = None) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1",
        port,
        username=user,
        password=password,
        identifier=f"test-{secrets.token_hex(4)}",
        timeout=DEADLINE_S,
    )


async def received_until_marker(
    watcher: aiomqtt.Client, marker_topic: str
) -> list[tuple[str, bytes]]:
    """Everything the watcher gets up to the harness's marker.  One publisher's
    messages arrive in order, so what the broker let through came before it."""
    seen = []
    async with asyncio.timeout(DEADLINE_S):
        async for message in watcher.messages:
            seen.append((str(message.topic), bytes(message.payload)))
            if str(message.topic) == marker_topic:
                return seen
    raise AssertionError("unreachable")


def test_the_acl_lets_a_node_publish_only_its_own_announcement_and_telemetry(tmp_path):
    auth = BrokerAuth.create(PREFIX, ("n1", "n2"))
    n1 = Topics(PREFIX, "n1")
    n2 = Topics(PREFIX, "n2")

    async def main():
        async with MosquittoBroker(workdir=tmp_path, auth=auth) as broker:
            port = broker.port
            for who in ((None, None), ("n1", "wrong"), ("nobody", auth.passwords["n1"])):
                with pytest.raises(aiomqtt.MqttError):
                    async with client(port, *who):
                        pass
            async with (
                client(port, HARNESS_USER, auth.harness_password) as harness,
                client(port, "n1", auth.passwords["n1"]) as node,
            ):
                await harness.subscribe(f"{PREFIX}/#", qos=1)
                denied = [
                    n2.command(),  # another node's commands
                    n1.command(),  # its own: only the harness commands
                    n1.broadcast_command(),
                    n2.address_book(),
                    n1.address_book(),
                    n2.announce(),  # another node's announcement
                    n2.telemetry(),
                ]
                for topic in denied:
                    await node.publish(topic, b'{"command": "leave"}', qos=1)
                allowed = [n1.announce(), n1.telemetry()]
                for topic in allowed:
                    await node.publish(topic, b"{}", qos=1)
                seen = await received_until_marker(harness, n1.telemetry())
                assert [topic for topic, _ in seen] == allowed

                # Reads: its own commands, not another node's.
                await node.subscribe(n1.command(), qos=1)
                await node.subscribe(n2.command(), qos=1)
                await harness.publish(n2.command(), b"for-n2", qos=1)
                await harness.publish(n1.command(), b"for-n1", qos=1)
                async with asyncio.timeout(DEADLINE_S):
                    message = await anext(node.messages)
                assert (str(message.topic), message.payload) == (n1.command(), b"for-n1")

    asyncio.run(main())
    for name in ("passwd", "acl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    # Hashed by mosquitto_passwd (PBKDF2-SHA512, "$7$"): no plaintext password on disk.
    text = (tmp_path / "passwd").read_text()
    assert all(password not in text for password in auth.passwords.values())
    assert all(line.split(":", 1)[1].startswith("$7$") for line in text.splitlines())


def test_node_config_keeps_secrets_in_0600_files_the_node_loader_reads(tmp_path):
    spec = ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=("n1", "n2"))
    raw = node_config.build(
        spec, "n1", listen_host="127.0.0.1", control_port=7001, bulk_port=7002,
        http_port=7003, peers={"n2": node_config.Endpoint("127.0.0.1", 7101, 7102)},
        broker_host="127.0.0.1", broker_port=1883, run_dir=str(tmp_path),
    )  # fmt: skip
    path = node_config.write(raw, tmp_path / "nodes" / "n1" / "node.toml")
    text = path.read_text()
    password = BrokerAuth.create(spec.topic_prefix, spec.nodes, spec.broker_secret_hex).passwords
    assert spec.run_key_hex not in text and password["n1"] not in text
    for name in ("run.key", "mqtt.password"):
        assert stat.S_IMODE((path.parent / name).stat().st_mode) == 0o600
    loaded = reference_config.load(path)
    assert loaded.run_key() == bytes.fromhex(spec.run_key_hex)
    assert loaded.mqtt is not None
    assert (loaded.mqtt.username, loaded.mqtt.password) == ("n1", password["n1"])
    # n1 gets its own password only: the broker secret and other passwords stay out.
    folder_text = "".join(p.read_text() for p in path.parent.iterdir())
    assert spec.broker_secret_hex not in folder_text and password["n2"] not in folder_text
    assert password[HARNESS_USER] not in folder_text

    (path.parent / "mqtt.password").unlink()
    with pytest.raises(reference_config.ConfigError, match="password_file"):
        reference_config.load(path)


# -- the attack of issue 16 against a real cluster -------------------------------------------


def status(session: ClusterSession, node: str) -> dict:
    port = session.backend.describe()["nodes"][node]["http_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as response:
        return json.loads(response.read())


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except OSError:
            value = None  # a restarting node's HTTP port is not up yet
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def events(session: ClusterSession, node: str) -> list:
    return history.read_events(session.run_dir / "events" / f"{node}.jsonl").events


def mqtt_drops(session: ClusterSession, node: str) -> list[str]:
    return [
        e.reason
        for e in events(session, node)
        if isinstance(e, history.FrameDrop) and e.peer == "mqtt"
    ]


@pytest.mark.slow
def test_anonymous_other_node_forged_and_replayed_commands_are_refused(tmp_path):
    run_id = f"auth-{secrets.token_hex(3)}"
    spec = ClusterSpec(
        run_id=run_id,
        run_dir=tmp_path / run_id,
        nodes=("n1", "n2", "n3"),
        node_config={"training": {"hidden": [16]}},
    )
    with ClusterSession("local", spec) as session:
        session.wait_until_steady(min_commit_step=2, timeout_s=180)
        backend = session.backend
        harness = backend.harness_mqtt()
        host, port = backend.broker_address()
        n1_password = (spec.run_dir / "nodes" / "n1" / "mqtt.password").read_text().strip()
        leave = encode(Leave(reason="attacker"))
        byzantine = encode(SetByzantine(behaviour=ByzantineBehaviour(mode="sign_flip")))
        n2, n3 = Topics(spec.topic_prefix, "n2"), Topics(spec.topic_prefix, "n3")
        start_steps = {n: status(session, n)["steps_committed"] for n in spec.nodes}

        async def attack() -> bytes:
            # 1. Anonymous, as in issue 16: the broker refuses the connection.
            with pytest.raises(aiomqtt.MqttError):
                async with client(port):
                    pass
            async with client(port, harness.username, harness.password) as watcher:
                await watcher.subscribe(n2.command(), qos=1)
                await watcher.subscribe(n3.command(), qos=1)
                # 2. As n1 (a Byzantine member has broker credentials): the ACL drops
                # its commands before they reach n2 or n3; the watcher sees only the
                # harness's own (signed, harmless) command that follows.
                async with client(port, "n1", n1_password) as node:
                    await node.publish(n2.command(), leave, qos=1)
                    await node.publish(n3.command(), byzantine, qos=1)
                    await node.publish(n2.address_book(), b'{"peers": {}}', qos=1, retain=True)
                await backend.send_command("n2", ForceCheckpoint(command_id="marker"))
                seen = await received_until_marker(watcher, n2.command())
                assert len(seen) == 1, seen
                captured = seen[0][1]
                assert b"marker" in captured and json.loads(captured)["mac"]
                # 3. Forged: the right topic and shape, a MAC under another key (someone
                # with the harness's broker login but not the run key).
                bad_key = harness_key(secrets.token_bytes(32))
                forged_leave = sign(bad_key, n2.command(), 10**9, Leave())
                forged_byzantine = sign(bad_key, n3.command(), 10**9, byzantine)
                await harness_publish(harness, n2.command(), forged_leave)
                await harness_publish(harness, n3.command(), forged_byzantine)
                # 4. Replayed: the captured valid command again, to n2 and to n3.
                await harness_publish(harness, n2.command(), captured)
                await harness_publish(harness, n3.command(), captured)
            return captured

        captured = session.call(attack(), 60)
        wait_for(
            lambda: (
                sorted(mqtt_drops(session, "n2")) == ["command:bad_mac", "command:replay"]
                and sorted(mqtt_drops(session, "n3")) == ["command:bad_mac", "command:bad_mac"]
            ),
            30,
            "n2 and n3 log the forged and replayed commands",
        )
        assert status(session, "n2")["mqtt"]["bad_payloads"] == {
            "command:bad_mac": 1,
            "command:replay": 1,
        }
        assert status(session, "n3")["mqtt"]["bad_payloads"] == {"command:bad_mac": 2}
        assert status(session, "n1")["mqtt"]["bad_payloads"] == {}
        # The one genuine command was taken; nothing else.
        assert status(session, "n2")["mqtt"]["commands"] == 1
        assert status(session, "n3")["mqtt"]["commands"] == 0

        # Training undisturbed: everyone keeps committing, nobody left, no switch.
        wait_for(
            lambda: all(
                status(session, n)["steps_committed"] >= start_steps[n] + 5 for n in spec.nodes
            ),
            120,
            "every node commits 5 more steps",
        )
        for node in spec.nodes:
            node_events = events(session, node)
            assert not any(isinstance(e, history.Stop) for e in node_events), node
            # A node that fell behind on this loaded machine installs a peer's state
            # and logs a switch back to honest (worker.py); only a switch to another
            # mode would be the forged command taking effect.
            switches = [e.mode for e in node_events if isinstance(e, history.ByzantineSwitch)]
            assert set(switches) <= {ByzantineBehaviour().mode}, (node, switches)
            assert sorted(status(session, node)["view"]) == list(spec.nodes)

        # The retained address book survives a restart: taken again by the new
        # incarnation, once, and not counted as a replay.
        book = tomllib.loads((spec.run_dir / "nodes" / "n2" / "node.toml").read_text())["peers"]
        update = AddressBookUpdate(peers={p: PeerAddress(**a) for p, a in book.items()})
        session.call(harness.address_books({"n2": update}), 30)
        wait_for(
            lambda: status(session, "n2")["mqtt"]["address_books"] == 1, 30, "n2 takes its book"
        )
        session.call(backend.node("n2").restart(), 60)
        wait_for(
            lambda: (
                status(session, "n2")["incarnation"] > 1
                and status(session, "n2")["mqtt"]["address_books"] == 1
            ),
            180,
            "restarted n2 takes the retained book",
        )
        assert status(session, "n2")["mqtt"]["bad_payloads"] == {}
        # A command recorded before the restart is still a replay after it (the node
        # persisted the highest sequence number it took).
        session.call(harness_publish(harness, n2.command(), captured), 30)
        wait_for(
            lambda: status(session, "n2")["mqtt"]["bad_payloads"] == {"command:replay": 1},
            30,
            "restarted n2 refuses the old command",
        )
        assert status(session, "n2")["mqtt"]["commands"] == 0
        assert sorted(mqtt_drops(session, "n2")) == [
            "command:bad_mac",
            "command:replay",
            "command:replay",
        ]


async def harness_publish(harness, topic: str, payload: bytes) -> None:
    async with client(harness.port, harness.username, harness.password) as connection:
        await connection.publish(topic, payload, qos=1)
