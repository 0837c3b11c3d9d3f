"""What the checkers take and give: ``Bounds`` in, a ``Verdict`` of ``PropertyResult`` out.

verdict.json schema (``Verdict.to_json()``; ``msgspec`` encodes the structs as-is)::

    {
      "status": "valid" | "invalid" | "unknown",       # invalid if any property is,
                                                      # else unknown if any is, else valid
      "bounds": {"detection_s": D, "recovery_s": R, "rejoin_s": J,
                 "latency_ms_max": ..., "proc_delay_ms": ..., "drift_ppm_max": ...},
      "events": <int, events read>, "torn_lines": <int>,
      "results": {
        "S1": {"property": "S1", "status": "...", "message": "...",
               "evidence": [{"node": "n2", "index": 417, "t_mono": 12.5,
                             "kind": "commit", "step": 9, "note": "param_fp 3fa1…"}],
               "checked": <int, items examined>},
        ... one entry per property: S1 S2 S3 S4 L1 L2 L3
      }
    }

``index`` is the event's position in ``History.events`` (the run's total order by
``(t_mono, lamport, node)``), so evidence is reproducible from the run directory.
At most ``MAX_EVIDENCE`` refs are kept per property: a verdict is read by people.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from swarmshake.reference_node.protocol.history import EventBase

Status = Literal["valid", "invalid", "unknown"]
PROPERTIES: tuple[str, ...] = ("S1", "S2", "S3", "S4", "L1", "L2", "L3")
MAX_EVIDENCE = 20  # refs per property: enough to find the bug, small enough to read


class Bounds(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The run's declared bounds (DESIGN: D, R, J, the latency envelope and Δ_proc).

    Defaults match the reference node's default heartbeat profile: crash detection
    p99 ≤ 300 ms is the goal, so D = 2 s leaves room for gossip rounds at 1,000 nodes.
    """

    detection_s: float = 2.0  # D: a crashed node is declared dead by every live node
    recovery_s: float = 10.0  # R: with a live, connected majority steps commit again
    rejoin_s: float = 30.0  # J: a restarted node reaches the majority's fingerprint
    latency_ms_max: float = 75.0  # declared one-way envelope (50 ± 25 ms jitter)
    proc_delay_ms: float = 100.0  # Δ_proc: a live node handles events at least this often
    drift_ppm_max: float = 1000.0  # clock drift inside the envelope

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if not 0.0 < value < 1e9:
                raise ValueError(f"bound {name} = {value} must be positive")


class EventRef(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    node: str
    index: int
    t_mono: float
    kind: str
    step: int = -1
    note: str = ""

    @classmethod
    def of(cls, index: int, event: EventBase, note: str = "") -> EventRef:
        return cls(
            node=event.node,
            index=index,
            t_mono=event.t_mono,
            kind=event.__struct_config__.tag,  # type: ignore[arg-type]
            step=event.step,
            note=note,
        )


class PropertyResult(msgspec.Struct, kw_only=True):
    property: str
    status: Status
    message: str = ""
    evidence: list[EventRef] = []
    checked: int = 0


class Verdict(msgspec.Struct, kw_only=True):
    status: Status
    results: dict[str, PropertyResult]
    bounds: Bounds
    events: int = 0
    torn_lines: int = 0

    def violated(self) -> list[str]:
        return [name for name, result in self.results.items() if result.status == "invalid"]

    def to_json(self) -> bytes:
        return msgspec.json.format(msgspec.json.encode(self), indent=2)


def overall_status(results: dict[str, PropertyResult]) -> Status:
    statuses = {result.status for result in results.values()}
    if "invalid" in statuses:
        return "invalid"
    if "unknown" in statuses or not results:
        return "unknown"
    return "valid"


def tail_undecided(tail_s: float, longest_gap_s: float, recovery_s: float) -> bool:
    """Whether a history that ends ``tail_s`` after its last new step, with a majority
    left alone all that time, leaves L2 undecided: shorter than R, so no violation
    yet, but longer than every gap before it and than R / 4, so the cluster may well
    be stalled (session 26: a sharded cluster dead for the last 9 s of a run was
    called valid; R = 10 s).  A run decides it with a quiesce of at least R."""
    return longest_gap_s < tail_s <= recovery_s and tail_s > recovery_s / 4


class Findings:
    """Accumulates one property's outcome: a violation beats missing evidence."""

    def __init__(self, name: str):
        self.name = name
        self.violations: list[str] = []
        self.unknowns: list[str] = []
        self.evidence: list[EventRef] = []
        self.checked = 0

    def invalid(self, message: str, *refs: EventRef) -> None:
        self.violations.append(message)
        self._keep(refs)

    def unknown(self, message: str, *refs: EventRef) -> None:
        self.unknowns.append(message)
        if not self.violations:
            self._keep(refs)

    def _keep(self, refs: tuple[EventRef, ...]) -> None:
        room = MAX_EVIDENCE - len(self.evidence)
        self.evidence.extend(refs[: max(room, 0)])

    def result(self, valid_message: str) -> PropertyResult:
        if self.violations:
            status: Status = "invalid"
            message = _summarise(self.violations)
        elif self.unknowns:
            status = "unknown"
            message = _summarise(self.unknowns)
        else:
            status = "valid"
            message = valid_message
        return PropertyResult(
            property=self.name,
            status=status,
            message=message,
            evidence=self.evidence,
            checked=self.checked,
        )


def _summarise(messages: list[str]) -> str:
    head = messages[0]
    return head if len(messages) == 1 else f"{head} (and {len(messages) - 1} more)"
