"""The detector driver's local-health grace: after this node's own loop stalled,
its timers wait as long again before judging peers (Lifeguard's idea), capped."""

from __future__ import annotations

import asyncio
import time

from swarmshake.reference_node.protocol import detector as det
from swarmshake.reference_node.protocol.messages import Heartbeat
from swarmshake.reference_node.runtime.clock import NodeClock
from swarmshake.reference_node.runtime.detector_driver import DetectorDriver
from swarmshake.reference_node.runtime.events import EventLog

CONFIG = det.DetectorConfig(
    heartbeat_interval_s=0.01,
    suspicion_floor_s=0.05,
    startup_grace_s=0.05,
    suspicion_timeout_s=5.0,
)


def driver_for(tmp_path, stall_probe=None, members=("a", "b")) -> tuple[DetectorDriver, list]:
    actions: list = []
    core = det.FailureDetector(node="a", members=members, seed=1, config=CONFIG)
    driver = DetectorDriver(
        core,
        clock=NodeClock(),
        events=EventLog(tmp_path / "a.jsonl", "a", 1),
        send=lambda peer, message: None,
        send_heartbeat=lambda peer, message: None,
        on_action=actions.append,
        stall_probe=stall_probe,
    )
    return driver, actions


def first_suspicion_after(driver: DetectorDriver, actions: list, stall_s: float) -> float:
    async def scenario() -> float:
        driver.start()
        timer = asyncio.create_task(driver.timer_loop())
        driver.on_heartbeat(Heartbeat(sender="b", incarnation=0, seq=1))
        silent_since = time.monotonic()
        if stall_s:
            driver.local_stall(stall_s)
        try:
            while not any(isinstance(a, det.Suspected) for a in actions):
                assert time.monotonic() - silent_since < 5.0, "never suspected"
                await asyncio.sleep(0.005)
            return time.monotonic() - silent_since
        finally:
            timer.cancel()

    return asyncio.run(scenario())


def test_a_silent_peer_is_suspected_after_the_floor(tmp_path):
    driver, actions = driver_for(tmp_path)
    assert first_suspicion_after(driver, actions, 0.0) < 0.3


def test_after_a_local_stall_judging_waits_as_long_again(tmp_path):
    driver, actions = driver_for(tmp_path)
    waited = first_suspicion_after(driver, actions, 0.4)
    assert waited >= 0.4  # held for the stall's length ...
    assert driver.stall_holds == 1


def test_the_hold_is_capped(tmp_path):
    driver, actions = driver_for(tmp_path)
    waited = first_suspicion_after(driver, actions, 30.0)
    cap_s = CONFIG.stall_grace_max_s
    assert cap_s <= waited < cap_s + 1.0  # ... but never for long


def test_an_arrival_read_before_the_watchdog_wakes_does_not_judge_the_stall(tmp_path):
    """Regression (gray suite, every run): n3 woke from a 4 s pause, its reader took a
    queued heartbeat of one peer before the watchdog ran, and the core fired the other
    peers' watches and suspicion timeouts that fell due during the pause: n3 declared
    all three peers dead at once.  The driver now asks the watchdog how late it is
    before an arrival reaches the core, and tells the core (LocalStall) first."""
    late = {"s": 0.0}
    driver, actions = driver_for(tmp_path, lambda: late["s"], members=("a", "b", "c"))
    driver.start()
    driver.on_heartbeat(Heartbeat(sender="b", incarnation=0, seq=1))
    driver.on_heartbeat(Heartbeat(sender="c", incarnation=0, seq=1))
    time.sleep(0.6)  # "paused": c's watch and its suspicion timeout both fall due
    late["s"] = 0.6
    driver.on_heartbeat(Heartbeat(sender="b", incarnation=0, seq=2))
    judged = [a for a in actions if isinstance(a, det.Suspected | det.DeclaredDead)]
    assert judged == [], judged


def test_without_the_stall_the_same_arrival_judges_the_silent_peer(tmp_path):
    """The control: told of no stall, the same arrival fires the watches that fell due
    (the first in time order, b's, is judged before b's own late heartbeat counts)."""
    driver, actions = driver_for(tmp_path, lambda: 0.0, members=("a", "b", "c"))
    driver.start()
    driver.on_heartbeat(Heartbeat(sender="b", incarnation=0, seq=1))
    driver.on_heartbeat(Heartbeat(sender="c", incarnation=0, seq=1))
    time.sleep(0.6)
    driver.on_heartbeat(Heartbeat(sender="b", incarnation=0, seq=2))
    assert any(isinstance(a, det.Suspected) for a in actions), actions
