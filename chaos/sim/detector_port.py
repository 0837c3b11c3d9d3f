"""How the simulator reads the failure-detector core beyond its ``handle`` contract.

The detector offers ``next_deadline()`` — the earliest of *all* its timers, watch
deadlines included.  For a heartbeat stream the simulator holds lazily the watch
deadline is only ever pushed forward by arrivals the simulator has not delivered
yet, so waking the node at it would cost a wake-up per ~100 ms per node: exactly the
per-heartbeat work the lazy design avoids.  What the simulator needs is the earliest
timer *other than* those watches (suspicion timeouts, notice retries, gossip rounds).
The core does not offer that yet, so it is read here, in one place, from the core's
own timer fields; a public ``next_deadline(exclude_watches=...)`` in the core would
replace this function (asked of the cores' owner).
"""

from __future__ import annotations

from swarmshake.reference_node.protocol.detector import FailureDetector


def next_timer_besides_watches(detector: FailureDetector) -> float | None:
    best: float | None = None
    gossip_at = detector._next_gossip_at  # noqa: SLF001 - see the module docstring
    if gossip_at is not None:
        best = gossip_at
    if not detector._eager_dead:  # noqa: SLF001 - the core's own switch for this timer
        timeout = detector.config.suspicion_timeout_s
        for suspicion in detector._suspicions.values():  # noqa: SLF001
            candidate = suspicion.first_at + timeout
            if best is None or candidate < best:
                best = candidate
            if suspicion.notice_at is not None and suspicion.notice_at < best:
                best = suspicion.notice_at
    return best
