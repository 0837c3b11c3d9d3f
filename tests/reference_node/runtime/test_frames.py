"""Frame codec: round trips, and every kind of bad input is dropped and counted."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmshake.reference_node.runtime.frames import (
    FRAME_VERSION,
    HEADER_BYTES,
    TAG_BYTES,
    Channel,
    DropCounter,
    DropReason,
    FrameDecoder,
    FrameEncoder,
    FrameError,
    FrameVerifier,
    PayloadCodec,
    derive_node_key,
)

RUN_KEY = b"k" * 32


def make_pair(channel=Channel.CONTROL, incarnation=1, sender="n1", receiver="n2", run_key=RUN_KEY):
    counter = DropCounter()
    encoder = FrameEncoder(
        run_key=run_key, sender=sender, incarnation=incarnation, receiver=receiver, channel=channel
    )
    verifier = FrameVerifier(run_key=RUN_KEY, receiver="n2", counter=counter)
    return encoder, verifier, counter


def test_round_trip_in_order_with_sequence_numbers():
    encoder, verifier, counter = make_pair()
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    stream = b"".join(encoder.encode_bytes(f"m{i}".encode()) for i in range(5))
    frames = decoder.feed(stream)
    assert [f.payload for f in frames] == [f"m{i}".encode() for i in range(5)]
    assert [f.header.sequence for f in frames] == [1, 2, 3, 4, 5]
    assert frames[0].header.sender == "n1" and frames[0].header.incarnation == 1
    assert counter.total == 0


def test_keys_differ_per_node_and_run():
    assert derive_node_key(RUN_KEY, "n1") != derive_node_key(RUN_KEY, "n2")
    assert derive_node_key(RUN_KEY, "n1") != derive_node_key(b"x" * 32, "n1")
    with pytest.raises(FrameError):
        derive_node_key(b"short", "n1")
    with pytest.raises(FrameError):
        derive_node_key(RUN_KEY, "bad id with spaces")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"receiver": "n3"}, DropReason.BAD_TAG),  # recorded on another link
        ({"run_key": b"z" * 32}, DropReason.BAD_TAG),  # another run
    ],
)
def test_frames_for_another_link_or_run_are_rejected(kwargs, reason):
    encoder, verifier, counter = make_pair(**kwargs)
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    assert decoder.feed(encoder.encode_bytes(b"hello")) == []
    assert counter.counts == {reason: 1}
    assert decoder.closed is None  # framing intact: the connection survives


def test_replay_on_same_or_new_connection_is_dropped():
    encoder, verifier, counter = make_pair()
    first = encoder.encode_bytes(b"a")
    second = encoder.encode_bytes(b"b")
    assert len(FrameDecoder(verifier, Channel.CONTROL).feed(first + second + first)) == 2
    # A new connection (after a redial) shares the receiver's replay guard.
    assert FrameDecoder(verifier, Channel.CONTROL).feed(second) == []
    assert counter.counts == {DropReason.REPLAY: 2}


def test_old_incarnation_is_stale_and_new_incarnation_restarts_sequence():
    old, verifier, counter = make_pair(incarnation=1)
    new = FrameEncoder(
        run_key=RUN_KEY, sender="n1", incarnation=2, receiver="n2", channel=Channel.CONTROL
    )
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    stale = old.encode_bytes(b"old")
    assert len(decoder.feed(new.encode_bytes(b"new"))) == 1
    assert decoder.feed(stale) == []
    assert counter.counts == {DropReason.STALE_INCARNATION: 1}


def test_channels_have_separate_sequences():
    control, verifier, counter = make_pair()
    bulk = FrameEncoder(
        run_key=RUN_KEY, sender="n1", incarnation=1, receiver="n2", channel=Channel.BULK
    )
    assert len(FrameDecoder(verifier, Channel.CONTROL).feed(control.encode_bytes(b"c"))) == 1
    assert len(FrameDecoder(verifier, Channel.BULK).feed(bulk.encode_bytes(b"b"))) == 1
    assert counter.total == 0


def test_frame_on_the_wrong_channel_closes_the_connection():
    encoder, verifier, counter = make_pair(channel=Channel.BULK)
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    assert decoder.feed(encoder.encode_bytes(b"x")) == []
    assert decoder.closed == DropReason.WRONG_CHANNEL
    assert counter.counts == {DropReason.WRONG_CHANNEL: 1}


def test_oversized_header_is_rejected_before_buffering_the_body():
    _, verifier, counter = make_pair()
    encoder = FrameEncoder(
        run_key=RUN_KEY,
        sender="n1",
        incarnation=1,
        receiver="n2",
        channel=Channel.CONTROL,
        payload_cap_bytes=1 << 20,
    )
    frame = encoder.encode_bytes(b"x" * (verifier.cap(Channel.CONTROL) + 1))
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    assert decoder.feed(frame[:HEADER_BYTES]) == []
    assert decoder.closed == DropReason.OVERSIZED
    assert decoder.feed(frame[HEADER_BYTES:]) == []  # ignored after a fatal drop
    assert counter.counts == {DropReason.OVERSIZED: 1}


def test_encoder_refuses_payload_over_the_cap():
    encoder, _, _ = make_pair()
    with pytest.raises(FrameError, match="exceeds the CONTROL cap"):
        encoder.encode_bytes(b"x" * (64 * 1024 + 1))


def test_wrong_version_closes_the_connection():
    encoder, verifier, counter = make_pair()
    frame = bytearray(encoder.encode_bytes(b"x"))
    frame[4] = FRAME_VERSION + 1
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    assert decoder.feed(bytes(frame)) == []
    assert decoder.closed == DropReason.WRONG_VERSION
    assert counter.counts == {DropReason.WRONG_VERSION: 1}


def test_half_frame_at_eof_is_counted_truncated():
    encoder, verifier, counter = make_pair()
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    frame = encoder.encode_bytes(b"payload")
    assert decoder.feed(frame[:-5]) == []
    decoder.eof()
    assert counter.counts == {DropReason.TRUNCATED: 1}


def test_unknown_sender_is_refused_when_a_book_is_given():
    encoder, _, _ = make_pair(sender="n9")
    counter = DropCounter()
    verifier = FrameVerifier(
        run_key=RUN_KEY, receiver="n2", counter=counter, known_sender={"n1"}.__contains__
    )
    assert FrameDecoder(verifier, Channel.CONTROL).feed(encoder.encode_bytes(b"x")) == []
    assert counter.counts == {DropReason.UNKNOWN_SENDER: 1}


class Ping(msgspec.Struct, tag="ping"):
    seq: int


def test_malformed_payload_is_counted():
    encoder, verifier, counter = make_pair()
    codec = PayloadCodec(Ping, counter)
    frames = FrameDecoder(verifier, Channel.CONTROL).feed(
        encoder.encode_bytes(codec.encode(Ping(seq=3))) + encoder.encode_bytes(b"\xc1garbage")
    )
    assert [codec.decode(f) for f in frames] == [Ping(seq=3), None]
    assert counter.counts == {DropReason.MALFORMED_PAYLOAD: 1}


# --- fuzzing ---------------------------------------------------------------------------------

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=400), st.lists(st.integers(1, 64), max_size=8))
def test_random_bytes_never_crash_and_are_counted(data, splits):
    _, verifier, counter = make_pair()
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    frames, position = [], 0
    for size in splits:
        frames += decoder.feed(data[position : position + size])
        position += size
    frames += decoder.feed(data[position:])
    decoder.eof()
    assert frames == []  # random bytes never authenticate
    assert (counter.total >= 1) == bool(data)


@FUZZ
@given(
    payloads=st.lists(st.binary(max_size=64), min_size=1, max_size=5),
    target=st.integers(0, 10_000),
    flip=st.integers(1, 255),
    cut=st.none() | st.integers(0, 10_000),
    splits=st.lists(st.integers(1, 97), max_size=6),
)
def test_corrupted_or_truncated_streams_deliver_only_genuine_frames(
    payloads, target, flip, cut, splits
):
    encoder, verifier, counter = make_pair()
    stream = bytearray(b"".join(encoder.encode_bytes(p) for p in payloads))
    stream[target % len(stream)] ^= flip  # one corrupted byte, anywhere
    if cut is not None:
        stream = stream[: cut % len(stream)]
    decoder = FrameDecoder(verifier, Channel.CONTROL)
    frames, position = [], 0
    for size in splits:
        frames += decoder.feed(bytes(stream[position : position + size]))
        position += size
    frames += decoder.feed(bytes(stream[position:]))
    decoder.eof()
    delivered = [(f.header.sequence, f.payload) for f in frames]
    genuine = {(i + 1, p) for i, p in enumerate(payloads)}
    assert set(delivered) <= genuine  # nothing forged, nothing altered
    assert len(delivered) < len(payloads)  # the corrupted frame never gets through
    # Every received byte that did not arrive as a genuine frame is counted as a drop.
    delivered_bytes = sum(HEADER_BYTES + len(f.payload) + TAG_BYTES for f in frames)
    assert (counter.total >= 1) == (len(stream) > delivered_bytes)


@FUZZ
@given(
    st.lists(
        st.sampled_from(["fresh", "replay", "stale", "wrong_hmac", "oversized", "version"]),
        max_size=12,
    )
)
def test_mixed_bad_frames_are_each_counted_by_reason(kinds):
    _, verifier, counter = make_pair()
    current = FrameEncoder(
        run_key=RUN_KEY, sender="n1", incarnation=5, receiver="n2", channel=Channel.CONTROL
    )
    old = FrameEncoder(
        run_key=RUN_KEY, sender="n1", incarnation=4, receiver="n2", channel=Channel.CONTROL
    )
    big = FrameEncoder(
        run_key=RUN_KEY,
        sender="n1",
        incarnation=5,
        receiver="n2",
        channel=Channel.CONTROL,
        payload_cap_bytes=1 << 20,
    )
    forger = FrameEncoder(
        run_key=b"q" * 32, sender="n1", incarnation=5, receiver="n2", channel=Channel.CONTROL
    )
    sent: list[bytes] = []
    expected: dict[str, int] = {}
    delivered = 0
    fresh_seen = False
    for kind in kinds:
        decoder = FrameDecoder(verifier, Channel.CONTROL)  # one connection per frame
        if kind == "fresh":
            frame = current.encode_bytes(b"ok")
            sent.append(frame)
            fresh_seen, want = True, None
        elif kind == "replay":
            if not sent:
                continue
            frame, want = sent[0], DropReason.REPLAY
        elif kind == "stale":
            frame = old.encode_bytes(b"old")
            want = DropReason.STALE_INCARNATION if fresh_seen else None
            if want is None:
                continue  # before any incarnation-5 frame an incarnation-4 frame is valid
        elif kind == "wrong_hmac":
            frame, want = forger.encode_bytes(b"forged"), DropReason.BAD_TAG
        elif kind == "oversized":
            frame, want = big.encode_bytes(b"x" * (70 * 1024)), DropReason.OVERSIZED
        else:
            raw = bytearray(current.encode_bytes(b"v"))
            raw[4] = 99
            frame, want = bytes(raw), DropReason.WRONG_VERSION
        got = decoder.feed(frame)
        decoder.eof()
        if want is None:
            delivered += 1
            assert len(got) == 1
        else:
            assert got == []
            expected[want] = expected.get(want, 0) + 1
    assert counter.counts == expected
    assert delivered == kinds.count("fresh")
    assert HEADER_BYTES + TAG_BYTES == 42 + 32
