"""Length-prefixed, versioned, size-capped, authenticated frames for peer links.

Wire layout of one frame (network byte order)::

    magic      4 bytes  b"SWSK"
    version    u8       FRAME_VERSION
    channel    u8       0 = control, 1 = bulk
    sender     16 bytes node id, ASCII, NUL-padded
    incarnation u64     the sender's process incarnation
    sequence   u64      per (sender incarnation, channel) link, starts at 1, strictly increasing
    length     u32      payload length in bytes (0 = link keepalive)
    payload    length bytes, a msgspec (msgpack) encoded struct
    tag        32 bytes BLAKE3-keyed(sender key, header || payload || receiver id)

Version 2 (this one) tags frames with keyed BLAKE3; version 1 used HMAC-SHA256.
Why the change: a tag is computed over every byte on the sender and again on the
receiver, and state transfer must move >= 1 GB/s (issue 4).  Measured on this
project's machine (AMD EPYC with SHA-NI, one core, 64 MiB input): HMAC-SHA256
0.9-1.4 GB/s, keyed BLAKE2b 0.75-0.95 GB/s, keyed BLAKE3 4.8-6.5 GB/s.  BLAKE3's
keyed mode is a PRF and so a MAC (BLAKE3 paper, section 2.5; the same role as
HMAC, no nonce to manage), with a 256-bit key and a 256-bit tag.  There is no
mixed-version mode: a receiver drops a version-1 frame as ``wrong_version`` (and
closes the connection), so all nodes of a run must come from the same install,
which the harness guarantees.  Key derivation stays HMAC-SHA256 (once per peer).

Keys: the harness issues one run key; each node's key is
``HMAC-SHA256(run_key, "swarmshake/node-key/v1/" + node_id)`` and the receiver
derives the sender's key the same way.  The receiver's id is bound into the tag
(without being sent), so a frame recorded on the link A->B is rejected on A->C.

Threat model (DESIGN.md, "Frames"): the tag keeps out frames from outside the run
(another run, a stray process, a corrupted or misrouted byte stream) and binds a
frame to its claimed sender, link and position.  A Byzantine *member* holds the run
key and could derive other nodes' keys; it may send any gradient content, but
forging other nodes' protocol messages is out of scope, as DESIGN says.

Every bad input is dropped and counted by reason in a ``DropCounter``, never raised
into the caller's loop.  Framing errors (bad magic, wrong version, unknown channel,
oversized length) make the rest of the byte stream untrustworthy, so the caller
closes the connection: a half-read frame is discarded with its connection, never
resynchronised.  Errors inside a well-framed frame (bad tag, replay, bad payload)
drop only that frame.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import blake3
import msgspec

MAGIC = b"SWSK"
FRAME_VERSION = 2  # 2: keyed-BLAKE3 tags (1: HMAC-SHA256); see the module docstring
NODE_ID_MAX_BYTES = 16
NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,16}$")
TAG_BYTES = 32
_HEADER = struct.Struct("!4sBB16sQQI")
HEADER_BYTES = _HEADER.size
_KEY_LABEL = b"swarmshake/node-key/v1/"
T = TypeVar("T")


class Channel(enum.IntEnum):
    CONTROL = 0
    BULK = 1


# Per-channel payload caps.  Control carries heartbeats, gossip and votes (a few
# hundred bytes); 64 KiB leaves room for a full membership list while bounding what
# one peer can make the latency-critical control loop buffer and hash.  Bulk carries
# tensors in chunks: state transfer and gradients are streamed as chunks of at most
# this size, so a 100M-parameter model (400 MB) needs no single giant buffer; 64 MiB
# keeps per-frame overhead negligible at >1 GB/s while bounding a receiver's memory.
DEFAULT_PAYLOAD_CAP_BYTES: dict[Channel, int] = {
    Channel.CONTROL: 64 * 1024,
    Channel.BULK: 64 * 1024 * 1024,
}


class DropReason(enum.StrEnum):
    BAD_MAGIC = "bad_magic"
    WRONG_VERSION = "wrong_version"
    BAD_CHANNEL = "bad_channel"
    WRONG_CHANNEL = "wrong_channel"  # a valid channel on the other channel's connection
    BAD_SENDER = "bad_sender"
    UNKNOWN_SENDER = "unknown_sender"
    OVERSIZED = "oversized"
    TRUNCATED = "truncated"
    BAD_TAG = "bad_tag"
    REPLAY = "replay"
    STALE_INCARNATION = "stale_incarnation"
    MALFORMED_PAYLOAD = "malformed_payload"


# Reasons after which the byte stream cannot be trusted to be aligned on frames.
FATAL_REASONS = frozenset(
    {
        DropReason.BAD_MAGIC,
        DropReason.WRONG_VERSION,
        DropReason.BAD_CHANNEL,
        DropReason.WRONG_CHANNEL,
        DropReason.BAD_SENDER,
        DropReason.OVERSIZED,
        DropReason.TRUNCATED,
    }
)


class FrameError(ValueError):
    """Raised only by the *encoder* for bad local input (a bug in the caller)."""


def validate_node_id(node_id: str) -> str:
    if not NODE_ID_PATTERN.match(node_id):
        raise FrameError(
            f"node id {node_id!r} must be 1-{NODE_ID_MAX_BYTES} characters of [A-Za-z0-9_-]"
        )
    return node_id


def derive_node_key(run_key: bytes, node_id: str) -> bytes:
    """The per-node HMAC key the harness issues: derived from the run key and node id."""
    if len(run_key) < 16:
        raise FrameError("run key must be at least 16 bytes")
    validate_node_id(node_id)
    return hmac.new(run_key, _KEY_LABEL + node_id.encode("ascii"), hashlib.sha256).digest()


def _pad_id(node_id: str) -> bytes:
    return node_id.encode("ascii").ljust(NODE_ID_MAX_BYTES, b"\0")


Buffer = bytes | bytearray | memoryview
# A payload as one buffer, or as pieces sent back to back (a small encoded prefix
# and a large view of a tensor): the frame carries their concatenation.
Payload = Buffer | tuple[Buffer, ...]


def frame_tag(key: bytes, header: Buffer, payload: Payload, receiver_padded: bytes) -> bytes:
    """The frame's 32-byte tag: keyed BLAKE3 over header, payload and receiver id.
    Takes views, so a large payload is hashed where it lies (no copy)."""
    mac = blake3.blake3(header, key=key)
    for piece in payload if isinstance(payload, tuple) else (payload,):
        mac.update(piece)
    mac.update(receiver_padded)
    return mac.digest()


def payload_length(payload: Payload) -> int:
    if isinstance(payload, tuple):
        return sum(memoryview(piece).nbytes for piece in payload)
    return memoryview(payload).nbytes


@dataclass(frozen=True, slots=True)
class FrameHeader:
    channel: Channel
    sender: str
    incarnation: int
    sequence: int
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class Frame:
    """An authenticated frame.  ``payload`` is ``bytes`` from ``FrameDecoder``; from a
    peer link (``links.read_frame``) it is a view of the connection's receive buffer,
    valid only until the frame handler returns: a handler that keeps it copies it."""

    header: FrameHeader
    payload: bytes | memoryview

    @property
    def is_keepalive(self) -> bool:
        return not self.payload


@dataclass
class DropCounter:
    """Counts dropped frames by reason; ``on_drop`` (optional) is told each drop."""

    counts: dict[str, int] = field(default_factory=dict)
    on_drop: Callable[[str, str], None] | None = None  # (peer, reason)

    def drop(self, reason: DropReason | str, peer: str = "") -> None:
        key = str(reason)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.on_drop is not None:
            self.on_drop(peer, key)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class FrameEncoder:
    """Encodes frames sent by one node to one receiver on one channel.

    The sequence number lives here, so one encoder per (receiver, channel) link; it
    survives redials, so a redialled connection continues the sequence.
    """

    def __init__(
        self,
        *,
        run_key: bytes,
        sender: str,
        incarnation: int,
        receiver: str,
        channel: Channel,
        payload_cap_bytes: int | None = None,
    ):
        self._key = derive_node_key(run_key, sender)
        self._sender = _pad_id(validate_node_id(sender))
        self._receiver = _pad_id(validate_node_id(receiver))
        self._incarnation = incarnation
        self._channel = Channel(channel)
        self._cap = payload_cap_bytes or DEFAULT_PAYLOAD_CAP_BYTES[self._channel]
        self.sequence = 0

    def encode_parts(self, payload: Payload) -> tuple[Buffer, ...]:
        """The frame as ``(header, *payload pieces, tag)``, for a gathering write
        (``sendmsg``) that puts a large payload on the wire where it lies."""
        length = payload_length(payload)
        if length > self._cap:
            raise FrameError(
                f"payload of {length} bytes exceeds the {self._channel.name} cap of {self._cap}"
            )
        self.sequence += 1
        header = _HEADER.pack(
            MAGIC,
            FRAME_VERSION,
            self._channel,
            self._sender,
            self._incarnation,
            self.sequence,
            length,
        )
        pieces = payload if isinstance(payload, tuple) else (payload,)
        return (header, *pieces, frame_tag(self._key, header, payload, self._receiver))

    def encode_bytes(self, payload: Payload) -> bytes:
        return b"".join(self.encode_parts(payload))

    def keepalive(self) -> bytes:
        return self.encode_bytes(b"")


class ReplayGuard:
    """Rejects replayed frames: per (sender, channel) the last sequence of the newest
    incarnation seen.  Fed only authenticated frames, so a forger cannot advance it."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], tuple[int, int]] = {}

    def check(self, header: FrameHeader) -> DropReason | None:
        key = (header.sender, int(header.channel))
        seen = self._last.get(key)
        if seen is not None:
            incarnation, sequence = seen
            if header.incarnation < incarnation:
                return DropReason.STALE_INCARNATION
            if header.incarnation == incarnation and header.sequence <= sequence:
                return DropReason.REPLAY
        self._last[key] = (header.incarnation, header.sequence)
        return None


class FrameVerifier:
    """Checks inbound frames for one receiving node (all its inbound connections).

    ``known_sender(node_id)`` limits which senders are accepted (e.g. the address
    book); None accepts any well-formed id of this run.
    """

    def __init__(
        self,
        *,
        run_key: bytes,
        receiver: str,
        counter: DropCounter,
        payload_caps_bytes: dict[Channel, int] | None = None,
        known_sender: Callable[[str], bool] | None = None,
    ):
        self._run_key = run_key
        self._receiver = _pad_id(validate_node_id(receiver))
        self.counter = counter
        self._caps = dict(DEFAULT_PAYLOAD_CAP_BYTES)
        if payload_caps_bytes:
            self._caps.update(payload_caps_bytes)
        self._known_sender = known_sender
        self._keys: dict[str, bytes] = {}
        # One guard per receiver: all links into this node share it, so a frame
        # replayed onto a new connection is still caught.
        self.replay_guard = ReplayGuard()

    def cap(self, channel: Channel) -> int:
        return self._caps[channel]

    def parse_header(self, raw: bytes, expected_channel: Channel) -> FrameHeader | DropReason:
        """Validate a header; a DropReason here is fatal for the connection."""
        if len(raw) != HEADER_BYTES:
            return DropReason.TRUNCATED
        magic, version, channel, sender_raw, incarnation, sequence, length = _HEADER.unpack(raw)
        if magic != MAGIC:
            return DropReason.BAD_MAGIC
        if version != FRAME_VERSION:
            return DropReason.WRONG_VERSION
        if channel not in (Channel.CONTROL, Channel.BULK):
            return DropReason.BAD_CHANNEL
        if channel != expected_channel:
            return DropReason.WRONG_CHANNEL
        try:
            sender = sender_raw.rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            return DropReason.BAD_SENDER
        if not NODE_ID_PATTERN.match(sender):
            return DropReason.BAD_SENDER
        if length > self._caps[Channel(channel)]:
            return DropReason.OVERSIZED
        return FrameHeader(Channel(channel), sender, incarnation, sequence, length)

    def _key_for(self, sender: str) -> bytes | None:
        if self._known_sender is not None and not self._known_sender(sender):
            return None
        key = self._keys.get(sender)
        if key is None:
            key = derive_node_key(self._run_key, sender)
            # Bounded by the number of distinct valid sender ids that authenticate;
            # unknown ids are refused above when a book is given.
            self._keys[sender] = key
        return key

    def verify(self, raw_header: bytes, header: FrameHeader, body: Buffer) -> Frame | DropReason:
        """Check tag and replay of a well-framed frame; ``body`` = payload + tag.
        The frame's payload is a slice of ``body`` (a view if ``body`` is one)."""
        if len(body) != header.payload_bytes + TAG_BYTES:
            return DropReason.TRUNCATED
        key = self._key_for(header.sender)
        if key is None:
            return DropReason.UNKNOWN_SENDER
        view = memoryview(body)
        tag = frame_tag(key, raw_header, view[: header.payload_bytes], self._receiver)
        if not hmac.compare_digest(tag, view[header.payload_bytes :]):
            return DropReason.BAD_TAG
        if header.sequence == 0:
            return DropReason.REPLAY  # sequences start at 1; 0 is never sent
        replay = self.replay_guard.check(header)
        if replay is not None:
            return replay
        return Frame(header, body[: header.payload_bytes])


class FrameDecoder:
    """Sans-IO incremental decoder for one inbound connection.

    ``feed(data)`` returns the good frames; drops are counted on the verifier's
    counter.  After a fatal drop, ``closed`` is set and further input is ignored:
    the caller must close the connection.  Memory is bounded by one frame (the
    channel's cap plus header and tag).
    """

    def __init__(self, verifier: FrameVerifier, channel: Channel, peer_label: str = ""):
        self._verifier = verifier
        self._channel = Channel(channel)
        self._peer_label = peer_label
        self._buffer = bytearray()
        self._header_raw: bytes | None = None
        self._header: FrameHeader | None = None
        self.closed: DropReason | None = None

    def feed(self, data: bytes) -> list[Frame]:
        if self.closed is not None:
            return []
        self._buffer += data
        frames: list[Frame] = []
        while True:
            if self._header is None:
                if len(self._buffer) < HEADER_BYTES:
                    return frames
                raw = bytes(self._buffer[:HEADER_BYTES])
                parsed = self._verifier.parse_header(raw, self._channel)
                if isinstance(parsed, DropReason):
                    self._fail(parsed)
                    return frames
                del self._buffer[:HEADER_BYTES]
                self._header_raw, self._header = raw, parsed
            need = self._header.payload_bytes + TAG_BYTES
            if len(self._buffer) < need:
                return frames
            body = bytes(self._buffer[:need])
            del self._buffer[:need]
            header_raw, header = self._header_raw, self._header
            self._header_raw = self._header = None
            assert header_raw is not None
            result = self._verifier.verify(header_raw, header, body)
            if isinstance(result, DropReason):
                self._verifier.counter.drop(result, header.sender)
            else:
                frames.append(result)

    def eof(self) -> None:
        """The connection ended; a partial frame in the buffer is counted as truncated."""
        if self.closed is None and (self._buffer or self._header is not None):
            self._fail(DropReason.TRUNCATED)

    def _fail(self, reason: DropReason) -> None:
        self.closed = reason
        self._buffer.clear()
        self._header = self._header_raw = None
        self._verifier.counter.drop(reason, self._peer_label)


class PayloadCodec(Generic[T]):
    """msgspec msgpack encode/decode of one payload type (a struct or tagged union).

    A payload that does not decode is counted as ``malformed_payload``; it never
    raises into the receive loop.
    """

    def __init__(self, payload_type: type[T] | object, counter: DropCounter):
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(payload_type)
        self._counter = counter

    def encode(self, message: object) -> bytes:
        return self._encoder.encode(message)

    def decode(self, frame: Frame) -> T | None:
        try:
            return self._decoder.decode(frame.payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self._counter.drop(DropReason.MALFORMED_PAYLOAD, frame.header.sender)
            return None
