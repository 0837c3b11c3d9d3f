"""The node's MQTT agent (aiomqtt): discovery, harness commands, telemetry, last will.

MQTT is not on the critical path (DESIGN.md): the agent runs as one task of the
control process and never blocks anything else.  Publishing is fire-and-forget
into a bounded outbox; while the broker is away, the agent redials with capped
exponential backoff and training goes on.  On every (re)connect it re-publishes
its retained announcement and re-subscribes, so a restarted broker (which may
have lost retained state) learns the node again.

Commands and address books are taken only signed by the harness (``mqtt_messages``:
MAC under the run key, sequence number).  A forged, unsigned or replayed one is
dropped, counted in ``stats.bad_payloads`` and reported through ``on_drop`` (the node
logs it as a history event).  The highest accepted sequence numbers are kept in
``state_dir`` so a command recorded before a restart cannot be replayed after it; the
retained address book, delivered again on every (re)subscribe, is applied once.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import msgspec

from swarmshake.reference_node.runtime.durable import write_atomically
from swarmshake.reference_node.runtime.links import Backoff
from swarmshake.reference_node.runtime.mqtt_messages import (
    AddressBookUpdate,
    Announcement,
    Command,
    PayloadError,
    SequenceGuard,
    Topics,
    decode_address_book,
    decode_announcement,
    decode_command,
    encode,
    harness_key,
    open_signed,
)

log = logging.getLogger(__name__)


class MqttSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 1883
    username: str | None = None
    password: str | None = None
    # A file holding the password (the harness writes one per node, mode 0600, so the
    # secret is in neither the config nor a command line); relative to the config's
    # folder.  The config loader reads it into ``password``.
    password_file: str = ""
    topic_prefix: str = "swarmshake/default"
    # The broker pings every keepalive; a dead broker is noticed within ~1.5x.
    keepalive_s: int = 5
    # Every MQTT operation (connect, subscribe, publish) gets this deadline.
    operation_timeout_s: float = 2.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 5.0
    # Telemetry is a stream of samples; 256 pending ones cover a minute of broker
    # loss at the default rate, older ones are worthless once newer exist.
    outbox_messages: int = 256


@dataclass
class MqttStats:
    connects: int = 0
    connect_failures: int = 0
    disconnects: int = 0
    published: int = 0
    outbox_dropped: int = 0
    commands: int = 0
    address_books: int = 0
    # A retained address book delivered again (every reconnect does): applied once.
    duplicates: int = 0
    bad_payloads: dict[str, int] = field(default_factory=dict)

    def count_bad(self, topic_kind: str, reason: str) -> None:
        key = f"{topic_kind}:{reason}"
        self.bad_payloads[key] = self.bad_payloads.get(key, 0) + 1


class MqttAgent:
    """Keeps one node connected to the broker as long as it runs.

    Callbacks are plain functions run on the control loop: ``on_command(cmd)``,
    ``on_address_book(update)``, ``on_announcement(announcement)`` (peers' ones),
    ``on_drop(topic_kind, reason)`` for every payload dropped.  ``run_key`` checks the
    harness's MACs; ``state_dir`` (None: nothing persisted) keeps the sequence floors.
    """

    SEQ_FILE = "mqtt_seq.json"

    def __init__(
        self,
        settings: MqttSettings,
        *,
        node_id: str,
        announcement: Announcement,
        run_key: bytes,
        on_command: Callable[[Command], None],
        on_address_book: Callable[[AddressBookUpdate], None] | None = None,
        on_announcement: Callable[[Announcement], None] | None = None,
        on_drop: Callable[[str, str], None] | None = None,
        state_dir: Path | None = None,
        seed: int = 0,
    ):
        self.settings = settings
        self.node_id = node_id
        self.topics = Topics(settings.topic_prefix, node_id)
        self._key = harness_key(run_key)
        self._on_drop = on_drop
        self._state_dir = state_dir
        floors = self._persisted = self._load_floors()
        self.command_seqs = SequenceGuard(floors.get("command", 0))
        # The book persisted last is still the retained one after a restart: take it
        # again, once (applying a book twice is harmless; an older one is refused).
        self.book_seqs = SequenceGuard(floors.get("addressbook", 0) - 1)
        self.announcement = announcement
        self._on_command = on_command
        self._on_address_book = on_address_book
        self._on_announcement = on_announcement
        self._backoff = Backoff(
            settings.backoff_initial_s,
            settings.backoff_max_s,
            random.Random(f"mqtt/{seed}/{node_id}"),
        )
        self._outbox: collections.deque[tuple[str, bytes, bool]] = collections.deque()
        self._outbox_ready = asyncio.Event()
        self.stats = MqttStats()
        self.connected = False

    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> None:
        """Queue a message; never blocks.  A full outbox drops its oldest entry."""
        if len(self._outbox) >= self.settings.outbox_messages:
            self._outbox.popleft()
            self.stats.outbox_dropped += 1
        self._outbox.append((topic, payload, retain))
        self._outbox_ready.set()

    def publish_telemetry(self, sample: object) -> None:
        self.publish(self.topics.telemetry(), encode(sample))

    def update_announcement(self, announcement: Announcement) -> None:
        self.announcement = announcement
        self.publish(self.topics.announce(), encode(announcement), retain=True)

    def _will(self) -> aiomqtt.Will:
        offline = msgspec.structs.replace(self.announcement, state="offline")
        return aiomqtt.Will(self.topics.announce(), encode(offline), qos=1, retain=True)

    async def run(self) -> None:
        """Connect, serve, and reconnect with backoff, until cancelled."""
        while True:
            try:
                await self._session()
            except* (aiomqtt.MqttError, OSError, TimeoutError) as group:
                if self.connected:
                    self.stats.disconnects += 1
                else:
                    self.stats.connect_failures += 1
                log.info("mqtt: %s; reconnecting", group.exceptions[0])
            self.connected = False
            await asyncio.sleep(self._backoff.next_delay_s())

    async def _session(self) -> None:
        settings = self.settings
        client = aiomqtt.Client(
            settings.host,
            settings.port,
            username=settings.username,
            password=settings.password,
            identifier=f"{self.node_id}-{self.announcement.incarnation}",
            will=self._will(),
            keepalive=settings.keepalive_s,
            timeout=settings.operation_timeout_s,
            # Bounds inbound messages buffered while the loop is busy (commands and
            # announcements are rare; a flood is dropped by paho, not buffered).
            max_queued_incoming_messages=1024,
        )
        async with client:
            self.connected = True
            self.stats.connects += 1
            self._backoff.reset()
            timeout = settings.operation_timeout_s
            await client.publish(
                self.topics.announce(),
                encode(self.announcement),
                qos=1,
                retain=True,
                timeout=timeout,
            )
            for topic in (
                self.topics.command(),
                self.topics.broadcast_command(),
                self.topics.address_book(),
                self.topics.all_announcements(),
            ):
                await client.subscribe(topic, qos=1, timeout=timeout)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._receive(client))
                group.create_task(self._drain_outbox(client))

    async def _drain_outbox(self, client: aiomqtt.Client) -> None:
        while True:
            if not self._outbox:
                self._outbox_ready.clear()
                await self._outbox_ready.wait()  # local event; broker loss ends _receive
                continue
            topic, payload, retain = self._outbox[0]
            await client.publish(
                topic,
                payload,
                qos=1 if retain else 0,
                retain=retain,
                timeout=self.settings.operation_timeout_s,
            )
            self._outbox.popleft()  # only once the broker has it
            self.stats.published += 1

    async def _receive(self, client: aiomqtt.Client) -> None:
        # The iterator ends with MqttError when the connection drops; paho's
        # keepalive bounds how long a dead broker goes unnoticed.
        async for message in client.messages:
            self.handle_message(str(message.topic), bytes(message.payload or b""))

    def _load_floors(self) -> dict[str, int]:
        if self._state_dir is None:
            return {}
        path = self._state_dir / self.SEQ_FILE
        try:
            floors = msgspec.json.decode(path.read_bytes(), type=dict[str, int])
        except FileNotFoundError:
            return {}
        except (OSError, msgspec.DecodeError) as error:
            # Written atomically (durable.py), so this is outside damage: start from
            # zero, which still refuses every forged message (the MAC) and every
            # replay within this incarnation.
            log.warning("mqtt: %s unreadable (%s); sequence floors start at 0", path, error)
            return {}
        return {k: v for k, v in floors.items() if k in ("command", "addressbook") and v >= 0}

    def _store_floors(self) -> None:
        if self._state_dir is not None:
            # Never below what was loaded: the book guard starts one under it.
            floors = {
                "command": max(self.command_seqs.highest, self._persisted.get("command", 0)),
                "addressbook": max(self.book_seqs.highest, self._persisted.get("addressbook", 0)),
            }
            write_atomically(self._state_dir, self.SEQ_FILE, encode(floors))

    def _signed_body(self, topic: str, payload: bytes, guard: SequenceGuard) -> bytes | None:
        """The body of a harness message on ``topic`` if its MAC holds and its sequence
        number is new; ``None`` for a retained book seen before; else PayloadError."""
        seq, body = open_signed(self._key, topic, payload)
        verdict = guard.check(seq)
        if verdict == "seen" and guard is self.book_seqs:
            self.stats.duplicates += 1
            return None
        if verdict != "ok":
            raise PayloadError("replay", f"seq {seq} {verdict} (highest {guard.highest})")
        self._store_floors()
        return body

    def handle_message(self, topic: str, payload: bytes) -> None:
        """Dispatch one inbound message; bad payloads are counted and logged."""
        topics = self.topics
        try:
            if topic in (topics.command(), topics.broadcast_command()):
                body = self._signed_body(topic, payload, self.command_seqs)
                if body is not None:
                    command = decode_command(body)
                    self.stats.commands += 1
                    self._on_command(command)
            elif topic == topics.address_book():
                # An empty retained message is a cleared topic, not an attack.
                if payload and self._on_address_book is not None:
                    body = self._signed_body(topic, payload, self.book_seqs)
                    if body is not None:
                        book = decode_address_book(body)
                        self.stats.address_books += 1
                        self._on_address_book(book)
            elif topic.endswith("/announce"):
                if payload and self._on_announcement is not None:
                    announcement = decode_announcement(payload)
                    if topic != topics.announce(announcement.node):
                        raise PayloadError(
                            "wrong_topic", f"{announcement.node} announced on {topic}"
                        )
                    if announcement.node != self.node_id:
                        self._on_announcement(announcement)
        except PayloadError as error:
            kind = topic.rsplit("/", 1)[-1]
            self.stats.count_bad(kind, error.reason)
            log.warning("mqtt: dropped bad payload on %s: %s", topic, error)
            if self._on_drop is not None:
                self._on_drop(kind, error.reason)
