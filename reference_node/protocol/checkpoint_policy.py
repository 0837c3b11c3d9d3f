"""When to write a checkpoint: a fixed step interval, or Young–Daly from failures.

Young (1974) / Daly (2006): with checkpoint cost ``C`` and mean time between
failures ``M``, the interval that minimises expected lost work plus checkpoint
overhead is about ``sqrt(2 C M)`` (first order, valid while C << M).  ``M`` is
estimated from the failures this node observes (declared deaths and its own
restarts) over a sliding window, with a prior of one pseudo-failure at
``prior_mtbf_s`` so a quiet start does not mean "never checkpoint"; the interval is
clamped to ``[min_interval_s, max_interval_s]`` and converted to steps with the
measured step duration.

Pure: ``handle(event, now) -> list[WriteCheckpoint]``.  Events: ``StepCommitted(step)``
after each commit (the only place a checkpoint may be written: a step boundary),
``FailureObserved()``, ``CheckpointCost(seconds)`` after each write.  Action:
``WriteCheckpoint(step, reason)`` -> write it, log ``checkpoint_write``.
"""

from __future__ import annotations

import math
from collections import deque

from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.structs import (
    Clock,
    CoreAction,
    CoreEvent,
    check_count,
    check_positive,
    check_time,
)

FAILURES_KEPT_MAX = 1024  # the sliding window's memory bound
STEP_TIMES_KEPT = 32  # step durations averaged for the seconds -> steps conversion


class StepCommitted(CoreEvent, frozen=True, kw_only=True):
    step: int

    def __post_init__(self) -> None:
        check_count(self.step, "StepCommitted.step")


class FailureObserved(CoreEvent, frozen=True, kw_only=True):
    pass


class CheckpointCost(CoreEvent, frozen=True, kw_only=True):
    seconds: float

    def __post_init__(self) -> None:
        check_time(self.seconds, "CheckpointCost.seconds")
        if self.seconds < 0:
            raise LocalProtocolError("CheckpointCost.seconds must be >= 0")


PolicyEvent = StepCommitted | FailureObserved | CheckpointCost


class WriteCheckpoint(CoreAction, frozen=True, kw_only=True):
    step: int
    reason: str


class FixedInterval:
    """A checkpoint every ``every_steps`` committed steps."""

    def __init__(self, *, every_steps: int):
        check_count(every_steps, "every_steps")
        if every_steps < 1:
            raise LocalProtocolError("every_steps must be >= 1")
        self.every_steps = every_steps
        self._clock = Clock()

    def handle(self, event: PolicyEvent, now: float) -> list[WriteCheckpoint]:
        self._clock.check(now)
        self._clock.last = now
        if isinstance(event, StepCommitted) and event.step % self.every_steps == 0:
            return [WriteCheckpoint(step=event.step, reason=f"every {self.every_steps} steps")]
        return []

    def check_valid(self) -> None:
        assert self.every_steps >= 1

    def snapshot(self) -> tuple:
        return (self.every_steps, self._clock.last)


class YoungDaly:
    """Adaptive interval ``sqrt(2 * C * MTBF)`` from observed failures, clamped."""

    def __init__(
        self,
        *,
        checkpoint_cost_s: float = 1.0,
        prior_mtbf_s: float = 3600.0,
        window_s: float = 3600.0,
        min_interval_s: float = 10.0,
        max_interval_s: float = 3600.0,
        start_s: float = 0.0,
    ):
        for name, value in (
            ("checkpoint_cost_s", checkpoint_cost_s),
            ("prior_mtbf_s", prior_mtbf_s),
            ("window_s", window_s),
            ("min_interval_s", min_interval_s),
            ("max_interval_s", max_interval_s),
        ):
            check_positive(value, name)
        check_time(start_s, "start_s")
        if min_interval_s > max_interval_s:
            raise LocalProtocolError("min_interval_s > max_interval_s")
        self.cost_s = checkpoint_cost_s
        self.prior_mtbf_s = prior_mtbf_s
        self.window_s = window_s
        self.min_interval_s = min_interval_s
        self.max_interval_s = max_interval_s
        self.start_s = start_s
        self.failures: deque[float] = deque(maxlen=FAILURES_KEPT_MAX)
        self.last_checkpoint_s = start_s
        self.last_step_s: float | None = None
        self.step_durations: deque[float] = deque(maxlen=STEP_TIMES_KEPT)
        self._clock = Clock()

    def mtbf_s(self, now: float) -> float:
        observed = min(self.window_s, max(0.0, now - self.start_s))
        recent = sum(1 for t in self.failures if t >= now - self.window_s)
        return (self.prior_mtbf_s + observed) / (1 + recent)

    def interval_s(self, now: float) -> float:
        raw = math.sqrt(2.0 * self.cost_s * self.mtbf_s(now))
        return min(max(raw, self.min_interval_s), self.max_interval_s)

    def handle(self, event: PolicyEvent, now: float) -> list[WriteCheckpoint]:
        self._clock.check(now)
        actions: list[WriteCheckpoint] = []
        if isinstance(event, FailureObserved):
            self.failures.append(now)
        elif isinstance(event, CheckpointCost):
            self.cost_s = max(event.seconds, 1e-6)
        elif isinstance(event, StepCommitted):
            if self.last_step_s is not None:
                self.step_durations.append(now - self.last_step_s)
            self.last_step_s = now
            interval = self.interval_s(now)
            if now - self.last_checkpoint_s >= interval:
                self.last_checkpoint_s = now
                actions.append(
                    WriteCheckpoint(
                        step=event.step,
                        reason=f"young-daly interval {interval:.1f}s (mtbf {self.mtbf_s(now):.0f}s)",
                    )
                )
        else:
            raise LocalProtocolError(f"YoungDaly cannot handle {type(event).__name__}")
        self._clock.last = now
        return actions

    def interval_steps(self, now: float) -> int | None:
        """The interval in steps at the measured step duration (None before 2 steps)."""
        if not self.step_durations:
            return None
        step_s = sum(self.step_durations) / len(self.step_durations)
        return max(1, round(self.interval_s(now) / max(step_s, 1e-9)))

    def check_valid(self) -> None:
        """Invariants: the interval stays inside its clamp, memory stays bounded."""
        now = max(self._clock.last, self.start_s)
        assert self.min_interval_s <= self.interval_s(now) <= self.max_interval_s
        assert len(self.failures) <= FAILURES_KEPT_MAX
        assert len(self.step_durations) <= STEP_TIMES_KEPT
        assert self.last_checkpoint_s >= self.start_s

    def snapshot(self) -> tuple:
        return (
            self.cost_s,
            tuple(self.failures),
            self.last_checkpoint_s,
            self.last_step_s,
            tuple(self.step_durations),
            self._clock.last,
        )
