"""Harness → node commands and address books over MQTT, logged in and signed.

One short-lived aiomqtt connection per command: commands are rare (a fault op),
and a fresh connection cannot be left half-broken by an earlier broker fault.
QoS 1, so the broker acknowledges that it took the command.

The harness logs in as its own broker user (``chaos/mosquitto.py``: only it may
publish commands and address books) and signs each payload with the run key and a
sequence number (``mqtt_messages.sign``).  The sequence is one counter per run, kept
in the run directory under a file lock, so every publisher of a run (the runner, a
``swarmshake up`` daemon restarted on the same run) counts up from where the last
stopped, and a node that persisted the highest number it took refuses any older one.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import aiomqtt

from swarmshake.chaos.backends.base import BackendError
from swarmshake.reference_node.runtime.mqtt_messages import (
    MAX_SEQ,
    AddressBookUpdate,
    Command,
    Topics,
    harness_key,
    sign,
)

COMMAND_DEADLINE_S = 3.0  # connect + publish on loopback takes milliseconds
_client_ids = itertools.count(1)


class HarnessSequence:
    """The run's harness sequence counter: a decimal in ``path``, bumped under flock."""

    def __init__(self, path: Path):
        self.path = path

    def next(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Held for a read and a write of a few bytes; other publishers wait that long.
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            text = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
            try:
                current = int(text or "0")
            except ValueError:
                raise BackendError(f"{self.path}: not a sequence number: {text!r}") from None
            if not 0 <= current < MAX_SEQ:
                raise BackendError(f"{self.path}: sequence {current} out of range")
            seq = current + 1
            encoded = f"{seq}\n".encode()
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, encoded, 0)
            os.fsync(descriptor)  # a restarted harness must not hand out this number again
            return seq
        finally:
            os.close(descriptor)  # closing releases the lock


@dataclass(frozen=True)
class HarnessMqtt:
    """Everything the harness needs to publish to one run's nodes."""

    host: str
    port: int
    username: str
    password: str
    topic_prefix: str
    run_key: bytes
    sequence: HarnessSequence

    def _client(self, role: str) -> aiomqtt.Client:
        return aiomqtt.Client(
            self.host,
            self.port,
            username=self.username,
            password=self.password,
            identifier=f"harness-{os.getpid()}-{role}-{next(_client_ids)}",
            timeout=COMMAND_DEADLINE_S,
        )

    def signed(self, topic: str, message: object) -> bytes:
        return sign(harness_key(self.run_key), topic, self.sequence.next(), message)

    async def command(self, node: str, command: Command) -> None:
        topic = Topics(self.topic_prefix, node).command()
        try:
            async with asyncio.timeout(COMMAND_DEADLINE_S), self._client(node) as client:
                await client.publish(topic, self.signed(topic, command), qos=1)
        except (TimeoutError, aiomqtt.MqttError) as error:
            raise BackendError(
                f"command {type(command).__name__} to {node} not delivered: {error!r}"
            ) from None

    async def address_books(self, books: dict[str, AddressBookUpdate]) -> None:
        """Publish each node's address book, retained (a node restarted later reads it)."""
        try:
            async with asyncio.timeout(COMMAND_DEADLINE_S), self._client("books") as client:
                for node, book in books.items():
                    topic = Topics(self.topic_prefix, node).address_book()
                    await client.publish(topic, self.signed(topic, book), qos=1, retain=True)
        except (TimeoutError, aiomqtt.MqttError) as error:
            raise BackendError(f"address books not published: {error!r}") from None
