"""Bulk channel: chunk encoding without copies, and state streamed over real links."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
import pytest
import torch

from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.runtime.bulk import (
    BulkChunk,
    BulkMessage,
    encode_chunk,
    send_chunks,
    split,
    state_blob,
)
from swarmshake.reference_node.runtime.frames import Channel, DropCounter, PayloadCodec
from swarmshake.reference_node.runtime.links import AddressBook, PeerAddress, PeerLinks
from swarmshake.reference_node.training.state import TrainingState


def codec() -> PayloadCodec[BulkMessage]:
    return PayloadCodec(BulkMessage, DropCounter())


async def serve_on_loopback(
    group: asyncio.TaskGroup, links: dict[str, PeerLinks], book: AddressBook
) -> None:
    """Every node's links listening on loopback, each address in ``book``."""
    for node, node_links in links.items():
        ready = asyncio.Event()
        group.create_task(node_links.serve(group, ready))
        await ready.wait()
        port = node_links.bound_port or 0
        book.set_harness(node, PeerAddress("127.0.0.1", port, port))


@pytest.mark.parametrize("size", [0, 1, 255, 256, 70_000, 5 << 20])
def test_chunk_pieces_decode_to_the_same_chunk(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    chunk = BulkChunk(
        kind="state", step=7, key="ab" * 8, index=3, last=False, data=memoryview(data)
    )
    head, view = encode_chunk(codec(), chunk)
    assert view.obj is data  # the data is not copied
    decoded = msgspec.msgpack.decode(head + bytes(view), type=BulkMessage)
    assert isinstance(decoded, BulkChunk)
    assert (decoded.kind, decoded.step, decoded.key, decoded.index, decoded.last) == (
        "state",
        7,
        "ab" * 8,
        3,
        False,
    )
    assert bytes(decoded.data) == data


def small_state(params: int) -> TrainingState:
    generator = torch.Generator().manual_seed(5)
    return TrainingState(
        step=9,
        params=torch.randn(params, generator=generator),
        optimizer="sgd",
        buffers={"momentum": torch.randn(params, generator=generator)},
        update_count=9,
    )


def test_a_state_streams_between_links_and_verifies_and_snapshots_reuse_memory() -> None:
    """Two nodes' bulk links on loopback: a state larger than one chunk arrives intact
    (tags checked, chunks decoded as views and copied out at once), then a second
    snapshot reuses the first one's storage once the link says it was written."""
    state = small_state(1_500_000)  # 12 MB: three chunks

    async def main() -> list[TrainingState]:
        received: list[TrainingState] = []
        assembler = checkpoint.StateAssembler(require_payload_hash=False)
        done = asyncio.Event()
        decoder = codec()

        def on_frame(frame) -> None:  # noqa: ANN001
            nonlocal assembler
            chunk = decoder.decode(frame)
            assert isinstance(chunk, BulkChunk)
            assembler.feed(chunk.data)
            if chunk.last:
                received.append(assembler.finish())
                assembler = checkpoint.StateAssembler(require_payload_hash=False)
                done.set()

        book = AddressBook()
        links = {
            node: PeerLinks(
                node_id=node,
                incarnation=1,
                run_key=b"k" * 32,
                channel=Channel.BULK,
                listen_host="127.0.0.1",
                listen_port=0,
                book=book,
                on_frame=on_frame if node == "b" else (lambda frame: None),
            )
            for node in ("a", "b")
        }
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(60), asyncio.TaskGroup() as group:
                await serve_on_loopback(group, links, book)
                storage = torch.empty(state.storage_elements())
                for _ in range(2):
                    fingerprint = state.param_fingerprint()
                    snapshot = state.clone_into(storage)
                    assert snapshot.params.data_ptr() == storage.data_ptr()
                    done.clear()
                    sender = codec()
                    sent = await send_chunks(
                        links["a"], sender, "b", state_blob(snapshot, "a", fingerprint), 10
                    )
                    assert sent
                    await links["a"].drained("b", 10)
                    await done.wait()
                    state.params[0] += 1.0  # the live state moves on between serves
                for node_links in links.values():
                    assert node_links.counter.total == 0
                raise asyncio.CancelledError
        return received

    expected_first = small_state(1_500_000)
    first, second = asyncio.run(main())
    assert first.param_fingerprint() == expected_first.param_fingerprint()
    assert torch.equal(first.buffers["momentum"], expected_first.buffers["momentum"])
    state.params[0] -= 1.0  # the second serve saw one update, not two
    assert second.param_fingerprint() == state.param_fingerprint()


def test_split_keeps_views_and_marks_the_last_chunk() -> None:
    data = bytearray(b"x" * (checkpoint.DEFAULT_CHUNK_BYTES + 10))
    chunks = list(split("contribution", 1, "", memoryview(data)))
    assert [c.last for c in chunks] == [False, True]
    assert chunks[0].data.obj is data and chunks[1].data.nbytes == 10


def test_state_chunks_that_beat_their_expect_state_are_held_for_it() -> None:
    # Seen in bench recovery (partition_minority, 8 nodes): a restarted worker got
    # n4's state chunks before the ExpectState naming n4, dropped them as
    # unrequested, and the rejoin waited out its 5 s fetch timeout.
    from swarmshake.reference_node.runtime.bulk import HeldStateChunks

    def chunk(index: int, last: bool, data: bytes) -> BulkChunk:
        return BulkChunk(
            kind="state", step=5, key="fp", index=index, last=last, data=memoryview(data)
        )

    buffer = bytearray(b"aaaa")
    held = HeldStateChunks(max_bytes=10)
    assert held.hold("n4", chunk(0, False, buffer))
    buffer[:] = b"zzzz"  # the connection's buffer is reused: the held copy is not
    assert held.hold("n4", chunk(1, True, b"bbbb"))
    assert not held.hold("n5", chunk(2, False, b"cc"))  # not the held stream
    assert held.take("n5") == []  # another source's pull: forgotten, not replayed
    assert held.hold("n4", chunk(0, False, b"aaaa")) and held.hold("n4", chunk(1, True, b"bb"))
    taken = held.take("n4")
    assert [bytes(c.data) for c in taken] == [b"aaaa", b"bb"] and taken[-1].last
    assert held.take("n4") == []  # taken once
    assert not held.hold("n4", chunk(3, False, b"x"))  # a stream's middle, not its start
    assert held.hold("n4", chunk(0, False, b"123456")) and not held.hold(
        "n4", chunk(1, False, b"12345")
    )
    assert held.take("n4") == []  # over max_bytes: nothing kept


def test_an_aggregate_asked_for_while_it_sends_is_sent_once() -> None:
    """An aggregated shard larger than a chunk is asked for again while it is still
    being sent (a gather re-asks every REQUEST_RETRY_S; a 100M model's shard is 24
    chunks of 4 MiB): the send under way answers the second request, so its bytes
    cross the link once and arrive whole.  Asked again after it was queued, it is
    sent again (the first copy may have been lost with its connection)."""
    from types import SimpleNamespace

    from swarmshake.reference_node.runtime.bulk import Assembler, AssemblyError
    from swarmshake.reference_node.runtime.worker import Worker

    payload = memoryview(bytes(range(256)) * (5 * (4 << 20) // 256 + 1))  # 5 chunks and a bit

    async def main() -> tuple[list[bytes], list[str], int, int]:
        assembled: list[bytes] = []
        drops: list[str] = []
        assembler = Assembler(max_blob_bytes=64 << 20)
        decoder = codec()

        def on_frame(frame) -> None:  # noqa: ANN001
            chunk = decoder.decode(frame)
            try:
                blob = assembler.feed("a", chunk)
            except AssemblyError as error:
                drops.append(error.reason)
                return
            if blob is not None:
                assembled.append(bytes(blob))

        book = AddressBook()
        links = {
            node: PeerLinks(
                node_id=node, incarnation=1, run_key=b"k" * 32, channel=Channel.BULK,
                listen_host="127.0.0.1", listen_port=0, book=book,
                on_frame=on_frame if node == "b" else (lambda frame: None),
                queue_frames=2,  # fewer than the blob's chunks: its send waits for room
            )
            for node in ("a", "b")
        }  # fmt: skip
        worker = SimpleNamespace(
            held_bulk=frozenset(), blobs_sending=set(), blob_sends_coalesced=0,
            links=links["a"], codec=codec(), _on_drop=lambda peer, reason: None,
        )  # fmt: skip
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(60), asyncio.TaskGroup() as group:
                await serve_on_loopback(group, links, book)

                def send():  # noqa: ANN202
                    chunks = split("shard_aggregate", 3, "1/4/a,b,c,d", payload)
                    return Worker.send_blob(worker, "b", chunks)

                first = group.create_task(send())
                await asyncio.sleep(0)  # under way: two chunks queued, waiting for room
                assert worker.blobs_sending
                await asyncio.gather(first, send())
                sends_while_sending = len(assembled) + 1  # the first, not yet read
                await send()  # after the first was queued whole: sent again
                await links["a"].drained("b", 10)
                for _ in range(100):
                    if len(assembled) == 2:
                        break
                    await asyncio.sleep(0.05)
                raise asyncio.CancelledError
        return assembled, drops, worker.blob_sends_coalesced, sends_while_sending

    assembled, drops, coalesced, sends_while_sending = asyncio.run(main())
    assert (coalesced, sends_while_sending) == (1, 1)
    assert drops == [] and assembled == [bytes(payload)] * 2


def test_a_late_refusal_or_wrong_bytes_from_a_peer_asked_before_keep_the_current_pull():
    """A pull asked n2, timed out, and asked n3.  n2's refusal (or its wrong bytes)
    coming after that is moot: it must not cancel the request to n3, whose bytes would
    then be dropped as unrequested and the pull wait out another fetch timeout.  n3's
    own refusal ends the request and names n3."""
    from types import SimpleNamespace

    import torch

    from swarmshake.reference_node.runtime import ipc
    from swarmshake.reference_node.runtime.bulk import BulkRefusal
    from swarmshake.reference_node.runtime.worker import Worker

    sent: list[object] = []
    drops: list[tuple[str, str]] = []
    worker = SimpleNamespace(
        aggregate_waiters={(3, "ab" * 8): "n3"},
        channel=SimpleNamespace(send=sent.append),
        drops=SimpleNamespace(drop=lambda reason, peer: drops.append((reason, peer))),
        aggregates={},
    )

    def refusal(sender: str) -> None:
        message = BulkRefusal(kind="aggregate", step=3, key="ab" * 8, reason="not held")
        Worker._on_aggregate_refusal(worker, sender, message)

    refusal("n2")
    assert sent == [] and worker.aggregate_waiters == {(3, "ab" * 8): "n3"}

    async def wrong_bytes_from(sender: str) -> None:
        async def run_compute(function, *args):  # noqa: ANN001, ANN202
            return "cd" * 8  # the bytes hash to another fingerprint

        worker.run_compute = run_compute
        await Worker._verify_aggregate(worker, sender, 3, "ab" * 8, torch.zeros(2))

    asyncio.run(wrong_bytes_from("n2"))
    assert sent == [] and worker.aggregate_waiters == {(3, "ab" * 8): "n3"}
    assert drops == [("aggregate_fingerprint_mismatch", "n2")]
    refusal("n3")
    assert worker.aggregate_waiters == {}
    assert sent == [
        ipc.AggregateMissing(step=3, missing=[], agg_fp="ab" * 8, reason="not held", source="n3")
    ]


def test_an_apply_for_a_step_the_workers_parameters_are_not_at_names_their_step():
    """The control process fetches the state on it (StepNode's StateDiverged) rather
    than pull bytes the worker holds and refuse the same apply again."""
    from types import SimpleNamespace

    import torch

    from swarmshake.reference_node.runtime import ipc
    from swarmshake.reference_node.runtime.worker import Worker

    sent: list[object] = []
    key = (3, "ab" * 8)

    async def held(_key):  # noqa: ANN001, ANN202
        return torch.zeros(2)

    worker = SimpleNamespace(
        replica=SimpleNamespace(step=5), channel=SimpleNamespace(send=sent.append), _held=held
    )
    asyncio.run(Worker.apply(worker, ipc.ApplyCommitted(step=3, agg_fp=key[1], keep_from_step=0)))
    assert sent == [
        ipc.AggregateMissing(
            step=3, missing=[], agg_fp=key[1], reason="state is at step 5", state_step=5
        )
    ]
