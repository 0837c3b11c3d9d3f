"""Checkpoint replicas: each node's checkpoint copied to r peers (DESIGN S2).

A committed step must survive while fewer than a majority of nodes crash, even when
a node's own disk loses or corrupts its checkpoints.  So after every checkpoint the
worker streams the file on the bulk channel (``BulkChunk(kind="replica")``) to the
r peers the control process names; each holder verifies it exactly as a local load
does (header hash, payload sha256, parameter fingerprint) and stores it atomically
under ``<data_dir>/replicas/<origin>/`` with the checkpoint's own file name.  A
worker that starts with no checkpoint that verifies asks its peers for their newest
replica of it (``BulkRequest(kind="replica")``), waits a bounded time, and installs
the newest one that verifies *and names it as origin* as its own checkpoint.

Two replica streams can come from one peer at once: the replica it serves back to
us, and a push of its own fresh checkpoint (we may be one of its holders).  They
are told apart by the chunk key (``SERVED_KEY`` for a served one, the param_fp for
a push) and never share an assembly: mixing them once made a restarting node
install a peer's checkpoint as its own (issue 4).

Pure file and byte handling here; the worker owns the sockets.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.runtime.bulk import BulkChunk, BulkRefusal, BulkRequest, split
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.durable import write_atomically

REPLICAS_DIR = "replicas"
# Replicas kept per origin: the newest plus one, so a replica torn by a crash of the
# holder mid-write (never renamed into place) or one corrupted on disk later still
# leaves a verified one.
REPLICAS_KEPT = 2
# Replica streams assembled at once by one holder: one per origin; a cluster of up to
# this many nodes can all replicate to the same holder at the same moment.
MAX_ASSEMBLIES = 64
# The key of a replica served back to its origin.  A push carries the checkpoint's
# param_fp (hex digits), which can never equal this word.
SERVED_KEY = "served"


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


def pushed_chunks(
    path: Path, step: int, param_fp: str, on_error: Callable[[OSError], None] = lambda _: None
) -> Iterator[BulkChunk]:
    """An origin's fresh checkpoint file, as the chunks it pushes to a holder.

    The file is read when the push's turn comes; if it cannot be read by then (pruned
    by a newer checkpoint, or its folder gone: a failing disk) the push ends there and
    ``on_error`` says why.  A holder verifies every replica it assembles (a cut one
    fails and is skipped), so a push cut short costs only this replica, never the worker (suites/disk.yaml's test once lost n1's
    worker to this NotADirectoryError)."""

    def pieces() -> Iterator[bytes]:
        try:
            yield from checkpoint.file_chunks(path)
        except OSError as error:
            on_error(error)

    return split("replica", step, param_fp, pieces())


def served_chunks(handle: BinaryIO, step: int) -> Iterator[BulkChunk]:
    """A held replica, from a file ``handle`` already open (a prune or a newer replica
    replacing the name while it streams cannot touch an open file), as the chunks a
    holder serves back to the origin.  Closes the handle when exhausted."""

    def pieces() -> Iterator[bytes]:
        with handle:
            while piece := handle.read(checkpoint.DEFAULT_CHUNK_BYTES):
                yield piece

    return split("replica", step, SERVED_KEY, pieces())


def is_served(chunk: BulkChunk) -> bool:
    """Whether a replica chunk answers our restore (else it is a peer's push)."""
    return chunk.key == SERVED_KEY


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

    def open_newest(self, origin: str) -> tuple[int, BinaryIO] | None:
        """``(step, open file)`` of the newest replica held for ``origin``.  Opened
        before streaming, so a prune or a rename over the name meanwhile cannot cut
        the stream short."""
        for _attempt in range(2):  # pruned between listing and opening: list again
            found = checkpoint.list_checkpoints(self.folder(origin))
            if not found:
                return None
            step, path = found[0]
            try:
                return step, open(path, "rb")  # noqa: SIM115 - the caller's stream closes it
            except FileNotFoundError:
                continue
        return None

    def newest(self, origin: str) -> Path | None:
        """The newest replica file held for ``origin`` (the requester verifies it)."""
        found = checkpoint.list_checkpoints(self.folder(origin))
        return found[0][1] if found else None


class RestoreAnswers:
    """The answers to one restore, per peer: the served file's bytes once whole, an
    empty buffer while none has arrived, ``None`` for "has none" (or a broken stream).
    Only chunks served for this restore (``is_served``) reach it: a peer's push
    arriving meanwhile goes to the holder's store, as at any other time."""

    def __init__(self, peers: list[str], max_bytes_per_file: int):
        self.by_peer: dict[str, bytearray | None] = {peer: bytearray() for peer in peers}
        self.complete = asyncio.Event()  # set once every peer has answered
        # One served stream per peer: (next chunk index, bytes so far), bounded by the
        # file size of this model.
        self._parts: dict[str, tuple[int, bytearray]] = {}
        self._max_bytes = max_bytes_per_file

    def takes(self, sender: str, chunk: BulkChunk) -> bool:
        return sender in self.by_peer and is_served(chunk)

    def on_chunk(self, sender: str, chunk: BulkChunk) -> None:
        """Take a served chunk (``takes`` was true); raises ``ReplicaError`` for a
        stream out of order or too large, after marking the peer "has none"."""
        if chunk.index == 0:
            parts = bytearray()
        else:
            entry = self._parts.get(sender)
            if entry is None or entry[0] != chunk.index:
                self._fail(sender)
                raise ReplicaError("replica_chunk_out_of_order")
            parts = entry[1]
        parts += chunk.data
        if len(parts) > self._max_bytes:
            self._fail(sender)
            raise ReplicaError("replica_too_large")
        if chunk.last:
            self._parts.pop(sender, None)
            self.by_peer[sender] = parts
            self._note_answer()
        else:
            self._parts[sender] = (chunk.index + 1, parts)

    def on_refusal(self, sender: str) -> None:
        if sender in self.by_peer:
            self._fail(sender)

    def _fail(self, sender: str) -> None:
        self._parts.pop(sender, None)
        self.by_peer[sender] = None
        self._note_answer()

    def _note_answer(self) -> None:
        if all(data is None or len(data) > 0 for data in self.by_peer.values()):
            self.complete.set()

    def silent(self) -> list[str]:
        """Peers from which nothing came yet, no answer and no stream under way:
        those worth asking again (a stream under way is not asked twice)."""
        return [
            peer
            for peer, data in self.by_peer.items()
            if data is not None and not data and peer not in self._parts
        ]


async def collect_answers(
    answers: RestoreAnswers,
    ask: Callable[[list[str]], None],
    wait_s: float,
    ask_again_s: float,
    clock: NodeClock,
) -> None:
    """Ask every peer, then ask the silent ones again every ``ask_again_s``, until each
    answered or ``wait_s`` passed (node time: ``clock``, skewed by a clock-skew fault).

    A request or its answer can be lost: written into a connection the link layer
    only later finds dead (a proxy accepts while the restarted worker's port is still
    closed, then drops what it got), and neither side retries a single frame.  Asking
    once made such a loss cost the whole ``wait_s`` (a 5.1 s rejoin in 1 of 8
    restarts); asking again costs one ``ask_again_s``.  Bounded: at most
    ``wait_s / ask_again_s`` rounds."""
    deadline = clock.now() + wait_s
    ask(list(answers.by_peer))
    while not answers.complete.is_set():
        remaining_s = deadline - clock.now()
        if remaining_s <= 0:
            return  # use what came; a peer silent all along is down (RESTORE_WAIT_S)
        try:
            async with asyncio.timeout(clock.host_delay_s(min(ask_again_s, remaining_s))):
                await answers.complete.wait()
        except TimeoutError:
            silent = answers.silent()
            if silent and clock.now() < deadline:
                ask(silent)


def take_replica_chunk(
    restoring: RestoreAnswers | None, store: ReplicaStore, sender: str, chunk: BulkChunk
) -> bytearray | None:
    """Route one replica chunk: a served one to the restore in progress, a push to the
    holder's store; the pushed file's bytes once whole.  Raises ``ReplicaError`` for
    a chunk to drop (one served after the restore stopped waiting is no push)."""
    if is_served(chunk):
        if restoring is None or not restoring.takes(sender, chunk):
            raise ReplicaError("unrequested_replica")
        restoring.on_chunk(sender, chunk)
        return None
    return store.feed(sender, chunk)


def choose_replica(
    answers: dict[str, bytearray | None], node: str, max_payload_bytes: int
) -> tuple[tuple[int, str, bytearray] | None, list[tuple[str, str]]]:
    """The newest answer that verifies and is ``node``'s own checkpoint, as
    ``(step, peer, bytes)``, and ``(peer, reason)`` for each one passed over.
    A checkpoint naming another origin is never ours to install, however valid.
    Blocking (hashes every answer): run it off the event loop."""
    candidates: list[tuple[int, str, bytearray]] = []
    skipped: list[tuple[str, str]] = []
    for peer, data in sorted(answers.items()):
        if not data:
            continue
        try:
            header = verify_bytes(data, max_payload_bytes)
        except ReplicaError as error:
            skipped.append((peer, error.reason))
            continue
        if header.node != node:
            skipped.append((peer, f"checkpoint of {header.node!r}, not of {node!r}"))
            continue
        candidates.append((header.step, peer, data))
    return (max(candidates) if candidates else None), skipped


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
# A peer that is up answers a request within milliseconds (a refusal, or the first
# chunk of its file); one silent this long lost the request or its answer: ask it
# again.  Above a link's redial backoff cap (1 s / 2 on average) so a retry usually
# finds the link redialled; 10 rounds within RESTORE_WAIT_S.
RESTORE_ASK_AGAIN_S = 0.5


class ReplicaService:
    """Replication as the worker runs it: send after a checkpoint, hold for others,
    serve back on request, and restore at start.  ``worker`` is the ``Worker``
    (its links, codec, task group, compute thread and event log)."""

    def __init__(self, worker) -> None:  # noqa: ANN001
        self.worker = worker
        self.store = ReplicaStore(worker.config.data_dir, worker.replica.model.parameter_count)
        self.restoring: RestoreAnswers | None = None  # while a restore collects answers
        # Requesters whose replica is being sent: a repeated request (the restore asks
        # a silent peer again) while the first answer is still queued is not served
        # twice, as two streams interleaved on one link would break each other.
        self.serving: set[str] = set()

    # -- the origin ------------------------------------------------------------------------------

    def replicate(self, path: Path, step: int, param_fp: str, peers: list[str]) -> None:
        worker = self.worker
        for peer in peers:
            if peer == worker.node:
                continue
            chunks = pushed_chunks(path, step, param_fp, functools.partial(self._unreadable, path))
            worker.group.create_task(worker.send_blob(peer, chunks))

    def _unreadable(self, path: Path, error: OSError) -> None:
        reason = f"replica push: {error.strerror or error!r}"[:200]
        self.worker.log(history.CheckpointSkip, path=str(path), reason=reason)

    # -- the holder ------------------------------------------------------------------------------

    def on_chunk(self, sender: str, chunk: BulkChunk) -> None:
        worker = self.worker
        try:
            data = take_replica_chunk(self.restoring, self.store, sender, chunk)
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
        if requester in self.serving:
            return  # the answer under way answers this request too
        self.serving.add(requester)
        try:
            await self._serve(requester)
        finally:
            self.serving.discard(requester)

    async def _serve(self, requester: str) -> None:
        worker = self.worker
        opened = self.store.open_newest(requester)
        if opened is None:
            refusal = BulkRefusal(kind="replica", step=-1, key="", reason="no replica held")
            await worker.send_blob(requester, iter([refusal]))
            return
        step, handle = opened
        try:
            await worker.send_blob(requester, served_chunks(handle, step))
        finally:
            handle.close()  # also when the link's queue stayed full and the rest was not sent

    # -- the restore -----------------------------------------------------------------------------

    def on_refusal(self, sender: str) -> None:
        if self.restoring is not None:
            self.restoring.on_refusal(sender)

    def early_frame(self, frame) -> bool:  # noqa: ANN001
        """Before WorkerReady: take the frames of a restore in progress (other early
        frames, a peer's push among them, wait for the worker to be ready).  True if
        consumed."""
        sender = frame.header.sender
        if self.restoring is None or sender not in self.restoring.by_peer:
            return False
        message = self.worker.codec.decode(frame)
        if isinstance(message, BulkChunk) and self.restoring.takes(sender, message):
            self.on_chunk(sender, message)
            return True
        if isinstance(message, BulkRefusal) and message.kind == "replica":
            self.on_refusal(sender)
            return True
        return False

    async def restore(self, peers: list[str]) -> Path | None:
        """Ask every peer for its newest replica of this node (again while silent:
        ``collect_answers``); install the newest that verifies and is this node's as
        its checkpoint.  Bounded by ``RESTORE_WAIT_S``."""
        worker = self.worker
        if not peers:
            return None
        self.restoring = RestoreAnswers(peers, self.store.max_bytes)
        request = BulkRequest(kind="replica")

        def ask(asked: list[str]) -> None:
            for peer in asked:
                worker.group.create_task(worker.send_blob(peer, iter([request])))

        await collect_answers(
            self.restoring, ask, RESTORE_WAIT_S, RESTORE_ASK_AGAIN_S, worker.clock
        )
        answers, self.restoring = self.restoring.by_peer, None
        limit = self.store.max_payload_bytes
        chosen, skipped = await worker.run_compute(choose_replica, answers, worker.node, limit)
        for peer, reason in skipped:
            worker.log(
                history.CheckpointSkip,
                path=f"replica@{peer}",
                reason=f"replica held by {peer}: {reason}"[:200],
            )
        if chosen is None:
            return None
        return await worker.run_compute(
            install_as_own, worker.config.checkpoint_dir, chosen[2], limit
        )
