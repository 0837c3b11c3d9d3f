"""Typed protocol errors shared by every core (h11's shape).

``LocalProtocolError``: the *driver* fed something the core cannot accept (time going
backwards, an event for a peer the core does not know, a batch that is not sorted).
That is a bug in the driver, not in a peer.

``RemoteProtocolError``: a *peer* sent something malformed, oversized, of the wrong
version or semantically impossible (a ballot from a node that is not a member, a step
far out of range).  The driver drops the frame, counts it and logs ``frame_drop``.

Either way the core's state is unchanged: every handler validates before it mutates.
Unlike h11 the error is not sticky: a core serves many peers, and one bad frame from
one peer must not wedge the node (DESIGN: "it never crashes a node").
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of the typed protocol errors; ``reason`` is a short machine-readable slug."""

    def __init__(self, message: str, *, reason: str = "invalid"):
        super().__init__(message)
        self.reason = reason


class LocalProtocolError(ProtocolError):
    """The driver fed an event that this core cannot accept; state unchanged."""


class RemoteProtocolError(ProtocolError):
    """A peer's message is malformed or impossible; drop it, count it; state unchanged."""
