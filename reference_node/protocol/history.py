"""The run-history event schema (DESIGN.md, "A run, end to end"), with its writer and reader.

Every node, the harness and the simulator append events as JSONL, one object a
line.  Every event carries ``{t_wall, t_mono, node, incarnation, epoch, step,
lamport, kind}``; the rest of its fields depend on ``kind``.  Each kind is a
msgspec struct in one tagged union, so a history is validated as it is read and
the vocabulary that the checkers, the TLA+ trace validator and the reports rely
on lives in this one file.  Add a kind here, never an ad-hoc dict elsewhere.

Field conventions: times in seconds (``t_wall`` since the Unix epoch, ``t_mono``
the host's true monotonic clock; the simulator writes its virtual time in both),
fingerprints as lower-case hex strings, ``step = -1`` where no step applies.  A
node logs a send or a vote *before* doing it, so a SIGKILL can lose an action's
effect but never leave an effect without its event.

Why a hand-written writer: a killed node may lose at most its last line, so each
event is written with one ``write`` of a complete line and flushed; a reader
skips (and counts) a torn *last* line, and rejects a malformed line anywhere else
with its file and line number.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

import msgspec

HARNESS = "harness"  # the ``node`` of events written by the harness
MAX_EVENT_LINE_BYTES = 64 * 1024  # an event is a record, not a payload; bounds the reader


class EventBase(msgspec.Struct, kw_only=True, frozen=True, tag_field="kind"):
    t_wall: float
    t_mono: float
    node: str
    incarnation: int = 0
    epoch: int = 0
    step: int = -1
    lamport: int = 0


# --- process lifecycle --------------------------------------------------------------------


class Start(EventBase, tag="start", kw_only=True, frozen=True):
    """A node process started (a new incarnation); records what bit-exact replay needs."""

    seed: int = 0
    git_commit: str = ""
    torch_version: str = ""
    threads: int = 1
    cpu_flags: str = ""
    config: dict[str, Any] = {}


class Ready(EventBase, tag="ready", kw_only=True, frozen=True):
    """The node's process is up and its listeners accept connections."""


class Stop(EventBase, tag="stop", kw_only=True, frozen=True):
    """A clean shutdown (a leave); a crash has no such event."""

    reason: str = ""


# --- failure detector and membership ------------------------------------------------------


class Suspect(EventBase, tag="suspect", kw_only=True, frozen=True):
    """``node`` suspects ``peer`` (at ``peer_incarnation``)."""

    peer: str
    peer_incarnation: int
    reason: str = ""  # e.g. "phi=9.2", "gossip from n3"


class Refute(EventBase, tag="refute", kw_only=True, frozen=True):
    """``node`` learned it is suspected and raised its incarnation to ``incarnation``."""

    suspected_by: str = ""


class DeclareDead(EventBase, tag="declare_dead", kw_only=True, frozen=True):
    """``node`` confirmed ``peer`` dead (in its detector view)."""

    peer: str
    peer_incarnation: int
    suspicions: int = 0  # independent suspicions that confirmed it
    reason: str = ""


class DeclareAlive(EventBase, tag="declare_alive", kw_only=True, frozen=True):
    """``node`` cleared a suspicion of ``peer`` or saw it come back with a new incarnation."""

    peer: str
    peer_incarnation: int


class ViewChange(EventBase, tag="view_change", kw_only=True, frozen=True):
    """``node``'s detector view (live peers) changed; ``epoch`` is the view epoch."""

    alive: list[str]


class ConfigChange(EventBase, tag="config_change", kw_only=True, frozen=True):
    """A membership change committed at ``step`` (one node at a time)."""

    change: Literal["add", "remove", "promote"]
    peer: str
    voters: list[str]
    learners: list[str] = []


# --- step commit ---------------------------------------------------------------------------


class AggSend(EventBase, tag="agg_send", kw_only=True, frozen=True):
    """``node`` is about to send its gradient contribution for ``step`` to ``to``."""

    to: str
    nbytes: int = 0


class AggregateServe(EventBase, tag="aggregate_serve", kw_only=True, frozen=True):
    """``node`` is about to send the aggregate ``value_fp`` of ``step`` to ``to``, a peer
    that fetched it (to vote for it or apply it): shows who held a value's bytes."""

    to: str
    value_fp: str
    nbytes: int = 0


class Propose(EventBase, tag="propose", kw_only=True, frozen=True):
    """``node`` as proposer sends accept requests for ``step`` with ``ballot``."""

    ballot: list[int]  # (round, proposer index): totally ordered
    value_fp: str
    contributors: list[str]


class Promise(EventBase, tag="promise", kw_only=True, frozen=True):
    """``node`` as acceptor promised ``ballot`` for ``step`` (persisted before replying)."""

    ballot: list[int]
    to: str


class Accept(EventBase, tag="accept", kw_only=True, frozen=True):
    """``node`` as acceptor accepted (voted for) a value at ``ballot`` (persisted first)."""

    ballot: list[int]
    value_fp: str
    contributors: list[str]
    to: str = ""
    holds_bytes: bool = True


class Commit(EventBase, tag="commit", kw_only=True, frozen=True):
    """``node`` learned ``step`` committed and applied it; ``param_fp`` is after applying."""

    value_fp: str
    contributors: list[str]
    param_fp: str
    voters: list[str] = []  # the configured membership the quorum was taken from
    quorum: list[str] = []  # the acceptors whose accepts made it committed


# --- training, rejoin, checkpoints ---------------------------------------------------------


class TrainStep(EventBase, tag="train_step", kw_only=True, frozen=True):
    """Local training result of ``step`` (loss before the update)."""

    loss: float | None  # None: the loss was not finite (JSON has no NaN or inf)
    samples: int = 0


class ByzantineSwitch(EventBase, tag="byzantine", kw_only=True, frozen=True):
    """``node`` switched its gradient behaviour at the boundary of ``step``
    (``step`` is the behaviour's ``since_step``); replay needs it to recompute what
    the node sent.  Fields mirror ``training.byzantine.ByzantineBehaviour``."""

    mode: str  # honest | sign_flip | scaled | gaussian_noise | stale | random_bits
    seed: int = 0
    magnitude: float = 10.0
    noise_std: float = 1.0


class RejoinBegin(EventBase, tag="rejoin_begin", kw_only=True, frozen=True):
    source: str  # a peer name, or "checkpoint"
    from_step: int = -1


class RejoinDone(EventBase, tag="rejoin_done", kw_only=True, frozen=True):
    """``node`` holds the state of ``step``, verified against ``param_fp``."""

    source: str
    param_fp: str
    nbytes: int = 0
    verified: bool = True


class CheckpointWrite(EventBase, tag="checkpoint_write", kw_only=True, frozen=True):
    path: str
    sha256: str
    param_fp: str
    nbytes: int = 0


class CheckpointSkip(EventBase, tag="checkpoint_skip", kw_only=True, frozen=True):
    """A torn or corrupted checkpoint was found and not loaded."""

    path: str
    reason: str


class CheckpointFail(EventBase, tag="checkpoint_fail", kw_only=True, frozen=True):
    """A checkpoint write that failed (a full or failing disk); the node trains on."""

    reason: str
    errno: int = 0


class FrameDrop(EventBase, tag="frame_drop", kw_only=True, frozen=True):
    """An inbound frame was dropped (malformed, oversized, replayed, unauthenticated)."""

    peer: str
    reason: str
    count: int = 1


class LoopStall(EventBase, tag="loop_stall", kw_only=True, frozen=True):
    """The node's control event loop woke late: for ``stalled_ms`` it handled no events.

    DESIGN's S4 counts a node as alive only while it handles events at least every
    Δ_proc; this event is the node's own measurement of that envelope (a stalled
    monitor may blame its peers, a stalled peer may be blamed)."""

    stalled_ms: float
    # When the stall began, on the same clock as ``t_mono``.
    since_mono: float


class WorkerStall(EventBase, tag="worker_stall", kw_only=True, frozen=True):
    """The node's worker event loop (bulk links, shards, gathers) woke late: for
    ``stalled_ms`` it moved no bulk bytes.  Not a ``loop_stall``: the detector and
    heartbeats live in the control process, so S4 reads only those."""

    stalled_ms: float
    since_mono: float  # when the stall began, on the same clock as ``t_mono``


# --- harness --------------------------------------------------------------------------------


class Fault(EventBase, tag="fault", kw_only=True, frozen=True):
    """A fault op injected or healed by the harness (or the simulator's nemesis)."""

    op: str
    target: list[str]
    params: dict[str, Any] = {}
    phase: Literal["inject", "heal"]


class RunMark(EventBase, tag="run_mark", kw_only=True, frozen=True):
    """Harness milestones: run start/end, steady state reached, quiesce, incidents."""

    mark: str
    data: dict[str, Any] = {}


Event = (
    Start
    | Ready
    | Stop
    | Suspect
    | Refute
    | DeclareDead
    | DeclareAlive
    | ViewChange
    | ConfigChange
    | AggSend
    | AggregateServe
    | Propose
    | Promise
    | Accept
    | Commit
    | TrainStep
    | ByzantineSwitch
    | RejoinBegin
    | RejoinDone
    | CheckpointWrite
    | CheckpointSkip
    | CheckpointFail
    | FrameDrop
    | LoopStall
    | WorkerStall
    | Fault
    | RunMark
)

EVENT_KINDS: tuple[str, ...] = tuple(
    cls.__struct_config__.tag
    for cls in Event.__args__  # type: ignore[attr-defined]
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)
# Kinds added by other layers (``verify/history.py``: the neutral history every
# system writes, and a system's own registered kinds); the readers below decode them
# as soon as they are registered.
_extra_kinds: dict[str, type[EventBase]] = {}


def register_kinds(*classes: type[EventBase]) -> None:
    """Let every reader of this module decode ``classes`` too (tags must be new)."""
    global _decoder
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, EventBase)):
            raise TypeError(f"{cls!r} is not an EventBase subclass")
        tag = cls.__struct_config__.tag
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"{cls.__name__} needs a string tag (class X(EventBase, tag=...))")
        known = _extra_kinds.get(tag)
        if tag in EVENT_KINDS or (known is not None and known is not cls):
            raise ValueError(f"event kind {tag!r} exists already")
        _extra_kinds[tag] = cls
    union = Event
    for cls in _extra_kinds.values():
        union = union | cls  # type: ignore[assignment]
    _decoder = msgspec.json.Decoder(union)


def known_kinds() -> tuple[str, ...]:
    """Every kind the readers decode now: this module's and the registered ones."""
    return (*EVENT_KINDS, *_extra_kinds)


class HistoryError(ValueError):
    """A history line that does not match the schema; names the file and line."""

    def __init__(self, path: str, line_no: int, problem: str):
        super().__init__(f"{path}:{line_no}: {problem}")
        self.path = path
        self.line_no = line_no
        self.problem = problem


def encode_event(event: EventBase) -> bytes:
    """One JSONL line (with its newline)."""
    return _encoder.encode(event) + b"\n"


def encode_lines(events: list[EventBase]) -> bytes:
    """Many JSONL lines at once: the bytes of ``encode_event`` on each, joined (one
    C call instead of one per event: the simulator logs tens of thousands)."""
    return _encoder.encode_lines(events)


def decode_event(line: bytes | str) -> EventBase:
    return _decoder.decode(line)


class EventWriter:
    """Appends events to one JSONL file, one ``write`` and flush per event.

    ``fsync`` every event would cost milliseconds on the control loop; flushing to
    the OS is enough for the guarantee DESIGN asks (a SIGKILLed process's written
    lines survive; only a host crash could lose them).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = open(self.path, "ab", buffering=0)  # noqa: SIM115 - owned

    def write(self, event: EventBase) -> None:
        self._file.write(encode_event(event))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReadResult(msgspec.Struct, frozen=True):
    events: list[EventBase]
    torn_lines: int  # torn last lines skipped (a killed writer)


def read_events(path: str | os.PathLike[str]) -> ReadResult:
    """Read one JSONL history file; a torn final line is skipped and counted."""
    path = Path(path)
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    events: list[EventBase] = []
    torn = 0
    last = len(lines) - 1
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        if len(line) > MAX_EVENT_LINE_BYTES:
            raise HistoryError(
                str(path), index + 1, f"line longer than {MAX_EVENT_LINE_BYTES} bytes"
            )
        try:
            events.append(_decoder.decode(line))
        except msgspec.DecodeError as error:
            # The last line without a newline is what a SIGKILL mid-write leaves.
            if index == last and not raw.endswith(b"\n"):
                torn += 1
                continue
            raise HistoryError(str(path), index + 1, str(error)) from None
    return ReadResult(events=events, torn_lines=torn)


# History order: (t_mono, lamport, node), built in C (a lambda per event was a tenth
# of checking a simulated run).
_ORDER_KEY = operator.attrgetter("t_mono", "lamport", "node")
_NODE = operator.attrgetter("node")


class History(msgspec.Struct, dict=True):
    """All events of a run (every node plus the harness), in a total order.

    Sorted by ``(t_mono, lamport, node)``: ``t_mono`` is the host's true clock
    shared by every process of a run, so the order is the real order up to the
    clock's resolution; ties are broken deterministically.

    ``of_kind`` and ``indexed`` read an index of event positions by class, built in
    one pass on first use (the checkers look for a few hundred events of a kind a
    dozen times in a simulated history of 60,000, most of them ``agg_send``).  The
    index is rebuilt when ``events`` is replaced or grows; events are never
    replaced in place.  (``dict=True`` gives the instance room for it; it is not a
    field: not encoded, not compared.)
    """

    events: list[EventBase]
    torn_lines: int = 0

    @classmethod
    def from_events(cls, events: Iterable[EventBase], torn_lines: int = 0) -> History:
        ordered = sorted(events, key=_ORDER_KEY)
        return cls(events=ordered, torn_lines=torn_lines)

    @classmethod
    def load(cls, run_dir: str | os.PathLike[str]) -> History:
        """Load ``RUN_DIR/events/*.jsonl``."""
        events_dir = Path(run_dir) / "events"
        if not events_dir.is_dir():
            raise FileNotFoundError(f"{events_dir}: no events folder (is this a run directory?)")
        collected: list[EventBase] = []
        torn = 0
        for path in sorted(events_dir.glob("*.jsonl")):
            result = read_events(path)
            collected.extend(result.events)
            torn += result.torn_lines
        return cls.from_events(collected, torn_lines=torn)

    def of_kind(self, *kinds: type[EventBase]) -> Iterator[EventBase]:
        return (event for _, event in self.indexed(*kinds))

    def indexed(self, *kinds: type[EventBase]) -> list[tuple[int, EventBase]]:
        """``(position, event)`` of every event that is an instance of one of
        ``kinds``, in history order (what ``enumerate`` plus ``isinstance`` gives)."""
        events = self.events
        positions_by_class = self._positions_by_class()
        lists = [
            positions for cls, positions in positions_by_class.items() if issubclass(cls, kinds)
        ]
        if not lists:
            return []
        ordered = lists[0] if len(lists) == 1 else sorted(p for ps in lists for p in ps)
        return [(position, events[position]) for position in ordered]

    def _positions_by_class(self) -> dict[type, list[int]]:
        events = self.events
        cached = self.__dict__.get("_index_cache")
        if cached is not None and cached[0] is events and cached[1] == len(events):
            return cached[2]
        positions_by_class: dict[type, list[int]] = {}
        for position, cls in enumerate(map(type, events)):
            positions = positions_by_class.get(cls)
            if positions is None:
                positions = positions_by_class[cls] = []
            positions.append(position)
        self.__dict__["_index_cache"] = (events, len(events), positions_by_class)
        return positions_by_class

    def nodes(self) -> list[str]:
        """The names of the nodes that logged events, sorted (a new list each call;
        the set is remembered as the index is, the checkers ask more than once)."""
        events = self.events
        cached = self.__dict__.get("_nodes_cache")
        if cached is None or cached[0] is not events or cached[1] != len(events):
            names = set(map(_NODE, events))
            names.discard(HARNESS)
            cached = self.__dict__["_nodes_cache"] = (events, len(events), sorted(names))
        return list(cached[2])


def write_history(path: str | os.PathLike[str], events: Iterable[EventBase]) -> None:
    """Write a whole history file at once (the simulator and tests use this)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        for event in events:
            handle.write(encode_event(event))
