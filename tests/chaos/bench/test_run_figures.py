"""run_figures: state transfers paired begin -> done per node incarnation, step gaps."""

from __future__ import annotations

import pytest

from swarmshake.chaos.bench.run_figures import main, state_transfers, step_seconds, window_rates
from swarmshake.reference_node.protocol.history import (
    Commit,
    Fault,
    History,
    RejoinBegin,
    RejoinDone,
)


def commit(node: str, step: int, t: float) -> Commit:
    return Commit(
        t_wall=t, t_mono=t, node=node, step=step, value_fp="v", contributors=[], param_fp="p"
    )


def test_transfer_rate_pairs_begin_and_done_of_one_incarnation():
    history = History.from_events(
        [
            RejoinBegin(t_wall=1.0, t_mono=1.0, node="n4", incarnation=2, source="n1"),
            # Another node's begin in between must not pair with n4's done.
            RejoinBegin(t_wall=1.5, t_mono=1.5, node="n2", incarnation=1, source="n3"),
            RejoinDone(
                t_wall=3.0,
                t_mono=3.0,
                node="n4",
                incarnation=2,
                step=7,
                source="n1",
                param_fp="p",
                nbytes=800_000_000,
            ),  # fmt: skip
            # A done with no begin of its incarnation is not a transfer.
            RejoinDone(
                t_wall=4.0,
                t_mono=4.0,
                node="n4",
                incarnation=3,
                step=9,
                source="n1",
                param_fp="p",
                nbytes=5,
            ),  # fmt: skip
        ]
    )
    (transfer,) = state_transfers(history)
    assert (transfer.node, transfer.incarnation, transfer.step) == ("n4", 2, 7)
    assert transfer.seconds == pytest.approx(2.0)
    assert transfer.megabytes_per_s == pytest.approx(400.0)


def test_a_transfer_of_no_bytes_has_no_rate():
    history = History.from_events(
        [
            RejoinBegin(t_wall=1.0, t_mono=1.0, node="n1", source="checkpoint"),
            RejoinDone(t_wall=1.2, t_mono=1.2, node="n1", source="checkpoint", param_fp="p"),
        ]
    )
    (transfer,) = state_transfers(history)
    assert transfer.megabytes_per_s is None


def test_step_seconds_reads_first_commits_of_consecutive_steps():
    history = History.from_events(
        [commit("n1", 0, 10.0), commit("n2", 0, 10.5), commit("n2", 1, 12.0), commit("n1", 3, 20.0)]
    )
    # 0 -> 1 is 2.0 s; step 2 never committed, so 1 -> 3 is no step time.
    assert step_seconds(history) == [pytest.approx(2.0)]


def fault(op: str, phase: str, t: float) -> Fault:
    return Fault(t_wall=t, t_mono=t, node="harness", op=op, target=["n4"], phase=phase)


def test_window_rates_count_new_steps_inside_each_fault_and_the_fault_free_rates():
    events = [commit("n1", step, 100.0 + 2.0 * step) for step in range(6)]  # 0.5 steps/s
    events += [fault("crash", "inject", 111.0), fault("crash", "heal", 119.0)]
    # One step in the 8 s window, then 1 step/s after the heal.
    events += [commit("n1", 6, 115.0), commit("n1", 7, 120.0)]
    events += [commit("n1", step, 120.0 + (step - 7)) for step in range(8, 12)]
    rates, before, after = window_rates(History.from_events(events))
    (crash,) = rates
    assert (crash.op, crash.new_steps) == ("crash", 1)
    assert crash.steps_per_s == pytest.approx(1 / 8)
    assert before == pytest.approx(0.5)
    assert after == pytest.approx(1.0)


def test_a_missing_run_dir_exits_64(tmp_path, capsys):
    assert main([str(tmp_path / "absent")]) == 64
    assert "not a directory" in capsys.readouterr().err
