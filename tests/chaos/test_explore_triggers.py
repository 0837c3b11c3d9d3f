"""Explore on a real backend draws event-triggered faults on the kinds a system writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmshake.chaos import faults as F
from swarmshake.chaos.commands.explore import main as explore_main
from swarmshake.chaos.explore_real import TRIGGER_STEPS, UNTRIGGERABLE_KINDS, with_triggers
from swarmshake.chaos.scenario import Generator, draw
from swarmshake.chaos.systems import load_system

NODES = ["n1", "n2", "n3"]


def drawn(seed: int) -> list[F.ScheduleEntry]:
    generator = Generator(ops=["crash", "pause", "partition"], rate_per_min=30.0)
    return draw(generator, NODES, 60.0, seed)


def test_crashes_and_pauses_fire_on_the_systems_kinds_the_rest_stay_timed():
    kinds = sorted(load_system("torchft").produces)
    triggered = timed = 0
    for seed in range(20):
        before = drawn(seed)
        after = with_triggers(before, kinds, seed)
        assert len(after) == len(before)
        for old, new in zip(before, after, strict=True):
            assert new.op == old.op and new.heal_after_s == old.heal_after_s
            if new.when is None:
                assert new.at_s == old.at_s
                timed += old.op.name in ("crash", "pause")
                continue
            triggered += 1
            assert old.op.name in ("crash", "pause") and new.at_s is None
            assert new.when.node == old.op.targets()[0]  # the target's own event
            assert new.when.kind in kinds and new.when.kind not in UNTRIGGERABLE_KINDS
            assert TRIGGER_STEPS[0] <= new.when.step_at_least <= TRIGGER_STEPS[1]
        assert with_triggers(before, kinds, seed) == after  # pure: same seed, same list
    assert triggered > 10 and timed > 10  # about half of each


def test_no_kind_to_trigger_on_leaves_the_schedule_timed():
    entries = drawn(3)
    assert with_triggers(entries, [], 3) == entries
    assert with_triggers(entries, ["fault", "run_mark", "start", "stop"], 3) == entries


def test_the_collective_kind_is_drawn_for_torchft():
    kinds = sorted(load_system("torchft").produces)
    seen = {
        entry.when.kind
        for seed in range(40)
        for entry in with_triggers(drawn(seed), kinds, seed)
        if entry.when is not None
    }
    assert "collective" in seen and "membership" in seen


def test_a_triggered_schedule_round_trips_through_its_yaml():
    candidates = (with_triggers(drawn(seed), ["collective"], seed) for seed in range(20))
    entries = next(c for c in candidates if any(e.when for e in c))
    schedule = F.FaultSchedule(entries=entries)
    text = F.schedule_to_yaml(schedule)
    assert "kind: collective" in text and "step_at_least" in text
    assert F.decode_schedule(text).entries == entries


def test_explore_refuses_a_system_it_cannot_load():
    from swarmshake.chaos.commands._args import UsageError

    with pytest.raises(UsageError, match="nosuch"):
        explore_main(["--backend", "local", "--system", "nosuch", "--budget", "1"])


def test_explore_around_a_scenario_checks_it_before_any_cluster_starts(tmp_path):
    from swarmshake.chaos.commands._args import UsageError

    suite = "suites/torchft-allreduce-kill.yaml"
    with pytest.raises(UsageError, match="runs system torchft"):
        explore_main(["--backend", "local", "--scenario", suite, "--system", "torchelastic"])
    with pytest.raises(UsageError, match="simulator"):
        explore_main(["--backend", "sim", "--scenario", suite])
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\ncluster: {nodes: 0}\n")
    with pytest.raises(UsageError, match="broken.yaml"):
        explore_main(["--backend", "local", "--scenario", str(broken)])
    with pytest.raises(UsageError, match="--nodes 0"):
        explore_main(["--backend", "local", "--system", "torchft", "--nodes", "0"])
    with pytest.raises(UsageError, match="--confirm 0"):
        explore_main(["--backend", "local", "--system", "torchft", "--confirm", "0"])


def test_explore_refuses_a_scenario_generator_op_the_system_cannot_take(tmp_path):
    from swarmshake.chaos.commands._args import UsageError

    text = Path("suites/torchft-explore.yaml").read_text()
    suite = tmp_path / "gen.yaml"
    suite.write_text(text.replace("ops: [crash, pause, partition]", "ops: [crash, broker_loss]"))
    with pytest.raises(UsageError, match="broker_loss"):
        explore_main(["--backend", "local", "--scenario", str(suite)])
