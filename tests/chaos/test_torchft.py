"""torchft as a system: options, the launch, the worker's config and its history recorder."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmshake.chaos.backends.base import ClusterSpec
from swarmshake.chaos.systems import NodeContext, SystemConfigError, known_systems, load_system
from swarmshake.chaos.systems.torchft import TorchFTSystem
from swarmshake.chaos.systems.torchft_worker import (
    Recorder,
    WorkerConfig,
    WorkerConfigError,
    replica_name,
)
from swarmshake.verify.history import (
    Collective,
    EventWriter,
    MembershipChange,
    RejoinDone,
    StepCommitted,
    read_events,
    step_commits,
)


def context(system, tmp_path: Path) -> NodeContext:
    spec = ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=("n1", "n2", "n3"))
    return NodeContext(
        spec=spec, name="n2", index=1, address="10.213.0.11", ports={}, peers={},
        addresses={}, services={"lighthouse": ("10.213.0.1", 29510)}, run_dir=tmp_path,
        python="/venv/python",
    )  # fmt: skip


def test_torchft_is_found_by_name_and_checks_its_options():
    assert known_systems()["torchft"].endswith(":TorchFTSystem")
    assert isinstance(load_system("torchft"), TorchFTSystem)
    with pytest.raises(SystemConfigError, match="unknown option"):
        load_system("torchft", {"timeout": 3})
    with pytest.raises(SystemConfigError, match="timeout_s"):
        load_system("torchft", {"timeout_s": 0})
    with pytest.raises(SystemConfigError, match="ddp"):
        load_system("torchft", {"ddp": "yes"})
    with pytest.raises(SystemConfigError, match="not a number"):
        load_system("torchft", {"lr": "fast"})


def test_launch_runs_the_worker_against_the_external_lighthouse(tmp_path):
    system = TorchFTSystem({"timeout_s": 5, "ddp": True})
    launch = system.launch(context(system, tmp_path))
    assert launch.argv == ("/venv/python", "-m", "swarmshake.chaos.systems.torchft_worker")
    env = launch.env
    assert env["SWARMSHAKE_LIGHTHOUSE"] == "http://10.213.0.1:29510"
    assert env["SWARMSHAKE_ADDRESS"] == "10.213.0.11" and env["GLOO_SOCKET_IFNAME"] != "lo"
    assert env["SWARMSHAKE_MIN_REPLICAS"] == "2"  # one fewer than the cluster
    assert env["SWARMSHAKE_TIMEOUT_S"] == "5.0" and env["SWARMSHAKE_TFT_DDP"] == "1"
    (service,) = system.services(context(system, tmp_path).spec)
    argv = service.launch("10.213.0.1", 29510).argv
    assert service.name == "lighthouse" and "--bind=10.213.0.1:29510" in argv
    assert "--min_replicas=2" in argv
    # The worker's own validation accepts exactly what the system sets.
    assert WorkerConfig.from_env(env).min_replicas == 2


GOOD = {
    "SWARMSHAKE_NODE": "n3", "SWARMSHAKE_ADDRESS": "127.0.0.1",
    "SWARMSHAKE_LIGHTHOUSE": "http://127.0.0.1:29510", "SWARMSHAKE_EVENTS": "/tmp/e.jsonl",
}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SWARMSHAKE_NODE": "alpha"}, "end in digits"),
        ({"SWARMSHAKE_LIGHTHOUSE": "127.0.0.1:29510"}, "http://"),
        ({"SWARMSHAKE_TIMEOUT_S": "0"}, "out of range"),
        ({"SWARMSHAKE_LR": "fast"}, "not a number"),
        ({"SWARMSHAKE_HIDDEN": "0"}, "HIDDEN"),
        ({"SWARMSHAKE_TFT_DDP": "yes"}, "0 or 1"),
        ({"SWARMSHAKE_EVENTS": ""}, "SWARMSHAKE_EVENTS is not set"),
    ],
)
def test_worker_config_refuses_bad_settings(change, message):
    with pytest.raises(WorkerConfigError, match=message):
        WorkerConfig.from_env({**GOOD, **change})


def test_worker_config_defaults_are_torchfts():
    cfg = WorkerConfig.from_env(GOOD)
    assert (cfg.timeout_s, cfg.quorum_timeout_s, cfg.ddp, cfg.hidden) == (
        60.0,
        60.0,
        False,
        (64, 64),
    )


def test_recorder_writes_the_neutral_history_the_checkers_read(tmp_path):
    path = tmp_path / "events" / "n2.jsonl"
    recorder = Recorder(EventWriter(str(path)), "n2", incarnation=2)
    recorder.start(seed=1)
    with pytest.raises(RuntimeError, match="before any quorum"):
        recorder.committed(0, "fp0", 1.0)
    recorder.quorum(0, 7, ["n2:aaa", "n1:bbb"])
    recorder.quorum(0, 7, ["n1:bbb", "n2:aaa"])  # the same quorum: no second record
    recorder.healed(0, 12, "peer", "fp12")
    recorder.collective(12)
    recorder.committed(12, "fp13", 0.5)
    recorder.quorum(13, 8, ["n1:bbb", "n2:aaa", "n3:ccc"])
    recorder.committed(13, "fp14", None)
    recorder.stop(14, "sigterm")
    events = read_events(path).events
    assert (
        len(events) == 9
    )  # start, membership, rejoin begin+done, collective, 2 commits, membership, stop
    memberships = [e for e in events if isinstance(e, MembershipChange)]
    assert [(m.quorum_id, m.members) for m in memberships] == [
        ("7", ["n1", "n2"]), ("8", ["n1", "n2", "n3"])
    ]  # fmt: skip
    (done,) = [e for e in events if isinstance(e, RejoinDone)]
    assert (done.step, done.param_fp) == (12, "fp12")
    (collective,) = [e for e in events if isinstance(e, Collective)]
    assert collective.step == 12 and collective.op == "allreduce"
    commits = [e for e in events if isinstance(e, StepCommitted)]
    assert [(c.step, c.participants, c.quorum_id) for c in commits] == [
        (12, ["n1", "n2"], "7"), (13, ["n1", "n2", "n3"], "8")
    ]  # fmt: skip
    assert all(e.incarnation == 2 and e.node == "n2" for e in events)
    assert [e.lamport for e in events] == sorted(e.lamport for e in events)
    views = list(step_commits(read_events(path)))
    assert [(v.step, v.param_fp) for v in views] == [(12, "fp13"), (13, "fp14")]


def test_replica_name_strips_torchfts_uuid():
    assert replica_name("n12:3f0c-11") == "n12" and replica_name("n4") == "n4"


CRASH_SCENARIO = """\
name: torchft-crash
seed: 3
system: torchft
system_options: {step_interval_s: 0.2, join_timeout_ms: 5000}
cluster: {nodes: 3, model: tiny}
steady_state: {min_commit_step: 3, timeout_s: 120}
duration_s: 40
quiesce_s: 20
faults:
  - at_s: 2
    op: {op: crash, nodes: [n3]}
    heal_after_s: 8
bounds: {detection_s: 20, recovery_s: 70, rejoin_s: 60}
"""


@pytest.mark.slow
def test_a_crash_on_three_replica_groups_is_judged_by_the_neutral_checkers(tmp_path):
    """Real torchft (3 replica groups, gloo, a Lighthouse) with one group crashed and
    restarted: the run is judged, not skipped: S1 over the quorums' fingerprints and
    L1-L3 each come out valid or invalid with a message, never unknown."""
    import json
    import subprocess
    import sys

    from swarmshake.chaos.systems.torchft import TorchFTSystem

    if problems := TorchFTSystem().check():
        pytest.skip("; ".join(problems))
    suite = tmp_path / "crash.yaml"
    suite.write_text(CRASH_SCENARIO)
    done = subprocess.run(
        [sys.executable, "-m", "swarmshake.chaos.cli", "run", str(suite), "--out",
         str(tmp_path / "runs"), "--json", "--quiet"],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    result = json.loads(done.stdout)
    verdict = json.loads((Path(result["run_dir"]) / "verdict.json").read_text())
    statuses = {name: r["status"] for name, r in verdict["results"].items()}
    messages = {name: r["message"] for name, r in verdict["results"].items()}
    shown = json.dumps(messages, indent=1)  # whole, not pytest's truncated repr
    assert all(statuses[p] in ("valid", "invalid") for p in ("S1", "L2", "L3")), shown
    # L1 as on Docker (test_docker_systems.py): unknown only when the crashed group was
    # back before torchft logged a quorum without it (torchft timing; 1 of 5 crash
    # trials side by side in session 5, and once in a session-7 CI check here, where
    # pytest's repr cut off which property it was).  Unknown for any other reason fails.
    assert statuses["L1"] in ("valid", "invalid") or (
        "no crash lasted long enough (D) or was followed by a new group" in messages["L1"]
    ), shown
    assert statuses["S1"] == "valid", shown  # participants of a step agree
    assert {p.stem for p in (Path(result["run_dir"]) / "events").glob("*.jsonl")} >= {
        "n1", "n2", "n3"
    }  # fmt: skip


def test_the_allreduce_kill_suite_triggers_on_the_workloads_collective_event():
    """A trigger may name a neutral kind (``collective``), not only the reference node's."""
    from swarmshake.chaos import scenario

    suite = Path(__file__).parents[2] / "suites" / "torchft-allreduce-kill.yaml"
    (entry,) = scenario.load(suite).faults
    assert entry.when is not None and (entry.when.kind, entry.when.node) == ("collective", "n3")
    with pytest.raises(scenario.ScenarioError, match="not an event kind"):
        scenario.loads(suite.read_text().replace("kind: collective", "kind: allreduce_start"))


def test_recorder_writes_node_error_with_the_exception_and_where_it_was_raised(tmp_path):
    from swarmshake.verify.history import NodeError

    path = tmp_path / "events" / "n1.jsonl"
    recorder = Recorder(EventWriter(str(path)), "n1")
    try:
        raise AssertionError  # what torchft/ddp.py:76's bare ``assert fut._fut`` raises
    except AssertionError as error:
        recorder.error(16, error)
    try:
        raise RuntimeError("Connection reset by peer\n  (gloo)" + "x" * 2000)
    except RuntimeError as error:
        recorder.error(17, error)
    first, second = read_events(path).events
    assert isinstance(first, NodeError) and first.step == 16
    assert first.error == "AssertionError"
    assert first.where.endswith(f"test_torchft.py:{first.where.rsplit(':', 1)[1]}")
    assert second.error.startswith("RuntimeError: Connection reset by peer (gloo)")
    assert "\n" not in second.error and len(second.error) == 500
