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
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

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


Command = SetByzantine | ForceCheckpoint | SetClock | Leave

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
