"""Base classes of the cores' events and actions, and the checks they share.

Events and actions are msgspec structs: frozen, slotted, keyword-only (h11's
``_events.py`` shape) and validated when built (``__post_init__`` raises
``LocalProtocolError``: a driver that builds a bad event has a bug).  msgspec rather
than dataclasses because the simulator builds millions of them: a msgspec struct is
several times cheaper to construct and compares and hashes by value.
"""

from __future__ import annotations

import math
import re

import msgspec

from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.protocol.messages import MAX_NODE_NAME_CHARS, NODE_NAME_PATTERN

_NAME = re.compile(NODE_NAME_PATTERN)
# Names that passed ``check_name``: a run checks the same few names millions of times
# (a regex each was a tenth of a simulated run).  Exact ``str`` only, bounded; a hot
# event may test membership itself before calling ``check_name``.
VALID_NAMES: set[str] = set()
VALID_NAMES_MAX = 8192  # > MAX_CLUSTER_NODES names plus the harness's; past it, no caching
_NUMBER = (int, float)
_FINITE_LOW, _FINITE_HIGH = -math.inf, math.inf


class CoreEvent(msgspec.Struct, frozen=True, kw_only=True):
    """Something a driver tells a core (an input)."""


class CoreAction(msgspec.Struct, frozen=True, kw_only=True):
    """Something a core asks its driver to do or to log (an output)."""


def check_name(value: object, what: str) -> None:
    if type(value) is str and value in VALID_NAMES:
        return
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_NODE_NAME_CHARS
        or _NAME.match(value) is None
    ):
        raise LocalProtocolError(
            f"{what} must be a node name of 1..{MAX_NODE_NAME_CHARS} chars matching "
            f"{NODE_NAME_PATTERN}, got {value!r}"
        )
    if type(value) is str and len(VALID_NAMES) < VALID_NAMES_MAX:
        VALID_NAMES.add(value)


def check_names(values: object, what: str) -> None:
    if not isinstance(values, tuple):
        raise LocalProtocolError(
            f"{what} must be a tuple of node names, got {type(values).__name__}"
        )
    for value in values:
        check_name(value, what)
    if len(set(values)) != len(values):
        raise LocalProtocolError(f"{what} has duplicates: {values!r}")


def check_count(value: object, what: str) -> None:
    if type(value) is int and value >= 0:
        return  # the common case, without the isinstance calls
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LocalProtocolError(f"{what} must be a non-negative int, got {value!r}")


def check_time(value: object, what: str) -> None:
    if not isinstance(value, _NUMBER) or isinstance(value, bool) or not math.isfinite(value):
        raise LocalProtocolError(f"{what} must be a finite number of seconds, got {value!r}")


def check_positive(value: object, what: str) -> None:
    check_time(value, what)
    if value <= 0:  # type: ignore[operator]
        raise LocalProtocolError(f"{what} must be > 0, got {value!r}")


class Clock:
    """Checks that ``now`` never goes backwards for one core (a driver bug otherwise)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = -math.inf

    def check(self, now: float) -> None:
        if type(now) is not float or not _FINITE_LOW < now < _FINITE_HIGH:
            check_time(now, "now")  # the common case (a finite float) needs no call
        if now < self.last:
            raise LocalProtocolError(
                f"now={now} is before the last handled time {self.last}: a core's clock "
                "never goes backwards",
                reason="time",
            )
