"""Checkpoints: atomic, checksummed, streamable snapshots of a replica's training state.

One byte format serves the checkpoint file and rejoin state transfer, so a peer can
stream its newest checkpoint (or its live state) in chunks and the receiver checks
it exactly as a local load does::

    magic        8 bytes   b"SWSHCKPT"
    header_len   4 bytes   little-endian u32, at most MAX_HEADER_BYTES
    header       JSON      CheckpointHeader: format version, step, param fingerprint,
                           optimizer, sizes, sha256 of the payload
    header_hash 32 bytes   sha256 of the header bytes
    payload                raw little-endian float32: params, then each optimizer
                           buffer in the header's order

Every byte is covered by a hash (the header by ``header_hash``, the payload by
``payload_sha256``), the parameters additionally by their fingerprint, and the
file's length is fixed by the header: a torn, truncated, extended or corrupted
file is detected and skipped with its reason, never loaded.

Writes are atomic: a temporary file in the same folder, fsync, rename, fsync of
the folder; a crash leaves either the old set of checkpoints or the new one (plus
a temporary that ``load_latest`` reports and ``remove_stale_temporaries`` deletes).
Hand-written rather than ``torch.save``: a pickle is neither safe to load from a
peer nor streamable with verification, and its bytes are not specified.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import torch

from swarmshake.reference_node.training.optimizer import BUFFER_NAMES
from swarmshake.reference_node.training.state import TrainingState

MAGIC = b"SWSHCKPT"
FORMAT_VERSION = 1
MAX_HEADER_BYTES = 64 * 1024  # the header is a few hundred bytes; bounds a corrupt length
HASH_BYTES = 32
PREFIX_FIXED_BYTES = len(MAGIC) + 4
MAX_PREFIX_BYTES = PREFIX_FIXED_BYTES + MAX_HEADER_BYTES + HASH_BYTES
# State transfer and file reads move this much per chunk: large enough that per-chunk
# overhead vanishes next to memcpy/hash cost, small enough to interleave with other
# bulk traffic and to bound a frame (DESIGN: size-capped frames).
DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
# Up to 2**31 float32 params plus two Adam buffers; a header claiming more is corrupt.
MAX_PAYLOAD_BYTES = 3 * 4 * (2**31)
UNHASHED = ""  # payload_sha256 of a stream whose sender did not hash the payload
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_KEEP = 3  # newest checkpoints kept: survives one or two corrupted ones
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{12})\.swck$")
TEMPORARY_NAME = re.compile(r"^\.ckpt-\d{12}\.swck\.tmp\.\d+$")

if sys.byteorder != "little":  # the payload is raw little-endian float32
    raise ImportError("swarmshake checkpoints need a little-endian machine")


class CheckpointError(ValueError):
    """A checkpoint or state stream that must not be loaded; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CheckpointHeader(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    format_version: int
    step: int
    update_count: int
    optimizer: str
    param_count: int
    dtype: str
    buffers: list[str]
    payload_nbytes: int
    payload_sha256: str
    param_fp: str
    node: str = ""


@dataclass(frozen=True)
class CheckpointInfo:
    """What the ``checkpoint_write`` event records."""

    path: Path
    step: int
    sha256: str  # of the payload
    param_fp: str
    nbytes: int  # of the whole file


@dataclass(frozen=True)
class Skipped:
    """A checkpoint not loaded, for the caller's ``checkpoint_skip`` event."""

    path: Path
    reason: str


@dataclass
class LoadResult:
    state: TrainingState | None
    path: Path | None
    skipped: list[Skipped] = field(default_factory=list)


# --- encoding ------------------------------------------------------------------------------


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a flat contiguous CPU float32 tensor, without a copy."""
    return memoryview(tensor.detach().cpu().numpy()).cast("B")


def _payload_tensors(state: TrainingState) -> list[torch.Tensor]:
    return [state.params, *(state.buffers[name] for name in BUFFER_NAMES[state.optimizer])]


def build_header(
    state: TrainingState,
    node: str = "",
    *,
    payload_sha256: str | None = None,
    param_fp: str | None = None,
) -> CheckpointHeader:
    """The header of ``state``; hashes the payload unless ``payload_sha256`` is given,
    fingerprints the parameters unless ``param_fp`` (already computed for exactly
    these parameters, e.g. by the step that produced them) is given."""
    if state.optimizer not in BUFFER_NAMES:
        raise ValueError(f"unknown optimizer {state.optimizer!r}")
    if sorted(state.buffers) != sorted(BUFFER_NAMES[state.optimizer]):
        raise ValueError(
            f"{state.optimizer} state needs buffers {BUFFER_NAMES[state.optimizer]}, "
            f"got {sorted(state.buffers)}"
        )
    total = 0
    digest = hashlib.sha256()
    for tensor in _payload_tensors(state):
        view = _tensor_bytes(tensor)
        if payload_sha256 is None:
            digest.update(view)
        total += view.nbytes
    return CheckpointHeader(
        format_version=FORMAT_VERSION,
        step=state.step,
        update_count=state.update_count,
        optimizer=state.optimizer,
        param_count=state.params.numel(),
        dtype="float32",
        buffers=list(BUFFER_NAMES[state.optimizer]),
        payload_nbytes=total,
        payload_sha256=digest.hexdigest() if payload_sha256 is None else payload_sha256,
        param_fp=state.param_fingerprint() if param_fp is None else param_fp,
        node=node,
    )


def encode_prefix(header: CheckpointHeader) -> bytes:
    """Everything before the payload: magic, header length, header, header hash."""
    header_bytes = msgspec.json.encode(header)
    return (
        MAGIC
        + struct.pack("<I", len(header_bytes))
        + header_bytes
        + hashlib.sha256(header_bytes).digest()
    )


def state_chunks(
    state: TrainingState,
    *,
    node: str = "",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    hash_payload: bool = True,
    param_fp: str | None = None,
) -> Iterator[bytes | memoryview]:
    """The state in the checkpoint byte format, as chunks of at most ``chunk_bytes``.

    The first chunk is the prefix (header); payload chunks are views of the live
    tensors, so the state must not change until the iterator is exhausted.
    ``hash_payload=False`` leaves ``payload_sha256`` empty: for a live transfer whose
    frames are already authenticated (HMAC) and ordered, a second hash of every byte
    would halve the throughput (sha256 runs at about 0.6-1.5 GB/s a core here); the
    receiver must then opt in (``StateAssembler(require_payload_hash=False)``) and
    still checks the parameter fingerprint.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    digest = None if hash_payload else UNHASHED
    yield encode_prefix(build_header(state, node, payload_sha256=digest, param_fp=param_fp))
    for tensor in _payload_tensors(state):
        view = _tensor_bytes(tensor)
        for start in range(0, view.nbytes, chunk_bytes):
            yield view[start : start + chunk_bytes]


# --- decoding ------------------------------------------------------------------------------


def parse_prefix(data: bytes | memoryview) -> tuple[CheckpointHeader, int] | None:
    """``(header, prefix length)``, or ``None`` while ``data`` is too short to tell."""
    if len(data) < PREFIX_FIXED_BYTES:
        if bytes(data[: len(MAGIC)]) != MAGIC[: min(len(data), len(MAGIC))]:
            raise CheckpointError("not a swarmshake checkpoint (bad magic)")
        return None
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise CheckpointError("not a swarmshake checkpoint (bad magic)")
    (header_len,) = struct.unpack_from("<I", data, len(MAGIC))
    if header_len > MAX_HEADER_BYTES:
        raise CheckpointError(f"header length {header_len} exceeds {MAX_HEADER_BYTES} (corrupt)")
    prefix_len = PREFIX_FIXED_BYTES + header_len + HASH_BYTES
    if len(data) < prefix_len:
        return None
    header_bytes = bytes(data[PREFIX_FIXED_BYTES : PREFIX_FIXED_BYTES + header_len])
    stored_hash = bytes(data[PREFIX_FIXED_BYTES + header_len : prefix_len])
    if hashlib.sha256(header_bytes).digest() != stored_hash:
        raise CheckpointError("header checksum mismatch (corrupt header)")
    try:
        header = msgspec.json.decode(header_bytes, type=CheckpointHeader)
    except msgspec.DecodeError as error:
        raise CheckpointError(f"unreadable header: {error}") from None
    _check_header(header)
    return header, prefix_len


def _check_header(header: CheckpointHeader) -> None:
    if header.format_version != FORMAT_VERSION:
        raise CheckpointError(
            f"format version {header.format_version}, this node reads {FORMAT_VERSION}"
        )
    if header.dtype != "float32":
        raise CheckpointError(f"dtype {header.dtype!r}, expected 'float32'")
    if header.optimizer not in BUFFER_NAMES:
        raise CheckpointError(f"unknown optimizer {header.optimizer!r}")
    if header.buffers != list(BUFFER_NAMES[header.optimizer]):
        raise CheckpointError(f"buffers {header.buffers} do not match optimizer {header.optimizer}")
    if header.step < 0 or header.update_count < 0 or header.param_count < 1:
        raise CheckpointError("negative step/update count or empty parameters")
    if header.payload_sha256 != UNHASHED and not SHA256_HEX.match(header.payload_sha256):
        raise CheckpointError("payload_sha256 is neither empty nor 64 hex digits")
    expected = 4 * header.param_count * (1 + len(header.buffers))
    if header.payload_nbytes != expected or expected > MAX_PAYLOAD_BYTES:
        raise CheckpointError(
            f"payload size {header.payload_nbytes} does not match {header.param_count} params "
            f"with {len(header.buffers)} buffers ({expected} bytes)"
        )


def _new_payload(nbytes: int, reuse: torch.Tensor | None = None) -> tuple[torch.Tensor, memoryview]:
    """An uninitialised, aligned byte tensor and a writable view of it (no memset of
    hundreds of MB, and float32 views of it are aligned).  ``reuse`` is a buffer
    already paged in: a fresh one costs a page fault per 4 KiB on first touch
    (~1.3 s for 800 MB on this VM under load, more than the copy itself)."""
    if reuse is None:
        payload = torch.empty(nbytes, dtype=torch.uint8)
    else:
        if reuse.dtype != torch.uint8 or reuse.dim() != 1 or not reuse.is_contiguous():
            raise ValueError("payload_buffer must be a flat contiguous uint8 CPU tensor")
        if reuse.numel() < nbytes or reuse.data_ptr() % 64:
            raise CheckpointError(
                f"payload of {nbytes} bytes does not fit the {reuse.numel()}-byte buffer"
            )
        payload = reuse[:nbytes]
    return payload, memoryview(payload.numpy())


def state_payload_bytes(param_count: int, optimizer: str) -> int:
    """Payload size of a state of ``param_count`` parameters with ``optimizer``'s buffers."""
    return 4 * param_count * (1 + len(BUFFER_NAMES[optimizer]))


def paged_in_payload_buffer(nbytes: int) -> torch.Tensor:
    """A ``StateAssembler`` payload buffer of ``nbytes`` with every page already
    touched, for a receiver that prepares it off the critical path: on this project's
    VM a first touch costs ~5 us per 4 KiB page (1.1-1.3 s for 800 MB, against
    0.13 s to fill the same memory once mapped), more than the transfer itself.
    Transparent huge pages did not help here (madvise mode, none were granted)."""
    if nbytes < 1:
        raise ValueError(f"nbytes must be >= 1, got {nbytes}")
    return torch.zeros(nbytes, dtype=torch.uint8)  # writing the zeros maps every page


def _state_from_payload(
    header: CheckpointHeader,
    payload: torch.Tensor,
    payload_sha256: str | None = None,
    *,
    require_payload_hash: bool = True,
) -> TrainingState:
    """Verify ``payload`` against ``header`` and wrap it as tensors (no copy).

    ``payload_sha256`` is the digest already computed while the bytes arrived (one
    pass over memory instead of two); ``None`` hashes here.
    """
    if payload.numel() != header.payload_nbytes:
        raise CheckpointError(
            f"truncated: payload has {payload.numel()} of {header.payload_nbytes} bytes"
        )
    if header.payload_sha256 == UNHASHED:
        if require_payload_hash:
            raise CheckpointError("the payload carries no checksum")
    else:
        if payload_sha256 is None:
            payload_sha256 = hashlib.sha256(memoryview(payload.numpy())).hexdigest()
        if payload_sha256 != header.payload_sha256:
            raise CheckpointError("payload checksum mismatch (corrupt payload)")
    count = header.param_count
    tensors = [
        payload[4 * count * index : 4 * count * (index + 1)].view(torch.float32)
        for index in range(1 + len(header.buffers))
    ]
    state = TrainingState(
        step=header.step,
        params=tensors[0],
        optimizer=header.optimizer,
        buffers=dict(zip(header.buffers, tensors[1:], strict=True)),
        update_count=header.update_count,
    )
    if state.param_fingerprint() != header.param_fp:
        raise CheckpointError("parameter fingerprint mismatch")
    return state


class StateAssembler:
    """Reassembles a streamed state from its chunks, in order, and verifies it.

    Feed chunks as they arrive; ``finish`` returns the verified state or raises
    ``CheckpointError``.  ``max_payload_bytes`` bounds what a peer can make us
    allocate (the expected model size, known from the config).  The caller then
    compares ``header.param_fp`` (verified against the bytes) with the fingerprint
    the majority committed.  ``require_payload_hash=False`` accepts a stream sent
    with ``hash_payload=False`` (see ``state_chunks``).  ``payload_buffer`` (flat
    uint8, 64-byte aligned, at least the payload's size) receives the bytes instead
    of a fresh allocation; the returned state's tensors are views of it, so it must
    not be reused while that state lives.
    """

    def __init__(
        self,
        *,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        require_payload_hash: bool = True,
        payload_buffer: torch.Tensor | None = None,
    ):
        self.max_payload_bytes = max_payload_bytes
        self.require_payload_hash = require_payload_hash
        self._payload_buffer = payload_buffer
        self.header: CheckpointHeader | None = None
        self._prefix = bytearray()
        self._payload: torch.Tensor | None = None
        self._view: memoryview | None = None
        self._filled = 0
        # Hashed as chunks arrive, while they are in cache; hashlib releases the GIL
        # on large updates, so a receiving thread overlaps hashing with socket reads.
        self._digest = hashlib.sha256()
        self._hashing = True

    @property
    def received_bytes(self) -> int:
        return len(self._prefix) + self._filled

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """Take the next chunk (any size); raises ``CheckpointError`` as soon as the
        stream cannot be valid.  An assembler that raised is spent: drop the transfer."""
        view = memoryview(chunk).cast("B")
        if self._payload is None:
            room = MAX_PREFIX_BYTES - len(self._prefix)
            self._prefix += view[:room]
            view = view[room:]
            parsed = parse_prefix(self._prefix)
            if parsed is None:  # only while the prefix is shorter than its maximum
                return
            self.header, prefix_len = parsed
            if self.header.payload_nbytes > self.max_payload_bytes:
                raise CheckpointError(
                    f"payload of {self.header.payload_nbytes} bytes exceeds the "
                    f"{self.max_payload_bytes} this receiver accepts"
                )
            if self.header.payload_sha256 == UNHASHED and self.require_payload_hash:
                raise CheckpointError("the payload carries no checksum")
            self._hashing = self.header.payload_sha256 != UNHASHED
            self._payload, self._view = _new_payload(
                self.header.payload_nbytes, self._payload_buffer
            )
            payload_start = bytes(self._prefix[prefix_len:])
            del self._prefix[prefix_len:]
            self._write(memoryview(payload_start))
        self._write(view)

    def _write(self, view: memoryview) -> None:
        assert self._view is not None
        end = self._filled + view.nbytes
        if end > self._view.nbytes:
            raise CheckpointError(
                f"stream longer than its header says ({end} > {self._view.nbytes})"
            )
        self._view[self._filled : end] = view
        if self._hashing:
            self._digest.update(view)
        self._filled = end

    def finish(self) -> TrainingState:
        if self.header is None or self._payload is None:
            raise CheckpointError(f"truncated: stream ended after {len(self._prefix)} header bytes")
        if self._filled != self._payload.numel():
            raise CheckpointError(
                f"truncated: payload has {self._filled} of {self._payload.numel()} bytes"
            )
        return _state_from_payload(
            self.header,
            self._payload,
            self._digest.hexdigest(),
            require_payload_hash=self.require_payload_hash,
        )


# --- files ---------------------------------------------------------------------------------


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:012d}.swck"


def write_checkpoint(
    directory: str | os.PathLike[str],
    state: TrainingState,
    *,
    node: str = "",
    keep: int = DEFAULT_KEEP,
) -> CheckpointInfo:
    """Write ``state`` atomically as the checkpoint of ``state.step``; prune to ``keep``."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(folder, state.step)
    temporary = folder / f".{final.name}.tmp.{os.getpid()}"
    # One pass over the payload: write it after a placeholder header, hashing each
    # chunk while it is in cache, then overwrite the header (same length: the digest
    # is always 64 hex digits) before the fsync.
    unhashed = build_header(state, node, payload_sha256="0" * 64)
    placeholder = encode_prefix(unhashed)
    digest = hashlib.sha256()
    nbytes = len(placeholder)
    try:
        with open(temporary, "wb") as handle:
            handle.write(placeholder)
            for tensor in _payload_tensors(state):
                view = _tensor_bytes(tensor)
                for start in range(0, view.nbytes, DEFAULT_CHUNK_BYTES):
                    piece = view[start : start + DEFAULT_CHUNK_BYTES]
                    digest.update(piece)
                    handle.write(piece)
                nbytes += view.nbytes
            header = msgspec.structs.replace(unhashed, payload_sha256=digest.hexdigest())
            prefix = encode_prefix(header)
            if len(prefix) != len(placeholder):
                raise AssertionError("checkpoint header changed length when its digest was set")
            handle.seek(0)
            handle.write(prefix)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(folder)
    prune(folder, keep)
    return CheckpointInfo(
        path=final,
        step=state.step,
        sha256=header.payload_sha256,
        param_fp=header.param_fp,
        nbytes=nbytes,
    )


def _fsync_directory(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read_checkpoint(
    path: str | os.PathLike[str], *, max_payload_bytes: int = MAX_PAYLOAD_BYTES
) -> TrainingState:
    """Load and verify one checkpoint file; raises ``CheckpointError`` with the reason."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(MAX_PREFIX_BYTES)
            parsed = parse_prefix(head)
            if parsed is None:
                raise CheckpointError(f"truncated: file has {size} bytes, header incomplete")
            header, prefix_len = parsed
            if header.payload_nbytes > max_payload_bytes:
                raise CheckpointError(
                    f"payload of {header.payload_nbytes} bytes exceeds the allowed {max_payload_bytes}"
                )
            expected_size = prefix_len + header.payload_nbytes
            if size < expected_size:
                raise CheckpointError(f"truncated: file has {size} of {expected_size} bytes")
            if size > expected_size:
                raise CheckpointError(f"file has {size - expected_size} bytes past its payload")
            payload, view = _new_payload(header.payload_nbytes)
            handle.seek(prefix_len)
            digest = hashlib.sha256()
            filled = 0
            while filled < view.nbytes:  # chunked: each chunk is hashed while in cache
                piece = view[filled : filled + DEFAULT_CHUNK_BYTES]
                count = handle.readinto(piece)
                if not count:
                    raise CheckpointError(
                        f"truncated: read {filled} of {view.nbytes} payload bytes"
                    )
                digest.update(piece[:count])
                filled += count
                piece.release()
            view.release()
    except OSError as error:
        raise CheckpointError(f"unreadable: {error.strerror or error}") from None
    match = CHECKPOINT_NAME.match(path.name)
    if match and int(match.group(1)) != header.step:
        raise CheckpointError(
            f"file name says step {int(match.group(1))}, header says {header.step}"
        )
    return _state_from_payload(header, payload, digest.hexdigest())


def list_checkpoints(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(step, path)`` of the checkpoint files in ``directory``, newest first."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = CHECKPOINT_NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


def stale_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    folder = Path(directory)
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.iterdir() if TEMPORARY_NAME.match(path.name))


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete temporaries left by writes that never finished (call at startup, when no
    write of this node can be in flight)."""
    removed = stale_temporaries(directory)
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def load_latest(
    directory: str | os.PathLike[str], *, max_payload_bytes: int = MAX_PAYLOAD_BYTES
) -> LoadResult:
    """The newest checkpoint that verifies; every one passed over is in ``skipped``."""
    skipped = [
        Skipped(path, "incomplete temporary file (a write that never finished)")
        for path in stale_temporaries(directory)
    ]
    for _step, path in list_checkpoints(directory):
        try:
            state = read_checkpoint(path, max_payload_bytes=max_payload_bytes)
        except CheckpointError as error:
            skipped.append(Skipped(path, error.reason))
            continue
        return LoadResult(state=state, path=path, skipped=skipped)
    return LoadResult(state=None, path=None, skipped=skipped)


def prune(directory: str | os.PathLike[str], keep: int = DEFAULT_KEEP) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoint files; returns what was deleted."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    removed = [path for _step, path in list_checkpoints(directory)[keep:]]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def file_chunks(
    path: str | os.PathLike[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[bytes]:
    """A checkpoint file as state-transfer chunks (the receiver verifies, not the sender)."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            yield chunk
