"""Trace validation: is a run's history a behaviour of the ``History`` spec?

The history (every node's and the harness's events in their total order) becomes a
generated module that binds ``Trace`` to a TLA+ sequence literal, one record per
event holding only the fields its action reads.  TLC then explores ``History``'s
``Next``, which explains ``Trace[l]`` and advances the cursor ``l``.  TLC 2.15 has
no ``TLCGet("stats")`` or POSTCONDITION, so the verdict rides on what it does have,
the depth of the state graph it searched: the deepest state reached has ``l`` equal
to that depth, so

* depth ``Len(Trace) + 1``: every event was explained, the trace is **accepted**;
* a smaller depth d: no state explained event d, so ``Trace[d]`` is the **first
  event the spec cannot explain**: the trace is **rejected** (exit 1);
* anything else (TLC error, deadline) is **unknown**.

Why not an invariant ``l <= Len(Trace)`` whose violation means "fully matched":
TLC then rebuilds and prints the whole trace as its counterexample, one state per
event (measured on a 19k-event run: 41 s instead of about 10 s).

Each event kind's action is deterministic, so there is one state per event and
the check costs what building and parsing the literal costs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from importlib.resources import files
from pathlib import Path

import msgspec

from swarmshake.reference_node.protocol import history as h
from swarmshake.verify.tla import Status, TlcResult, run_tlc

TRACE_MODULE = "HistoryTrace"
ALL_NODES = "*"  # a fault target meaning every node (the harness's and simulator's notation)
# Measured on 2 shared cores: 10k events 7.6 s, 100k events 70 s.  A deadline
# scaled by the trace length keeps a huge history from hanging CI while leaving an
# ordinary one several times the time it needs.
BASE_TIMEOUT_S = 60.0
TIMEOUT_PER_EVENT_S = 0.002


class UnexplainedEvent(msgspec.Struct, frozen=True):
    index: int  # 1-based position in the history's total order
    event: dict  # the event as it appears in the history (JSON form)


class TraceResult(msgspec.Struct):
    run_dir: str
    status: Status
    events: int
    explained: int
    first_unexplained: UnexplainedEvent | None = None
    duration_s: float = 0.0
    message: str = ""
    tlc: TlcResult | None = None

    @property
    def exit_code(self) -> int:
        return {"valid": 0, "violated": 1, "unknown": 2}[self.status]


def _string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _string_set(items: Iterable[str]) -> str:
    return "{" + ", ".join(_string(item) for item in sorted(set(items))) + "}"


def _ballot(ballot: Sequence[int]) -> str:
    if len(ballot) != 2:
        raise ValueError(f"ballot {list(ballot)!r} is not a (round, proposer) pair")
    return f"<<{int(ballot[0])}, {int(ballot[1])}>>"


def _bool(value: bool) -> str:
    return "TRUE" if value else "FALSE"


def event_record(event: h.EventBase) -> str:
    """The TLA+ record of one event: its kind, node and what its action reads."""
    kind = type(event).__struct_config__.tag
    fields = [f"k |-> {_string(str(kind))}", f"n |-> {_string(event.node)}"]
    match event:
        case h.Start() | h.Refute():
            fields.append(f"inc |-> {event.incarnation}")
        case h.ViewChange():
            fields.append(f"ep |-> {event.epoch}")
        case h.Suspect() | h.DeclareDead() | h.DeclareAlive():
            fields += [f"peer |-> {_string(event.peer)}", f"pinc |-> {event.peer_incarnation}"]
        case h.ConfigChange():
            fields.append(f"vs |-> {_string_set(event.voters)}")
        case h.Promise():
            fields += [f"st |-> {event.step}", f"bal |-> {_ballot(event.ballot)}"]
        case h.Accept():
            fields += [
                f"st |-> {event.step}",
                f"bal |-> {_ballot(event.ballot)}",
                f"val |-> {_string(event.value_fp)}",
                f"hb |-> {_bool(event.holds_bytes)}",
            ]
        case h.Commit():
            fields += [
                f"st |-> {event.step}",
                f"val |-> {_string(event.value_fp)}",
                f"par |-> {_string(event.param_fp)}",
                f"q |-> {_string_set(event.quorum)}",
                f"vs |-> {_string_set(event.voters)}",
            ]
        case h.RejoinDone():
            fields += [
                f"st |-> {event.step}",
                f"par |-> {_string(event.param_fp)}",
                f"ok |-> {_bool(event.verified)}",
            ]
        case h.Fault():
            fields += [
                f"op |-> {_string(event.op)}",
                f"tg |-> {_string_set(event.target)}",
                f"ph |-> {_string(event.phase)}",
            ]
    return "[" + ", ".join(fields) + "]"


def node_names(events: Sequence[h.EventBase]) -> set[str]:
    """Every node a history speaks of (as author, peer, quorum/voter or fault target)."""
    names: set[str] = set()
    for event in events:
        names.add(event.node)
        match event:
            case h.Suspect() | h.DeclareDead() | h.DeclareAlive():
                names.add(event.peer)
            case h.Commit():
                names.update(event.quorum, event.voters)
            case h.ConfigChange():
                names.update(event.voters)
            case h.Fault():
                names.update(event.target)
    names.discard(h.HARNESS)
    names.discard(ALL_NODES)
    return names


CONSTANTS_LINE = "CONSTANTS Trace, Nodes"


def trace_module(events: Sequence[h.EventBase], spec_text: str) -> str:
    """The generated module: ``History``'s text with its two constants defined.

    Why not ``EXTENDS History`` and ``Trace <- TraceLit`` in the cfg: TLC 2.15 then
    re-evaluates the literal at every ``Trace[l]`` (measured: 1,000 events took
    29 s), while a constant definition in the checked module is evaluated once.
    """
    if spec_text.count(CONSTANTS_LINE) != 1 or "MODULE History " not in spec_text:
        raise ValueError(f"History.tla must declare exactly one line {CONSTANTS_LINE!r}")
    records = ",\n    ".join(event_record(event) for event in events)
    definitions = f"Nodes == {_string_set(node_names(events))}\nTrace == <<\n    {records}\n>>\n"
    text = spec_text.replace("MODULE History ", f"MODULE {TRACE_MODULE} ", 1)
    return text.replace(CONSTANTS_LINE, definitions, 1)


TRACE_CONFIG = """INIT Init
NEXT Next
"""


def validate_events(
    events: Sequence[h.EventBase], *, label: str = "", timeout_s: float | None = None
) -> TraceResult:
    """Check that ``events`` (in order) are a behaviour of ``History``."""
    started = time.monotonic()
    if not events:
        return TraceResult(label, "unknown", 0, 0, message="the history holds no events")
    specs_dir = Path(str(files("swarmshake.specs")))
    deadline_s = timeout_s or BASE_TIMEOUT_S + TIMEOUT_PER_EVENT_S * len(events)
    spec_text = (specs_dir / "History.tla").read_text()
    generated = {f"{TRACE_MODULE}.tla": trace_module(events, spec_text)}
    # One worker: the behaviour is a single path, so a second thread has nothing to do.
    tlc = run_tlc(
        specs_dir / "History.tla",
        TRACE_CONFIG,
        generated_files=generated,
        timeout_s=deadline_s,
        workers=1,
        root_module=TRACE_MODULE,
    )
    result = TraceResult(label, "unknown", len(events), 0, tlc=tlc)
    if tlc.status == "valid" and tlc.depth == len(events) + 1:
        result.status = "valid"
        result.explained = len(events)
    elif tlc.status == "valid" and 1 <= tlc.depth <= len(events):
        # Depth d: the deepest state has l = d, so events 1..d-1 were explained.
        first = tlc.depth
        result.status = "violated"
        result.explained = first - 1
        result.first_unexplained = UnexplainedEvent(
            index=first, event=msgspec.to_builtins(events[first - 1])
        )
        kind = type(events[first - 1]).__struct_config__.tag
        result.message = (
            f"event {first} of {len(events)} ({kind} by {events[first - 1].node} at "
            f"t_mono={events[first - 1].t_mono}) is not a step of the spec"
        )
    elif tlc.status == "valid":
        result.status = "unknown"
        result.message = f"TLC searched to depth {tlc.depth}, outside 1..{len(events) + 1}"
    else:
        result.message = tlc.message or "TLC gave no verdict"
    result.duration_s = time.monotonic() - started
    return result


def validate_run(run_dir: str | os.PathLike[str], *, timeout_s: float | None = None) -> TraceResult:
    """Load ``RUN_DIR/events/*.jsonl`` and validate it (raises on an unreadable history)."""
    history = h.History.load(run_dir)
    result = validate_events(history.events, label=str(run_dir), timeout_s=timeout_s)
    if history.torn_lines:
        result.message = (
            result.message + f"; {history.torn_lines} torn last line(s) skipped"
        ).lstrip("; ")
    return result
