"""MQTT topics and payloads (JSON, msgspec structs) between nodes and the harness.

Topics, under ``<prefix>`` (config ``mqtt.topic_prefix``, default ``swarmshake/<run_id>``):

- ``<prefix>/nodes/<node>/announce`` (retained, by the node): ``Announcement``, the
  node's own listen addresses and incarnation; its last will replaces it with
  ``state = "offline"`` so a crash is visible to every subscriber.
- ``<prefix>/nodes/<node>/addressbook`` (retained, by the harness): ``AddressBookUpdate``,
  where *this* node must dial each peer (a link's Toxiproxy listener).  Harness
  entries win over self-announcements (DESIGN.md, "The network").
- ``<prefix>/nodes/<node>/command`` and ``<prefix>/command`` (by the harness):
  one ``Command`` (tagged by ``"command"``).
- ``<prefix>/nodes/<node>/telemetry`` (by the node): JSON status samples, best effort.

Every inbound payload is size-capped and validated; a bad one is counted and
logged by the receiver, never raised into its loop.

Commands and address books travel signed (DESIGN.md, "MQTT"): a ``Signed`` envelope
holds the message's JSON as ``body``, a harness sequence number ``seq`` and a keyed
BLAKE3 ``mac`` over (topic, seq, body) under ``harness_key(run_key)``.  The broker's
ACL already keeps nodes and strangers from publishing there; the MAC keeps out
anything that reaches the topic without the run key, the topic in the tag stops a
command recorded for one node from being replayed to another, and ``SequenceGuard``
stops it being replayed to the same node.  A member holds the run key and could
forge, which is out of the threat model, as for frames (``frames.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from typing import Annotated, Literal

import blake3
import msgspec

from swarmshake.reference_node.runtime.links import PeerAddress
from swarmshake.reference_node.training.behaviour import ByzantineBehaviour

# A command or address book is a few hundred bytes; 64 KiB holds a book of ~1000
# peers and bounds what a stray publisher can make a node parse.
MAX_MQTT_PAYLOAD_BYTES = 64 * 1024

NodeId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,16}$")]


class Announcement(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    node: NodeId
    incarnation: int
    state: Literal["online", "offline"] = "online"
    address: PeerAddress | None = None
    http_port: int = 0


class AddressBookUpdate(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    peers: Annotated[dict[NodeId, PeerAddress], msgspec.Meta(max_length=4096)]


class _Command(
    msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, tag_field="command"
):
    command_id: Annotated[str, msgspec.Meta(max_length=128)] = ""


class SetByzantine(_Command, tag="set_byzantine"):
    """Switch this node's gradient behaviour (honest to go back)."""

    behaviour: ByzantineBehaviour


class ForceCheckpoint(_Command, tag="force_checkpoint"):
    """Write a checkpoint at the next committed step."""


class SetClock(_Command, tag="set_clock"):
    """Clock-skew fault: the node's clock runs at ``1 + drift_ppm/1e6`` and is shifted by
    ``offset_s`` (DESIGN: skew acts on the node's injected clock, not the host's)."""

    offset_s: float = 0.0
    drift_ppm: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.offset_s) and abs(self.offset_s) <= 3600):
            raise ValueError("offset_s must be finite and within +-3600 s")
        if not (math.isfinite(self.drift_ppm) and abs(self.drift_ppm) <= 500_000):
            raise ValueError("drift_ppm must be finite and within +-500000")


class Leave(_Command, tag="leave"):
    """Shut down cleanly (logs a ``stop`` event), as opposed to a crash."""

    reason: Annotated[str, msgspec.Meta(max_length=128)] = "harness"


class HoldBulk(_Command, tag="hold_bulk"):
    """Harness fault ``hold_bulk``: the worker sends no bulk frame (contributions,
    aggregates, state, checkpoints) to the nodes in ``peers`` until a later command
    names others; an empty list releases every hold.  The bytes are dropped at this
    node, before any socket, so no proxy holds them and no later link change can
    deliver them.  A restart starts with no hold (it lives in the worker process)."""

    peers: Annotated[list[NodeId], msgspec.Meta(max_length=4096)] = []


Command = SetByzantine | ForceCheckpoint | SetClock | Leave | HoldBulk

_command_decoder = msgspec.json.Decoder(Command)
_announcement_decoder = msgspec.json.Decoder(Announcement)
_book_decoder = msgspec.json.Decoder(AddressBookUpdate)
encode = msgspec.json.Encoder().encode


class PayloadError(ValueError):
    """An inbound MQTT payload that was rejected; ``reason`` is the counter key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _decode(decoder: msgspec.json.Decoder, payload: bytes) -> object:
    if len(payload) > MAX_MQTT_PAYLOAD_BYTES:
        raise PayloadError("oversized", f"{len(payload)} bytes > {MAX_MQTT_PAYLOAD_BYTES}")
    try:
        return decoder.decode(payload)
    except (msgspec.DecodeError, ValueError) as error:  # ValidationError is a DecodeError
        raise PayloadError("malformed", str(error)[:200]) from None


def decode_command(payload: bytes) -> Command:
    return _decode(_command_decoder, payload)  # type: ignore[return-value]


def decode_announcement(payload: bytes) -> Announcement:
    return _decode(_announcement_decoder, payload)  # type: ignore[return-value]


def decode_address_book(payload: bytes) -> AddressBookUpdate:
    return _decode(_book_decoder, payload)  # type: ignore[return-value]


# -- signed harness messages ----------------------------------------------------------------

_KEY_LABEL = b"swarmshake/harness-mqtt-key/v1"
_MAC_CONTEXT = b"swarmshake/harness-mqtt/v1\0"
MAX_SEQ = 2**63 - 1
# How far behind the highest accepted sequence number a late one is still accepted
# (once): the harness publishes each command on its own connection, so two commands
# to one node may overtake each other.  Older ones are dropped as stale; the guard's
# memory is bounded by this many numbers.
SEQ_WINDOW = 1024


def harness_key(run_key: bytes) -> bytes:
    """The key commands and address books are MACed with: the run key under its own
    label, so it is never a frame key (``frames.derive_node_key``)."""
    if len(run_key) < 16:
        raise ValueError("run key must be at least 16 bytes")
    return hmac.new(run_key, _KEY_LABEL, hashlib.sha256).digest()


class Signed(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    seq: Annotated[int, msgspec.Meta(ge=1, le=MAX_SEQ)]
    body: str
    mac: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


_signed_decoder = msgspec.json.Decoder(Signed)


def _mac(key: bytes, topic: str, seq: int, body: bytes) -> bytes:
    # The topic has no NUL (MQTT forbids U+0000 in topic names), so it ends where
    # the separator is; seq is fixed-width.
    message = _MAC_CONTEXT + topic.encode() + b"\0" + seq.to_bytes(8, "big") + body
    return blake3.blake3(message, key=key).digest()


def _is_unsigned_object(payload: bytes) -> bool:
    """A JSON object with no ``mac`` (a bare command, as an anonymous client would
    send): told apart from garbage so the counter says what was tried."""
    try:
        value = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return False
    return isinstance(value, dict) and "mac" not in value


def sign(key: bytes, topic: str, seq: int, message: object) -> bytes:
    """The payload the harness publishes on ``topic``: ``message`` (a struct, or the
    body's UTF-8 JSON bytes as they are) in a ``Signed``."""
    if not 1 <= seq <= MAX_SEQ:
        raise ValueError(f"seq {seq} outside 1..{MAX_SEQ}")
    body = message if isinstance(message, bytes) else encode(message)
    return encode(Signed(seq=seq, body=body.decode(), mac=_mac(key, topic, seq, body).hex()))


def open_signed(key: bytes, topic: str, payload: bytes) -> tuple[int, bytes]:
    """``(seq, body)`` of a signed payload whose MAC holds for ``topic``; else
    ``PayloadError`` with reason ``malformed`` (not an envelope) or ``bad_mac``."""
    try:
        signed: Signed = _decode(_signed_decoder, payload)  # type: ignore[assignment]
    except PayloadError as error:
        if error.reason == "malformed" and _is_unsigned_object(payload):
            raise PayloadError("unsigned", "a JSON object without the harness's MAC") from None
        raise
    body = signed.body.encode()
    if not hmac.compare_digest(_mac(key, topic, signed.seq, body), bytes.fromhex(signed.mac)):
        raise PayloadError("bad_mac", f"seq {signed.seq}: MAC does not verify")
    return signed.seq, body


class SequenceGuard:
    """Accepts each harness sequence number at most once (pure: no I/O, no clock).

    Everything at or below ``floor`` is refused: at start the floor is what the node
    persisted (the highest it accepted before a restart); it then trails the highest
    accepted number by ``SEQ_WINDOW``.  Above the floor, a number is accepted unless
    already seen, so commands that overtook each other are all taken, once.
    """

    def __init__(self, floor: int = 0, window: int = SEQ_WINDOW):
        self.floor = max(0, floor)
        self.highest = self.floor
        self.window = window
        self._seen: set[int] = set()

    def check(self, seq: int) -> Literal["ok", "seen", "stale"]:
        """``ok`` (and remembered), ``seen`` (accepted before) or ``stale`` (at or below
        the floor: too old to tell, so refused)."""
        if seq in self._seen:
            return "seen"
        if seq <= self.floor:
            return "stale"
        self._seen.add(seq)
        if seq > self.highest:
            self.highest = seq
            floor = self.highest - self.window
            if floor > self.floor:
                self.floor = floor
                self._seen = {s for s in self._seen if s > floor}
        return "ok"


class Topics:
    def __init__(self, prefix: str, node_id: str):
        self.prefix = prefix.rstrip("/")
        self.node_id = node_id

    def announce(self, node: str | None = None) -> str:
        return f"{self.prefix}/nodes/{node or self.node_id}/announce"

    def address_book(self) -> str:
        return f"{self.prefix}/nodes/{self.node_id}/addressbook"

    def command(self) -> str:
        return f"{self.prefix}/nodes/{self.node_id}/command"

    def broadcast_command(self) -> str:
        return f"{self.prefix}/command"

    def telemetry(self) -> str:
        return f"{self.prefix}/nodes/{self.node_id}/telemetry"

    def all_announcements(self) -> str:
        return f"{self.prefix}/nodes/+/announce"
