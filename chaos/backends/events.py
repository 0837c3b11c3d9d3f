"""Follows a run's ``events/*.jsonl`` while it runs: steady state, triggers, progress.

Nodes append their events with one ``write`` per line; the tail reads only what is
new since its last poll and decodes complete lines (a half-written last line stays
for the next poll).  It keeps a per-node summary, not the history: the history is
read from disk by the verifier after the run, so a long run costs no memory here.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from swarmshake.reference_node.protocol.history import (
    HARNESS,
    MAX_EVENT_LINE_BYTES,
    Commit,
    DeclareDead,
    EventBase,
    Fault,
    decode_event,
)
from swarmshake.verify.history import StepCommitted  # registers the neutral kinds

MAX_TRACKED_STEPS = 1000  # fingerprints of this many recent steps are compared live
RECENT_EVENTS = 200  # what the progress display shows is the last few; bounds memory
MAX_READ_BYTES_PER_POLL = 8 << 20  # one poll reads at most this per file; the rest next time


@dataclass
class NodeSummary:
    last_commit_step: int = -1
    commits: int = 0
    incarnation: int = 0
    events: int = 0
    bad_lines: int = 0
    declared_dead_by_others: int = 0
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)


Listener = Callable[[EventBase], None]


class EventTail:
    def __init__(self, events_dir: Path, nodes: tuple[str, ...] | list[str]):
        self.events_dir = events_dir
        self.summaries: dict[str, NodeSummary] = {name: NodeSummary() for name in nodes}
        self.recent: collections.deque[EventBase] = collections.deque(maxlen=RECENT_EVENTS)
        self.active_faults: dict[str, list[str]] = {}  # op -> targets, from harness events
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self._listeners: list[Listener] = []
        # Live hint for the progress display only (the verdict comes from the
        # checkers): a step committed with two different parameter fingerprints.
        self._step_fps: dict[tuple[str, int], dict[str, str]] = {}
        self.divergent_steps: list[int] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def poll(self) -> int:
        """Read what is new in every file; returns the number of events seen."""
        if not self.events_dir.is_dir():
            return 0
        seen = 0
        for path in sorted(self.events_dir.glob("*.jsonl")):
            seen += self._poll_file(path)
        return seen

    def _poll_file(self, path: Path) -> int:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read(MAX_READ_BYTES_PER_POLL)
        except FileNotFoundError:
            return 0
        if not chunk:
            return 0
        self._offsets[path] = offset + len(chunk)
        data = self._partial.pop(path, b"") + chunk
        lines = data.split(b"\n")
        if lines[-1]:
            if len(lines[-1]) <= MAX_EVENT_LINE_BYTES:
                self._partial[path] = lines[-1]
        count = 0
        for line in lines[:-1]:
            if not line.strip():
                continue
            try:
                event = decode_event(line)
            except msgspec.DecodeError:
                # A node writes whole lines; a bad one is the node's bug, counted and
                # left for the verifier to report with its file and line.
                name = path.stem
                if name in self.summaries:
                    self.summaries[name].bad_lines += 1
                continue
            self._note(event)
            count += 1
        return count

    def _note(self, event: EventBase) -> None:
        self.recent.append(event)
        summary = self.summaries.get(event.node)
        if summary is not None:
            summary.events += 1
            summary.incarnation = max(summary.incarnation, event.incarnation)
            kind = event.__struct_config__.tag
            summary.kinds[kind] += 1  # type: ignore[index]
            if isinstance(event, Commit | StepCommitted):
                summary.commits += 1
                summary.last_commit_step = max(summary.last_commit_step, event.step)
                self._note_fingerprint(event)
        if isinstance(event, DeclareDead) and event.peer in self.summaries:
            self.summaries[event.peer].declared_dead_by_others += 1
        if isinstance(event, Fault) and event.node == HARNESS:
            if event.phase == "inject":
                self.active_faults[event.op] = list(event.target)
            else:
                self.active_faults.pop(event.op, None)
        for listener in list(self._listeners):
            listener(event)

    def _note_fingerprint(self, event: Commit | StepCommitted) -> None:
        # Keyed by quorum too: a system that rolls back re-commits a step number anew.
        key = (getattr(event, "quorum_id", ""), event.step)
        fps = self._step_fps.setdefault(key, {})
        fps[event.node] = event.param_fp
        if len(set(fps.values())) > 1 and event.step not in self.divergent_steps:
            self.divergent_steps.append(event.step)
        while len(self._step_fps) > MAX_TRACKED_STEPS:
            del self._step_fps[next(iter(self._step_fps))]  # the oldest inserted

    def steady(self, min_commit_step: int) -> bool:
        """Every node committed a step ≥ ``min_commit_step`` (-1: every node is ready)."""
        if min_commit_step < 0:
            return all(s.kinds["ready"] > 0 for s in self.summaries.values())
        return self.min_commit_step() >= min_commit_step

    def min_commit_step(self, nodes: list[str] | tuple[str, ...] | None = None) -> int:
        chosen = nodes if nodes is not None else list(self.summaries)
        return min((self.summaries[n].last_commit_step for n in chosen), default=-1)
