"""The node's injectable clock: the host's monotonic clock with an offset and a drift.

DESIGN.md: clock-skew faults act on the node's clock, while events record the
host's true clock in ``t_mono``.  The protocol cores get ``now()`` from here, and
timers the cores ask for (in node seconds) are converted to host seconds for
asyncio with ``host_delay_s``.

A core's clock never goes backwards (``protocol.structs.Clock`` checks it), so a
skew that moves the clock back *holds* node time until the host catches up: the
node sees time stop, as a real node whose clock was stepped back does from a
monotonic source.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class NodeClock:
    def __init__(
        self,
        offset_s: float = 0.0,
        drift_ppm: float = 0.0,
        host: Callable[[], float] = time.monotonic,
    ):
        self._host = host
        self._anchor_host = host()
        self._anchor_node = self._anchor_host + offset_s
        self._rate = 1.0 + drift_ppm / 1e6
        self._last = -float("inf")
        self.offset_s = offset_s
        self.drift_ppm = drift_ppm

    def now(self) -> float:
        """Node time in seconds (monotonic, skewed)."""
        raw = self._anchor_node + (self._host() - self._anchor_host) * self._rate
        if raw > self._last:
            self._last = raw
        return self._last

    def host_now(self) -> float:
        """The host's true monotonic clock (``t_mono`` of events)."""
        return self._host()

    def host_delay_s(self, node_delay_s: float) -> float:
        """How long the host waits for ``node_delay_s`` to pass on this clock."""
        if node_delay_s <= 0:
            return 0.0
        return node_delay_s / self._rate

    def set_skew(self, offset_s: float, drift_ppm: float) -> None:
        """Apply a clock-skew fault: from now on the node clock runs at ``1 + drift``
        and stands ``offset_s`` away from where an unskewed clock would be."""
        host = self._host()
        self._anchor_host = host
        self._anchor_node = host + offset_s
        self._rate = 1.0 + drift_ppm / 1e6
        self.offset_s = offset_s
        self.drift_ppm = drift_ppm
