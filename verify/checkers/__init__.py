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
from swarmshake.verify.checkers.timeline import Timeline, build_timeline
from swarmshake.verify.history import RunSystem, missing_kinds

__all__ = [
    "PROPERTIES",
    "Bounds",
    "EventRef",
    "PropertyResult",
    "Verdict",
    "build_timeline",
    "check_history",
    "check_neutral",
    "detection_delays_s",
]


# What the reference-only checkers need: the step commit's votes and the detector's
# verdicts, which only the reference node's vocabulary has.
REFERENCE_NEEDS: dict[str, str] = {
    "S2": "accept/commit votes with their quorum and the configured voters",
    "S3": "accept votes and ballots of the step commit",
    "S4": "the failure detector's suspect/declare_dead verdicts",
}


def check_neutral(history: History, bounds: Bounds, system: RunSystem) -> Verdict:
    """Every property judged from the neutral history of a system other than the reference.

    A property whose events the system never writes is ``unknown`` with that reason."""
    from swarmshake.verify.checkers import neutral

    checkers: dict[str, Callable[[], PropertyResult]] = {
        "S1": lambda: neutral.check_s1(history),
        "L1": lambda: neutral.check_l1(history, bounds),
        "L2": lambda: neutral.check_l2(history, bounds),
        "L3": lambda: neutral.check_l3(history, bounds),
    }
    results: dict[str, PropertyResult] = {}
    for name in PROPERTIES:
        if name in REFERENCE_NEEDS:
            results[name] = PropertyResult(
                property=name,
                status="unknown",
                message=f"system {system.name} does not record {REFERENCE_NEEDS[name]}",
            )
            continue
        missing = missing_kinds(neutral.NEEDS[name], system.produces)
        if missing:
            results[name] = PropertyResult(
                property=name,
                status="unknown",
                message=f"system {system.name} does not write {', '.join(missing)} events",
            )
            continue
        try:
            results[name] = checkers[name]()
        except Exception as error:  # noqa: BLE001 - a checker that raises says unknown
            results[name] = PropertyResult(
                property=name,
                status="unknown",
                message=f"checker raised {type(error).__name__}: {error}",
            )
    return _verdict(history, bounds, results)


def check_history(
    history: History,
    bounds: Bounds | None = None,
    system: RunSystem | None = None,
    *,
    timeline: Timeline | None = None,
) -> Verdict:
    """Check every property; never raises for a bad history (that is ``unknown``).

    ``system``: what the run's system writes (``RunSystem.of(run_dir)``); None or
    the reference node: the reference checkers on its full vocabulary.
    ``timeline``: ``build_timeline(history, bounds)`` if the caller already built it
    (the simulator needs it for its detection figures too)."""
    bounds = bounds or Bounds()
    if system is not None and system.produces is not None:
        return check_neutral(history, bounds, system)
    results: dict[str, PropertyResult] = {}
    try:
        if timeline is None:
            timeline = build_timeline(history, bounds)
        membership = Membership(history)
    except Exception as error:  # noqa: BLE001 - any failure here means "cannot decide"
        message = f"could not build the run's ground truth: {type(error).__name__}: {error}"
        results = {
            p: PropertyResult(property=p, status="unknown", message=message) for p in PROPERTIES
        }
        # Not _verdict(): its emptiness test reads the same malformed events.
        return Verdict(
            status="unknown",
            results=results,
            bounds=bounds,
            events=len(history.events),
            torn_lines=history.torn_lines,
        )

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
    return _verdict(history, bounds, results)


def _verdict(history: History, bounds: Bounds, results: dict[str, PropertyResult]) -> Verdict:
    """The verdict of both checker paths (reference and neutral)."""
    _undecided_without_nodes(history, results)
    return Verdict(
        status=overall_status(results),
        results=results,
        bounds=bounds,
        events=len(history.events),
        torn_lines=history.torn_lines,
    )


def _undecided_without_nodes(history: History, results: dict[str, PropertyResult]) -> None:
    """A history in which no node wrote a single event (nodes that never started, a
    config they refused, the harness's events alone) makes every property hold
    vacuously; that is not evidence, so every property is ``unknown``."""
    if not history.events:
        reason = "the history is empty: nothing to decide"
    elif not history.nodes():
        reason = (
            f"no node wrote an event ({len(history.events)} harness events only):"
            " the nodes never ran, so nothing can be judged; see the run's logs/"
        )
    else:
        return
    for result in results.values():
        result.status = "unknown"
        result.message = reason
