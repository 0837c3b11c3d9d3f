"""Sharded aggregation gives the all-to-all aggregate's bits (CPU, the kernels'
torch reference): each owner's ``aggregate_shard`` over its slices, joined in order,
equals ``aggregate`` over the whole gradients, and an int8 payload cut along the
shard bounds decodes to the same values as the whole payload."""

from __future__ import annotations

import pytest
import torch

from swarmshake.kernels import fingerprint_hex
from swarmshake.reference_node.protocol.sharding import shard_bounds
from swarmshake.reference_node.training.aggregation import (
    AggregationError,
    aggregate,
    aggregate_shard,
    join_shards,
)
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.wire import WireEncoder, decode, shard_payload

NAMES = ["n1", "n2", "n3", "n4", "n5"]


def contributions(numel: int, count: int, seed: int, poison: bool) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    rows = {name: torch.randn(numel, generator=generator) for name in NAMES[:count]}
    if poison:  # outliers: the robust rules exclude them per coordinate, the mean
        # drops the whole row (one bad value, in one shard only, decides it)
        rows[NAMES[0]][-1] = float("nan")
        rows[NAMES[1]][numel // 2] = float("inf")
        rows[NAMES[2]][5::13] = -1e30
    return rows


def sharded(config: TrainingConfig, rows: dict[str, torch.Tensor], owners: int) -> torch.Tensor:
    numel = next(iter(rows.values())).numel()
    # What each sender says in its shard keys: its whole gradient is not finite.
    non_finite = frozenset(n for n, r in rows.items() if not bool(torch.isfinite(r).all()))
    parts = []
    for start, end in shard_bounds(numel, owners):
        chosen = {n: r[start:end] for n, r in rows.items()}
        part = aggregate_shard(config, end - start, chosen, non_finite)
        assert not isinstance(part, AggregationError), part
        parts.append(part)
    whole, agg_fp = join_shards(parts)
    assert agg_fp == fingerprint_hex(whole)
    return whole


@pytest.mark.parametrize("rule", ["median", "trimmed_mean", "mean"])
@pytest.mark.parametrize("numel", [1, 255, 1000, 100_003])
@pytest.mark.parametrize("owners", [1, 3, 4, 5])
def test_sharded_equals_all_to_all_bits(rule, numel, owners):
    config = TrainingConfig(aggregation=rule, byzantine_f=1)
    for seed, poison in ((0, False), (1, True)):
        rows = contributions(numel, 5 if rule != "mean" else 4, seed, poison)
        reference = aggregate(config, rows)
        assert torch.equal(
            sharded(config, rows, owners).view(torch.int32), reference.view(torch.int32)
        )
        assert fingerprint_hex(sharded(config, rows, owners)) == fingerprint_hex(reference)


@pytest.mark.parametrize("numel", [1, 300, 1000, 65_537])
@pytest.mark.parametrize("owners", [2, 4, 7])
def test_int8_shards_decode_to_the_whole_payloads_values(numel, owners):
    config = TrainingConfig(wire_dtype="int8")
    gradient = torch.randn(numel, generator=torch.Generator().manual_seed(numel))
    payload, own = WireEncoder(config).encode(gradient)
    whole = decode(config, payload, numel)
    assert torch.equal(whole, own)
    for start, end in shard_bounds(numel, owners):
        piece = shard_payload(config, payload, numel, start, end)
        if end == start:
            assert piece.nbytes == 0
            continue
        assert torch.equal(decode(config, piece, end - start), whole[start:end])


def test_a_non_finite_shard_is_refused_like_the_whole():
    config = TrainingConfig(aggregation="median", byzantine_f=1)
    rows = contributions(600, 3, 0, False)
    for name in ("n1", "n2", "n3"):
        rows[name][10] = float("nan")  # every value bad at one coordinate: no median
    with pytest.raises(AggregationError):
        aggregate(config, rows)
    first, second = shard_bounds(600, 2)
    assert isinstance(
        aggregate_shard(config, first[1], {n: r[: first[1]] for n, r in rows.items()}),
        AggregationError,
    )
    assert not isinstance(
        aggregate_shard(config, 600 - second[0], {n: r[second[0] :] for n, r in rows.items()}),
        AggregationError,
    )


def test_an_owners_input_wait_runs_on_the_nodes_clock():
    """A shard owner asked for an aggregate whose inputs never came refuses after
    ``INPUT_WAIT_S`` of *node* time (the worker's clock, skewed by a clock-skew fault
    as the control process's is), naming the contributors it lacks."""
    from types import SimpleNamespace

    from swarmshake.reference_node.protocol.sharding import aggregate_shard_key
    from swarmshake.reference_node.runtime.bulk import BulkRefusal, BulkRequest
    from swarmshake.reference_node.runtime.clock import NodeClock
    from swarmshake.reference_node.runtime.sharded import INPUT_WAIT_S, ShardExchange

    def owner(drift_ppm: float):
        host = [100.0]
        sent: list[tuple[str, list]] = []
        clock = NodeClock(host=lambda: host[0])
        clock.set_skew(0.0, drift_ppm)
        worker = SimpleNamespace(
            node="n1", clock=clock, config=SimpleNamespace(training=TrainingConfig()),
            replica=SimpleNamespace(model=SimpleNamespace(parameter_count=8)),
            drops=SimpleNamespace(drop=lambda reason, peer: None),
            send_blob=lambda peer, frames: (peer, list(frames)), spawn=lambda sent_: sent.append(sent_),
        )  # fmt: skip
        return ShardExchange(worker), host, sent

    request = BulkRequest(
        kind="shard_aggregate", step=3, key=aggregate_shard_key(0, 2, ["n1", "n2"])
    )
    host_s = 0.7 * INPUT_WAIT_S
    for drift_ppm, refused in ((0.0, False), (500_000.0, True)):  # 0.7 s is 1.05 s at +50 %
        exchange, host, sent = owner(drift_ppm)
        exchange.on_request("n2", request)
        assert sent == []
        host[0] += host_s
        exchange.on_request("n2", request)
        refusals = [f for _, frames in sent for f in frames if isinstance(f, BulkRefusal)]
        assert bool(refusals) == refused, drift_ppm
        if refused:
            assert refusals[0].missing == ["n1", "n2"]


def _owner_exchange(host: list[float]):
    """A ShardExchange of owner n1 on a fake worker whose clock is ``host[0]``; the
    blobs it sends are collected in the returned list."""
    from types import SimpleNamespace

    from swarmshake.reference_node.runtime.clock import NodeClock
    from swarmshake.reference_node.runtime.sharded import ShardExchange

    sent: list[tuple[str, list]] = []
    worker = SimpleNamespace(
        node="n1", clock=NodeClock(host=lambda: host[0]),
        config=SimpleNamespace(training=TrainingConfig()),
        replica=SimpleNamespace(model=SimpleNamespace(parameter_count=8)),
        drops=SimpleNamespace(drop=lambda reason, peer: None),
        send_blob=lambda peer, frames: (peer, list(frames)), spawn=lambda sent_: sent.append(sent_),
    )  # fmt: skip
    return ShardExchange(worker), sent


def test_a_contributor_whose_shard_is_still_arriving_is_late_not_missing():
    """An owner asked for a shard's aggregate refuses after ``INPUT_WAIT_S``, naming
    the contributors it lacks, but only those no chunk came from within that time: a
    100M model's shard (100 MB, 24 chunks) takes seconds on a loaded host, and naming
    its sender would make the next proposal leave a live contributor out."""
    from swarmshake.reference_node.protocol.sharding import aggregate_shard_key, shard_key
    from swarmshake.reference_node.runtime.bulk import BulkChunk, BulkRefusal, BulkRequest
    from swarmshake.reference_node.runtime.sharded import INPUT_WAIT_S

    host = [100.0]
    exchange, sent = _owner_exchange(host)
    request = BulkRequest(
        kind="shard_aggregate", step=3, key=aggregate_shard_key(0, 2, ["n2", "n3"])
    )

    def chunk_from(sender: str, index: int) -> None:
        chunk = BulkChunk(
            kind="shard", step=3, key=shard_key(0, 2), index=index, last=False, data=b"x"
        )
        exchange.chunk_arrived(sender, chunk)

    def refusals() -> list[BulkRefusal]:
        return [f for _, frames in sent for f in frames if isinstance(f, BulkRefusal)]

    exchange.on_request("n4", request)
    for index in range(6):  # both shards arriving, chunk after chunk, for 3 x INPUT_WAIT_S
        chunk_from("n2", index)
        chunk_from("n3", index)
        host[0] += INPUT_WAIT_S / 2
        exchange.on_request("n4", request)
    assert refusals() == []
    chunk_from("n2", 6)  # n3's chunks stop (its last came INPUT_WAIT_S / 2 ago)
    host[0] += INPUT_WAIT_S / 4
    exchange.on_request("n4", request)
    assert refusals() == []  # n3's last chunk is not INPUT_WAIT_S old yet
    chunk_from("n2", 7)
    host[0] += INPUT_WAIT_S / 4 + 0.01
    exchange.on_request("n4", request)
    assert [r.missing for r in refusals()] == [["n3"]]


def test_a_shard_on_its_way_is_not_asked_for_again_and_keeps_its_gather_going(monkeypatch):
    """A gather waiting for an aggregated shard whose chunks are arriving neither asks
    its owner again (it would send the same 100 MB once more) nor gives up after
    ``GATHER_TIMEOUT_S``; once
    the chunks stop it asks again, and gives up that long after the last one."""
    import asyncio

    from swarmshake.reference_node.protocol.sharding import aggregate_shard_key
    from swarmshake.reference_node.runtime import sharded as sharded_module
    from swarmshake.reference_node.runtime.bulk import BulkChunk, BulkRequest

    tick_s = 0.02  # the real waits, scaled down: REQUEST_RETRY_S is 0.5 s
    monkeypatch.setattr(sharded_module, "BROADCAST_GRACE_S", tick_s)
    monkeypatch.setattr(sharded_module, "REQUEST_RETRY_S", 2 * tick_s)
    monkeypatch.setattr(sharded_module, "GATHER_TIMEOUT_S", 10 * tick_s)

    async def scenario() -> tuple[int, object, float, list]:
        import time

        host = [0.0]
        exchange, sent = _owner_exchange(host)
        exchange.worker.clock = type(exchange.worker.clock)(host=time.monotonic)
        exchange.worker.replica.step = 3
        exchange.owners[3] = ("n1", "n2")
        exchange.plans[3] = ("n1", "n2")
        contributors = ("n1", "n2")
        key = aggregate_shard_key(1, 2, contributors)
        gather = asyncio.ensure_future(exchange._gather(3, contributors))
        last_chunk_at = 0.0
        for index in range(20):  # 20 x tick: twice GATHER_TIMEOUT_S, arriving all along
            chunk = BulkChunk(
                kind="shard_aggregate", step=3, key=key, index=index, last=False, data=b"x"
            )
            exchange.chunk_arrived("n2", chunk)
            last_chunk_at = time.monotonic()
            await asyncio.sleep(tick_s)
        asks_while_arriving = sum(
            1
            for peer, frames in sent
            for f in frames
            if isinstance(f, BulkRequest) and peer == "n2"
        )
        assert not gather.done()
        outcome = await asyncio.wait_for(gather, 5.0)
        return asks_while_arriving, outcome, time.monotonic() - last_chunk_at, sent

    asks_while_arriving, outcome, after_last_chunk_s, sent = asyncio.run(scenario())
    assert asks_while_arriving == 0
    assert isinstance(outcome, AggregationError) and "none arriving" in str(outcome)
    assert after_last_chunk_s >= 10 * tick_s  # GATHER_TIMEOUT_S from the last chunk
    asks = [
        f for peer, frames in sent for f in frames if isinstance(f, BulkRequest) and peer == "n2"
    ]
    assert asks  # asked again once the chunks stopped


def test_an_owner_asks_members_for_the_shards_it_lacks_and_they_send_them_again():
    """A shard lost on the way is asked for: the owner refusing a set whose input it
    lacks also asks the silent members for their shard (once per PULL_RETRY_S), and a
    member holding its payload sends that shard again, unless it is on its way."""
    import asyncio

    import torch

    from swarmshake.reference_node.protocol.sharding import aggregate_shard_key, shard_key
    from swarmshake.reference_node.runtime.bulk import BulkRequest
    from swarmshake.reference_node.runtime.sharded import INPUT_WAIT_S, PULL_RETRY_S

    host = [100.0]
    owner, sent = _owner_exchange(host)
    ask = BulkRequest(kind="shard_aggregate", step=3, key=aggregate_shard_key(0, 2, ["n1", "n2"]))
    owner.on_request("n3", ask)
    host[0] += INPUT_WAIT_S + 0.01
    owner.on_request("n3", ask)
    owner.on_request("n3", ask)  # again at once: not asked twice
    pulls = [(peer, f) for peer, frames in sent for f in frames if isinstance(f, BulkRequest)]
    assert pulls == [("n2", BulkRequest(kind="shard", step=3, key=shard_key(0, 2)))]
    host[0] += PULL_RETRY_S
    owner.on_request("n3", ask)
    assert sum(1 for peer, frames in sent for f in frames if isinstance(f, BulkRequest)) == 2

    member, _ = _owner_exchange(host)  # "n1" here plays the member asked
    sends: list[tuple[str, list]] = []
    link_free = asyncio.Event()  # the link takes the shard when this is set

    async def send_blob(peer: str, frames) -> None:  # noqa: ANN001
        await link_free.wait()
        sends.append((peer, list(frames)))

    async def scenario() -> None:
        tasks: list[asyncio.Task] = []
        member.worker.send_blob = send_blob
        member.worker.spawn = lambda coro: tasks.append(asyncio.ensure_future(coro))
        member.worker.log = lambda *args, **kwargs: None
        member.plans[3] = ("n2", "n1")
        member.payloads[3] = memoryview(torch.arange(8, dtype=torch.float32).numpy()).cast("B")
        ask_n1 = BulkRequest(kind="shard", step=3, key=shard_key(0, 2))
        member.on_shard_request("n2", ask_n1)
        host[0] += PULL_RETRY_S  # asked again while the first send still waits for the link
        member.on_shard_request("n2", ask_n1)
        link_free.set()
        await asyncio.gather(*tasks)
        member.on_shard_request("n2", BulkRequest(kind="shard", step=4, key=shard_key(0, 2)))
        assert len(tasks) == 1  # a step it holds no payload of: nothing to send
        member.on_shard_request("n2", ask_n1)  # sent PULL_RETRY_S ago and lost: again
        member.on_shard_request("n2", ask_n1)  # just sent: not again
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
    shards = [(peer, f.kind, f.key) for peer, frames in sends for f in frames]
    assert shards == [("n2", "shard", shard_key(0, 2))] * 2
