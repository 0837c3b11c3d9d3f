"""Mosquitto (Debian package) with aiomqtt: what discovery and last-will notices rely on."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest

from swarmshake.chaos.mosquitto import HARNESS_USER, MosquittoBroker

DEADLINE_S = 10


@pytest.fixture
async def broker():
    async with MosquittoBroker() as running:
        yield running


def login(broker) -> dict:
    """The broker takes only logged-in clients (chaos/mosquitto.py)."""
    return {"username": HARNESS_USER, "password": broker.auth.harness_password}


async def test_anonymous_and_wrong_password_clients_are_refused(broker):
    for credentials in ({}, {"username": HARNESS_USER, "password": "guess"}):
        with pytest.raises(aiomqtt.MqttError):
            async with aiomqtt.Client("127.0.0.1", broker.port, timeout=DEADLINE_S, **credentials):
                pass


async def test_publish_subscribe_round_trip(broker):
    async with (
        aiomqtt.Client("127.0.0.1", broker.port, identifier="sub", **login(broker)) as subscriber,
        aiomqtt.Client("127.0.0.1", broker.port, identifier="pub", **login(broker)) as publisher,
    ):
        await subscriber.subscribe("swarmshake/test/#", qos=1)
        await publisher.publish("swarmshake/test/hello", b"payload-1", qos=1)
        async with asyncio.timeout(DEADLINE_S):
            message = await anext(subscriber.messages)
    assert str(message.topic) == "swarmshake/test/hello"
    assert message.payload == b"payload-1"


async def test_retained_announcement_reaches_a_late_subscriber(broker):
    async with aiomqtt.Client(
        "127.0.0.1", broker.port, identifier="announcer", **login(broker)
    ) as announcer:
        await announcer.publish(
            "swarmshake/nodes/n1", b'{"addr": "127.0.0.1:1"}', qos=1, retain=True
        )
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier="late", **login(broker)) as late:
        await late.subscribe("swarmshake/nodes/+", qos=1)
        async with asyncio.timeout(DEADLINE_S):
            message = await anext(late.messages)
    assert message.retain and message.payload == b'{"addr": "127.0.0.1:1"}'


async def test_last_will_is_delivered_when_the_connection_is_cut_through_toxiproxy(
    broker, toxiproxy
):
    proxy = await toxiproxy.create_proxy("broker", "127.0.0.1:0", f"127.0.0.1:{broker.port}")
    will = aiomqtt.Will("swarmshake/will/n1", b"gone", qos=1)
    async with aiomqtt.Client(
        "127.0.0.1", broker.port, identifier="watcher", **login(broker)
    ) as watcher:
        await watcher.subscribe("swarmshake/will/#", qos=1)
        client = aiomqtt.Client(
            "127.0.0.1",
            proxy.listen_port,
            identifier="n1",
            will=will,
            keepalive=60,
            **login(broker),
        )
        await client.__aenter__()
        try:
            await toxiproxy.set_enabled("broker", False)  # the node's link to the broker is cut
            async with asyncio.timeout(DEADLINE_S):
                message = await anext(watcher.messages)
        finally:
            try:
                await client.__aexit__(None, None, None)
            except aiomqtt.MqttError:
                pass  # its connection is gone: that was the point
    assert str(message.topic) == "swarmshake/will/n1"
    assert message.payload == b"gone"
