from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmshake.reference_node.checkpoint import (
    CheckpointError,
    StateAssembler,
    file_chunks,
    list_checkpoints,
    load_latest,
    read_checkpoint,
    remove_stale_temporaries,
    state_chunks,
    write_checkpoint,
)
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.state import TrainingState
from swarmshake.reference_node.training.step import Replica


def trained_state(optimizer: str = "sgd", steps: int = 3) -> TrainingState:
    config = TrainingConfig(seed=2, hidden=[32, 32], batch_per_node=8, optimizer=optimizer)  # type: ignore[arg-type]
    replica = Replica(config, "n1")
    for _ in range(steps):
        replica.apply(replica.step, replica.contribution().gradient)
    return replica.state


def assert_same_state(loaded: TrainingState, original: TrainingState) -> None:
    assert loaded.step == original.step and loaded.update_count == original.update_count
    assert loaded.optimizer == original.optimizer
    assert torch.equal(loaded.params, original.params)
    assert loaded.buffers.keys() == original.buffers.keys()
    for name, tensor in original.buffers.items():
        assert torch.equal(loaded.buffers[name], tensor)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_round_trip(tmp_path: Path, optimizer: str) -> None:
    state = trained_state(optimizer)
    info = write_checkpoint(tmp_path, state, node="n1")
    assert info.path.exists() and info.step == 3 and info.nbytes == info.path.stat().st_size
    assert info.param_fp == state.param_fingerprint()
    assert_same_state(read_checkpoint(info.path), state)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_loaded_state_keeps_training_identically(tmp_path: Path) -> None:
    config = TrainingConfig(seed=2, hidden=[32, 32], batch_per_node=8)
    live = Replica(config, "n1")
    for _ in range(3):
        live.apply(live.step, live.contribution().gradient)
    info = write_checkpoint(tmp_path, live.state)
    restored = Replica(config, "n1", state=read_checkpoint(info.path))
    for _ in range(3):
        live.apply(live.step, live.contribution().gradient)
        restored.apply(restored.step, restored.contribution().gradient)
    assert live.param_fingerprint() == restored.param_fingerprint()


def corrupt_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "truncated"),
        (lambda p: p.write_bytes(p.read_bytes()[:20]), "truncated"),
        (lambda p: p.write_bytes(b""), "truncated"),
        (lambda p: corrupt_byte(p, p.stat().st_size - 5), "payload checksum mismatch"),
        (lambda p: corrupt_byte(p, 40), "header checksum mismatch"),
        (lambda p: corrupt_byte(p, 0), "bad magic"),
        (lambda p: p.write_bytes(p.read_bytes() + b"\0"), "past its payload"),
    ],
    ids=["torn-half", "torn-header", "empty", "payload-bit", "header-bit", "magic", "extended"],
)
def test_damaged_newest_is_skipped_with_its_reason_and_the_previous_loaded(
    tmp_path: Path, damage, reason: str
) -> None:
    older = trained_state(steps=2)
    newer = trained_state(steps=3)
    write_checkpoint(tmp_path, older)
    info = write_checkpoint(tmp_path, newer)
    damage(info.path)
    with pytest.raises(CheckpointError, match=reason):
        read_checkpoint(info.path)
    result = load_latest(tmp_path)
    assert result.state is not None and result.state.step == 2
    assert_same_state(result.state, older)
    assert [(s.path, reason in s.reason) for s in result.skipped] == [(info.path, True)]


def test_a_bit_flip_in_any_byte_of_the_file_is_detected(tmp_path: Path) -> None:
    config = TrainingConfig(seed=2, input_dim=2, output_dim=1, hidden=[2], batch_per_node=2)
    info = write_checkpoint(tmp_path, Replica(config, "n1").state)
    original = info.path.read_bytes()
    for offset in range(len(original)):
        data = bytearray(original)
        data[offset] ^= 1 << (offset % 8)  # every byte, every bit position across bytes
        info.path.write_bytes(bytes(data))
        with pytest.raises(CheckpointError):
            read_checkpoint(info.path)


def test_renamed_file_with_a_wrong_step_is_refused(tmp_path: Path) -> None:
    info = write_checkpoint(tmp_path, trained_state(steps=3))
    renamed = info.path.with_name("ckpt-000000000009.swck")
    os.rename(info.path, renamed)
    with pytest.raises(CheckpointError, match="file name says step 9, header says 3"):
        read_checkpoint(renamed)


def test_temporary_of_an_unfinished_write_is_reported_and_removed(tmp_path: Path) -> None:
    info = write_checkpoint(tmp_path, trained_state(steps=2))
    leftover = tmp_path / ".ckpt-000000000003.swck.tmp.4242"
    leftover.write_bytes(info.path.read_bytes()[:100])
    result = load_latest(tmp_path)
    assert result.state is not None and result.state.step == 2
    assert [s.path for s in result.skipped] == [leftover]
    assert "never finished" in result.skipped[0].reason
    assert remove_stale_temporaries(tmp_path) == [leftover]
    assert not leftover.exists()


def test_nothing_valid_loads_nothing(tmp_path: Path) -> None:
    assert load_latest(tmp_path / "missing").state is None
    info = write_checkpoint(tmp_path, trained_state())
    info.path.write_bytes(b"garbage")
    result = load_latest(tmp_path)
    assert result.state is None and result.path is None and len(result.skipped) == 1


def test_retention_keeps_the_newest(tmp_path: Path) -> None:
    config = TrainingConfig(seed=2, hidden=[8], batch_per_node=4)
    replica = Replica(config, "n1")
    for _ in range(6):
        write_checkpoint(tmp_path, replica.state, keep=2)
        replica.apply(replica.step, replica.contribution().gradient)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [5, 4]
    with pytest.raises(ValueError, match="keep"):
        write_checkpoint(tmp_path, replica.state, keep=0)


@pytest.mark.parametrize("chunk_bytes", [1, 7, 4096, 1 << 22])
def test_streamed_state_reassembles_and_verifies(chunk_bytes: int) -> None:
    state = trained_state("adam")
    assembler = StateAssembler()
    chunks = list(state_chunks(state, chunk_bytes=chunk_bytes if chunk_bytes > 1 else 64))
    if chunk_bytes == 1:  # also feed byte by byte, across every boundary
        chunks = [bytes(c)[i : i + 1] for c in chunks for i in range(len(c))][:5000] + [
            b"".join(bytes(c) for c in chunks)[5000:]
        ]
    for chunk in chunks:
        assembler.feed(chunk)
    assert_same_state(assembler.finish(), state)


def test_a_stream_in_one_chunk_reassembles() -> None:
    state = trained_state()
    assembler = StateAssembler()
    assembler.feed(b"".join(bytes(c) for c in state_chunks(state)))
    assert_same_state(assembler.finish(), state)


def test_a_checkpoint_file_streams_as_chunks(tmp_path: Path) -> None:
    state = trained_state()
    info = write_checkpoint(tmp_path, state)
    assembler = StateAssembler()
    for chunk in file_chunks(info.path, chunk_bytes=1000):
        assembler.feed(chunk)
    assert_same_state(assembler.finish(), state)


def test_stream_damage_is_detected() -> None:
    state = trained_state()
    whole = b"".join(bytes(c) for c in state_chunks(state))
    flipped = bytearray(whole)
    flipped[-3] ^= 0x80
    assembler = StateAssembler()
    assembler.feed(bytes(flipped))
    with pytest.raises(CheckpointError, match="payload checksum"):
        assembler.finish()
    short = StateAssembler()
    short.feed(whole[:-10])
    with pytest.raises(CheckpointError, match="truncated"):
        short.finish()
    long = StateAssembler()
    with pytest.raises(CheckpointError, match="longer than its header"):
        long.feed(whole + b"x")
    small = StateAssembler(max_payload_bytes=100)
    with pytest.raises(CheckpointError, match="exceeds the 100"):
        small.feed(whole)
    with pytest.raises(CheckpointError, match="bad magic"):
        StateAssembler().feed(b"HTTP/1.1 200 OK\r\n")


STREAM_STATE = trained_state("adam", steps=1)
STREAM_BYTES = b"".join(bytes(c) for c in state_chunks(STREAM_STATE))


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(STREAM_BYTES)), max_size=12))
def test_any_split_reassembles_and_any_truncation_is_refused(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM_BYTES)]
    assembler = StateAssembler()
    for start, end in zip(bounds, bounds[1:], strict=False):
        assembler.feed(STREAM_BYTES[start:end])
    assert_same_state(assembler.finish(), STREAM_STATE)
    if cuts and min(cuts) < len(STREAM_BYTES):
        short = StateAssembler()
        try:
            short.feed(STREAM_BYTES[: min(cuts)])
            short.finish()
        except CheckpointError as error:
            assert "truncated" in error.reason or "bad magic" in error.reason
        else:
            raise AssertionError(f"a stream cut at {min(cuts)} bytes was accepted")


def test_an_unhashed_live_stream_needs_opt_in_and_still_checks_the_parameters() -> None:
    state = trained_state()
    chunks = [bytes(c) for c in state_chunks(state, hash_payload=False)]
    with pytest.raises(CheckpointError, match="no checksum"):
        refusing = StateAssembler()
        for chunk in chunks:
            refusing.feed(chunk)
    accepting = StateAssembler(require_payload_hash=False)
    for chunk in chunks:
        accepting.feed(chunk)
    assert_same_state(accepting.finish(), state)
    whole = bytearray(b"".join(chunks))
    whole[len(chunks[0]) + 11] ^= 0x04  # a parameter byte
    damaged = StateAssembler(require_payload_hash=False)
    damaged.feed(bytes(whole))
    with pytest.raises(CheckpointError, match="parameter fingerprint mismatch"):
        damaged.finish()


def test_a_stream_lands_in_a_reused_buffer(tmp_path: Path) -> None:
    state = trained_state()
    buffer = torch.zeros(1 << 20, dtype=torch.uint8)
    assembler = StateAssembler(payload_buffer=buffer)
    for chunk in state_chunks(state):
        assembler.feed(chunk)
    received = assembler.finish()
    assert_same_state(received, state)
    assert received.params.data_ptr() == buffer.data_ptr()
    too_small = StateAssembler(payload_buffer=torch.zeros(16, dtype=torch.uint8))
    with pytest.raises(CheckpointError, match="does not fit"):
        for chunk in state_chunks(state):
            too_small.feed(chunk)
