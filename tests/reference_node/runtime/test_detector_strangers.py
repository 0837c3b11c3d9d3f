"""The runtime's detector driver reports a stranger's refused heartbeat to the core,
as the simulator does: the node heartbeats a member it does not know yet (detector
docstring, "Strangers"), and the refusal still reaches the control process."""

from __future__ import annotations

import pytest

from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol.errors import RemoteProtocolError
from swarmshake.reference_node.protocol.messages import Heartbeat
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.detector_driver import DetectorDriver
from swarmshake.reference_node.runtime.events import EventLog


def test_a_strangers_heartbeat_is_refused_and_the_stranger_heartbeated(tmp_path):
    core = det.FailureDetector(node="a", members=("a", "b"), seed=1)
    driver = DetectorDriver(
        core,
        clock=NodeClock(),
        events=EventLog(tmp_path / "a.jsonl", "a", 1),
        send=lambda peer, message: None,
        send_heartbeat=lambda peer, message: None,
    )
    driver.start()
    assert driver.plan is not None and driver.plan.to == ("b",)
    with pytest.raises(RemoteProtocolError):  # the control process counts and answers it
        driver.on_heartbeat(Heartbeat(sender="c", incarnation=2, seq=1))
    assert driver.plan.to == ("b", "c")
    assert "c" not in core.targets  # heartbeated, not watched
    driver.on_heartbeat(Heartbeat(sender="b", incarnation=1, seq=1))  # a member's: no change
    assert driver.plan.to == ("b", "c")
    core.check_valid()
