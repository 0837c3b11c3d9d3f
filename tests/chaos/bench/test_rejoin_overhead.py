"""bench rejoin (state transfer through the runtime's framing) and the gloo baseline."""

from __future__ import annotations

import pytest

from swarmshake.chaos.bench import overhead, rejoin
from swarmshake.chaos.commands._args import UsageError
from swarmshake.reference_node.training.config import TrainingConfig


def test_state_transfer_is_verified_end_to_end() -> None:
    result = rejoin.run(params=200_000, optimizer="adam", repeats=2)
    assert result["verified"] is True
    assert result["frame_drops"] == {}
    # params plus Adam's two moment buffers, float32, plus the checkpoint header
    assert 200_000 * 4 * 3 < result["state_bytes"] < 200_000 * 4 * 3 + 4096
    assert result["gb_per_s"]["best"] > 0 and result["seconds"]["min"] <= result["seconds"]["max"]


def test_parameter_counts_parse_and_are_bounded() -> None:
    assert rejoin.parse_count("100M") == 100_000_000
    assert rejoin.parse_count("500k") == 500_000
    assert rejoin.parse_count("1G") == 1_000_000_000
    with pytest.raises(UsageError):
        rejoin.parse_count("2G")
    with pytest.raises(UsageError):
        rejoin.parse_count("lots")


@pytest.mark.slow
def test_gloo_baseline_trains_the_reference_model() -> None:
    config = TrainingConfig(seed=3, hidden=[32], threads=1)
    result = overhead.gloo_baseline(config, world=2, steps=20, warmup=2)
    assert result["world"] == 2 and result["steps"] == 20
    assert result["steps_per_s"] > 0
    assert result["last_loss"] < result["first_loss"]  # it really trains


def test_the_node_run_waits_for_steady_state_as_long_as_the_model_needs() -> None:
    """The node's run is given the harness's 60 s to reach steady state, more when
    gloo's step alone takes seconds: at 100M parameters on 2 cores (~7 s a gloo step,
    the node ~25 s) 60 s held two steps and the bench measured the rate of those."""
    assert overhead.steady_state_timeout_s(0.036) == 60.0  # 1M parameters
    assert overhead.steady_state_timeout_s(6.8) >= 30.0 + 3 * 25.0  # 100M
    assert overhead.steady_state_timeout_s(1e6) == 3600.0  # the scenario's bound


@pytest.mark.parametrize(
    ("events", "aborted"),
    [("100M-758fd09-events", "not reached within"), ("100M-92f6095-events", None)],
)
def test_a_run_that_never_reached_steady_state_gives_no_rate(tmp_path, events, aborted) -> None:
    """The harness's own events of two 100M runs (docs/bench-results/session20): in
    the first a worker was killed for memory and the run was aborted before steady
    state, yet the bench printed a rate from the others' commits; now it says why it
    has none.  The second reached steady state."""
    import shutil
    from pathlib import Path

    from swarmshake.reference_node.protocol.history import History

    source = Path(__file__).parents[3] / "docs" / "bench-results" / "session20" / events
    (tmp_path / "events").mkdir()
    shutil.copy(source / "harness.jsonl", tmp_path / "events" / "harness.jsonl")
    reason = overhead.run_aborted(History.load(tmp_path))
    if aborted is None:
        assert reason is None
    else:
        assert reason is not None and aborted in reason


def test_a_node_that_stopped_committing_after_steady_state_gives_no_rate(tmp_path) -> None:
    """The 92f6095 100M run (all four nodes trained to the end), and the same run with
    n3's commits cut after step 4, as if its worker had been killed then: the harness
    does not abort after steady state, so the bench must notice the node is gone."""
    import json
    import shutil
    from pathlib import Path

    from swarmshake.reference_node.protocol.history import History

    source = Path(__file__).parents[3] / "docs" / "bench-results" / "session20"
    whole = tmp_path / "whole"
    shutil.copytree(source / "100M-92f6095-events", whole / "events")
    assert overhead.nodes_lost(History.load(whole)) == []
    cut = tmp_path / "cut"
    shutil.copytree(source / "100M-92f6095-events", cut / "events")
    n3 = cut / "events" / "n3.jsonl"
    kept = [
        line
        for line in n3.read_text().splitlines()
        if not (json.loads(line)["kind"] == "commit" and json.loads(line)["step"] > 4)
    ]
    n3.write_text("\n".join(kept) + "\n")
    assert overhead.nodes_lost(History.load(cut)) == ["n3 (last step 4 of 8)"]


def test_the_node_rate_is_timed_after_steady_state_as_gloo_is_after_its_warm_up(tmp_path) -> None:
    """The 92f6095 100M run: steady state when the last node committed step 2; the
    node's rate counts the steps committed after it, not the warm-up before."""
    import shutil
    from pathlib import Path

    from swarmshake.reference_node.protocol.history import Commit, History, RunMark

    source = Path(__file__).parents[3] / "docs" / "bench-results" / "session20"
    shutil.copytree(source / "100M-92f6095-events", tmp_path / "events")
    history = History.load(tmp_path)
    start, end, intervals = overhead.steady_window(history)
    [mark] = [
        e.t_mono for e in history.events if isinstance(e, RunMark) and e.mark == "steady_state"
    ]
    assert mark <= start < end and intervals >= 2
    commits_of_step_2 = [e.t_mono for e in history.events if isinstance(e, Commit) and e.step == 2]
    assert start > max(commits_of_step_2)  # step 2 reached steady state; step 3 is timed
