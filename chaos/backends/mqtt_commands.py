"""Harness → node commands over MQTT (clock skew, Byzantine mode, leave, checkpoint).

One short-lived aiomqtt connection per command: commands are rare (a fault op),
and a fresh connection cannot be left half-broken by an earlier broker fault.
QoS 1, so the broker acknowledges that it took the command.
"""

from __future__ import annotations

import asyncio

import aiomqtt

from swarmshake.chaos.backends.base import BackendError
from swarmshake.reference_node.runtime.mqtt_messages import Command, Topics, encode

COMMAND_DEADLINE_S = 3.0  # connect + publish on loopback takes milliseconds


async def publish_command(host: str, port: int, prefix: str, node: str, command: Command) -> None:
    topic = Topics(prefix, node).command()
    try:
        async with asyncio.timeout(COMMAND_DEADLINE_S):
            async with aiomqtt.Client(
                host, port, identifier=f"harness-{node}-{id(command)}"
            ) as client:
                await client.publish(topic, encode(command), qos=1)
    except (TimeoutError, aiomqtt.MqttError) as error:
        raise BackendError(
            f"command {type(command).__name__} to {node} not delivered: {error!r}"
        ) from None


async def publish_retained(host: str, port: int, topic: str, payload: bytes) -> None:
    try:
        async with asyncio.timeout(COMMAND_DEADLINE_S):
            async with aiomqtt.Client(host, port) as client:
                await client.publish(topic, payload, qos=1, retain=True)
    except (TimeoutError, aiomqtt.MqttError) as error:
        raise BackendError(f"publish to {topic} failed: {error!r}") from None
