"""History checkers for S1–S4 and L1–L3: one set for simulated and real runs.

``check_history(history, bounds) -> Verdict`` reads a :class:`History` (every node's
events plus the harness's ``fault`` events) and returns, per property,
``valid | invalid | unknown`` with evidence (event refs: node, history index,
``t_mono``).  A checker that raises yields ``unknown`` with the error as its message,
never ``valid`` (Jepsen's rule).  ``Verdict.to_json()`` is ``verdict.json``; its
schema is documented in :mod:`swarmshake.verify.checkers.model`.
"""

from __future__ import annotations

from collections.abc import Callable

from swarmshake.reference_node.protocol.history import History
from swarmshake.verify.checkers.detector import check_l1, check_s4, detection_delays_s
from swarmshake.verify.checkers.model import (
    PROPERTIES,
    Bounds,
    EventRef,
    PropertyResult,
    Verdict,
    overall_status,
)
from swarmshake.verify.checkers.progress import check_l2, check_l3
from swarmshake.verify.checkers.safety import Membership, check_s1, check_s2, check_s3
from swarmshake.verify.checkers.timeline import build_timeline

__all__ = [
    "PROPERTIES",
    "Bounds",
    "EventRef",
    "PropertyResult",
    "Verdict",
    "build_timeline",
    "check_history",
    "detection_delays_s",
]


def check_history(history: History, bounds: Bounds | None = None) -> Verdict:
    """Check every property; never raises for a bad history (that is ``unknown``)."""
    bounds = bounds or Bounds()
    results: dict[str, PropertyResult] = {}
    try:
        timeline = build_timeline(history, bounds)
        membership = Membership(history)
    except Exception as error:  # noqa: BLE001 - any failure here means "cannot decide"
        message = f"could not build the run's ground truth: {type(error).__name__}: {error}"
        results = {
            p: PropertyResult(property=p, status="unknown", message=message) for p in PROPERTIES
        }
        return Verdict(status="unknown", results=results, bounds=bounds, events=len(history.events))

    checkers: dict[str, Callable[[], PropertyResult]] = {
        "S1": lambda: check_s1(history, timeline),
        "S2": lambda: check_s2(history, timeline, membership),
        "S3": lambda: check_s3(history, membership),
        "S4": lambda: check_s4(history, timeline, bounds),
        "L1": lambda: check_l1(history, timeline, bounds),
        "L2": lambda: check_l2(history, timeline, membership, bounds),
        "L3": lambda: check_l3(history, timeline, membership, bounds),
    }
    for name, checker in checkers.items():
        try:
            results[name] = checker()
        except Exception as error:  # noqa: BLE001 - a checker that raises says unknown
            results[name] = PropertyResult(
                property=name,
                status="unknown",
                message=f"checker raised {type(error).__name__}: {error}",
            )
    if not history.events:
        for result in results.values():
            result.status = "unknown"
            result.message = "the history is empty: nothing to decide"
    return Verdict(
        status=overall_status(results),
        results=results,
        bounds=bounds,
        events=len(history.events),
        torn_lines=history.torn_lines,
    )
