"""Payloads of the bulk channel (worker to worker) and reassembly of chunked blobs.

Tensors travel as raw little-endian float32 bytes in ``BulkChunk``s of at most
``CHUNK_BYTES``; a blob is (kind, step, key) from one sender, its chunks in order on
one connection.  A receiver knows how large every blob may be (from the model
size), so a peer cannot make it allocate more than that, and it holds at most
``MAX_ASSEMBLIES`` partial blobs at once.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Literal

import msgspec

from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.checkpoint import DEFAULT_CHUNK_BYTES
from swarmshake.reference_node.runtime.frames import PayloadCodec
from swarmshake.reference_node.runtime.links import PeerLinks, QueueFull
from swarmshake.reference_node.training.state import TrainingState

CHUNK_BYTES = DEFAULT_CHUNK_BYTES  # 4 MiB: see checkpoint.DEFAULT_CHUNK_BYTES for why
# Blobs in flight at once into one worker: every peer's contribution for two steps,
# plus an aggregate and a state stream, for clusters up to ~60 nodes.
MAX_ASSEMBLIES = 128

# shard: one shard of a contribution, to its owner; shard_aggregate: an owner's
# aggregate of one shard (protocol.sharding: keys "i/n" and "i/n/contributors").
BlobKind = Literal["contribution", "aggregate", "state", "replica", "shard", "shard_aggregate"]
# Blobs whose (kind, step, key) names their bytes: an aggregate by its fingerprint, an
# aggregated shard by its step, index and contributor set (its owner computes it once
# and serves that tensor).  Two sends of one of these to a peer carry the same bytes,
# so a sender may let one answer both.  A contribution or a shard of one may be
# recomputed under the same name (a state installed at the same step), a state or a
# replica is a snapshot: never merged.
CONTENT_NAMED_KINDS: frozenset[str] = frozenset({"aggregate", "shard_aggregate"})


class BulkChunk(msgspec.Struct, kw_only=True, frozen=True, tag="chunk", forbid_unknown_fields=True):
    kind: BlobKind
    step: int
    # aggregate: its fingerprint; state: the state's param_fp; replica: the checkpoint's
    # param_fp for a push to a holder, "served" for a replica served back to its origin
    key: str
    index: int
    last: bool
    # Decoded as a view of the frame's payload (no copy; msgspec supports it), so it
    # is valid only while the frame is (see frames.Frame): consumers copy it into
    # their blob or state buffer at once.  Encoded from any buffer, also a view.
    data: memoryview


class BulkRequest(
    msgspec.Struct, kw_only=True, frozen=True, tag="request", forbid_unknown_fields=True
):
    kind: Literal["aggregate", "state", "replica", "shard_aggregate", "shard"]
    step: int = -1
    key: str = ""


class BulkRefusal(
    msgspec.Struct, kw_only=True, frozen=True, tag="refusal", forbid_unknown_fields=True
):
    kind: Literal["aggregate", "state", "replica", "shard_aggregate"]
    step: int
    key: str
    reason: str
    # shard_aggregate: the contributors whose shard this owner never received.
    missing: list[str] = msgspec.field(default_factory=list)


BulkMessage = BulkChunk | BulkRequest | BulkRefusal


def split(
    kind: BlobKind, step: int, key: str, pieces: Iterator[bytes | memoryview] | bytes | memoryview
) -> Iterator[BulkChunk]:
    """A blob as chunks; ``pieces`` may be one buffer or an iterator of buffers.
    Chunks hold views of ``pieces`` (no copy): keep those buffers unchanged until the
    chunks are encoded."""
    if isinstance(pieces, bytes | bytearray | memoryview):
        view = memoryview(pieces).cast("B")
        pieces = iter(
            [
                view[start : start + CHUNK_BYTES]
                for start in range(0, max(len(view), 1), CHUNK_BYTES)
            ]
        )
    index = 0
    current = next(pieces, None)
    while current is not None:
        following = next(pieces, None)
        yield BulkChunk(
            kind=kind,
            step=step,
            key=key,
            index=index,
            last=following is None,
            data=memoryview(current).cast("B"),
        )
        index += 1
        current = following


class AssemblyError(ValueError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Assembler:
    """Collects chunks of fixed-size blobs (contributions, aggregates) by
    (sender, kind, step, key); ``feed`` returns the complete blob or None."""

    def __init__(self, max_blob_bytes: int, max_assemblies: int = MAX_ASSEMBLIES):
        self._max_blob_bytes = max_blob_bytes
        self._max = max_assemblies
        self._partial: dict[tuple[str, str, int, str], tuple[int, bytearray]] = {}

    def feed(self, sender: str, chunk: BulkChunk) -> bytearray | None:
        key = (sender, chunk.kind, chunk.step, chunk.key)
        if chunk.index == 0:
            self._partial.pop(key, None)  # a resend restarts the blob
            if len(self._partial) >= self._max:
                raise AssemblyError("too_many_partial_blobs")
            entry = (0, bytearray())
        else:
            entry = self._partial.get(key)
            if entry is None or entry[0] != chunk.index:
                self._partial.pop(key, None)
                raise AssemblyError("chunk_out_of_order")
        buffer = entry[1]
        buffer += chunk.data
        if len(buffer) > self._max_blob_bytes:
            self._partial.pop(key, None)
            raise AssemblyError("blob_too_large")
        if chunk.last:
            self._partial.pop(key, None)
            return buffer
        self._partial[key] = (chunk.index + 1, buffer)
        return None

    def forget_steps_before(self, step: int) -> None:
        for key in [key for key in self._partial if key[2] < step]:
            del self._partial[key]


def state_blob(snapshot: TrainingState, node: str, param_fp: str) -> Iterator[BulkChunk]:
    """A live state as ``state`` chunks (checkpoint byte format, payload unhashed:
    the frames are authenticated and TCP-ordered, and the receiver checks the
    parameters' fingerprint).  ``param_fp`` must be ``snapshot``'s, computed once by
    the caller; ``snapshot`` must not change until the chunks are sent."""
    pieces = checkpoint.state_chunks(snapshot, node=node, hash_payload=False, param_fp=param_fp)
    return split("state", snapshot.step, param_fp, pieces)


# How msgspec ends a BulkChunk whose data is empty: the last field (fields are
# encoded in definition order), "data", as an empty msgpack bin8.
_EMPTY_DATA_TAIL = b"\xa4data\xc4\x00"
_BIN32 = struct.Struct(">BI")  # msgpack bin32: 0xc6, big-endian u32 length


def encode_chunk(codec: PayloadCodec[BulkMessage], chunk: BulkChunk) -> tuple[bytes, memoryview]:
    """``chunk``'s msgpack encoding as ``(prefix, data)``: their concatenation is a
    valid msgpack map that decodes to ``chunk`` (data as a bin32), and ``data`` stays
    a view of the caller's memory.  msgspec would copy every chunk into a new bytes
    object (0.75 GB/s here, page faults included); the frame layer sends and tags
    the two pieces where they lie instead.  Only the bin header is written by hand;
    ``test_bulk`` checks the result decodes to the same chunk."""
    head = codec.encode(msgspec.structs.replace(chunk, data=memoryview(b"")))
    if not head.endswith(_EMPTY_DATA_TAIL):
        raise AssertionError("BulkChunk.data must stay the struct's last field")
    data = memoryview(chunk.data).cast("B")
    return head[: -len(b"\xc4\x00")] + _BIN32.pack(0xC6, data.nbytes), data


async def send_chunks(
    links: PeerLinks,
    codec: PayloadCodec[BulkMessage],
    peer: str,
    messages: Iterable[BulkMessage],
    timeout_s: float,
) -> bool:
    """Queue ``messages`` to ``peer`` in order, each waiting up to ``timeout_s`` for
    room (back-pressure: the link holds a few frames); False if the queue stayed full
    (counted in ``links.stats.queue_rejected``) and the rest was not sent.  Chunk data
    is queued as views: keep its memory unchanged until ``links.drained(peer)``."""
    try:
        for message in messages:
            if isinstance(message, BulkChunk):
                await links.send(peer, encode_chunk(codec, message), timeout_s)
            else:
                await links.send(peer, codec.encode(message), timeout_s)
    except QueueFull:
        return False
    return True


class HeldStateChunks:
    """State chunks that arrive before the pull they answer is set up, held (bounded)
    instead of dropped.  The control process tells the worker to expect a state
    (``ExpectState``) and sends the request to the source at once; the source's first
    chunks can reach the worker's loop before that IPC message does (a restarted
    worker busy with a backlog of peers' frames), and a dropped first chunk cost the
    whole rejoin fetch timeout (a 5.4 s rejoin in ``bench recovery``,
    partition_minority at 8 nodes).  One stream is held, from its chunk 0, in order,
    up to ``max_bytes``; anything else is not held (the caller drops it)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.sender: str | None = None
        self.chunks: list[BulkChunk] = []
        self.nbytes = 0

    def hold(self, sender: str, chunk: BulkChunk) -> bool:
        if chunk.index == 0:
            self.clear()
            self.sender = sender
        elif sender != self.sender or not self.chunks or self.chunks[-1].index + 1 != chunk.index:
            return False
        if self.nbytes + len(chunk.data) > self.max_bytes:
            self.clear()
            return False
        # Copied: the chunk's data is a view of its connection's receive buffer.
        self.chunks.append(msgspec.structs.replace(chunk, data=memoryview(bytes(chunk.data))))
        self.nbytes += len(chunk.data)
        return True

    def take(self, source: str) -> list[BulkChunk]:
        """The held stream if it came from ``source`` (then forgotten either way)."""
        chunks = self.chunks if self.sender == source else []
        self.clear()
        return chunks

    def clear(self) -> None:
        self.sender, self.chunks, self.nbytes = None, [], 0
