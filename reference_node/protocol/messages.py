"""Versioned wire messages of the control channel (msgpack, one tagged union).

Every message a node sends to a peer on the *control* channel is one of the structs
below.  The runtime's frame layer adds the length prefix and the HMAC; this module
owns the bytes inside: ``encode_message(msg) -> bytes`` and
``decode_message(bytes) -> Message``.

Wire format: a msgpack array ``[version, body]`` where ``body`` is a msgpack map
tagged by ``"type"``.  The version is read first, so a peer of another version is
told apart from a malformed frame (``RemoteProtocolError.reason == "version"``)
before its body is interpreted.  Unknown fields are rejected (same version, same
shape); a new field needs a new ``PROTOCOL_VERSION``.

Limits (every one bounds what a peer can make us allocate or iterate):
- ``MAX_FRAME_BYTES`` = 256 KiB: the largest legitimate control message is a
  ``Decided``/``AcceptRequest`` whose contributor list names every node of the largest
  cluster (2048 names of <= 64 chars ~ 135 KiB); bulk tensors never travel here.
- ``MAX_CLUSTER_NODES`` = 2048: twice the 1000-node simulation goal.
- ``MAX_NODE_NAME_CHARS`` = 64, ``[A-Za-z0-9_.:-]``: names go into file names and logs.
- ``MAX_GOSSIP_ITEMS`` = 32: a gossip message carries a bounded piggyback; the
  detector sends at most this many items per message (the oldest pending first).
- ``MAX_FINGERPRINT_CHARS`` = 128: hex of up to a 512-bit digest.
- ``MAX_REASON_CHARS`` = 128: free text is for humans, not payloads.

Decoding errors raise ``RemoteProtocolError`` with ``reason`` one of
``oversized | malformed | version``; the caller drops the frame and logs
``frame_drop`` with that reason.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError

# 2: DecisionRequest (a v1 peer would reject it as malformed).
PROTOCOL_VERSION = 2
MAX_FRAME_BYTES = 256 * 1024
MAX_CLUSTER_NODES = 2048
MAX_NODE_NAME_CHARS = 64
MAX_GOSSIP_ITEMS = 32
MAX_MONITORS_PER_NODE = 64  # a node watches at most this many peers (DetectorConfig)
MAX_FINGERPRINT_CHARS = 128
MAX_REASON_CHARS = 128
MAX_COUNTER = 2**62  # steps, incarnations, rounds, sequence numbers: fits int64 with room

NODE_NAME_PATTERN = r"^[A-Za-z0-9_.:-]+$"

NodeName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_NODE_NAME_CHARS, pattern=NODE_NAME_PATTERN)
]
Fingerprint = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_FINGERPRINT_CHARS, pattern=r"^[0-9a-f]+$")
]
Counter = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNTER)]
Step = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNTER)]
GENESIS_STEP = -1  # "no step committed yet": the state is the initial parameters
OfferedStep = Annotated[int, msgspec.Meta(ge=GENESIS_STEP, le=MAX_COUNTER)]
ProposerIndex = Annotated[int, msgspec.Meta(ge=0, lt=MAX_CLUSTER_NODES)]
Ballot = tuple[Counter, ProposerIndex]
"""(round, proposer index): compared as a tuple, so ballots are totally ordered and two
proposers never share one."""
NodeList = Annotated[list[NodeName], msgspec.Meta(max_length=MAX_CLUSTER_NODES)]
Reason = Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)]


class _Nested(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Structs nested inside messages (not in the union)."""


class ConfigChangeRequest(_Nested):
    """One membership change carried by a step's value (Raft single-server change)."""

    change: Literal["add", "remove", "promote"]
    peer: NodeName
    incarnation: Counter = 0


class StepValue(_Nested):
    """The value a step commits: the aggregate's fingerprint and who contributed to it,
    plus at most one membership change (applied after the step)."""

    agg_fp: Fingerprint
    contributors: NodeList
    config_change: ConfigChangeRequest | None = None

    def __post_init__(self) -> None:
        if len(set(self.contributors)) != len(self.contributors):
            raise ValueError("contributors must be unique")
        if self.contributors != sorted(self.contributors):
            raise ValueError("contributors must be sorted (one canonical encoding per value)")


class GossipItem(_Nested):
    """What ``origin`` believes about ``subject`` at ``incarnation``."""

    subject: NodeName
    incarnation: Counter
    status: Literal["alive", "suspect", "dead", "left"]
    origin: NodeName


class _Message(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"
):
    sender: NodeName


class Heartbeat(_Message, tag="heartbeat"):
    incarnation: Counter
    seq: Counter
    # Sent to a node the sender does not hold as a member (the detector's "Strangers":
    # it heard that node's heartbeats): no evidence for a joiner that it was added.
    stranger: bool = False


class Gossip(_Message, tag="gossip"):
    items: Annotated[list[GossipItem], msgspec.Meta(min_length=1, max_length=MAX_GOSSIP_ITEMS)]
    # Set on "you were declared dead" notices: the size of the sender's alive view, so
    # two nodes that hold each other dead after a partition agree on which one rejoins,
    # and the sender's incarnation, so a notice from an incarnation that has since
    # rejoined (still in flight when it restarted) is recognised as stale.
    sender_view_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_CLUSTER_NODES)] | None = None
    sender_incarnation: Counter | None = None
    # Set on "you were declared dead" notices: whether the sender formed that verdict
    # with a quorum (it heard a majority, >= confirm_suspicions monitors agreed, at its
    # current incarnation).  A node that hears a majority ignores a verdict formed
    # without one (detector.py, "Verdicts formed where the subject could not be heard").
    sender_quorum: bool | None = None
    # The peers whose heartbeats the sender expects (its watches).  Who watches whom
    # follows each node's own view, and views differ after a partition: a receiver
    # named here that does not count the sender among its monitors heartbeats it too
    # (detector.py, "Watches announced"), or the sender, hearing nothing, declares a
    # live node dead.
    sender_watches: (
        Annotated[list[NodeName], msgspec.Meta(max_length=MAX_MONITORS_PER_NODE)] | None
    ) = None


class Prepare(_Message, tag="prepare"):
    step: Step
    ballot: Ballot


class PromiseReply(_Message, tag="promise"):
    step: Step
    ballot: Ballot
    accepted_ballot: Ballot | None = None
    accepted_value: StepValue | None = None

    def __post_init__(self) -> None:
        if (self.accepted_ballot is None) != (self.accepted_value is None):
            raise ValueError("accepted_ballot and accepted_value come together")


class AcceptRequest(_Message, tag="accept_request"):
    step: Step
    ballot: Ballot
    value: StepValue


class AcceptedReply(_Message, tag="accepted"):
    step: Step
    ballot: Ballot
    value_fp: Fingerprint


class Nack(_Message, tag="nack"):
    """The acceptor already promised a higher ballot; the proposer retries above it.

    ``sender_step`` set: the sender is already at that later step and holds no decision
    for ``step`` (it started past it from a checkpoint or a state transfer), so nobody
    may ever answer this proposer: it is behind and must rejoin (``commit.Behind``).
    """

    step: Step
    ballot: Ballot
    promised: Ballot
    sender_step: Step | None = None


class Decided(_Message, tag="decided"):
    step: Step
    value: StepValue
    quorum: NodeList = []  # the acceptors whose accepts chose it (evidence for S3 checks)


class DecisionRequest(_Message, tag="decision_request"):
    """Ask a peer that is already past ``step`` for its decision (answered with
    ``Decided``; silence when the peer cannot tell it).  Sent by a node that holds no
    decision for its current step while a peer's traffic shows the step decided."""

    step: Step


class JoinRequest(_Message, tag="join_request"):
    incarnation: Counter


class LeaveNotice(_Message, tag="leave_notice"):
    incarnation: Counter


class LeaveConfirmed(_Message, tag="leave_confirmed"):
    """A member committed the receiver's removal at ``step``: sent when the removal
    commits and in answer to a notice from a node already removed.  A leaver that
    did not see that step (a learner falling behind) otherwise ran on, watching the
    members it remembered, and declared them dead once they stopped heartbeating it
    (the simulator's leave churn; node_core.removal_step)."""

    step: Step


class StateRequest(_Message, tag="state_request"):
    """A rejoining node asks for the state of the latest committed step."""

    incarnation: Counter


class StateOffer(_Message, tag="state_offer"):
    """Reply to ``StateRequest``: the bytes follow on the bulk channel.

    ``step == GENESIS_STEP``: the source has committed no step yet and holds the
    initial parameters (``param_fp`` is their fingerprint); no bytes follow.  Without
    this answer a node restarted before the first commit waits out every source's
    fetch timeout and, having no checkpoint, cannot rejoin at all (found by explore:
    crash one node and restart another at 0.5 s in a 3-node cluster: no commit ever).
    """

    step: OfferedStep
    param_fp: Fingerprint
    nbytes: Counter
    # The configuration the offered state runs under (after the offered step's
    # commits) and the step that committed it: the receiver starts its commit core
    # with it, so a node that rejoins or joins after membership changes votes with the
    # right quorum.  Empty ``voters``: not told (the receiver keeps its own).
    voters: NodeList = []
    learners: NodeList = []
    config_step: OfferedStep = GENESIS_STEP


class AggregateRequest(_Message, tag="aggregate_request"):
    """An acceptor or learner asks for the aggregate bytes with ``value_fp`` (bulk reply)."""

    step: Step
    value_fp: Fingerprint


Message = (
    Heartbeat
    | Gossip
    | Prepare
    | PromiseReply
    | AcceptRequest
    | AcceptedReply
    | Nack
    | Decided
    | DecisionRequest
    | JoinRequest
    | LeaveNotice
    | LeaveConfirmed
    | StateRequest
    | StateOffer
    | AggregateRequest
)
MESSAGE_TYPES: tuple[str, ...] = tuple(
    cls.__struct_config__.tag
    for cls in Message.__args__  # type: ignore[attr-defined]
)


class _Envelope(msgspec.Struct, array_like=True):
    version: int
    body: msgspec.Raw


_envelope_decoder = msgspec.msgpack.Decoder(_Envelope)
_body_decoder = msgspec.msgpack.Decoder(Message)
_encoder = msgspec.msgpack.Encoder()


def encode_message(message: Message) -> bytes:
    """The bytes of one message; a message over ``MAX_FRAME_BYTES`` is the sender's bug."""
    body = _encoder.encode(message)
    data = _encoder.encode(_Envelope(version=PROTOCOL_VERSION, body=msgspec.Raw(body)))
    if len(data) > MAX_FRAME_BYTES:
        raise LocalProtocolError(
            f"{type(message).__name__} encodes to {len(data)} bytes > MAX_FRAME_BYTES "
            f"({MAX_FRAME_BYTES})",
            reason="oversized",
        )
    return data


def decode_message(data: bytes | bytearray | memoryview) -> Message:
    """Parse and validate one message; ``RemoteProtocolError`` on any bad input."""
    if len(data) > MAX_FRAME_BYTES:
        raise RemoteProtocolError(
            f"frame of {len(data)} bytes exceeds MAX_FRAME_BYTES ({MAX_FRAME_BYTES})",
            reason="oversized",
        )
    try:
        envelope = _envelope_decoder.decode(data)
    except msgspec.DecodeError as error:  # ValidationError is a subclass
        raise RemoteProtocolError(f"malformed envelope: {error}", reason="malformed") from None
    if envelope.version != PROTOCOL_VERSION:
        raise RemoteProtocolError(
            f"protocol version {envelope.version} is not supported (this node speaks "
            f"{PROTOCOL_VERSION})",
            reason="version",
        )
    try:
        return _body_decoder.decode(envelope.body)
    except msgspec.DecodeError as error:
        raise RemoteProtocolError(f"malformed message: {error}", reason="malformed") from None
