"""The checkers' ground truth (``verify/checkers/timeline.py``) at its edges.

Written against the survivors of the first full mutation run of ``verify/checkers/``
(session 13, timeline.py 273/327 killed): when a window or process ends, which heal
ends which window, what leaves the declared envelope, and which malformed fault
parameters are ignored rather than trusted or crashed on.
"""

from __future__ import annotations

import math

import pytest

from swarmshake.reference_node.protocol.history import (
    HARNESS,
    DeclareDead,
    Fault,
    History,
    LoopStall,
    Start,
    Stop,
)
from swarmshake.verify.checkers import Bounds, check_history
from swarmshake.verify.checkers.timeline import Interval, build_timeline

NODES = ["n1", "n2", "n3"]
BOUNDS = Bounds(detection_s=1.0)


def _starts() -> list:
    return [Start(t_wall=0.1, t_mono=0.1, node=n, config={"voters": NODES}) for n in NODES]


def _fault(op: str, target: list[str], t: float, phase: str = "inject", **params) -> Fault:
    return Fault(t_wall=t, t_mono=t, node=HARNESS, op=op, target=target, phase=phase,
                 params=params)  # fmt: skip


def _declare(node: str, peer: str, t: float) -> DeclareDead:
    return DeclareDead(t_wall=t, t_mono=t, node=node, peer=peer, peer_incarnation=0)


def _timeline(*events):
    return build_timeline(History.from_events([*_starts(), *events]), BOUNDS)


def _s4(*events):
    return check_history(History.from_events([*_starts(), *events]), BOUNDS).results["S4"]


def _exit_ends(timeline) -> list[float]:
    return [window.interval.end for window in timeline.exits]


def test_an_interval_holds_its_start_not_its_end():
    interval = Interval(1.0, 2.0)
    assert interval.covers(1.0) and not interval.covers(2.0)
    assert interval.overlaps(0.0, 1.0) and not interval.overlaps(2.0, 3.0)


def test_the_timeline_ends_at_the_last_event():
    assert _timeline(_declare("n1", "n2", 4.0), _declare("n1", "n3", 7.0)).end_t == 7.0


def test_a_clean_stop_ends_the_process():
    # n2 left cleanly at 5 s: n1's declaration at 6 s is of a node that is not running.
    assert _s4(Stop(t_wall=5, t_mono=5.0, node="n2"), _declare("n1", "n2", 6.0)).status == "valid"


def test_a_crash_of_a_node_already_down_is_no_second_crash():
    timeline = _timeline(_fault("crash", ["n2"], 2.0), _fault("crash", ["n2"], 3.0))
    assert [(name, t) for name, t, _ in timeline.crashes] == [("n2", 2.0)]


def test_a_loop_stall_longer_than_proc_delay_marks_the_node_stalled_for_its_length():
    def stall(ms: float) -> LoopStall:
        return LoopStall(t_wall=5.0, t_mono=5.0, node="n2", stalled_ms=ms, since_mono=4.5)

    assert _timeline(stall(100.0)).nodes["n2"].stalls == []  # exactly Δ_proc: handled in time
    (interval,) = _timeline(stall(250.0)).nodes["n2"].stalls
    assert (interval.start, interval.end) == (4.5, 4.75)


def test_nodes_seen_without_a_start_are_up_from_their_first_event():
    # A history cut at the front: two nodes' starts are missing.
    events = [_declare("n1", "n3", 1.0), _declare("n2", "n3", 2.0)]
    timeline = build_timeline(History.from_events(events), BOUNDS)
    assert [(p.start, p.end) for p in timeline.nodes["n1"].processes] == [(1.0, math.inf)]
    assert [(p.start, p.end) for p in timeline.nodes["n2"].processes] == [(2.0, math.inf)]


@pytest.mark.parametrize(("at", "observers"), [(6.0, 2), (5.9, 1)])
def test_an_observer_is_judged_if_it_runs_until_d_after_the_crash(at, observers):
    # n2 crashes at 5 s (D = 1 s) and nobody declares it; n1 crashes at ``at`` (n3
    # declares that in time); n3 runs on.
    events = [*_starts(), _fault("crash", ["n2"], 5.0), _fault("crash", ["n1"], at)]
    events.append(_declare("n3", "n1", at + 0.5))
    result = check_history(History.from_events(events), BOUNDS).results["L1"]
    assert result.checked == observers + 1  # n1's own crash: n3 declared it


def test_an_observer_paused_exactly_d_after_the_crash_is_not_judged():
    events = [*_starts(), _fault("crash", ["n2"], 5.0), _fault("pause", ["n1"], 6.0)]
    events.append(_declare("n3", "n2", 5.5))
    result = check_history(History.from_events(events), BOUNDS).results["L1"]
    assert result.checked == 1 and result.status == "valid"


# --- pauses ---------------------------------------------------------------------------------


def test_a_resume_of_a_node_never_paused_changes_nothing():
    assert _timeline(_fault("resume", ["n2"], 2.0)).nodes["n2"].pauses == []


def test_a_pause_while_paused_is_the_same_pause():
    timeline = _timeline(
        _fault("pause", ["n2"], 1.0), _fault("resume", ["n2"], 2.0),
        _fault("pause", ["n2"], 3.0), _fault("pause", ["n2"], 4.0),
        _fault("resume", ["n2"], 5.0),
    )  # fmt: skip
    assert [(p.start, p.end) for p in timeline.nodes["n2"].pauses] == [(1.0, 2.0), (3.0, 5.0)]


# --- the declared envelope -------------------------------------------------------------------


def test_latency_and_drift_exactly_at_the_envelope_stay_inside_it():
    inside = _timeline(
        _fault("latency", ["n1"], 1.0, delay_ms=50.0, jitter_ms=25.0),
        _fault("clock_skew", ["n2"], 1.0, drift_ppm=1000.0),
    )  # fmt: skip
    assert inside.exits == []
    outside = _timeline(_fault("latency", ["n1"], 1.0, delay_ms=50.0, jitter_ms=25.5))
    assert len(outside.exits) == 1


def test_a_zero_skew_ends_the_window_of_an_earlier_skew():
    timeline = _timeline(
        _fault("clock_skew", ["n2"], 1.0, offset_ms=300.0),
        _fault("clock_skew", ["n2"], 4.0, offset_ms=0.0),
    )  # fmt: skip
    assert _exit_ends(timeline) == [4.0 + BOUNDS.detection_s]


def test_the_heal_of_everything_ends_every_link_window():
    timeline = _timeline(
        _fault("latency", ["n1"], 1.0, delay_ms=500.0), _fault("heal", [], 3.0, "heal")
    )
    assert _exit_ends(timeline) == [3.0 + BOUNDS.detection_s]


def test_a_heal_ends_the_oldest_of_two_windows_with_its_target_only():
    timeline = _timeline(
        _fault("latency", ["n1"], 1.0, delay_ms=500.0),
        _fault("latency", ["n1"], 2.0, delay_ms=900.0),
        _fault("latency", ["n1"], 3.0, phase="heal"),
    )  # fmt: skip
    assert _exit_ends(timeline) == [3.0 + BOUNDS.detection_s, math.inf]


def test_a_heal_naming_one_node_leaves_a_fault_on_every_node_open():
    timeline = _timeline(
        _fault("latency", ["*"], 1.0, delay_ms=500.0),
        _fault("latency", ["n1"], 3.0, phase="heal"),
    )  # fmt: skip
    assert _exit_ends(timeline) == [math.inf]


def test_a_link_fault_naming_no_node_touches_every_link():
    result = _s4(_fault("latency", [], 1.0, delay_ms=500.0), _declare("n1", "n2", 2.0))
    assert result.status == "unknown" and "outside the declared envelope" in result.message


def test_a_link_fault_on_another_node_leaves_a_declaration_judged():
    result = _s4(_fault("latency", ["n3"], 1.0, delay_ms=500.0), _declare("n1", "n2", 2.0))
    assert result.status == "invalid"


def test_a_link_fault_with_half_its_links_recorded_counts_every_link_of_its_nodes():
    half = _fault("latency", ["n2"], 1.0, delay_ms=500.0, src=["n2"])  # no dst
    result = _s4(half, _declare("n1", "n2", 2.0))
    assert result.status == "unknown" and "outside the declared envelope" in result.message


def test_malformed_cuts_are_ignored_not_trusted():
    partition = _fault(
        "partition", ["n2"], 1.0,
        cuts=[["n1", "n2"], ["n1", "n2", "n3"], "ab", 5, [1, "n2"], ["n3", 2]],
    )  # fmt: skip
    blackhole = _fault("blackhole", ["n3"], 1.0, src="n3", dst=["n1"])
    timeline = _timeline(partition, blackhole)
    assert [sorted(pairs) for _, pairs in timeline.cuts] == [[("n1", "n2")], []]
