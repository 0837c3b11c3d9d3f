"""The bytes of the aggregates an acceptor may vote for, kept durably across a restart.

DESIGN: "an acceptor accepts only once it holds the aggregate's bytes, so any live
majority member can apply a committed step".  Its acceptor record (``Persist``) survives
a crash; so must the bytes it claims, or after a restart every retry adopts a value
(Paxos: the highest accepted one) that nobody can serve, and commits stop for good.

How the node keeps that promise: the worker writes every aggregate it holds (built,
rebuilt from contributions, or fetched and verified) here, synced to disk, *before* it
tells the control process it holds it (``ipc.AggregateHeld``).  The control process
feeds the commit core ``HoldsAggregate`` only then, and the core accepts only values it
holds, so an accept record never exists without its bytes on disk.  Writing at hold
time rather than at ``Persist`` keeps the control loop free of big I/O and needs no
extra round trip to the worker in the vote's path; the write of a prebuilt aggregate
starts before anyone asks for it.  After a restart the worker reloads the aggregates,
verifies each against its fingerprint, and reports them in ``WorkerReady``; the step
driver tells the commit core (``HoldsAggregate``), and the worker serves them to peers.

Layout: a few preallocated *slot* files, ``slot-NN.agg``, each holding one aggregate::

    magic     8 bytes   b"SWAGG001"
    step      8 bytes   big-endian u64
    fp_len    1 byte    then the fingerprint (ASCII hex), zero-padded to 64 bytes
    crc32     4 bytes   big-endian, of the 81 bytes above
    padding             to HEADER_BYTES
    payload             the aggregate's raw float32 bytes (the fingerprint covers them)

Why slots rather than a new file per aggregate (temporary, fsync, rename, fsync of the
folder): an aggregate is written once per step on the vote's critical path, and on this
machine's disk that sequence costs ~15 ms median against ~1-4 ms for an in-place
overwrite with ``fdatasync`` (measured with 27 KB, the tiny model's aggregate).  The
overwrite is not atomic, and need not be: only a *free* slot is overwritten (one whose
step was pruned, so nobody can claim its old content), and a torn write fails the
fingerprint check at load, so it is skipped -- its hold was never reported, since that
waits for the sync.  A damaged slot (torn, bit rot, foreign) is skipped with its
reason, never served.  Bounded: ``prune`` frees the slots of old steps (its docstring
says why they are never claimed again) and deletes free slot files beyond
``SPARE_SLOTS``; there are never more than ``MAX_SLOTS`` slots.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"SWAGG001"
_FIELDS = struct.Struct("!8sQB64s")  # magic, step, fingerprint length, fingerprint
_CRC = struct.Struct("!I")
HEADER_BYTES = 128  # the fields above plus their crc, padded: the payload starts aligned
FINGERPRINT = re.compile(r"^[0-9a-f]{8,64}$")  # kernels.fingerprint_hex: 16 hex digits
SLOT_NAME = re.compile(r"^slot-(\d{2})\.agg$")
# The commit core admits at most 16 distinct aggregates per step and only the last few
# steps are kept, so this many slots means something is wrong: the oldest step's slot is
# reused rather than the disk filled (its step is far outside any window still voted on).
MAX_SLOTS = 64
# Free slot files kept for reuse: a step or two of aggregates in flight beyond the
# kept window; more would be disk space for nothing.
SPARE_SLOTS = 4
MAX_STEP = 2**63 - 1


class AggregateStoreError(ValueError):
    """A write the store refuses (bad step, fingerprint or size): a caller's bug."""


@dataclass(frozen=True)
class StoredAggregate:
    step: int
    agg_fp: str
    payload: bytearray  # writable, so the worker can wrap it in a tensor without a copy
    path: Path


@dataclass(frozen=True)
class SkippedFile:
    path: Path
    reason: str


@dataclass
class LoadResult:
    held: list[StoredAggregate] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)


def encode_header(step: int, agg_fp: str) -> bytes:
    fp_bytes = agg_fp.encode("ascii")
    fields = _FIELDS.pack(MAGIC, step, len(fp_bytes), fp_bytes)
    header = fields + _CRC.pack(zlib.crc32(fields))
    return header + bytes(HEADER_BYTES - len(header))


def decode_header(data: bytes) -> tuple[int, str] | str:
    """(step, fingerprint), or the reason the header is not one."""
    if len(data) < _FIELDS.size + _CRC.size:
        return "header cut short"
    fields = data[: _FIELDS.size]
    (crc,) = _CRC.unpack_from(data, _FIELDS.size)
    magic, step, fp_len, fp_bytes = _FIELDS.unpack(fields)
    if magic != MAGIC:
        return "no aggregate header"
    if crc != zlib.crc32(fields) or not 8 <= fp_len <= 64:
        return "header checksum mismatch"
    agg_fp = fp_bytes[:fp_len].decode("ascii", errors="replace")
    if not FINGERPRINT.match(agg_fp):
        return "header fingerprint is not hex"
    return step, agg_fp


class AggregateStore:
    """Aggregates' bytes on disk (module docstring).  Blocking: call it off the event
    loop, and from one thread at a time (the worker's store thread; ``load`` first)."""

    def __init__(self, folder: Path, payload_bytes: int):
        if payload_bytes <= 0:
            raise AggregateStoreError(f"payload_bytes={payload_bytes} must be > 0")
        self.folder = folder
        self.payload_bytes = payload_bytes  # every aggregate is one parameter vector
        folder.mkdir(parents=True, exist_ok=True)
        # slot index -> the (step, fingerprint) it holds, None when free; filled by load.
        self._slots: dict[int, tuple[int, str] | None] | None = None

    def slot_path(self, index: int) -> Path:
        return self.folder / f"slot-{index:02d}.agg"

    def load(self, fingerprint: Callable[[bytearray], str]) -> LoadResult:
        """Every stored aggregate whose slot verifies (``fingerprint(payload)`` must give
        the fingerprint in its header), oldest step first; damaged slots in ``skipped``
        (and free for reuse)."""
        result = LoadResult()
        self._slots = {}
        for path in sorted(self.folder.iterdir()):
            named = SLOT_NAME.match(path.name)
            if named is None:
                result.skipped.append(SkippedFile(path, "not an aggregate slot name"))
                continue
            index = int(named.group(1))
            self._slots[index] = None
            try:
                found = self._read(path)
            except OSError as error:
                found = f"unreadable: {error.strerror or error}"
            if isinstance(found, str):
                if found != "free":
                    result.skipped.append(SkippedFile(path, found))
                continue
            step, agg_fp, payload = found
            actual = fingerprint(payload)
            if actual != agg_fp:
                reason = f"payload fingerprint {actual} differs from {agg_fp} (torn or damaged)"
                result.skipped.append(SkippedFile(path, reason))
                continue
            self._slots[index] = (step, agg_fp)
            result.held.append(StoredAggregate(step, agg_fp, payload, path))
        result.held.sort(key=lambda entry: (entry.step, entry.agg_fp))
        return result

    def _read(self, path: Path) -> tuple[int, str, bytearray] | str:
        expected_size = HEADER_BYTES + self.payload_bytes
        size = path.stat().st_size
        if size != expected_size:
            return f"{size} bytes, expected {expected_size} (torn or another model's)"
        with open(path, "rb") as handle:
            header = handle.read(HEADER_BYTES)
            if header[: len(MAGIC)] == bytes(len(MAGIC)):
                return "free"  # pruned: its content is nobody's any more
            decoded = decode_header(header)
            if isinstance(decoded, str):
                return decoded
            payload = bytearray(self.payload_bytes)
            if handle.readinto(payload) != self.payload_bytes:
                return "payload shorter than its size"
        return decoded[0], decoded[1], payload

    def write(self, step: int, agg_fp: str, payload: memoryview | bytes) -> Path:
        """Store the aggregate ``agg_fp`` of ``step`` durably; returns its slot's path."""
        if not 0 <= step <= MAX_STEP:
            raise AggregateStoreError(f"step {step} is outside [0, {MAX_STEP}]")
        if not FINGERPRINT.match(agg_fp):
            raise AggregateStoreError(f"fingerprint {agg_fp!r} is not 8-64 lowercase hex digits")
        nbytes = memoryview(payload).nbytes
        if nbytes != self.payload_bytes:
            raise AggregateStoreError(f"payload of {nbytes} bytes, expected {self.payload_bytes}")
        slots = self._table()
        for index, held in slots.items():
            if held == (step, agg_fp):
                return self.slot_path(index)  # already durable
        index, new_file = self._free_slot(slots)
        path = self.slot_path(index)
        slots[index] = None  # until the write is durable: torn content is nobody's
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            written = os.pwritev(fd, [encode_header(step, agg_fp), payload], 0)
            if written != HEADER_BYTES + nbytes:
                raise OSError(f"short write: {written} of {HEADER_BYTES + nbytes} bytes")
            if new_file:
                os.fsync(fd)  # the size and the new directory entry are metadata too
            else:
                os.fdatasync(fd)  # same size, same name: the data is all that changed
        finally:
            os.close(fd)
        if new_file:
            self._sync_folder()
        slots[index] = (step, agg_fp)
        return path

    def read(self, step: int, agg_fp: str) -> bytearray | None:
        """The payload of the aggregate ``agg_fp`` of ``step`` if a slot holds it (None
        if none does, or its slot no longer reads as that aggregate).  Not verified
        against the fingerprint here: it was at write or load, and whoever receives it
        from us verifies it again."""
        for index, held in self._table().items():
            if held != (step, agg_fp):
                continue
            try:
                found = self._read(self.slot_path(index))
            except OSError:
                return None
            if isinstance(found, str) or found[:2] != (step, agg_fp):
                return None
            return found[2]
        return None

    def _free_slot(self, slots: dict[int, tuple[int, str] | None]) -> tuple[int, bool]:
        for index in sorted(slots):
            if slots[index] is None:
                return index, False
        if len(slots) < MAX_SLOTS:
            index = next(i for i in range(MAX_SLOTS) if i not in slots)
            return index, True
        return min(slots, key=lambda i: slots[i] or (-1, "")), False

    def _sync_folder(self) -> None:
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def _table(self) -> dict[int, tuple[int, str] | None]:
        if self._slots is None:
            raise AggregateStoreError("call load() before the first write or prune")
        return self._slots

    def stored(self) -> list[tuple[int, str]]:
        """(step, fingerprint) of every aggregate held, oldest step first."""
        return sorted(held for held in self._table().values() if held is not None)

    def prune(
        self, keep_from_step: int, keep: frozenset[tuple[int, str]] = frozenset()
    ) -> list[tuple[int, str]]:
        """Free the slots of steps below ``keep_from_step`` except the (step, fingerprint)
        in ``keep``; returns what they held.

        Why old steps may go: a restarted acceptor installs the state of a live peer
        (rejoin), and while fewer than a majority restart that state is at most a few
        steps behind any step this node applied -- an acceptor of the newest decided
        step lives in every majority, and a node that many steps behind it transfers
        state instead of deciding old steps again.  When a majority does restart from
        older checkpoints, the steps after them are decided again, and each retry
        re-proposes the value an acceptor record holds: those values are ``keep``
        (node_core.aggregates_to_keep), as long as their records.

        A freed slot's header is zeroed without a sync: if that is lost in a crash, the
        old aggregate reloads, verifies, and is never claimed (its step is old).
        """
        slots = self._table()
        freed = []
        for index, held in sorted(slots.items()):
            if held is not None and held[0] < keep_from_step and held not in keep:
                try:
                    with open(self.slot_path(index), "r+b") as handle:
                        handle.write(bytes(len(MAGIC)))
                except OSError:
                    continue  # still held; tried again at the next prune
                slots[index] = None
                freed.append(held)
        spare = sorted(index for index, held in slots.items() if held is None)
        for index in spare[SPARE_SLOTS:]:
            try:
                self.slot_path(index).unlink(missing_ok=True)
            except OSError:
                continue
            del slots[index]
        return freed
