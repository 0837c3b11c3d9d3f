"""The node core's record of which aggregates a node holds in memory, and what its commit core is told of them.

Which aggregate bytes a node holds decides whether it pulls a value
(``AggregatePulls.wanted``), applies a decided one at once (``StepApply.decided``),
re-proposes a stored value (``step_began``), and which ``HoldsAggregate`` a new commit
core gets after a rejoin (``announce``).  Both shells kept this record their own way --
the runtime a bounded set per step mirroring its worker's reports, the simulator its
worker's memory itself, unbounded -- and each wrote its own announce.  It lives here
once; the bytes stay with the worker (the runtime's process, the simulator's
``NodeDisk``), which serves them.

| the shell tells it | when |
|---|---|
| ``add(step, value_fp)`` | the worker holds the bytes (built, pulled, or reloaded after a restart) |
| ``discard(step, value_fp)`` | the worker found them gone (an apply's ``lost``) |
| ``forget_below(step)`` | the worker dropped from memory what an apply's window no longer keeps (``ApplyAggregate.keep_from_step``) |

``announce(core_step)`` is the ``HoldsAggregate`` list for a commit core that starts at
``core_step`` (every aggregate held in its window), ``in_window(step, core_step)``
whether a newly held one is told to the running core.  Pure; no clock, no I/O.
"""

from __future__ import annotations

from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol.node_core import NODE_DEFAULTS, NodeConfig, in_commit_window

# Steps whose held aggregates are remembered.  The worker keeps in memory only the
# steps of an apply's window (``aggregates_kept_steps``) and those its commit core may
# run ahead to (``steps_ahead_max``), a few values a step; this bounds the record should
# a node hold aggregates and never apply (a joiner that gets bytes it never uses): the
# oldest step goes first, as it is the least likely to be asked for.
MAX_HELD_STEPS = 64


class HeldAggregates:
    """The (step, value fingerprint) of every aggregate the node holds in memory."""

    def __init__(self, config: NodeConfig = NODE_DEFAULTS):
        self._config = config
        self._held: dict[int, set[str]] = {}

    def __contains__(self, key: object) -> bool:
        step, value_fp = key  # type: ignore[misc]
        held = self._held.get(step)
        return held is not None and value_fp in held

    def steps(self) -> list[int]:
        """The steps with an aggregate held, in order."""
        return sorted(self._held)

    def at(self, step: int) -> frozenset[str]:
        """The value fingerprints held for ``step``."""
        return frozenset(self._held.get(step, ()))

    def add(self, step: int, value_fp: str) -> None:
        self._held.setdefault(step, set()).add(value_fp)
        while len(self._held) > MAX_HELD_STEPS:
            del self._held[min(self._held)]

    def discard(self, step: int, value_fp: str) -> None:
        held = self._held.get(step)
        if held is not None:
            held.discard(value_fp)
            if not held:
                del self._held[step]

    def forget_below(self, step: int) -> None:
        """As the worker's memory after an apply (``ApplyAggregate.keep_from_step``).
        Remembered longer, a checkpoint fallback below the window re-proposed a value
        whose bytes only the disk kept, as if held (issue 12, session 17: found by the
        agreement test)."""
        for held_step in [s for s in self._held if s < step]:
            del self._held[held_step]

    def in_window(self, step: int, core_step: int) -> bool:
        """Whether the commit core at ``core_step`` takes a ``HoldsAggregate`` of ``step``."""
        return in_commit_window(step, core_step, self._config)

    def announce(self, core_step: int) -> list[cm.HoldsAggregate]:
        """DRIVERS.md: a new commit core (after a restart or a rejoin) is told every
        aggregate held in its window, bytes that came while no core ran included, or
        an accept waiting for them stalls."""
        return [
            cm.HoldsAggregate(step=step, value_fp=value_fp)
            for step in sorted(self._held)
            if self.in_window(step, core_step)
            for value_fp in sorted(self._held[step])
        ]

    def check_valid(self) -> None:
        assert len(self._held) <= MAX_HELD_STEPS, "more held steps than MAX_HELD_STEPS"
        assert all(self._held.values()), "a step recorded with nothing held"
