"""Signed harness messages: the MAC, the sequence guard, and what a node keeps across
a restart (DESIGN.md, "MQTT": a forged or replayed command is dropped and counted)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmshake.reference_node.runtime.links import PeerAddress
from swarmshake.reference_node.runtime.mqtt import MqttAgent, MqttSettings
from swarmshake.reference_node.runtime.mqtt_messages import (
    SEQ_WINDOW,
    AddressBookUpdate,
    Announcement,
    Leave,
    PayloadError,
    SequenceGuard,
    Topics,
    encode,
    harness_key,
    open_signed,
    sign,
)

RUN_KEY = bytes.fromhex("00112233445566778899aabbccddeeff" * 2)
KEY = harness_key(RUN_KEY)
TOPIC = Topics("swarmshake/r1", "n2").command()


def test_a_signed_message_opens_only_under_its_key_and_topic():
    payload = sign(KEY, TOPIC, 7, Leave(reason="test"))
    seq, body = open_signed(KEY, TOPIC, payload)
    assert seq == 7 and body == encode(Leave(reason="test"))
    other_topic = Topics("swarmshake/r1", "n3").command()
    for key, topic in ((harness_key(bytes(32)), TOPIC), (KEY, other_topic)):
        with pytest.raises(PayloadError) as error:
            open_signed(key, topic, payload)
        assert error.value.reason == "bad_mac"


def test_the_harness_key_is_not_the_run_key_nor_a_frame_key():
    from swarmshake.reference_node.runtime.frames import derive_node_key

    assert KEY not in (RUN_KEY, derive_node_key(RUN_KEY, "n2"))
    with pytest.raises(ValueError):
        harness_key(b"short")


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda p: p.replace(b'"seq":7', b'"seq":8'), "bad_mac"),  # a later number
        (lambda p: p.replace(b"test", b"tesT"), "bad_mac"),  # another body
        (lambda p: b'{"command":"leave"}', "unsigned"),  # issue 16's anonymous command
        (lambda p: p[:-2], "malformed"),
        (lambda p: p.replace(b'"seq":7', b'"seq":0'), "malformed"),
        (lambda p: p.replace(b'"mac":"', b'"mac":"zz'), "malformed"),
    ],
)
def test_tampered_payloads_are_refused_by_reason(tamper, reason):
    payload = sign(KEY, TOPIC, 7, Leave(reason="test"))
    with pytest.raises(PayloadError) as error:
        open_signed(KEY, TOPIC, tamper(payload))
    assert error.value.reason == reason


def test_sequence_guard_takes_each_number_once_and_reordered_ones_within_the_window():
    guard = SequenceGuard()
    assert [guard.check(s) for s in (5, 3, 5, 3, 4)] == ["ok", "ok", "seen", "seen", "ok"]
    assert guard.check(5 + SEQ_WINDOW + 10) == "ok"
    # Far behind the highest: too old to tell whether it was seen, refused.
    assert guard.check(6) == "stale"
    assert guard.check(5 + SEQ_WINDOW + 9) == "ok"  # just behind: overtaken, taken once
    assert guard.check(5 + SEQ_WINDOW + 9) == "seen"


def test_sequence_guard_refuses_everything_at_or_below_its_starting_floor():
    guard = SequenceGuard(floor=40)
    assert [guard.check(s) for s in (1, 40, 41, 41)] == ["stale", "stale", "ok", "seen"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=5000), max_size=200))
def test_sequence_guard_never_accepts_a_number_twice_and_stays_bounded(seqs):
    guard = SequenceGuard(window=64)
    accepted = [s for s in seqs if guard.check(s) == "ok"]
    assert len(accepted) == len(set(accepted))
    assert len(guard._seen) <= 65
    # Every number above the first-seen maximum minus the window was either taken
    # or is a repeat: a reordered command is not lost.
    for index, seq in enumerate(seqs):
        if seq > max(seqs[:index], default=0):
            assert seq in accepted


def agent(tmp_path, got):
    return MqttAgent(
        MqttSettings(topic_prefix="swarmshake/r1"),
        node_id="n2",
        announcement=Announcement(node="n2", incarnation=1),
        run_key=RUN_KEY,
        on_command=got.append,
        on_address_book=got.append,
        on_drop=lambda kind, reason: got.append((kind, reason)),
        state_dir=tmp_path,
    )


def test_replays_are_refused_across_a_restart_and_the_retained_book_is_taken_once(tmp_path):
    got: list = []
    first = agent(tmp_path, got)
    topics = first.topics
    book = AddressBookUpdate(
        peers={"n1": PeerAddress(host="127.0.0.1", control_port=7000, bulk_port=7001)}
    )
    book_payload = sign(KEY, topics.address_book(), 10, book)
    old_book = sign(KEY, topics.address_book(), 9, book)
    leave = sign(KEY, topics.command(), 11, Leave(reason="test"))
    first.handle_message(topics.address_book(), book_payload)
    first.handle_message(topics.address_book(), book_payload)  # redelivered on reconnect
    first.handle_message(topics.command(), leave)
    first.handle_message(topics.command(), leave)
    assert got == [book, Leave(reason="test"), ("command", "replay")]
    assert first.stats.duplicates == 1

    got.clear()
    second = agent(tmp_path, got)  # the node restarted: a new incarnation
    second.handle_message(topics.address_book(), book_payload)  # still the retained one
    second.handle_message(topics.address_book(), book_payload)
    second.handle_message(topics.address_book(), old_book)
    second.handle_message(topics.command(), leave)
    assert got == [book, ("addressbook", "replay"), ("command", "replay")]
    assert second.stats.bad_payloads == {"addressbook:replay": 1, "command:replay": 1}

    got.clear()
    third = agent(tmp_path, got)  # and again: the book floor did not slide down
    third.handle_message(topics.address_book(), old_book)
    third.handle_message(topics.address_book(), book_payload)
    assert got == [("addressbook", "replay"), book]


def test_an_unreadable_sequence_file_starts_from_zero_and_still_checks_macs(tmp_path):
    (tmp_path / MqttAgent.SEQ_FILE).write_bytes(b"\x00garbage")
    got: list = []
    node = agent(tmp_path, got)
    topic = node.topics.command()
    node.handle_message(topic, sign(harness_key(bytes(32)), topic, 1, Leave()))
    node.handle_message(topic, sign(KEY, topic, 1, Leave()))
    assert got == [("command", "bad_mac"), Leave()]
