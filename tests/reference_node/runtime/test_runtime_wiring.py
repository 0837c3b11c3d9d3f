"""Fast tests of the runtime wiring: event incarnation after a refute, the persisted
configuration history, the checkpoint schedule, replica storage, config checks."""

from __future__ import annotations

import asyncio

import pytest
import torch

from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.config import ConfigError, NodeConfig, StepSection, from_dict
from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.runtime import incarnation as incarnation_store
from swarmshake.reference_node.runtime import ipc
from swarmshake.reference_node.runtime.bulk import split
from swarmshake.reference_node.runtime.checkpoint_replication import (
    ReplicaError,
    ReplicaStore,
    install_as_own,
)
from swarmshake.reference_node.runtime.membership_driver import (
    ConfigHistory,
    Configuration,
    MembershipFileError,
    initial_configuration,
)
from swarmshake.reference_node.training.state import TrainingState

KEY = "00" * 16


def raw_config(tmp_path, **node) -> dict:
    return {
        "node": {"id": "n1", "members": ["n1", "n2", "n3"], "run_dir": str(tmp_path), **node},
        "network": {"run_key_hex": KEY},
        "peers": {
            p: {"host": "127.0.0.1", "control_port": 1, "bulk_port": 2} for p in ("n2", "n3")
        },
    }


def test_events_carry_the_incarnation_raised_by_a_refute(tmp_path):
    from swarmshake.reference_node.runtime.node import ControlProcess

    config = from_dict(raw_config(tmp_path))

    async def scenario() -> ControlProcess:
        control = ControlProcess(config, tmp_path / "node.toml", {})
        control.events.log(history.Ready)
        control._on_detector_action(det.Refuted(incarnation=7, suspected_by="n2", at=0.0))
        control.events.log(history.Stop, reason="test")
        control.events.close()
        return control

    control = asyncio.run(scenario())
    events = history.read_events(config.events_path).events
    assert [(type(e).__name__, e.incarnation) for e in events] == [("Ready", 1), ("Stop", 7)]
    assert control.status()["incarnation"] == 7
    assert incarnation_store.read(config.data_dir) == 7  # a restart comes back above it


def test_config_history_persists_and_answers_by_step(tmp_path):
    initial = initial_configuration(["n1", "n2", "n3", "n4"], "n4", join=True)
    assert initial == Configuration(step=-1, voters=("n1", "n2", "n3"))
    configs = ConfigHistory.load(tmp_path, initial)
    configs.record(Configuration(step=10, voters=("n1", "n2", "n3"), learners=("n4",)))
    configs.record(Configuration(step=14, voters=("n1", "n2", "n3", "n4")))
    configs.save()
    again = ConfigHistory.load(tmp_path, initial)
    assert again.latest().voters == ("n1", "n2", "n3", "n4")
    assert again.after(9) == initial  # a change at step c governs the steps after c
    assert again.after(10).learners == ("n4",)
    assert again.after(13).learners == ("n4",) and again.after(14).learners == ()
    # A state installed from a peer replaces everything newer than its configuration.
    again.record(Configuration(step=12, voters=("n1", "n2")))
    again.save()
    assert ConfigHistory.load(tmp_path, initial).latest().voters == ("n1", "n2")
    (tmp_path / "membership.json").write_text("{not json")
    with pytest.raises(MembershipFileError, match="delete it"):
        ConfigHistory.load(tmp_path, initial)


def _checkpointing(section: StepSection) -> nc.Checkpointing:
    """The node core's checkpoint decider as the runtime builds it from node.toml."""
    return nc.Checkpointing(section.checkpointing(), 0.0, restarted=False)


def test_fixed_schedule_every_n_steps_and_off():
    schedule = _checkpointing(StepSection(checkpoint_every=5))
    due = [s for s in range(1, 16) if schedule.committed(s, float(s)) is not None]
    assert due == [5, 10, 15]
    off = _checkpointing(StepSection(checkpoint_every=0))
    assert all(off.committed(s, float(s)) is None for s in range(1, 20))
    assert nc.Checkpointing(nc.CHECKPOINT_DEFAULTS, 0.0, restarted=True).failures_observed == 1


def test_young_daly_schedule_checkpoints_more_often_after_failures():
    section = StepSection(
        checkpoint_policy="young-daly",
        checkpoint_prior_mtbf_s=3600.0,
        checkpoint_min_interval_s=1.0,
        checkpoint_max_interval_s=3600.0,
    )

    def writes(failures: int) -> int:
        schedule = _checkpointing(section)
        for _ in range(failures):
            schedule.failure(0.0)
        count = 0
        for step in range(1, 601):  # one step a second for ten minutes, writes cost 1 s
            now = float(step)
            if schedule.committed(step, now) is not None:
                schedule.done(now + 1.0)
                count += 1
        return count

    # sqrt(2 * 1 s * (3600 s + uptime)) = 85-97 s without failures: ~6 writes; 99
    # failures: MTBF = (3600 s + uptime) / 100 ~ 40 s, every ~9 s: ~60 writes.
    assert 5 <= writes(0) <= 7
    assert writes(99) >= 5 * writes(0)


def small_state(step: int) -> TrainingState:
    generator = torch.Generator().manual_seed(step)
    params = torch.randn(100, generator=generator)
    return TrainingState(
        step=step,
        params=params,
        optimizer="adam",
        buffers={"exp_avg": torch.zeros(100), "exp_avg_sq": torch.zeros(100)},
        update_count=step,
    )


def test_replica_store_verifies_stores_atomically_and_prunes(tmp_path):
    store = ReplicaStore(tmp_path / "holder", parameter_count=100)
    for step in (3, 6, 9):
        info = checkpoint.write_checkpoint(tmp_path / "origin", small_state(step), node="n1")
        data = None
        for chunk in split("replica", step, info.param_fp, checkpoint.file_chunks(info.path, 700)):
            data = store.feed("n1", chunk)
        assert data is not None
        path, header = store.store("n1", data)
        assert path.read_bytes() == info.path.read_bytes() and header.step == step
    assert [s for s, _ in checkpoint.list_checkpoints(store.folder("n1"))] == [9, 6]
    assert store.newest("n1").name == "ckpt-000000000009.swck"
    assert not list(store.folder("n1").glob(".*tmp*"))
    # A corrupted stream is never stored; nor a checkpoint claimed for another node.
    corrupt = bytearray(info.path.read_bytes())
    corrupt[-3] ^= 1
    with pytest.raises(ReplicaError, match="checksum"):
        store.store("n1", corrupt)
    with pytest.raises(ReplicaError, match="sent as"):
        store.store("n2", info.path.read_bytes())
    assert [s for s, _ in checkpoint.list_checkpoints(store.folder("n1"))] == [9, 6]
    # Out-of-order chunks and oversized streams are refused with a reason.
    chunks = list(split("replica", 9, "", checkpoint.file_chunks(info.path, 700)))
    with pytest.raises(ReplicaError, match="out_of_order"):
        store.feed("n1", chunks[1])
    # The origin gets it back as its own checkpoint, which then loads.
    own = install_as_own(tmp_path / "own", info.path.read_bytes(), 3 * 4 * 100)
    assert checkpoint.load_latest(tmp_path / "own").path == own


@pytest.mark.parametrize(
    ("node", "step", "message"),
    [
        ({"join": True, "members": ["n1"]}, {}, "join = true needs"),
        ({}, {"checkpoint_replicas": 3}, "checkpoint_replicas=3"),
        ({}, {"checkpoint_every": -1}, "checkpoint_every=-1"),
        ({}, {"checkpoint_min_interval_s": 9.0, "checkpoint_max_interval_s": 5.0}, "exceed"),
        ({}, {"checkpoint_policy": "daily"}, "checkpoint_policy"),
        ({"leave_timeout_s": 0}, {}, "leave_timeout_s=0"),
    ],
)
def test_bad_membership_and_checkpoint_settings_are_named(tmp_path, node, step, message):
    raw = raw_config(tmp_path, **node)
    if node.get("members") == ["n1"]:
        raw["peers"] = {}
    raw["step"] = step
    with pytest.raises(ConfigError, match=message):
        from_dict(raw)


def test_defaults_are_valid(tmp_path):
    config = from_dict(raw_config(tmp_path))
    assert isinstance(config, NodeConfig)
    assert config.step.checkpoint_replicas == -1 and not config.node.join


def test_a_removed_peers_heartbeats_are_answered_with_its_removal(tmp_path):
    """n3 left at step 4 but, restarted before it saw that step, heartbeats n1 as a
    member: n1's detector refuses the heartbeat (a non-member's) and the control
    process answers with ``LeaveConfirmed(4)``, at most once per
    ``removal_answer_interval_s`` -- before any worker exists (no step driver yet)."""
    from swarmshake.reference_node.protocol import messages as msgs
    from swarmshake.reference_node.runtime.frames import Channel, Frame, FrameHeader
    from swarmshake.reference_node.runtime.node import ControlProcess

    config = from_dict(raw_config(tmp_path))
    initial = initial_configuration(["n1", "n2", "n3"], "n1", join=False)
    history_ = ConfigHistory.load(config.data_dir, initial)
    history_.record(Configuration(step=4, voters=("n1", "n2")))
    history_.save()

    def heartbeat(seq: int) -> Frame:
        payload = msgs.encode_message(msgs.Heartbeat(sender="n3", incarnation=2, seq=seq))
        header = FrameHeader(Channel.CONTROL, "n3", 2, seq, len(payload))
        return Frame(header=header, payload=payload)

    async def scenario() -> list:
        control = ControlProcess(config, tmp_path / "node.toml", {})
        sent: list = []  # the links record (no sockets here): every frame sent, decoded

        def send_nowait(peer: str, payload: bytes, **_: object) -> None:
            sent.append((peer, msgs.decode_message(bytes(payload))))

        control.links.send_nowait = send_nowait
        control.start_detector()
        assert control.step_driver is None
        for seq in range(3):  # within one interval: one answer
            control.on_control_frame(heartbeat(seq))
        control.events.close()
        return sent

    sent = asyncio.run(scenario())
    answers = [(p, m) for p, m in sent if isinstance(m, msgs.LeaveConfirmed)]
    assert answers == [("n3", msgs.LeaveConfirmed(sender="n1", step=4))]
    assert all(p != "n3" for p, m in sent if not isinstance(m, msgs.LeaveConfirmed))


def test_a_dead_peers_heartbeats_reach_the_detector_core_which_tells_it(tmp_path):
    """b was declared dead here (cut off: its heartbeats stopped) and heartbeats again
    at the same incarnation: the detector core answers it with its death, rate-limited,
    so it restarts.  The driver used to drop every heartbeat from a peer it does not
    watch before the core saw it (a dead peer is watched no more), while the simulator
    hands them to the core: the runtime never told a cut-off node it was dead."""
    from swarmshake.reference_node.protocol.messages import Gossip, Heartbeat
    from swarmshake.reference_node.runtime.clock import NodeClock
    from swarmshake.reference_node.runtime.detector_driver import DetectorDriver
    from swarmshake.reference_node.runtime.events import EventLog

    config = det.DetectorConfig(
        heartbeat_interval_s=0.01,
        suspicion_floor_s=0.05,
        startup_grace_s=0.05,
        suspicion_timeout_s=0.2,
    )
    host = [0.0]
    core = det.FailureDetector(node="a", members=("a", "b", "c"), seed=1, config=config)
    sent: list = []
    driver = DetectorDriver(
        core,
        clock=NodeClock(host=lambda: host[0]),
        events=EventLog(tmp_path / "a.jsonl", "a", 1),
        send=lambda peer, message: sent.append((peer, message)),
        send_heartbeat=lambda peer, message: None,
    )

    def run_until(until: float, senders: tuple[str, ...]) -> None:
        while host[0] < until:
            host[0] = round(host[0] + 0.01, 6)
            for sender in senders:
                driver.on_heartbeat(Heartbeat(sender=sender, incarnation=0, seq=1))
            deadline = core.next_deadline()
            if deadline is not None and deadline <= driver.clock.now():
                driver.apply(core.handle(det.Tick(), driver.clock.now()))

    driver.start()
    run_until(0.2, ("b", "c"))
    run_until(2.0, ("c",))  # b is cut off
    assert core.status["b"] == "dead"
    sent.clear()
    run_until(2.2, ("b", "c"))  # b's heartbeats come through again
    told_b = [m for peer, m in sent if peer == "b" and isinstance(m, Gossip)]
    assert told_b and any(item.subject == "b" for m in told_b for item in m.items)
    assert len(told_b) <= 0.2 / config.dead_notice_gap_s + 1  # rate-limited


def test_the_step_leader_waits_for_the_aggregation_rules_fewest_contributions(tmp_path):
    """The median with f = 1 aggregates no fewer than 3 gradients: the node's leader
    is built with that minimum (a node.toml may ask for more, never for less)."""
    from swarmshake.reference_node.runtime.node import ControlProcess
    from swarmshake.reference_node.runtime.step_driver import StepDriver

    raw = raw_config(tmp_path)
    raw["training"] = {"aggregation": "median", "byzantine_f": 1}
    config = from_dict(raw)
    assert config.decisions().min_contributors == 3
    control = ControlProcess(config, tmp_path / "node.toml", {})
    control.worker_ready = ipc.WorkerReady(
        step=0, param_fp="", bulk_port=0, worker_pid=0, source="initial",
        torch_version="", threads=1, cpu_flags="",
    )  # fmt: skip
    assert StepDriver(control).step_node.leader.config.min_contributors == 3
    control.events.close()
    raw["step"] = {"node": {"min_contributors": 4}}
    assert from_dict(raw).decisions().min_contributors == 4
    assert from_dict(raw_config(tmp_path)).decisions() == nc.NODE_DEFAULTS  # the mean: 1
    # Sharded contributions: the leader leaves dead contributors out; Krum stays
    # all-to-all (protocol.sharding), so its leader keeps them.
    raw["training"] = {"aggregation": "median", "aggregation_path": "sharded"}
    assert from_dict(raw).decisions().sharded_contributions
    raw["training"] = {"aggregation": "krum", "byzantine_f": 0, "aggregation_path": "sharded"}
    assert not from_dict(raw).decisions().sharded_contributions


def test_both_node_core_parts_see_each_durable_acceptor_record(tmp_path):
    """The acceptor store replaces its accepted-value mapping on every write; the step
    node (an apply's kept aggregates) and the state fetch (an install's) must both be
    handed the new one, or an install prunes bytes a record still pins."""
    import concurrent.futures

    from swarmshake.reference_node.protocol import commit as cm
    from swarmshake.reference_node.protocol.messages import StepValue
    from swarmshake.reference_node.runtime.node import ControlProcess
    from swarmshake.reference_node.runtime.step_driver import StepDriver

    control = ControlProcess(from_dict(raw_config(tmp_path)), tmp_path / "node.toml", {})
    control.worker_ready = ipc.WorkerReady(
        step=0, param_fp="", bulk_port=0, worker_pid=0, source="initial",
        torch_version="", threads=1, cpu_flags="",
    )  # fmt: skip
    driver = StepDriver(control)
    value = StepValue(agg_fp="ab" * 8, contributors=[driver.name])
    record = cm.AcceptorRecord(
        step=0, promised=(1, 0), accepted_ballot=(1, 0), accepted_value=value
    )
    driver.store.write(record)  # the persistence thread's write
    done: concurrent.futures.Future = concurrent.futures.Future()
    done.set_result(None)
    driver._persisting = True
    driver._persisted(done, [], driver._generation)  # back on the control loop
    assert driver.step_node.accepted == driver.transfer.accepted == {0: "ab" * 8}
    control.events.close()
