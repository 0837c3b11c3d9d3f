"""The runtime answers a refused non-member as the simulator does: it heartbeats it,
flagged as a stranger -- a member added in a configuration this node has not learnt
yet (detector docstring, "Strangers"; ``node_core.heartbeats_stranger``) -- and a
node it removed is also told so (``LeaveConfirmed``)."""

from __future__ import annotations

import asyncio

from swarmshake.reference_node.config import from_dict
from swarmshake.reference_node.protocol import messages as msgs
from swarmshake.reference_node.protocol.membership import Configuration, initial_configuration
from swarmshake.reference_node.runtime.frames import Channel, Frame, FrameHeader
from swarmshake.reference_node.runtime.membership_driver import ConfigHistory
from swarmshake.reference_node.runtime.node import ControlProcess

KEY = "00" * 16


def _heartbeat(sender: str, seq: int) -> Frame:
    payload = msgs.encode_message(msgs.Heartbeat(sender=sender, incarnation=2, seq=seq))
    header = FrameHeader(Channel.CONTROL, sender, 2, seq, len(payload))
    return Frame(header=header, payload=payload)


def test_refused_non_members_are_heartbeated_as_strangers_and_the_removed_told(tmp_path):
    """n1 removed n3 at step 4 (it may have been added again since) and never heard of
    n9 (added, say, while n1 was down): both are refused and heartbeated, flagged; n3
    is also told its removal."""
    peers = {p: {"host": "127.0.0.1", "control_port": 1, "bulk_port": 2} for p in ("n2", "n3")}
    config = from_dict(
        {
            "node": {"id": "n1", "members": ["n1", "n2", "n3"], "run_dir": str(tmp_path)},
            "network": {"run_key_hex": KEY},
            "peers": peers,
        }
    )
    history_ = ConfigHistory.load(
        config.data_dir, initial_configuration(["n1", "n2", "n3"], "n1", join=False)
    )
    history_.record(Configuration(step=4, voters=("n1", "n2")))
    history_.save()

    async def scenario() -> tuple[tuple[str, ...], list]:
        control = ControlProcess(config, tmp_path / "node.toml", {})
        sent: list = []
        control.links.send_nowait = lambda peer, payload, **_: sent.append(
            (peer, msgs.decode_message(bytes(payload)))
        )
        control.start_detector()
        control.on_control_frame(_heartbeat("n3", 1))
        control.on_control_frame(_heartbeat("n9", 1))
        plan = control.detector.plan
        beats = asyncio.create_task(control.detector.heartbeat_loop())
        await asyncio.sleep(0.12)  # a few heartbeat intervals
        beats.cancel()
        control.events.close()
        return plan.to, sent

    targets, sent = asyncio.run(scenario())
    assert {"n3", "n9"} <= set(targets)
    assert ("n3", msgs.LeaveConfirmed(sender="n1", step=4)) in sent
    assert not any(isinstance(m, msgs.LeaveConfirmed) for p, m in sent if p == "n9")
    # Heartbeats to the stranger say so (no joiner takes them for its add); to members not.
    beats = {(p, m.stranger) for p, m in sent if isinstance(m, msgs.Heartbeat)}
    assert {("n9", True), ("n3", True), ("n2", False)} <= beats
    assert not {("n9", False), ("n3", False), ("n2", True)} & beats
