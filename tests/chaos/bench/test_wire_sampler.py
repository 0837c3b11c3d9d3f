"""Wire bytes per node per step (``bench overhead``): measured from the nodes'
``/status`` counters, bulk over the worker's steps, control over the driver's."""

from __future__ import annotations

from pathlib import Path

from swarmshake.chaos.bench.overhead import WireSampler


def sample(incarnation: int, committed: int, report_step: int, control: int, bulk: int) -> dict:
    return {
        "incarnation": incarnation,
        "steps_committed": committed,
        "report_step": report_step,
        "wire_bytes": {
            "control": {"sent": control, "received": control // 2},
            "bulk": {"sent": bulk, "received": bulk * 3},
        },
    }


def test_bytes_per_step_divide_each_channel_by_its_own_step_count(tmp_path: Path) -> None:
    wire = WireSampler(tmp_path, 0.0)
    wire.first["n1"] = sample(1, committed=10, report_step=10, control=1_000, bulk=10_000)
    # The worker's report lags the driver: 20 bulk steps, 25 control steps.
    wire.last["n1"] = sample(1, committed=35, report_step=30, control=6_000, bulk=410_000)
    result = wire.per_step()
    row = result["nodes"]["n1"]
    assert row["bulk_sent"] == 20_000.0 and row["bulk_received"] == 60_000.0
    assert row["control_sent"] == 200.0 and row["control_received"] == 100.0
    assert row["sent"] == 20_200.0 and result["mean"]["sent"] == 20_200.0


def test_a_node_without_two_samples_is_not_measured(tmp_path: Path) -> None:
    wire = WireSampler(tmp_path, 0.0)
    wire.first["n1"] = sample(1, committed=10, report_step=10, control=1, bulk=1)
    assert "not_measured" in wire.per_step()
