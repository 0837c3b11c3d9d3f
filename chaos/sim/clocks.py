"""A node's injected clock under clock-skew faults (offset and drift).

DESIGN: ``t_mono`` in the history is the host's true clock; clock-skew faults act on
the node's injected clock, which is what its cores see as ``now``.  The local clock is
``base + (1 + drift) · (t − t_base)``, re-based at every skew change.  It never goes
backwards (the cores reject that, as a monotonic clock would never do it): after a
negative offset step the local clock holds still until true time catches up, like a
monotonic clock that an NTP step cannot move back.  Healing a drift is such a step
(the clock returns to true time): a node that ran 1000 ppm fast for ten minutes
holds for 0.6 s.  What the node reads while held is the held value, so that is also
the stamp of whatever arrives meanwhile (``map``), as the runtime's clock gives it.
"""

from __future__ import annotations

import math

PPM = 1e-6


class NodeClock:
    __slots__ = ("t_base", "local_base", "rate", "last_local", "held")

    def __init__(self) -> None:
        self.t_base = 0.0
        self.local_base = 0.0
        self.rate = 1.0
        self.last_local = 0.0
        self.held = 0.0  # the reading when the current segment began (its floor)

    @property
    def identity(self) -> bool:
        return self.rate == 1.0 and self.t_base == self.local_base and self.held <= self.t_base

    def skew(self, t: float, offset_s: float, drift_ppm: float) -> None:
        """From true time ``t`` on: local = true + ``offset_s``, running at 1 + drift.
        Call ``local(t)`` first: the reading then is the new segment's floor."""
        self.held = self.last_local
        self.t_base = t
        self.local_base = t + offset_s
        self.rate = 1.0 + drift_ppm * PPM

    def local(self, t: float) -> float:
        if self.rate == 1.0 and self.t_base == self.local_base:
            value = t
        else:
            value = self.local_base + self.rate * (t - self.t_base)
        if value < self.last_local:
            value = self.last_local
        self.last_local = value
        return value

    def map(self, t: float) -> float:
        """The local reading at true time ``t`` on the current segment: for stamping
        arrivals that happened since the last skew change (the simulator hands those
        over before every change) but before the last handled event.  A clock held
        after a step back reads the held value, so that is the stamp (not the raw
        segment value, which lies before what the node's timers have already seen)."""
        value = self.local_base + self.rate * (t - self.t_base)
        return value if value >= self.held else self.held

    def peek_local(self, t: float) -> float:
        """``local(t)`` without advancing the no-going-back floor."""
        if self.rate == 1.0 and self.t_base == self.local_base:
            return max(t, self.last_local)
        return max(self.local_base + self.rate * (t - self.t_base), self.last_local)

    def true_time(self, local: float) -> float:
        """The earliest true time at which the local clock reads at least ``local``
        (for timers: a wake-up one ulp early would find its timer not yet due)."""
        if self.identity:
            return local
        if local <= self.held:
            return self.t_base  # the held reading: from the segment's start on
        t = self.t_base + (local - self.local_base) / self.rate
        for _ in range(8):  # rounding: a few ulps at most
            if self.local_base + self.rate * (t - self.t_base) >= local:
                break
            t = math.nextafter(t, math.inf)
        return t
