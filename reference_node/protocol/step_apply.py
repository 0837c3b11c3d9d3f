"""The node core's apply: when a node applies a committed step's aggregate, and what it keeps.

The commit core says which value a step decided (``commit.ApplyStep``); the node applies
exactly that value's aggregate once it holds the bytes, then reports the new parameters
(``commit.Applied``).  Both shells used to keep this themselves and had drifted: the
runtime asked its worker to apply at once, held or not (a value decided before its
bytes came was refused by the worker and pulled again as "lost"), the simulator waited
for the bytes; the runtime cleared its flag on any worker answer, the simulator only on
the apply it waited for.  ``StepApply`` decides once: an apply is asked when the value
is decided and its bytes are held, whichever comes last, at most one at a time, and
only the answer for that very value completes it.

Pure like every core: no clock is needed, no I/O.

| the shell tells it | when |
|---|---|
| ``decided(step, value, holds=, accepted=)`` | the commit core's ``ApplyStep`` (``holds``: this node holds the value's bytes) |
| ``held(step, value_fp, accepted=)`` | the bytes of an aggregate are now held (built, or pulled) |
| ``applied(step, value_fp)`` | the worker applied an aggregate; the ``ApplyAggregate`` it completes (feed the commit core ``Applied``), or None |
| ``lost(step, value_fp)`` | the worker found the bytes of the apply gone; True: pull them again (``AggregatePulls.lost``) |
| ``dropped()`` | a rejoin began, or a state was installed: the pending apply is moot |

| action | the shell does |
|---|---|
| ``ApplyAggregate(step, value, keep_from_step, pinned)`` | apply the aggregate of exactly ``value.contributors``; then hold only the aggregates of ``keep_from_step`` and later, and the ``pinned`` ones (``node_core.aggregates_to_keep``); report ``applied`` (or ``lost``) |

``pending`` is the step and value decided and not yet applied: while there is one, a
node does not leave its step for a state transfer (``node_core.peer_ahead``'s caller).
"""

from __future__ import annotations

from collections.abc import Mapping

from swarmshake.reference_node.protocol.messages import StepValue
from swarmshake.reference_node.protocol.node_core import (
    NODE_DEFAULTS,
    NodeConfig,
    aggregates_to_keep,
)
from swarmshake.reference_node.protocol.structs import CoreAction


class ApplyAggregate(CoreAction, frozen=True, kw_only=True):
    """Apply ``step``'s committed aggregate (exactly ``value.contributors``'), then keep
    only the aggregates of ``keep_from_step`` and later and the ``pinned`` ones."""

    step: int
    value: StepValue
    keep_from_step: int
    pinned: tuple[tuple[int, str], ...]


class StepApply:
    """At most one apply at a time: the value the commit core decided, once held."""

    def __init__(self, config: NodeConfig = NODE_DEFAULTS):
        self.config = config
        self.pending: tuple[int, StepValue] | None = None  # decided, not applied yet
        self.asked: ApplyAggregate | None = None  # the pending apply, asked of the worker

    def decided(
        self, step: int, value: StepValue, *, holds: bool, accepted: Mapping[int, str]
    ) -> list[ApplyAggregate]:
        self.pending = (step, value)
        self.asked = None
        return self._ask(accepted) if holds else []

    def held(
        self, step: int, value_fp: str, *, accepted: Mapping[int, str]
    ) -> list[ApplyAggregate]:
        if self.asked is not None or not self._is_pending(step, value_fp):
            return []
        return self._ask(accepted)

    def applied(self, step: int, value_fp: str) -> ApplyAggregate | None:
        """The apply this answer completes (feed the commit core ``Applied``; the worker
        kept what it names), or None: an answer for an apply a rejoin made moot."""
        done = self.asked
        if done is None or not self._is_pending(step, value_fp):
            return None
        self.pending = None
        self.asked = None
        return done

    def lost(self, step: int, value_fp: str) -> bool:
        if self.asked is None or not self._is_pending(step, value_fp):
            return False
        self.asked = None  # asked again once the bytes are held again
        return True

    def dropped(self) -> None:
        self.pending = None
        self.asked = None

    def check_valid(self) -> None:
        if self.asked is None:
            return
        assert self.pending is not None, "an apply asked with nothing decided"
        assert (self.asked.step, self.asked.value) == self.pending, "asked another value"

    def _is_pending(self, step: int, value_fp: str) -> bool:
        pending = self.pending
        return pending is not None and pending[0] == step and pending[1].agg_fp == value_fp

    def _ask(self, accepted: Mapping[int, str]) -> list[ApplyAggregate]:
        assert self.pending is not None
        step, value = self.pending
        kept = aggregates_to_keep(accepted, step, config=self.config)
        self.asked = ApplyAggregate(
            step=step, value=value, keep_from_step=kept.from_step, pinned=kept.pinned
        )
        return [self.asked]
