"""MQTT agent against a real Mosquitto: discovery, commands, bad payloads, broker loss."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import aiomqtt
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmshake.reference_node.runtime.links import PeerAddress
from swarmshake.reference_node.runtime.mqtt import MqttAgent, MqttSettings
from swarmshake.reference_node.runtime.mqtt_messages import (
    Announcement,
    ForceCheckpoint,
    SetByzantine,
    Topics,
    decode_announcement,
    encode,
    harness_key,
    sign,
)

PREFIX = "swarmshake/test"
MQTT_USER, MQTT_PASSWORD = "node", "s3cret-test"  # the broker fixture's credentials
RUN_KEY = bytes(range(32))
_seqs = iter(range(1, 1 << 30))


def signed(topic: str, body: bytes) -> bytes:
    """``body`` as the harness sends it on ``topic``: MACed, with a fresh sequence number."""
    return sign(harness_key(RUN_KEY), topic, next(_seqs), body)


def settings_for(port: int, **kw) -> MqttSettings:
    return MqttSettings(
        host="127.0.0.1",
        port=port,
        username=MQTT_USER,
        password=MQTT_PASSWORD,
        topic_prefix=PREFIX,
        keepalive_s=1,
        backoff_initial_s=0.05,
        backoff_max_s=0.2,
        **kw,
    )


def make_agent(node: str, port: int, **callbacks) -> tuple[MqttAgent, list]:
    got: list = []
    agent = MqttAgent(
        settings_for(port),
        node_id=node,
        announcement=Announcement(
            node=node,
            incarnation=1,
            address=PeerAddress(host="127.0.0.1", control_port=7000, bulk_port=7001),
        ),
        on_command=got.append,
        on_address_book=got.append,
        on_announcement=got.append,
        run_key=RUN_KEY,
        **callbacks,
    )
    return agent, got


async def wait_for(predicate, timeout_s=10.0):
    async with asyncio.timeout(timeout_s):
        while not predicate():  # noqa: ASYNC110 - polls state other tasks and processes change
            await asyncio.sleep(0.02)


async def harness_publish(port: int, topic: str, payload: bytes, retain: bool = False) -> None:
    async with aiomqtt.Client(
        "127.0.0.1", port, username=MQTT_USER, password=MQTT_PASSWORD, timeout=2
    ) as client:
        await client.publish(topic, payload, qos=1, retain=retain)


def test_discovery_commands_and_bad_payloads(broker):
    assert (broker.user, broker.password) == (MQTT_USER, MQTT_PASSWORD)

    async def main():
        a, got_a = make_agent("a", broker.port)
        b, got_b = make_agent("b", broker.port)
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(a.run()), group.create_task(b.run())]
            await wait_for(
                lambda: any(isinstance(m, Announcement) and m.node == "b" for m in got_a)
            )
            topics = Topics(PREFIX, "a")
            bad = [
                b"not json",
                b"{}",
                b'{"command": "launch_missiles"}',
                b'{"command": "set_byzantine", "behaviour": {"mode": "sign_flip", "magnitude": "x"}}',
                b'{"command": "set_clock", "offset_s": 1e9}',
                b"[" * 70_000,
            ]
            # Correctly signed, but not a command: each is counted by what is wrong.
            for payload in bad:
                await harness_publish(
                    broker.port, topics.command(), signed(topics.command(), payload)
                )
            byzantine = b'{"command": "set_byzantine", "behaviour": {"mode": "sign_flip"}}'
            good = signed(topics.command(), byzantine)
            await harness_publish(broker.port, topics.command(), good)
            # Unsigned (what an anonymous client sent in issue 16), a MAC under another
            # key, the good one again (a replay), and a's command sent to b.
            await harness_publish(broker.port, topics.command(), byzantine)
            forged = sign(harness_key(b"not the run key!"), topics.command(), 10**6, byzantine)
            await harness_publish(broker.port, topics.command(), forged)
            await harness_publish(broker.port, topics.command(), good)
            await harness_publish(broker.port, Topics(PREFIX, "b").command(), good)
            broadcast = topics.broadcast_command()
            checkpoint = signed(broadcast, b'{"command": "force_checkpoint"}')
            await harness_publish(broker.port, broadcast, checkpoint)
            await wait_for(lambda: any(isinstance(m, ForceCheckpoint) for m in got_a))
            await wait_for(lambda: any(isinstance(m, ForceCheckpoint) for m in got_b))
            assert [m.behaviour.mode for m in got_a if isinstance(m, SetByzantine)] == ["sign_flip"]
            assert not any(isinstance(m, SetByzantine) for m in got_b)
            assert a.stats.bad_payloads == {
                "command:malformed": 5,
                "command:oversized": 1,
                "command:unsigned": 1,
                "command:bad_mac": 1,
                "command:replay": 1,
            }
            assert b.stats.bad_payloads == {"command:bad_mac": 1}
            assert (a.stats.commands, b.stats.commands) == (2, 1)
            for task in tasks:
                task.cancel()

    asyncio.run(main())


def test_broker_loss_and_return(broker):
    async def main():
        a, _ = make_agent("a", broker.port)
        async with asyncio.TaskGroup() as group:
            task = group.create_task(a.run())
            await wait_for(lambda: a.connected)
            broker.stop()
            await wait_for(lambda: not a.connected)
            for i in range(300):  # telemetry keeps flowing into the bounded outbox
                a.publish_telemetry({"i": i})
            assert a.stats.outbox_dropped >= 300 - a.settings.outbox_messages
            await asyncio.sleep(0.5)
            assert a.stats.connect_failures >= 1
            broker.start()
            await wait_for(lambda: a.connected and a.stats.connects == 2)
            await wait_for(lambda: not a._outbox)  # the backlog is delivered
            task.cancel()

    asyncio.run(main())


def test_last_will_marks_a_killed_node_offline(broker, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio
        from swarmshake.reference_node.runtime.mqtt import MqttAgent, MqttSettings
        from swarmshake.reference_node.runtime.mqtt_messages import Announcement
        agent = MqttAgent(
            MqttSettings(host="127.0.0.1", port={broker.port}, username="{MQTT_USER}",
                         password="{MQTT_PASSWORD}", topic_prefix="{PREFIX}", keepalive_s=1),
            node_id="k", announcement=Announcement(node="k", incarnation=3), on_command=print,
            run_key=bytes(16))
        async def main():
            task = asyncio.create_task(agent.run())
            while not agent.connected:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            print("ready", flush=True)
            await task
        asyncio.run(main())
    """)
    )
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"

        async def watch():
            async with aiomqtt.Client(
                "127.0.0.1", broker.port, username=MQTT_USER, password=MQTT_PASSWORD, timeout=2
            ) as client:
                await client.subscribe(Topics(PREFIX, "k").announce(), qos=1)
                states = []
                async with asyncio.timeout(10):
                    async for message in client.messages:
                        states.append(decode_announcement(message.payload).state)
                        if states == ["online"]:
                            process.kill()
                        if states[-1] == "offline":
                            return states

        assert asyncio.run(watch()) == ["online", "offline"]
    finally:
        process.kill()
        process.wait()


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["command", "addressbook", "announce", "broadcast"]),
    st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.text(max_size=8), inner, max_size=4)
            ),
            max_leaves=10,
        ).map(encode),
        st.fixed_dictionaries(
            {
                "command": st.sampled_from(
                    ["set_byzantine", "force_checkpoint", "set_clock", "leave", "x"]
                )
            },
            optional={
                "behaviour": st.dictionaries(
                    st.sampled_from(["mode", "magnitude", "seed"]),
                    st.integers() | st.text(max_size=12),
                ),
                "offset_s": st.floats(),
                "drift_ppm": st.floats(),
                "reason": st.text(max_size=200),
            },
        ).map(encode),
    ),
    st.booleans(),
)
def test_fuzzed_payloads_never_crash_and_are_counted(kind, payload, wrap_signed):
    agent, got = make_agent("a", 1)
    topics = agent.topics
    topic = {
        "command": topics.command(),
        "broadcast": topics.broadcast_command(),
        "addressbook": topics.address_book(),
        "announce": topics.announce("b"),
    }[kind]
    if wrap_signed and kind != "announce" and payload:
        # Past the MAC and the sequence check, so the body's own validation is fuzzed.
        try:
            payload.decode()  # a body travels as a JSON string: UTF-8 only
            payload = signed(topic, payload)
        except UnicodeDecodeError:
            pass
    agent.handle_message(topic, payload)
    bad = sum(agent.stats.bad_payloads.values())
    # Each message is delivered to a callback or counted as bad, never raised; an
    # empty retained message (a cleared topic) is neither.
    cleared = kind in ("addressbook", "announce") and not payload
    assert len(got) + bad == (0 if cleared else 1)
