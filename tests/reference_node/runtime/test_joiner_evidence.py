"""A joiner takes every member's unflagged heartbeat for evidence of its add, also
once its detector runs: when its fetch from the first member that showed the add
fails (that member crashed), the next comes from another (node_core.Enrolment;
explore --leaves, 4 nodes, seed 6, where the simulator found it)."""

from __future__ import annotations

from swarmshake.reference_node.config import from_dict
from swarmshake.reference_node.protocol import messages as msgs
from swarmshake.reference_node.runtime import ipc
from swarmshake.reference_node.runtime.frames import Channel, Frame, FrameHeader
from swarmshake.reference_node.runtime.node import ControlProcess
from swarmshake.reference_node.runtime.step_driver import StepDriver

KEY = "00" * 16


def _heartbeat(sender: str, seq: int, *, stranger: bool = False) -> Frame:
    message = msgs.Heartbeat(sender=sender, incarnation=1, seq=seq, stranger=stranger)
    payload = msgs.encode_message(message)
    header = FrameHeader(Channel.CONTROL, sender, 1, seq, len(payload))
    return Frame(header=header, payload=payload)


def test_a_joiner_with_a_running_detector_takes_members_heartbeats_for_evidence(tmp_path):
    peers = {p: {"host": "127.0.0.1", "control_port": 1, "bulk_port": 2} for p in ("n0", "n2")}
    config = from_dict(
        {
            "node": {
                "id": "n1",
                "members": ["n0", "n1", "n2"],
                "join": True,
                "run_dir": str(tmp_path),
            },  # fmt: skip
            "network": {"run_key_hex": KEY},
            "peers": peers,
        }
    )
    control = ControlProcess(config, tmp_path / "node.toml", {})
    control.links.send_nowait = lambda peer, payload, **_: True
    control.worker_ready = ipc.WorkerReady(
        step=0, param_fp="", bulk_port=0, worker_pid=0, source="initial",
        torch_version="", threads=1, cpu_flags="",
    )  # fmt: skip
    control.step_driver = StepDriver(control)
    enrolment = control.step_driver.enrolment
    assert enrolment.joining and not control.detector_started
    control.on_control_frame(_heartbeat("n2", 1))  # the first evidence starts the detector
    assert control.detector_started and enrolment.evidence_from == "n2"
    enrolment.evidence_from = None  # taken: the fetch from n2 began (and failed)
    control.on_control_frame(_heartbeat("n0", 1, stranger=True))
    assert enrolment.evidence_from is None  # a stranger's heartbeat shows no add
    control.on_control_frame(_heartbeat("n0", 2))
    assert enrolment.evidence_from == "n0"
    control.events.close()
