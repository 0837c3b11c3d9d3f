"""The node's two shells (the runtime's drivers, the simulator's NodeApp) re-declare
none of the node core's knobs and make none of its decisions (issue 12).

An AST scan, so a shell that grows its own ``COLLECT_S = 1.0`` or asks the commit
core who leads a step fails here, not in a drift found months later."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from swarmshake.reference_node.protocol import detector, node_core

ROOT = Path(__file__).resolve().parents[3]
SHELLS = (
    "chaos/sim/app.py",
    "chaos/sim/engine.py",
    "reference_node/runtime/step_driver.py",
    "reference_node/runtime/detector_driver.py",
    "reference_node/runtime/membership_driver.py",
)
KNOBS = set(node_core.NodeConfig.__struct_fields__) | {
    f"checkpoint_{name}" for name in node_core.CheckpointConfig.__struct_fields__
}
# ... and the detector core's (the runtime's driver once had its own STALL_MIN_S).
KNOBS |= set(detector.DetectorConfig.__struct_fields__)
# Names the shells used before the node core owned them (each one a past drift).
RETIRED = {
    "records_kept",
    "retained_steps",
    "fetch_rounds_max",
    "ahead_steps_max",
    "rejoin_retry_s",
    "join_retry_s",
    "leave_retry_s",
    "fetch_retry_s",
    "contribution_wait_s",
    "round_timeout_s",
    "takeover_s",
    "checkpoint_every_steps",  # the simulator's own interval before Checkpointing
}
# Calls that decide who proposes, which records go, or whom to rejoin from: only the
# node core may make them.
DECIDING_CALLS = {"acting_coordinator", "coordinator", "rendezvous_order", "_proposer_rank"}
# ... and when to checkpoint: a shell that builds its own policy core decides it.
DECIDING_CALLS |= {"FixedInterval", "YoungDaly", "CheckpointSchedule"}
# ... and how a value's bytes are got: aggregate_pulls.AggregatePulls calls these (the
# shells once did, each with its own bookkeeping around them).
DECIDING_CALLS |= {"plan_aggregate", "fetch_source", "pulls_to_move_on", "pull_retry_at",
                   "rebuilds_now"}  # fmt: skip
# ... and the glue between the step's pieces: step_node.StepNode builds the leader,
# the proposer, the pulls, the apply and the held record, and feeds the commit core
# its node-side events (the shells each did, and each wrote the glue their own way).
STEP_PARTS = {"StepLeader", "Proposer", "AggregatePulls", "StepApply", "HeldAggregates",
              "step_began", "change_to_propose"}  # fmt: skip
STEP_PARTS |= {"ProposeValue", "HoldsAggregate", "Applied", "PeerAt", "ViewUpdated"}
DECIDING_CALLS |= STEP_PARTS
# ... and the state fetch's: state_transfer.StateTransfer builds the rejoin core and
# decides whom it asks, what an offer means, whether bytes wait, which configuration
# and which aggregates an install keeps, and when a failed fetch is retried.
TRANSFER_PARTS = {"Rejoin", "StateFetch", "rejoin_start", "rejoin_sources",
                  "offered_configuration", "state_bytes_wait", "aggregates_to_keep"}  # fmt: skip
DECIDING_CALLS |= TRANSFER_PARTS


def _tree(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(), filename=path)


def _numeric(node: ast.AST | None) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float)


def _declared_numbers(tree: ast.Module) -> list[tuple[str, int]]:
    """Module-level and class-level names bound to a number literal."""
    found = []
    bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for statement in body:
            if isinstance(statement, ast.Assign) and _numeric(statement.value):
                names = [t.id for t in statement.targets if isinstance(t, ast.Name)]
            elif isinstance(statement, ast.AnnAssign) and _numeric(statement.value):
                names = [statement.target.id] if isinstance(statement.target, ast.Name) else []
            else:
                continue
            found += [(name, statement.lineno) for name in names]
    return found


@pytest.mark.parametrize("path", SHELLS)
def test_a_shell_declares_none_of_the_node_cores_knobs(path):
    clashes = [
        f"{path}:{line} {name}"
        for name, line in _declared_numbers(_tree(path))
        if name.lower() in KNOBS | RETIRED
    ]
    where = "the cores' configs (NodeConfig, CheckpointConfig, DetectorConfig)"
    assert not clashes, f"defined in {where}, not here: {clashes}"


def _called(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of every call, ``mod.f(...)`` and a bare ``f(...)`` alike."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            found.append((name, node.lineno))
    return found


@pytest.mark.parametrize("path", SHELLS)
def test_a_shell_makes_none_of_the_node_cores_decisions(path):
    calls = [
        f"{path}:{line} {name}" for name, line in _called(_tree(path)) if name in DECIDING_CALLS
    ]
    assert not calls, f"a decision of protocol/node_core.py, made in a shell: {calls}"


def test_the_scan_sees_a_shell_building_its_own_checkpoint_policy():
    tree = ast.parse("p = FixedInterval(every_steps=10)\nq = cp.YoungDaly(prior_mtbf_s=1.0)\n")
    assert {name for name, _ in _called(tree)} & DECIDING_CALLS == {"FixedInterval", "YoungDaly"}


@pytest.mark.parametrize("path", SHELLS)
def test_every_commit_and_rejoin_core_a_shell_builds_gets_the_vote_floor(path):
    missing = [
        f"{path}:{node.lineno}"
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("StepCommit", "Rejoin")
        and "vote_floor" not in {k.arg for k in node.keywords}
    ]
    assert not missing, f"a commit or rejoin core built without the durable floor: {missing}"


def test_the_scan_sees_a_re_declared_knob():
    """The scan itself can fail: a shell that re-declares a knob is caught."""
    tree = ast.parse("COLLECT_S = 1.0\nclass A:\n    fetch_timeout_s: float = 0.5\n")
    names = {name.lower() for name, _ in _declared_numbers(tree)}
    assert {"collect_s", "fetch_timeout_s"} <= names & KNOBS


# State a shell kept while it decided joins and leaves itself (node_core.Enrolment now).
RETIRED_STATE = {"next_join_request", "next_leave_notice", "join_evidence", "join_started",
                 "leave_started", "leaving", "joining"}  # fmt: skip


def _assigned_attributes(tree: ast.Module) -> list[tuple[str, int]]:
    return [
        (target.attr, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    ]


@pytest.mark.parametrize("path", SHELLS)
def test_a_shell_keeps_no_join_or_leave_state_of_its_own(path):
    kept = [
        f"{path}:{line} self.{name}"
        for name, line in _assigned_attributes(_tree(path))
        if name in RETIRED_STATE
    ]
    assert not kept, f"join and leave are node_core.Enrolment's decisions: {kept}"


def test_the_scan_sees_a_shell_timing_its_own_join_requests():
    tree = ast.parse("class S:\n    def f(self):\n        self.next_join_request = 0.0\n")
    assert [name for name, _ in _assigned_attributes(tree)] == ["next_join_request"]


# State a shell kept while it ran aggregate pulls itself (aggregate_pulls.AggregatePulls
# now): the runtime's ``fetching`` and ``rebuilds``, the simulator's ``fetches``.
RETIRED_PULL_STATE = {"fetching", "fetches", "rebuilds"}
# ... and while it turned the leader's decision into a proposal (node_core.Proposer).
RETIRED_PULL_STATE |= {"proposed", "building", "building_first"}
# ... and while it decided when a committed value is applied (step_apply.StepApply).
RETIRED_PULL_STATE |= {"pending_apply", "applying"}
# ... and while each kept its own record of the values peers named, the contributions
# that arrived and the aggregates held (AggregatePulls.value_seen, the leader's
# ``arrived``, held_aggregates.HeldAggregates).
RETIRED_PULL_STATE |= {"values", "arrived", "held_aggregates"}
# ... and while each ran its state fetch itself (state_transfer.StateTransfer): the
# offered configurations, the bytes that waited for their offer, the fetch's state.
RETIRED_PULL_STATE |= {"offered_configs", "pending_staged", "pending_state", "fetch"}


@pytest.mark.parametrize("path", SHELLS)
def test_a_shell_keeps_no_pull_state_of_its_own(path):
    kept = [
        f"{path}:{line} self.{name}"
        for name, line in _assigned_attributes(_tree(path))
        if name in RETIRED_PULL_STATE
    ]
    where = "the node core's (StepNode, StateTransfer and their parts)"
    assert not kept, f"pulls and proposals are {where}: {kept}"


def test_the_scan_sees_a_shell_choosing_its_own_pull_source():
    tree = ast.parse("class S:\n    def f(self):\n        self.fetches = {}\n"
                     "        nc.fetch_source('n0', (), 0, ())\n")  # fmt: skip
    assert [name for name, _ in _assigned_attributes(tree)] == ["fetches"]
    assert {name for name, _ in _called(tree)} & DECIDING_CALLS == {"fetch_source"}


def test_the_scan_sees_a_shell_feeding_its_commit_core_itself():
    tree = ast.parse("class S:\n    def f(self):\n        self.core.handle(cm.Applied(step=1, "
                     "param_fp='x'), 0.0)\n        self.leader = nc.StepLeader(node='n0')\n")  # fmt: skip
    assert {name for name, _ in _called(tree)} & STEP_PARTS == {"Applied", "StepLeader"}
