"""Start-up time of an 8-node cluster, from ``up()`` to every node ready.

The number BENCHMARKS.md wants is "up to steady state"; with stand-in nodes steady
state is "every node ready and dialled", which isolates the harness's own cost
(zygote, Toxiproxy with 120 proxies, Mosquitto, forks).  The reference node adds its
own start-up on top (worker process, first steps).
"""

from __future__ import annotations

import time

import pytest

from swarmshake.chaos.backends.session import ClusterSession

pytestmark = pytest.mark.slow


def test_eight_local_nodes_are_up_within_five_seconds(tmp_path, heartbeat_program):
    from swarmshake.chaos.backends.base import ClusterSpec

    spec = ClusterSpec(
        run_id="startup8", run_dir=tmp_path / "run", nodes=tuple(f"n{i}" for i in range(1, 9)),
        node_program=heartbeat_program, node_config={"training": {"hidden": [16]}},
    )  # fmt: skip
    session = ClusterSession("local", spec)
    started = time.monotonic()
    with session:
        session.wait_until_steady(min_commit_step=-1, timeout_s=60)
        elapsed = time.monotonic() - started
        timings = session.backend.timings
        print(f"8 local nodes ready in {elapsed:.2f}s; {timings}")
        assert len(session.backend.toxiproxy.proxy("n1__n2__control").listen) > 0
    # The goal is ≤ 5 s in total; the zygote's one torch import takes 3-6 s on a loaded
    # 2-core machine, so the firm bounds are: the harness's own part (everything after
    # the zygote is ready) within 2 s, and the whole within 15 s.
    assert elapsed - timings["zygote_ready_s"] <= 2.0, (elapsed, timings)
    assert elapsed <= 15.0, (elapsed, timings)
