"""The neutral run history: the events every system under test can produce.

A checker judges a *history*, not a system.  The reference node writes a rich
vocabulary (``reference_node/protocol/history.py``: Paxos votes, detector verdicts,
checkpoints); torchft, TorchElastic or a user's trainer write what their training
loop can see.  What every checker can rely on, whatever the system:

==================  =====================================================================
``start``           a node process started (a new incarnation)
``stop``            a clean shutdown
``step_committed``  a node applied step *s*: the participants of the step, the
                    parameter fingerprint after it (``kernels.fingerprint``), the quorum
                    (group) id it was taken in
``membership``      a node's view of the training group changed: members, quorum id
``rejoin_begin``,   a node (re)joined and fetched state (from a peer or a checkpoint),
``rejoin_done``     then holds state verified against a fingerprint
``collective``      a node is about to start a collective (all-reduce) of step *s*:
                    the trigger point for a fault "inside an all-reduce"
``node_error``      a node's process is exiting on an error it did not handle (a
                    survivor that dies after a peer's fault); a death the process
                    cannot see (SIGKILL, a segfault) has none
``fault``,          the harness's own records: faults injected and healed, milestones
``run_mark``
==================  =====================================================================

The reference node's kinds map onto these (:func:`step_commits`,
:func:`membership_changes`): its ``commit`` is a ``step_committed`` whose
participants are the step's contributors, its ``config_change`` a ``membership``.
A system's own kinds are added with :func:`register_kind` (any ``EventBase``
subclass with a new tag), after which every reader decodes them.

A checker names the kinds it needs (``NEEDS``); :func:`missing_kinds` tells it,
from what the run's system says it produces (``run.json``), whether it can decide
or must answer ``unknown`` with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from swarmshake.reference_node.protocol import history as _reference
from swarmshake.reference_node.protocol.history import (
    EVENT_KINDS,
    HARNESS,
    Commit,
    ConfigChange,
    EventBase,
    EventWriter,
    Fault,
    History,
    HistoryError,
    RejoinBegin,
    RejoinDone,
    RunMark,
    Start,
    Stop,
    decode_event,
    encode_event,
    read_events,
    write_history,
)


class StepCommitted(EventBase, tag="step_committed", kw_only=True, frozen=True):
    """``node`` applied ``step``; ``param_fp`` is its parameters' fingerprint after it.

    ``participants``: the nodes whose work went into the step (the quorum or world
    that trained it); S1 compares their fingerprints.  ``quorum_id`` names the group
    (torchft's quorum id, TorchElastic's rendezvous round); ``""`` when unknown."""

    participants: list[str]
    param_fp: str
    quorum_id: str = ""
    loss: float | None = None


class MembershipChange(EventBase, tag="membership", kw_only=True, frozen=True):
    """``node``'s training group is now ``members`` (quorum ``quorum_id``)."""

    members: list[str]
    quorum_id: str = ""
    reason: str = ""


class Collective(EventBase, tag="collective", kw_only=True, frozen=True):
    """``node`` is about to start collective ``op`` of ``step`` (logged before it starts)."""

    op: str = "allreduce"
    nbytes: int = 0


class NodeError(EventBase, tag="node_error", kw_only=True, frozen=True):
    """``node``'s process is exiting on an error it did not handle (logged on the way out).

    ``error``: the exception's type and message, one line; ``where``: the innermost
    frame (``file:line``).  A clean stop is ``stop``; a death the process cannot see
    (SIGKILL, a segfault) has no event of its own: the harness finds that node not
    running at the quiesce and records its restart."""

    error: str
    where: str = ""


NEUTRAL_CLASSES: tuple[type[EventBase], ...] = (
    StepCommitted,
    MembershipChange,
    Collective,
    NodeError,
)
_reference.register_kinds(*NEUTRAL_CLASSES)

#: The neutral vocabulary every checker may rely on (the reference kinds among them
#: are already generic: start, stop, rejoin, fault, run_mark).
NEUTRAL_KINDS: frozenset[str] = frozenset(
    {"start", "stop", "step_committed", "membership", "rejoin_begin", "rejoin_done",
     "collective", "node_error", "fault", "run_mark"}
)  # fmt: skip
#: Which neutral kind each reference kind stands in for.
REFERENCE_MAP: dict[str, str] = {"commit": "step_committed", "config_change": "membership"}


def register_kind(cls: type[EventBase]) -> type[EventBase]:
    """Add a system's own kind (usable as a class decorator); readers decode it from now on."""
    _reference.register_kinds(cls)
    return cls


def provides(produces: Iterable[str]) -> frozenset[str]:
    """The neutral kinds a system provides, given the kinds it writes."""
    kinds = set(produces)
    return frozenset(kinds | {REFERENCE_MAP[k] for k in kinds if k in REFERENCE_MAP})


def missing_kinds(needs: Iterable[str], produces: Iterable[str] | None) -> list[str]:
    """Kinds a checker needs that the system never writes (None: it writes every kind)."""
    if produces is None:
        return []
    have = provides(produces)
    return sorted(set(needs) - have)


#: The reference node's own vocabulary (the reference checkers read it).
REFERENCE_KINDS = frozenset(EVENT_KINDS)


def load_history(run_dir: str | Path) -> History:
    """``RUN_DIR/events/*.jsonl`` with every registered kind decoded."""
    return History.load(run_dir)


@dataclass(frozen=True)
class RunSystem:
    """What a run directory says about its system; runs from before systems: reference."""

    name: str = "reference"
    produces: frozenset[str] | None = None  # None: every kind (the reference node)

    @classmethod
    def of(cls, run_dir: str | Path) -> RunSystem:
        """From ``system.json`` (written by the backend) or else ``run.json``."""
        record: dict = {}
        for name in ("system.json", "run.json"):
            try:
                record = json.loads((Path(run_dir) / name).read_text())
                break
            except (OSError, ValueError):
                continue
        if not isinstance(record, dict):
            return cls()
        name = str(record.get("system", "reference"))
        produces = record.get("produces")
        if not isinstance(produces, list):
            # A record from before run records listed the kinds: the reference node
            # (the only system then) wrote them all; any other declared none.
            return cls(name) if name == "reference" else cls(name, frozenset())
        kinds = frozenset(str(kind) for kind in produces)
        # A system that writes the reference node's whole vocabulary is judged by the
        # reference checkers (Paxos votes, detector verdicts); any other by the
        # neutral ones.  Decided by what it writes, not by its name.
        return cls(name, None if REFERENCE_KINDS <= kinds else kinds)


# --- the neutral view of any history ----------------------------------------------------------


@dataclass(frozen=True)
class StepView:
    """One node's commit of one step, whatever kind recorded it."""

    index: int  # position in History.events (evidence refs use it)
    event: EventBase
    node: str
    step: int
    t_mono: float
    participants: tuple[str, ...]
    param_fp: str
    quorum_id: str


def step_commits(history: History) -> Iterator[StepView]:
    for index, event in enumerate(history.events):
        if isinstance(event, StepCommitted):
            yield StepView(index, event, event.node, event.step, event.t_mono,
                           tuple(event.participants), event.param_fp, event.quorum_id)  # fmt: skip
        elif isinstance(event, Commit):
            yield StepView(index, event, event.node, event.step, event.t_mono,
                           tuple(event.contributors), event.param_fp, "")  # fmt: skip


@dataclass(frozen=True)
class MembershipView:
    index: int
    event: EventBase
    node: str
    t_mono: float
    members: tuple[str, ...]
    quorum_id: str


def membership_changes(history: History) -> Iterator[MembershipView]:
    for index, event in enumerate(history.events):
        if isinstance(event, MembershipChange):
            yield MembershipView(index, event, event.node, event.t_mono,
                                 tuple(event.members), event.quorum_id)  # fmt: skip
        elif isinstance(event, ConfigChange):
            yield MembershipView(index, event, event.node, event.t_mono,
                                 tuple(event.voters), str(event.step))  # fmt: skip


__all__ = [
    "HARNESS",
    "NEUTRAL_KINDS",
    "REFERENCE_KINDS",
    "Collective",
    "EventBase",
    "EventWriter",
    "Fault",
    "History",
    "HistoryError",
    "MembershipChange",
    "MembershipView",
    "NodeError",
    "RejoinBegin",
    "RejoinDone",
    "RunMark",
    "RunSystem",
    "Start",
    "StepCommitted",
    "StepView",
    "Stop",
    "decode_event",
    "encode_event",
    "load_history",
    "membership_changes",
    "missing_kinds",
    "provides",
    "read_events",
    "register_kind",
    "step_commits",
    "write_history",
]
