"""Recovery in the simulator: what the recovery benchmark's numbers rest on.

A step aggregates every live voter's gradient; a crashed contributor or coordinator
costs its detection plus one round, not a backoff timer; no crash leaves the cluster
without a commit for longer than the issue's cliff (2 s).  Measured the way
``swarmshake bench recovery`` measures (``reports.recovery.measure_run``).
"""

from __future__ import annotations

import pytest

from swarmshake.chaos import faults
from swarmshake.chaos.sim.run import SimConfig, run_simulation
from swarmshake.reference_node.protocol.history import Commit
from swarmshake.reports.recovery import measure_run

NODES = ("n0", "n1", "n2", "n3")
CLIFF_S = 2.0  # issue 8: no recovery may take longer


def _recovery_s(seed: int, text: str) -> float:
    run = run_simulation(SimConfig(nodes=4, duration_s=20, seed=seed), faults.decode_schedule(text))
    assert run.verdict.violated() == [], [v.message for v in run.result.violations]
    [fault] = measure_run(run.history).faults
    assert fault.recovery_s is not None, "no commit without the victim"
    return fault.recovery_s


def test_a_healthy_step_aggregates_every_voters_gradient():
    run = run_simulation(SimConfig(nodes=4, duration_s=10, seed=3))
    commits = [e for e in run.history.events if isinstance(e, Commit)]
    assert len({c.step for c in commits}) >= 7  # ~1.1 s a step
    assert all(sorted(c.contributors) == list(NODES) for c in commits)


@pytest.mark.parametrize("step", [3, 4, 5, 6])  # coordinators n3, n0, n1, n2
def test_a_coordinator_killed_as_it_sends_its_gradient_is_replaced_within_a_round(step):
    """The other voters' gradients are in after ~0.45 s; the coordinator's death is
    declared after ~0.25 s; the next voter in rotation proposes at that view change
    with phase 1 (one extra round trip), no backoff in between."""
    coordinator = NODES[step % 4]
    recovery = _recovery_s(
        step,
        f"""
- op: {{op: crash, nodes: [{coordinator}]}}
  when: {{node: {coordinator}, kind: agg_send, step_at_least: {step}}}
""",
    )
    assert recovery <= 0.8


@pytest.mark.parametrize("seed", range(8))
def test_a_crash_at_any_moment_of_a_step_is_recovered_before_the_cliff(seed):
    """Crash times spread over two steps.  A crash after the victim's gradient was
    delivered needs the step after; the worst case (seed 6) kills step 5's coordinator
    just after its value was chosen and before anyone learned it: detection (0.2 s),
    the next voter's phase-1 round that recovers the chosen value (0.3 s), then a whole
    step without the victim (1.1 s), about 1.6 s."""
    victim = NODES[1 + seed % 3]
    recovery = _recovery_s(
        seed,
        f"""
- op: {{op: crash, nodes: [{victim}]}}
  at_s: {5.0 + 0.27 * seed:.2f}
""",
    )
    assert recovery <= CLIFF_S - 0.25


def test_a_minority_partition_is_left_behind_within_the_cliff():
    recovery = _recovery_s(
        1,
        """
- op: {op: partition, grouping: isolate, nodes: [n1]}
  at_s: 6.3
  heal_after_s: 4
""",
    )
    assert recovery <= CLIFF_S - 0.5
