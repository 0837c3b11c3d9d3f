"""When the node checkpoints: drives the checkpoint-policy core (fixed or Young–Daly).

The control process owns the decision (the worker only writes): after every commit
it feeds ``StepCommitted``; every peer this node declares dead, and its own restart,
is a ``FailureObserved`` (the observed failure rate Young–Daly adapts to); the time
from asking the worker for a checkpoint to its ``CheckpointDone`` is the measured
``CheckpointCost``.  Actions are ``WriteCheckpoint``: the caller asks the worker to
write and replicate it.
"""

from __future__ import annotations

from swarmshake.reference_node.config import StepSection
from swarmshake.reference_node.protocol import checkpoint_policy as cp


def make_policy(step: StepSection, start_s: float) -> cp.FixedInterval | cp.YoungDaly | None:
    """The configured policy; None when checkpoints are only written on request."""
    if step.checkpoint_policy == "young-daly":
        return cp.YoungDaly(
            prior_mtbf_s=step.checkpoint_prior_mtbf_s,
            window_s=step.checkpoint_window_s,
            min_interval_s=step.checkpoint_min_interval_s,
            max_interval_s=step.checkpoint_max_interval_s,
            start_s=start_s,
        )
    if step.checkpoint_every == 0:
        return None
    return cp.FixedInterval(every_steps=step.checkpoint_every)


class CheckpointSchedule:
    def __init__(self, step: StepSection, start_s: float):
        self.policy = make_policy(step, start_s)
        self.failures_observed = 0
        self.writes_requested = 0
        self.last_reason = ""
        self._asked_at: float | None = None
        self.last_cost_s: float | None = None

    def committed(self, step: int, now: float) -> cp.WriteCheckpoint | None:
        if self.policy is None:
            return None
        actions = self.policy.handle(cp.StepCommitted(step=step), now)
        return actions[0] if actions else None

    def failure(self, now: float) -> None:
        self.failures_observed += 1
        if self.policy is not None:
            self.policy.handle(cp.FailureObserved(), now)

    def asked(self, now: float, reason: str) -> None:
        self.writes_requested += 1
        self.last_reason = reason
        self._asked_at = now

    def done(self, now: float) -> None:
        """The worker finished a write: its duration is the policy's cost C."""
        if self._asked_at is None:
            return  # a write nobody timed (e.g. one the harness forced before a restart)
        self.last_cost_s = max(0.0, now - self._asked_at)
        self._asked_at = None
        if self.policy is not None:
            self.policy.handle(cp.CheckpointCost(seconds=self.last_cost_s), now)

    def status(self, now: float) -> dict[str, object]:
        policy = self.policy
        out: dict[str, object] = {
            "policy": "off" if policy is None else type(policy).__name__,
            "failures_observed": self.failures_observed,
            "writes_requested": self.writes_requested,
            "last_reason": self.last_reason,
            "last_cost_s": self.last_cost_s,
        }
        if isinstance(policy, cp.YoungDaly):
            out["interval_s"] = policy.interval_s(now)
            out["mtbf_s"] = policy.mtbf_s(now)
            out["interval_steps"] = policy.interval_steps(now)
        return out
