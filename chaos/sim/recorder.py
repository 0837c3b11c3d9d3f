"""The simulator's history: events in the DESIGN schema, a digest, and the run files.

Every event the simulation logs passes through ``Recorder.log``, stamped with the
virtual time (``t_mono`` and ``t_wall`` are both the virtual clock, as history.py says
for the simulator) and a run-wide Lamport counter.  The recorder keeps the event for
the checkers, folds its encoded line into a BLAKE2b digest (so two runs are equal iff
their digests are) and buffers the line for ``events/<node>.jsonl``.  Buffers are
flushed to disk when they pass ``FLUSH_BYTES`` so a 1,000-node run does not hold every
line twice, and no more than one file is open at a time (a 1,000-node run would
otherwise need 1,001 descriptors).

Lines are encoded ``ENCODE_BATCH`` events at a time (``Encoder.encode_lines``: the
same bytes as one ``encode_event`` each, in a third less time; the digest of the
concatenation is the digest of the lines in turn).  An event is immutable once
logged (frozen, and nothing keeps a handle on the lists it holds), so encoding it a
little later gives the same line; ``digest()`` and ``close()`` encode what is left.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from swarmshake.reference_node.protocol.history import EventBase, encode_lines

FLUSH_BYTES = 256 * 1024  # per-node buffer before an append to its file
ENCODE_BATCH = 4096  # events encoded together (a few hundred KiB of lines)


class Recorder:
    __slots__ = (
        "_digest",
        "events",
        "_buffers",
        "_sizes",
        "_out",
        "lamport",
        "_encoded",
        "_forgotten",
        "watchers",
        "keep",
    )

    def __init__(self, out_dir: Path | None, *, keep_events: bool = True):
        # SHA-256 (shown as its first 128 bits): with the CPU's SHA extensions it hashes
        # a 600 s run's 12 MB of lines in a third of blake2b's time (3 % of the run).
        self._digest = hashlib.sha256()
        self.events: list[EventBase] = []
        self.keep = keep_events
        self._buffers: dict[str, list[bytes]] = {}
        self._sizes: dict[str, int] = {}
        self._out = out_dir / "events" if out_dir is not None else None
        if self._out is not None:
            self._out.mkdir(parents=True, exist_ok=True)
            for stale in self._out.glob("*.jsonl"):
                stale.unlink()  # a rerun into the same folder must not append to old lines
        self.lamport = 0  # the run-wide Lamport counter (next_lamport)
        # ``events[:_encoded]`` are folded into the digest; without ``keep_events``
        # the encoded ones are dropped and counted in ``_forgotten``.
        self._encoded = 0
        self._forgotten = 0
        # Called with each event after it is logged (fault triggers watch the history).
        self.watchers: list[Callable[[EventBase], None]] = []

    def next_lamport(self, node: str) -> int:
        """One counter for the whole run: the simulator is one process, so its logging
        order is a total order consistent with causality (a valid Lamport clock), and
        events at the same virtual time sort in the order they happened — a fault an
        event triggered sorts after that event."""
        self.lamport += 1
        return self.lamport

    @property
    def count(self) -> int:
        """Events logged so far."""
        return self._forgotten + len(self.events)

    def log(self, event: EventBase) -> None:
        events = self.events
        events.append(event)
        if len(events) - self._encoded >= ENCODE_BATCH:
            self._encode_pending()
        if self.watchers:
            for watcher in self.watchers:
                watcher(event)

    def _encode_pending(self) -> None:
        events = self.events
        pending = events[self._encoded :]
        if not pending:
            return
        lines = encode_lines(pending)
        self._digest.update(lines)
        if self._out is not None:
            # One event a line: JSON escapes a newline inside a string.
            for event, line in zip(pending, lines.splitlines(keepends=True), strict=True):
                node = event.node
                buffer = self._buffers.setdefault(node, [])
                buffer.append(line)
                size = self._sizes.get(node, 0) + len(line)
                if size >= FLUSH_BYTES:
                    self._flush(node)
                    size = 0
                self._sizes[node] = size
        if self.keep:
            self._encoded = len(events)
        else:
            self._forgotten += len(events)
            events.clear()

    def _flush(self, node: str) -> None:
        assert self._out is not None
        with open(self._out / f"{node}.jsonl", "ab") as handle:
            handle.write(b"".join(self._buffers.pop(node, [])))

    def close(self) -> None:
        self._encode_pending()
        if self._out is not None:
            for node in list(self._buffers):
                self._flush(node)

    def digest(self) -> str:
        self._encode_pending()
        return self._digest.hexdigest()[:32]
