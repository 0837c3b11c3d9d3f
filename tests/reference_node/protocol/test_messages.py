"""Wire messages: round trips, limits, and typed errors on bad bytes."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmshake.reference_node.protocol import messages as M
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError

VALUE = M.StepValue(agg_fp="ab12", contributors=["a", "b"])
EXAMPLES = [
    M.Heartbeat(sender="n1", incarnation=2, seq=9),
    M.Gossip(
        sender="n1",
        items=[M.GossipItem(subject="n2", incarnation=1, status="suspect", origin="n1")],
    ),
    M.Prepare(sender="n1", step=4, ballot=(2, 1)),
    M.PromiseReply(
        sender="n1", step=4, ballot=(2, 1), accepted_ballot=(0, 0), accepted_value=VALUE
    ),
    M.AcceptRequest(sender="n1", step=4, ballot=(2, 1), value=VALUE),
    M.AcceptedReply(sender="n1", step=4, ballot=(2, 1), value_fp="ab12"),
    M.Nack(sender="n1", step=4, ballot=(2, 1), promised=(3, 0)),
    M.Decided(sender="n1", step=4, value=VALUE, quorum=["a", "b"]),
    M.DecisionRequest(sender="n2", step=4),
    M.JoinRequest(sender="n9", incarnation=3),
    M.LeaveNotice(sender="n9", incarnation=3),
    M.StateRequest(sender="n9", incarnation=3),
    M.StateOffer(sender="n1", step=4, param_fp="cd", nbytes=100),
    M.AggregateRequest(sender="n1", step=4, value_fp="ab12"),
    M.LeaveConfirmed(sender="n1", step=9),
]


def test_every_message_type_round_trips():
    assert {type(m).__struct_config__.tag for m in EXAMPLES} == set(M.MESSAGE_TYPES)
    for message in EXAMPLES:
        assert M.decode_message(M.encode_message(message)) == message


def _body(message_dict: dict) -> bytes:
    return msgspec.msgpack.encode(
        [M.PROTOCOL_VERSION, msgspec.Raw(msgspec.msgpack.encode(message_dict))]
    )


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "malformed"),
        (b"\x00\x01\x02", "malformed"),
        (msgspec.msgpack.encode([M.PROTOCOL_VERSION + 1, {"type": "heartbeat"}]), "version"),
        (msgspec.msgpack.encode([1, {"type": "heartbeat"}]), "version"),
        (b"\x92\x01" + b"\x00" * (M.MAX_FRAME_BYTES), "oversized"),
        (_body({"type": "nosuch", "sender": "a"}), "malformed"),
        (_body({"type": "heartbeat", "sender": "a", "incarnation": -1, "seq": 0}), "malformed"),
        (_body({"type": "heartbeat", "sender": "a" * 65, "incarnation": 0, "seq": 0}), "malformed"),
        (_body({"type": "heartbeat", "sender": "a b", "incarnation": 0, "seq": 0}), "malformed"),
        (
            _body({"type": "heartbeat", "sender": "a", "incarnation": 0, "seq": 0, "x": 1}),
            "malformed",
        ),
        (
            _body(
                {
                    "type": "gossip",
                    "sender": "a",
                    "items": [{"subject": "b", "incarnation": 0, "status": "alive", "origin": "a"}]
                    * (M.MAX_GOSSIP_ITEMS + 1),
                }
            ),
            "malformed",
        ),
        (
            _body(
                {
                    "type": "decided",
                    "sender": "a",
                    "step": 1,
                    "value": {"agg_fp": "ab", "contributors": ["b", "a"]},
                }
            ),
            "malformed",
        ),
        (
            _body(
                {
                    "type": "decided",
                    "sender": "a",
                    "step": 1,
                    "value": {"agg_fp": "AB", "contributors": []},
                }
            ),
            "malformed",
        ),
        (
            _body(
                {
                    "type": "promise",
                    "sender": "a",
                    "step": 1,
                    "ballot": [1, 0],
                    "accepted_ballot": [0, 0],
                }
            ),
            "malformed",
        ),
    ],
)
def test_bad_bytes_raise_a_typed_error_with_a_reason(data, reason):
    with pytest.raises(RemoteProtocolError) as error:
        M.decode_message(data)
    assert error.value.reason == reason


def test_an_oversized_message_is_refused_when_encoding():
    names = [f"node-{i:04d}-{'x' * 54}" for i in range(M.MAX_CLUSTER_NODES)]
    value = M.StepValue(agg_fp="ab", contributors=sorted(names))
    with pytest.raises(LocalProtocolError):
        M.encode_message(M.Decided(sender="a", step=1, value=value, quorum=sorted(names)))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_remote_protocol_error(data):
    try:
        message = M.decode_message(data)
    except RemoteProtocolError:
        return
    assert M.decode_message(M.encode_message(message)) == message
