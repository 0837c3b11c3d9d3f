"""The harness's own numbers: start-up to steady state, fault latency, capacity.

``swarmshake bench harness [--backend local|docker] [--nodes 8] [--trials 3]
[--capacity 4,8,12,16] [--json]``

- **Up to steady state**: from ``backend.up()`` until every node of a real
  reference-node cluster committed step 2 (the runner's steady state), per trial.
- **Fault latency, call to effect**: with the cluster steady, each op is injected
  and healed ``--trials`` times.  Toxiproxy applies a proxy change before it answers
  (a disabled proxy has closed its connections by then), so for link ops the effect
  is the answer of the last proxy call; a crash's effect is the node's process gone
  (``is_running()`` false); a pause's is the signal or ``docker pause`` returning.
- **Capacity**: for each size in ``--capacity``, bring a cluster up and hold it
  fault-free for ``HOLD_S``; the size holds when it reached steady state within
  ``STEADY_TIMEOUT_S`` and the history checks clean: no false declaration (S4),
  commits keep flowing (L2) and no control-loop stall beyond the suspicion floor.
  The first size that fails ends the ramp: "the machine holds N nodes".
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from swarmshake.chaos import faults as F
from swarmshake.chaos.backends.base import BackendError, ClusterSpec
from swarmshake.chaos.backends.session import ClusterSession
from swarmshake.reference_node.protocol import history

# Well past the goals (5 s local, 15 s Docker for 8 nodes): a size that needs longer
# than this does not "hold" on the machine.
STEADY_TIMEOUT_S = 120.0
STEADY_STEP = 2  # the runner's default steady state: every node committed step 2
# Fault-free hold per capacity size: long enough for a few hundred heartbeats per
# link and for a gen-2 collection or a checkpoint to happen.
HOLD_S = 20.0
# A control loop stalled longer than the detector's suspicion floor (160 ms) can
# cause a false suspicion; shorter ones are scheduling noise.
STALL_LIMIT_MS = 160.0
# How long a crash may take to show (process gone) before the trial gives up.
EFFECT_TIMEOUT_S = 10.0
SETTLE_S = 1.0  # after a heal: links re-dialled before the next trial's call


def _spec(
    backend: str, nodes: int, run_dir: Path, seed: int, hidden: list[int] | None
) -> ClusterSpec:
    """``hidden``: the nodes' model widths; None keeps the node's default (~0.8M
    parameters, the CI model's size)."""
    return ClusterSpec(
        run_id=f"bench-harness-{backend}-{nodes}-{int(time.time() * 1000) % 10**8}",
        run_dir=run_dir,
        nodes=tuple(f"n{i}" for i in range(1, nodes + 1)),
        seed=seed,
        node_config={"training": {"hidden": hidden}} if hidden else {},
    )


def _summary(values_ms: list[float]) -> dict[str, float | int]:
    return {
        "min": round(min(values_ms), 1),
        "median": round(statistics.median(values_ms), 1),
        "max": round(max(values_ms), 1),
        "trials": len(values_ms),
    }


def _timed_ms(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _crash_effect_ms(session: ClusterSession, node: str) -> float:
    started = time.perf_counter()
    session.inject(F.Crash(nodes=[node]))
    deadline = time.monotonic() + EFFECT_TIMEOUT_S
    while session.call(_is_running(session, node)):
        if time.monotonic() > deadline:
            raise BackendError(f"{node} still running {EFFECT_TIMEOUT_S}s after crash")
        time.sleep(0.001)
    return (time.perf_counter() - started) * 1000


async def _is_running(session: ClusterSession, node: str) -> bool:
    return session.backend.node(node).is_running()


def fault_latencies(session: ClusterSession, trials: int) -> dict[str, dict[str, Any]]:
    """Call → effect per op on a steady cluster, ``trials`` times each."""
    nodes = list(session.spec.nodes)
    victim = nodes[-1]
    ops: dict[str, F.FaultOp] = {
        "partition_isolate_one": F.Partition(grouping="isolate", nodes=[victim]),
        "partition_halves": F.Partition(grouping="halves"),
        "latency_one_link": F.Latency(src=[nodes[0]], dst=[nodes[1]], delay_ms=50, jitter_ms=0),
        "pause": F.Pause(nodes=[victim]),
    }
    results: dict[str, dict[str, Any]] = {}
    for name, op in ops.items():
        samples = []
        try:
            for _ in range(trials):
                samples.append(_timed_ms(lambda op=op: session.inject(op)))
                session.heal(op)
                time.sleep(SETTLE_S)
        except Exception as error:  # noqa: BLE001 - one op failing must not lose the others
            results[name] = {"error": f"{type(error).__name__}: {error}"[:300]}
            session.heal_all()
            continue
        results[name] = {**_summary(samples), "goal_ms": 50.0}
    crash_samples = []
    for _ in range(trials):
        crash_samples.append(_crash_effect_ms(session, victim))
        session.heal(F.Crash(nodes=[victim]))  # restarts it
        session.wait_until_steady(min_commit_step=-1, timeout_s=STEADY_TIMEOUT_S)
        time.sleep(SETTLE_S)
    results["crash"] = {**_summary(crash_samples), "goal_ms": 50.0}
    return results


def startup(
    backend: str,
    nodes: int,
    trials: int,
    seed: int,
    scratch: Path,
    *,
    hidden: list[int] | None = None,
    keep_session: bool = False,
):
    """Up → steady per trial; the last trial's session is returned open when asked."""
    samples_s: list[float] = []
    session: ClusterSession | None = None
    for trial in range(trials):
        run_dir = scratch / f"startup-{nodes}-{trial}"
        session = ClusterSession(backend, _spec(backend, nodes, run_dir, seed + trial, hidden))
        started = time.monotonic()
        try:
            session.up()
            session.wait_until_steady(min_commit_step=STEADY_STEP, timeout_s=STEADY_TIMEOUT_S)
            samples_s.append(time.monotonic() - started)
        except BaseException:
            session.down()
            raise
        if not (keep_session and trial == trials - 1):
            session.down()
            session = None
    return samples_s, session


def _loop_stalls_ms(run_dir: Path) -> list[float]:
    stalls = []
    for event in history.History.load(run_dir).events:
        if isinstance(event, history.LoopStall):
            stalls.append(event.stalled_ms)
    return stalls


def holds(
    backend: str, nodes: int, seed: int, scratch: Path, hidden: list[int] | None = None
) -> dict[str, Any]:
    """Whether the machine holds ``nodes`` real nodes: steady in time, then a clean
    fault-free hold (no false death, commits flowing, no long loop stall)."""
    from swarmshake.verify.checkers import check_history

    run_dir = scratch / f"capacity-{nodes}"
    session = ClusterSession(backend, _spec(backend, nodes, run_dir, seed, hidden))
    entry: dict[str, Any] = {"nodes": nodes}
    started = time.monotonic()
    try:
        session.up()
        session.wait_until_steady(min_commit_step=STEADY_STEP, timeout_s=STEADY_TIMEOUT_S)
        entry["steady_s"] = round(time.monotonic() - started, 2)
        session.mark("steady_state")
        session.poll()
        first = {n: s.last_commit_step for n, s in session.backend.events.summaries.items()}
        time.sleep(HOLD_S)
        session.poll()
        last = {n: s.last_commit_step for n, s in session.backend.events.summaries.items()}
        entry["steps_per_s"] = round(
            statistics.median(last[n] - first[n] for n in first) / HOLD_S, 1
        )
    except BackendError as error:
        entry.update(holds=False, reason=str(error)[:300])
        return entry
    finally:
        session.down()
    verdict = check_history(history.History.load(run_dir))
    stalls = _loop_stalls_ms(run_dir)
    entry["max_loop_stall_ms"] = round(max(stalls), 1) if stalls else 0.0
    failing = [p for p in ("S4", "L2") if verdict.results[p].status != "valid"]
    if failing:
        reason = "; ".join(f"{p}: {verdict.results[p].message}" for p in failing)
        entry.update(holds=False, reason=reason[:300])
    elif stalls and max(stalls) > STALL_LIMIT_MS:
        entry.update(holds=False, reason=f"control loop stalled {max(stalls):.0f} ms")
    else:
        entry["holds"] = True
    return entry


def capacity(
    backend: str, sizes: Iterable[int], seed: int, scratch: Path, hidden: list[int] | None = None
) -> dict[str, Any]:
    ramp = []
    held = 0
    for size in sizes:
        entry = holds(backend, size, seed, scratch, hidden)
        ramp.append(entry)
        if not entry.get("holds"):
            break
        held = size
    return {"holds_nodes": held, "ramp": ramp}


def run(
    backend: str,
    nodes: int,
    trials: int,
    capacity_sizes: list[int],
    seed: int,
    hidden: list[int] | None = None,
) -> dict[str, Any]:
    # The clusters' run directories (a few hundred MB each with checkpoints) are only
    # read for the figures: they go with the scratch folder, on success or failure.
    with tempfile.TemporaryDirectory(prefix="swarmshake-bench-harness-") as scratch:
        return _run_in(backend, nodes, trials, capacity_sizes, seed, Path(scratch), hidden)


def _run_in(
    backend: str,
    nodes: int,
    trials: int,
    capacity_sizes: list[int],
    seed: int,
    scratch: Path,
    hidden: list[int] | None,
) -> dict[str, Any]:
    samples_s, session = startup(
        backend, nodes, trials, seed, scratch, hidden=hidden, keep_session=True
    )
    assert session is not None
    goal_s = 5.0 if backend == "local" else 15.0
    result: dict[str, Any] = {
        "backend": backend,
        "nodes": nodes,
        "model_hidden": hidden or "node default",
        "up_to_steady_s": {
            **{
                k: v / 1000
                for k, v in _summary([s * 1000 for s in samples_s]).items()
                if k != "trials"
            },
            "trials": len(samples_s),
            "goal_s": goal_s,
        },
    }
    try:
        result["fault_call_to_effect_ms"] = fault_latencies(session, trials)
    finally:
        session.down()
    if capacity_sizes:
        result["capacity"] = capacity(backend, capacity_sizes, seed, scratch, hidden)
    return result
