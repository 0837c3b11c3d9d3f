"""A Hypothesis provider whose draws depend only on the seed, not on the process.

Stock Hypothesis (6.13x and later) mixes into 5% of its draws constants it collects
from the source of every *local* module in ``sys.modules`` (anything outside
site-packages and the standard library: all of swarmshake in an editable install,
and the caller's own scripts).  So ``swarmshake explore --seed S`` drew different
schedules depending on what the process had imported before (importing
``swarmshake.chaos.backends`` first added its ``3600`` to the pool), on the script
that called it, and on every literal in every swarmshake module: a found schedule
could not be reproduced from its seed.  This provider is Hypothesis's own with that
pool left out; the fixed global constants (0, ±1, boundaries, ...) stay, so edge
values are still tried.  Written here because Hypothesis has no setting for it;
the override uses Hypothesis's provider internals, checked by
tests/chaos/sim/test_explore_determinism.py.
"""

from __future__ import annotations

from typing import Any

from hypothesis.internal.conjecture import providers
from hypothesis.internal.conjecture.choice import choice_constraints_key, choice_permitted

BACKEND_NAME = "swarmshake-seeded"
# Constants permitted under each (choice type, constraints): the strategies here
# use a handful of distinct constraints, so this stays tiny.
_POOLS: dict[tuple, tuple] = {}


class SeededProvider(providers.HypothesisProvider):
    def _maybe_draw_constant(
        self, choice_type: Any, constraints: Any, *, p: float = 0.05
    ) -> Any | None:
        if self._random.random() > p:
            return None
        key = (choice_type, choice_constraints_key(choice_type, constraints))
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = tuple(
                choice
                for choice in providers.GLOBAL_CONSTANTS.set_for_type(choice_type)
                if choice_permitted(choice, constraints)
            )
        return self._random.choice(pool) if pool else None


def register() -> str:
    """Make the provider known to Hypothesis; returns the ``backend=`` setting's value."""
    providers.AVAILABLE_PROVIDERS[BACKEND_NAME] = f"{__name__}.SeededProvider"
    return BACKEND_NAME
