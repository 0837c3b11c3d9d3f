"""The acceptor's durable aggregate bytes: writes that a crash can tear but never turn
into wrong bytes, reload verified by the real fingerprint, pruning to the last few
steps, damaged slots skipped with their reason."""

from __future__ import annotations

import os

import pytest
import torch

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.runtime.aggregate_store import (
    HEADER_BYTES,
    MAX_SLOTS,
    SPARE_SLOTS,
    AggregateStore,
    AggregateStoreError,
)

PARAMS = 1000


def aggregate(seed: int) -> tuple[torch.Tensor, str]:
    tensor = torch.randn(PARAMS, generator=torch.Generator().manual_seed(seed))
    return tensor, fingerprint_hex(tensor)


def payload(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.numpy()).cast("B")


def fingerprint(data: bytearray) -> str:
    return fingerprint_hex(torch.frombuffer(data, dtype=torch.float32))


def reopen(store: AggregateStore) -> tuple[AggregateStore, list, dict]:
    """A new process's view of the same folder: what a restarted worker reloads."""
    fresh = AggregateStore(store.folder, store.payload_bytes)
    result = fresh.load(fingerprint)
    held = [(entry.step, entry.agg_fp) for entry in result.held]
    return fresh, held, {skip.path.name: skip.reason for skip in result.skipped}


@pytest.fixture
def store(tmp_path):
    store = AggregateStore(tmp_path / "aggregates", PARAMS * 4)
    assert store.load(fingerprint).held == []
    return store


def test_written_aggregates_reload_bit_exact_after_a_restart(store):
    first, first_fp = aggregate(1)
    second, second_fp = aggregate(2)
    store.write(7, first_fp, payload(first))
    store.write(8, second_fp, payload(second))
    store.write(8, second_fp, payload(second))  # held already: no second copy
    assert len(list(store.folder.iterdir())) == 2
    fresh, held, skipped = reopen(store)
    assert (held, skipped) == ([(7, first_fp), (8, second_fp)], {})
    loaded = fresh.load(fingerprint).held[0]
    assert torch.equal(torch.frombuffer(loaded.payload, dtype=torch.float32), first)


def test_a_stored_aggregate_reads_back_until_its_slot_is_freed(store):
    """The worker serves the aggregates of steps it applied from here, not memory."""
    first, first_fp = aggregate(1)
    second, second_fp = aggregate(2)
    store.write(7, first_fp, payload(first))
    store.write(8, second_fp, payload(second))
    read = store.read(7, first_fp)
    assert read is not None and torch.equal(torch.frombuffer(read, dtype=torch.float32), first)
    assert store.read(7, second_fp) is None  # another value of that step: not held
    assert store.read(9, second_fp) is None
    store.prune(keep_from_step=8)
    assert store.read(7, first_fp) is None  # freed
    read = store.read(8, second_fp)
    assert read is not None and torch.equal(torch.frombuffer(read, dtype=torch.float32), second)
    fresh, _, _ = reopen(store)
    assert fresh.read(8, second_fp) == read  # after a restart too


def test_a_torn_or_damaged_slot_is_skipped_with_its_reason_and_reused(store):
    good, good_fp = aggregate(1)
    flipped, flipped_fp = aggregate(2)
    torn, torn_fp = aggregate(3)
    other, other_fp = aggregate(4)
    for step, (tensor, agg_fp) in enumerate([(good, good_fp), (flipped, flipped_fp)]):
        store.write(step, agg_fp, payload(tensor))
    torn_path = store.write(2, torn_fp, payload(torn))
    header_path = store.write(3, other_fp, payload(other))
    # Bit rot in a payload; a write a crash cut short (the new header over half of the
    # old payload); a damaged header; a stranger in the folder.
    rotten = bytearray(store.slot_path(1).read_bytes())
    rotten[-5] ^= 0x40
    store.slot_path(1).write_bytes(bytes(rotten))
    with open(torn_path, "r+b") as handle:
        handle.seek(HEADER_BYTES + 8)
        handle.write(b"\x7f" * 100)
    with open(header_path, "r+b") as handle:
        handle.seek(12)
        handle.write(b"\x01")  # inside the step field: the header's crc catches it
    (store.folder / "notes.txt").write_text("not ours")

    fresh, held, skipped = reopen(store)
    assert held == [(0, good_fp)]
    assert "differs from" in skipped["slot-01.agg"], skipped
    assert "differs from" in skipped["slot-02.agg"], skipped
    assert skipped["slot-03.agg"] == "header checksum mismatch"
    assert skipped["notes.txt"] == "not an aggregate slot name"
    # A skipped slot is free: the next write reuses it instead of growing the folder.
    fresh.write(9, other_fp, payload(other))
    assert sorted(p.name for p in fresh.folder.glob("slot-*")) == [
        f"slot-{i:02d}.agg" for i in range(4)
    ]
    assert reopen(fresh)[1] == [(0, good_fp), (9, other_fp)]


def test_prune_frees_old_steps_keeps_few_spare_slots_and_bounds_the_slots(store):
    tensor, agg_fp = aggregate(1)
    for step in range(10):
        store.write(step, agg_fp, payload(tensor))
    freed = store.prune(keep_from_step=6)
    assert [step for step, _ in freed] == [0, 1, 2, 3, 4, 5]
    assert [step for step, _ in store.stored()] == [6, 7, 8, 9]
    assert len(list(store.folder.glob("slot-*"))) == 4 + SPARE_SLOTS
    # A freed slot does not come back after a restart.
    assert [step for step, _ in reopen(store)[1]] == [6, 7, 8, 9]
    # New steps reuse the freed slots before the folder grows.
    store.write(10, agg_fp, payload(tensor))
    assert len(list(store.folder.glob("slot-*"))) == 4 + SPARE_SLOTS

    for step in range(100, 100 + MAX_SLOTS):
        store.write(step, agg_fp, payload(tensor))
    assert len(list(store.folder.glob("slot-*"))) == MAX_SLOTS
    remaining = [step for step, _ in store.stored()]
    assert len(remaining) == MAX_SLOTS and remaining[-1] == 100 + MAX_SLOTS - 1
    assert 6 not in remaining  # the oldest steps' slots were reused first


def test_prune_keeps_the_pinned_values_of_older_steps_across_a_restart(store):
    """node_core.aggregates_to_keep pins the values the kept acceptor records accepted:
    a majority restarting from older checkpoints decides those steps again, and
    only a kept copy can serve the value each retry must re-propose."""
    tensor, agg_fp = aggregate(1)
    rival, rival_fp = aggregate(2)
    for step in range(10):
        store.write(step, agg_fp, payload(tensor))
    store.write(3, rival_fp, payload(rival))  # a value this node held but never accepted
    freed = store.prune(keep_from_step=6, keep=frozenset({(2, agg_fp), (4, agg_fp)}))
    assert (3, rival_fp) in freed and (2, agg_fp) not in freed
    assert [step for step, _ in store.stored()] == [2, 4, 6, 7, 8, 9]
    assert [step for step, _ in reopen(store)[1]] == [2, 4, 6, 7, 8, 9]


def test_the_store_refuses_names_and_sizes_that_are_not_an_aggregate(store):
    tensor, agg_fp = aggregate(1)
    with pytest.raises(AggregateStoreError, match="fingerprint"):
        store.write(1, "../../etc/passwd", payload(tensor))
    with pytest.raises(AggregateStoreError, match="bytes"):
        store.write(1, agg_fp, b"\0" * 8)
    with pytest.raises(AggregateStoreError, match="step"):
        store.write(-1, agg_fp, payload(tensor))
    assert store.stored() == [] and os.listdir(store.folder) == []
