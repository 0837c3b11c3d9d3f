"""Checkpoint replicas: each node's checkpoint copied to r peers (DESIGN S2).

A committed step must survive while fewer than a majority of nodes crash, even when
a node's own disk loses or corrupts its checkpoints.  So after every checkpoint the
worker streams the file on the bulk channel (``BulkChunk(kind="replica")``) to the
r peers the control process names; each holder verifies it exactly as a local load
does (header hash, payload sha256, parameter fingerprint) and stores it atomically
under ``<data_dir>/replicas/<origin>/`` with the checkpoint's own file name.  A
worker that starts with no checkpoint that verifies asks its peers for their newest
replica of it (``BulkRequest(kind="replica")``), waits a bounded time, and installs
the newest one that verifies as its own checkpoint.

Pure file and byte handling here; the worker owns the sockets.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.bulk import BulkChunk, BulkRefusal, BulkRequest, split

REPLICAS_DIR = "replicas"
# Replicas kept per origin: the newest plus one, so a replica torn by a crash of the
# holder mid-write (never renamed into place) or one corrupted on disk later still
# leaves a verified one.
REPLICAS_KEPT = 2
# Replica streams assembled at once by one holder: one per origin; a cluster of up to
# this many nodes can all replicate to the same holder at the same moment.
MAX_ASSEMBLIES = 64


class ReplicaError(ValueError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def max_file_bytes(parameter_count: int) -> int:
    """The largest checkpoint file of this model: params + two Adam buffers + prefix."""
    return 3 * 4 * parameter_count + checkpoint.MAX_PREFIX_BYTES


def verify_bytes(data: bytes | bytearray, max_payload_bytes: int) -> checkpoint.CheckpointHeader:
    """Check a whole checkpoint file's bytes as ``read_checkpoint`` would; the header."""
    assembler = checkpoint.StateAssembler(max_payload_bytes=max_payload_bytes)
    try:
        assembler.feed(memoryview(data))
        assembler.finish()
    except checkpoint.CheckpointError as error:
        raise ReplicaError(error.reason) from None
    assert assembler.header is not None
    return assembler.header


def write_atomically(folder: Path, name: str, data: bytes | bytearray) -> Path:
    """Temp file, fsync, rename, fsync folder: a crash leaves the old set or the new."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / name
    temporary = folder / f".{name}.tmp.{os.getpid()}"
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return final


class ReplicaStore:
    """The replicas this node holds for others, and their reassembly from chunks."""

    def __init__(self, data_dir: Path, parameter_count: int, keep: int = REPLICAS_KEPT):
        self.root = data_dir / REPLICAS_DIR
        self.keep = keep
        self.max_payload_bytes = 3 * 4 * parameter_count
        self.max_bytes = max_file_bytes(parameter_count)
        self._partial: dict[str, tuple[int, bytearray]] = {}

    def folder(self, origin: str) -> Path:
        return self.root / origin

    def feed(self, origin: str, chunk: BulkChunk) -> bytearray | None:
        """Take one chunk from ``origin``; the whole file's bytes once the last arrived."""
        if chunk.index == 0:
            self._partial.pop(origin, None)  # a new stream replaces an unfinished one
            if len(self._partial) >= MAX_ASSEMBLIES:
                raise ReplicaError("too_many_replica_streams")
            entry = (0, bytearray())
        else:
            entry = self._partial.get(origin)
            if entry is None or entry[0] != chunk.index:
                self._partial.pop(origin, None)
                raise ReplicaError("replica_chunk_out_of_order")
        buffer = entry[1]
        buffer += chunk.data
        if len(buffer) > self.max_bytes:
            self._partial.pop(origin, None)
            raise ReplicaError("replica_too_large")
        if chunk.last:
            self._partial.pop(origin, None)
            return buffer
        self._partial[origin] = (chunk.index + 1, buffer)
        return None

    def store(
        self, origin: str, data: bytes | bytearray
    ) -> tuple[Path, checkpoint.CheckpointHeader]:
        """Verify and store one replica of ``origin``'s checkpoint; prune old ones.
        Blocking (hash + fsync): run it off the event loop."""
        header = verify_bytes(data, self.max_payload_bytes)
        if header.node and header.node != origin:
            raise ReplicaError(f"checkpoint of {header.node!r} sent as {origin!r}'s")
        folder = self.folder(origin)
        path = write_atomically(folder, checkpoint.checkpoint_path(folder, header.step).name, data)
        checkpoint.prune(folder, self.keep)
        return path, header

    def newest(self, origin: str) -> Path | None:
        """The newest replica file held for ``origin`` (the requester verifies it)."""
        found = checkpoint.list_checkpoints(self.folder(origin))
        return found[0][1] if found else None


def install_as_own(checkpoint_dir: Path, data: bytes | bytearray, max_payload_bytes: int) -> Path:
    """A replica fetched back from a peer becomes this node's checkpoint file."""
    header = verify_bytes(data, max_payload_bytes)
    return write_atomically(
        checkpoint_dir, checkpoint.checkpoint_path(checkpoint_dir, header.step).name, data
    )


# --- the worker's side ------------------------------------------------------------------------

# A restarting worker waits this long for its peers' replicas before giving up: peers
# that are up answer within milliseconds (a refusal, or the file at >= 100 MB/s, so
# a 0.5 GB checkpoint in ~5 s on a loaded machine); peers that are down never do, and
# the node must not wait for them (a live peer's state transfer comes next anyway).
RESTORE_WAIT_S = 5.0
# Replica chunks of a restore held before WorkerReady, per peer: the file's chunks.
RESTORE_POLL_S = 0.05


class ReplicaService:
    """Replication as the worker runs it: send after a checkpoint, hold for others,
    serve back on request, and restore at start.  ``worker`` is the ``Worker``
    (its links, codec, task group, compute thread and event log)."""

    def __init__(self, worker) -> None:  # noqa: ANN001
        self.worker = worker
        self.store = ReplicaStore(worker.config.data_dir, worker.replica.model.parameter_count)
        # Restore in progress: peer -> the file's bytes, or None for "has none".
        self.restoring: dict[str, bytearray | None] | None = None
        self._restore_parts = ReplicaStore(
            worker.config.data_dir, worker.replica.model.parameter_count
        )

    # -- the origin ------------------------------------------------------------------------------

    def replicate(self, path: Path, step: int, param_fp: str, peers: list[str]) -> None:
        worker = self.worker
        for peer in peers:
            if peer == worker.node:
                continue
            chunks = split("replica", step, param_fp, checkpoint.file_chunks(path))
            worker.group.create_task(worker.send_blob(peer, chunks))

    # -- the holder ------------------------------------------------------------------------------

    def on_chunk(self, sender: str, chunk: BulkChunk) -> None:
        worker = self.worker
        if self.restoring is not None and sender in self.restoring:
            self._on_restore_chunk(sender, chunk)
            return
        try:
            data = self.store.feed(sender, chunk)
        except ReplicaError as error:
            worker.drops.drop(error.reason, sender)
            return
        if data is not None:
            worker.group.create_task(self._store(sender, data))

    async def _store(self, origin: str, data: bytearray) -> None:
        worker = self.worker
        try:
            await worker.run_compute(self.store.store, origin, data)
        except ReplicaError as error:
            worker.log(
                history.CheckpointSkip,
                path=str(self.store.folder(origin)),
                reason=f"replica from {origin}: {error.reason}"[:200],
            )

    async def serve(self, requester: str) -> None:
        worker = self.worker
        path = self.store.newest(requester)
        if path is None:
            refusal = BulkRefusal(kind="replica", step=-1, key="", reason="no replica held")
            await worker.send_blob(requester, iter([refusal]))
            return
        step = int(checkpoint.CHECKPOINT_NAME.match(path.name).group(1))  # type: ignore[union-attr]
        await worker.send_blob(requester, split("replica", step, "", checkpoint.file_chunks(path)))

    # -- the restore -----------------------------------------------------------------------------

    def on_refusal(self, sender: str) -> None:
        if self.restoring is not None and sender in self.restoring:
            self.restoring[sender] = None

    def _on_restore_chunk(self, sender: str, chunk: BulkChunk) -> None:
        try:
            data = self._restore_parts.feed(sender, chunk)
        except ReplicaError as error:
            self.worker.drops.drop(error.reason, sender)
            self.restoring[sender] = None  # type: ignore[index]
            return
        if data is not None:
            self.restoring[sender] = data  # type: ignore[index]

    def early_frame(self, frame) -> bool:  # noqa: ANN001
        """Before WorkerReady: take the frames of a restore in progress (other early
        frames wait for the worker to be ready).  True if consumed."""
        if self.restoring is None or frame.header.sender not in self.restoring:
            return False
        message = self.worker.codec.decode(frame)
        if isinstance(message, BulkChunk) and message.kind == "replica":
            self._on_restore_chunk(frame.header.sender, message)
            return True
        if isinstance(message, BulkRefusal) and message.kind == "replica":
            self.on_refusal(frame.header.sender)
            return True
        return False

    async def restore(self, peers: list[str]) -> Path | None:
        """Ask every peer for its newest replica of this node; install the newest that
        verifies as this node's checkpoint.  Bounded by ``RESTORE_WAIT_S``."""
        worker = self.worker
        if not peers:
            return None
        self.restoring = {peer: bytearray() for peer in peers}
        pending = {peer: False for peer in peers}  # answered yet?
        request = BulkRequest(kind="replica")
        for peer in peers:
            worker.group.create_task(worker.send_blob(peer, iter([request])))
        deadline = time.monotonic() + RESTORE_WAIT_S
        while time.monotonic() < deadline:
            for peer, data in self.restoring.items():
                pending[peer] = data is None or (isinstance(data, bytearray) and len(data) > 0)
            if all(pending.values()):
                break
            await asyncio.sleep(RESTORE_POLL_S)
        answers, self.restoring = self.restoring, None
        candidates: list[tuple[int, str, bytearray]] = []
        limit = self.store.max_payload_bytes
        for peer, data in sorted(answers.items()):
            if not data:
                continue
            try:
                header = await worker.run_compute(verify_bytes, data, limit)
            except ReplicaError as error:
                worker.log(
                    history.CheckpointSkip,
                    path=f"replica@{peer}",
                    reason=f"replica held by {peer}: {error.reason}"[:200],
                )
                continue
            candidates.append((header.step, peer, data))
        if not candidates:
            return None
        step, peer, data = max(candidates)
        return await worker.run_compute(install_as_own, worker.config.checkpoint_dir, data, limit)
