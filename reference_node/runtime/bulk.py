"""Payloads of the bulk channel (worker to worker) and reassembly of chunked blobs.

Tensors travel as raw little-endian float32 bytes in ``BulkChunk``s of at most
``CHUNK_BYTES``; a blob is (kind, step, key) from one sender, its chunks in order on
one connection.  A receiver knows how large every blob may be (from the model
size), so a peer cannot make it allocate more than that, and it holds at most
``MAX_ASSEMBLIES`` partial blobs at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import msgspec

from swarmshake.reference_node.checkpoint import DEFAULT_CHUNK_BYTES

CHUNK_BYTES = DEFAULT_CHUNK_BYTES  # 4 MiB: see checkpoint.DEFAULT_CHUNK_BYTES for why
# Blobs in flight at once into one worker: every peer's contribution for two steps,
# plus an aggregate and a state stream, for clusters up to ~60 nodes.
MAX_ASSEMBLIES = 128

BlobKind = Literal["contribution", "aggregate", "state", "replica"]


class BulkChunk(msgspec.Struct, kw_only=True, frozen=True, tag="chunk", forbid_unknown_fields=True):
    kind: BlobKind
    step: int
    key: str  # aggregate: its fingerprint; state/replica: the state's param_fp; else ""
    index: int
    last: bool
    data: bytes


class BulkRequest(
    msgspec.Struct, kw_only=True, frozen=True, tag="request", forbid_unknown_fields=True
):
    kind: Literal["aggregate", "state"]
    step: int = -1
    key: str = ""


class BulkRefusal(
    msgspec.Struct, kw_only=True, frozen=True, tag="refusal", forbid_unknown_fields=True
):
    kind: Literal["aggregate", "state"]
    step: int
    key: str
    reason: str


BulkMessage = BulkChunk | BulkRequest | BulkRefusal


def split(
    kind: BlobKind, step: int, key: str, pieces: Iterator[bytes | memoryview] | bytes | memoryview
) -> Iterator[BulkChunk]:
    """A blob as chunks; ``pieces`` may be one buffer or an iterator of buffers."""
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
            kind=kind, step=step, key=key, index=index, last=following is None, data=bytes(current)
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
