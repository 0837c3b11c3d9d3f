"""``swarmshake bench rejoin [--params 100M]``: state transfer for a rejoining node.

Measures the path a restarted node's state takes from a live peer, with the worker's
own code and nothing else: a sender process runs the worker's bulk links
(``links.PeerLinks``) and serves its ``TrainingState`` as ``Worker.serve_state``
does (a snapshot clone, the fingerprint the last step computed, the chunks of
``bulk.state_blob`` queued by ``bulk.send_chunks``: msgpack-encoded, framed and
tagged with keyed BLAKE3, written with one gathering ``sendmsg`` per frame); this
process runs the receiving worker's links (``recv_into`` one reusable buffer, tag
checked in place), decodes each chunk as a view and feeds it to
``checkpoint.StateAssembler`` in a pre-mapped pull buffer, then finishes it (the
parameter fingerprint, checked against the announced one) on a compute thread, as
``Worker._on_state_chunk`` and ``_stage_state`` do.  Timed from the request to
the verified state; two processes on loopback, so a 2-core machine runs each end
on its own core only when nothing else runs.

Live mode (default, what a rejoin uses): the frames are authenticated and ordered
by TCP, so the payload is not hashed a second time; ``--hashed`` measures the
checkpoint-format path with the payload SHA-256 (sender hashes while building the
header, receiver while the bytes arrive).

Besides wall time, both processes report CPU seconds per GB moved (user + system,
all threads): on a shared machine that figure moves far less with the load than
the rate does.  The goal (issue 4) is >= 1 GB/s.  ``bench recovery``'s ``restart``
cells and ``chaos.bench.rejoin_time`` measure the whole rejoin on real clusters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import statistics
import sys
import time
from typing import Any

import torch

from swarmshake.chaos.commands._args import (
    EXIT_UNKNOWN,
    EXIT_VALID,
    ArgumentParser,
    UsageError,
    bench_flags,
)
from swarmshake.reference_node import checkpoint
from swarmshake.reference_node.runtime.bulk import (
    BulkChunk,
    BulkMessage,
    send_chunks,
    split,
    state_blob,
)
from swarmshake.reference_node.runtime.frames import Channel, DropCounter, Frame, PayloadCodec
from swarmshake.reference_node.runtime.links import AddressBook, PeerAddress, PeerLinks
from swarmshake.reference_node.training.optimizer import BUFFER_NAMES
from swarmshake.reference_node.training.state import TrainingState

MAX_PARAMS = 1_000_000_000  # 4 GB of parameters: beyond that the machine's memory is measured
MAX_REPEATS = 50
START_TIMEOUT_S = 120.0  # the sender builds and fingerprints its state before it listens
TRANSFER_TIMEOUT_S = 600.0  # one transfer; 4 GB at 10 MB/s would still finish
SEND_TIMEOUT_S = 60.0  # one chunk waiting for room in the link's queue (worker: 10 s)
RUN_KEY = b"swarmshake-bench-rejoin"  # a fixed key: both ends are this benchmark
SENDER, RECEIVER = "n1", "n2"


class _Finished(Exception):
    """Raised inside a TaskGroup to stop its link tasks (which run until cancelled)."""


def parse_count(text: str) -> int:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)\s*", text)
    if not match:
        raise UsageError(f"--params {text!r}: write a count like 100M, 500k or 1000000")
    scale = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}[match.group(2).lower()]
    count = int(float(match.group(1)) * scale)
    if not 1 <= count <= MAX_PARAMS:
        raise UsageError(f"--params {text!r}: must lie in [1, {MAX_PARAMS:,}]")
    return count


def make_state(params: int, optimizer: str, seed: int) -> TrainingState:
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(params, generator=generator, dtype=torch.float32)
    buffers = {name: torch.randn(params, generator=generator) for name in BUFFER_NAMES[optimizer]}
    return TrainingState(
        step=1000, params=values, optimizer=optimizer, buffers=buffers, update_count=1000
    )


def _links(node: str, book: AddressBook, on_frame) -> PeerLinks:  # noqa: ANN001
    return PeerLinks(
        node_id=node,
        incarnation=1,
        run_key=RUN_KEY,
        channel=Channel.BULK,
        listen_host="127.0.0.1",
        listen_port=0,
        book=book,
        on_frame=on_frame,
    )


async def _sender(receiver_port: int, params: int, optimizer: str, seed: int, hashed: bool) -> int:
    """The live peer: serves one state stream per request line on stdin, as the
    worker's ``serve_state`` does; prints one JSON line of timings per transfer."""
    state = make_state(params, optimizer, seed)
    fingerprint = state.param_fingerprint()  # the worker has it from the step's Applied
    book = AddressBook({RECEIVER: PeerAddress("127.0.0.1", 0, receiver_port)})
    links = _links(SENDER, book, lambda frame: None)
    codec: PayloadCodec[BulkMessage] = PayloadCodec(BulkMessage, DropCounter())
    compute = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.TaskGroup() as group:
            ready = asyncio.Event()
            group.create_task(links.serve(group, ready))
            await ready.wait()  # serve dials the receiver (it is in the book)
            await _serve_requests(links, codec, state, fingerprint, hashed, compute, loop)
            raise _Finished
    except* _Finished:
        pass
    return 0


async def _serve_requests(
    links: PeerLinks,
    codec: PayloadCodec[BulkMessage],
    state: TrainingState,
    fingerprint: str,
    hashed: bool,
    compute: concurrent.futures.Executor,
    loop: asyncio.AbstractEventLoop,
) -> None:
    storage: torch.Tensor | None = None
    async with asyncio.timeout(START_TIMEOUT_S):
        while not links.connected(RECEIVER):  # noqa: ASYNC110 - the dialler sets it, no event
            await asyncio.sleep(0.01)
    print(json.dumps({"ready": True}), flush=True)  # built, fingerprinted and connected
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            break
        cpu_started, started = time.process_time(), time.perf_counter()
        # As Worker.serve_state: copied into snapshot memory mapped at the first
        # serve and kept (so the first transfer also pays its page faults).
        if storage is None:
            storage = torch.empty(state.storage_elements(), dtype=torch.float32)
        snapshot = await loop.run_in_executor(compute, state.clone_into, storage)
        cloned_s = time.perf_counter() - started
        if hashed:
            pieces = checkpoint.state_chunks(snapshot, node=SENDER, hash_payload=True)
            chunks = split("state", snapshot.step, fingerprint, pieces)
        else:
            chunks = state_blob(snapshot, SENDER, fingerprint)
        if not await send_chunks(links, codec, RECEIVER, chunks, SEND_TIMEOUT_S):
            raise RuntimeError("the receiver stopped taking chunks")
        # As the worker: the chunks are views of the snapshot storage, reused only
        # once written (and the CPU figure covers the last frames too).
        await links.drained(RECEIVER, SEND_TIMEOUT_S)
        print(
            json.dumps(
                {
                    "snapshot_s": cloned_s,
                    "cpu_s": time.process_time() - cpu_started,
                }
            ),
            flush=True,
        )


class _Receiver:
    """The requesting worker's side: chunks into a ``StateAssembler``, then finish."""

    def __init__(self, payload_bytes: int, hashed: bool):
        self.payload_bytes = payload_bytes
        self.hashed = hashed
        self.codec: PayloadCodec[BulkMessage] = PayloadCodec(BulkMessage, DropCounter())
        self.compute = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.assembler: checkpoint.StateAssembler | None = None
        self.done: asyncio.Future[tuple[TrainingState, bool, int]] | None = None
        self.errors: list[str] = []

    def expect(
        self, buffer: torch.Tensor | None
    ) -> asyncio.Future[tuple[TrainingState, bool, int]]:
        """Ready for one state; the future gives it, whether its verified header
        fingerprint is the one announced with the chunks (the worker's offer check),
        and the bytes of the stream (header and payload)."""
        self.assembler = checkpoint.StateAssembler(
            max_payload_bytes=self.payload_bytes + (1 << 20),
            require_payload_hash=self.hashed,
            payload_buffer=buffer,
        )
        self.done = asyncio.get_running_loop().create_future()
        return self.done

    def on_frame(self, frame: Frame) -> None:
        message = self.codec.decode(frame)
        if not isinstance(message, BulkChunk) or message.kind != "state":
            self.errors.append(f"unexpected bulk message {type(message).__name__}")
            return
        assert self.assembler is not None and self.done is not None
        self.assembler.feed(message.data)
        if message.last:
            assembler, done, announced = self.assembler, self.done, message.key
            self.assembler = None
            future = asyncio.get_running_loop().run_in_executor(self.compute, assembler.finish)

            def finished(future: asyncio.Future[TrainingState]) -> None:
                error = future.exception()
                if error is not None:
                    done.set_exception(error)
                else:
                    assert assembler.header is not None  # finish checked the bytes against it
                    verified = assembler.header.param_fp == announced
                    done.set_result((future.result(), verified, assembler.received_bytes))

            future.add_done_callback(finished)


async def _receive_all(
    params: int, optimizer: str, repeats: int, seed: int, hashed: bool
) -> dict[str, Any]:
    payload_bytes = checkpoint.state_payload_bytes(params, optimizer)
    receiver = _Receiver(payload_bytes, hashed)
    links = _links(RECEIVER, AddressBook(), receiver.on_frame)
    transfers: list[dict[str, Any]] = []
    try:
        async with asyncio.TaskGroup() as group:
            ready = asyncio.Event()
            group.create_task(links.serve(group, ready))
            await ready.wait()
            await _request_all(links, receiver, transfers, params, optimizer, repeats, seed, hashed)
            raise _Finished
    except* _Finished:
        pass
    if receiver.errors:
        raise RuntimeError("; ".join(receiver.errors[:3]))
    return {"transfers": transfers, "frame_drops": dict(links.counter.counts)}


async def _request_all(
    links: PeerLinks,
    receiver: _Receiver,
    transfers: list[dict[str, Any]],
    params: int,
    optimizer: str,
    repeats: int,
    seed: int,
    hashed: bool,
) -> None:
    payload_bytes = receiver.payload_bytes
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "swarmshake.chaos.bench.rejoin",
        "--sender",
        str(links.bound_port),
        str(params),
        optimizer,
        str(seed),
        "hashed" if hashed else "live",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            if not await process.stdout.readline():
                assert process.stderr is not None
                stderr = await process.stderr.read()
                raise RuntimeError(f"the sender exited before it was ready: {stderr[-800:]!r}")
        for _ in range(repeats):
            # The worker's pull buffer, mapped before the pull (Worker.prepare_pull_buffer),
            # in a helper thread as the worker does: the loop keeps serving the link.
            buffer = (
                None
                if hashed
                else await asyncio.get_running_loop().run_in_executor(
                    None, checkpoint.paged_in_payload_buffer, payload_bytes
                )
            )
            done = receiver.expect(buffer)
            cpu_started, started = time.process_time(), time.perf_counter()
            process.stdin.write(b"R\n")
            await process.stdin.drain()
            async with asyncio.timeout(TRANSFER_TIMEOUT_S):
                state, verified, nbytes = await done
            seconds = time.perf_counter() - started
            cpu_s = time.process_time() - cpu_started
            async with asyncio.timeout(START_TIMEOUT_S):
                sender_line = await process.stdout.readline()
            if not sender_line:
                raise RuntimeError("the sender exited mid-benchmark")
            sender_facts = json.loads(sender_line)
            transfers.append(
                {
                    "seconds": seconds,
                    "receiver_cpu_s": cpu_s,
                    "sender_cpu_s": sender_facts["cpu_s"],
                    "snapshot_s": sender_facts["snapshot_s"],
                    "verified": verified,
                    "nbytes": nbytes,
                }
            )
            del state, buffer
        process.stdin.write(b"\n")
        await process.stdin.drain()
        async with asyncio.timeout(60):
            _, stderr = await process.communicate()
        if process.returncode:
            raise RuntimeError(f"the sender failed: {stderr.decode()[-800:]}")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        raise


def run(
    params: int, optimizer: str, repeats: int, seed: int = 0, hashed: bool = False
) -> dict[str, Any]:
    try:
        measured = asyncio.run(_receive_all(params, optimizer, repeats, seed, hashed))
    except ExceptionGroup as group:  # from the TaskGroups: report the first cause
        first = group.exceptions[0]
        raise RuntimeError(f"{type(first).__name__}: {first}") from first
    transfers = measured["transfers"]
    seconds = [t["seconds"] for t in transfers]
    nbytes = transfers[0]["nbytes"]
    gigabytes = nbytes / 1e9
    return {
        "params": params,
        "mode": "hashed" if hashed else "live",
        "optimizer": optimizer,
        "state_bytes": nbytes,
        "repeats": repeats,
        "seconds": {"min": min(seconds), "p50": statistics.median(seconds), "max": max(seconds)},
        "gb_per_s": {
            "best": gigabytes / min(seconds),
            "p50": gigabytes / statistics.median(seconds),
        },
        # The figure: median transfer rate, GB/s (10^9 bytes per second).
        "throughput_gbps": gigabytes / statistics.median(seconds),
        # CPU (user + system, all threads) per GB moved, median over transfers: the
        # cost of the path, far less sensitive to other load than the rate.
        "cpu_s_per_gb": {
            "sender": statistics.median(t["sender_cpu_s"] for t in transfers) / gigabytes,
            "receiver": statistics.median(t["receiver_cpu_s"] for t in transfers) / gigabytes,
        },
        "snapshot_s_p50": statistics.median(t["snapshot_s"] for t in transfers),
        "verified": all(t["verified"] for t in transfers),
        "frame_drops": measured["frame_drops"],
        "goal_gb_per_s": 1.0,
        # Wall-clock figures on a shared machine mean little without its load.
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="swarmshake bench rejoin",
        description=__doc__.splitlines()[0],
        epilog="--quick: 1M parameters, one repeat",
        parents=[bench_flags()],
    )
    parser.add_argument("--params", help="parameter count, e.g. 100M (default 10M, quick 1M)")
    parser.add_argument("--optimizer", choices=sorted(BUFFER_NAMES), default="sgd")
    parser.add_argument("--repeats", type=int, help="transfers timed (default 3, quick 1)")
    parser.add_argument(
        "--hashed", action="store_true", help="hash the payload too (checkpoint format path)"
    )
    return parser


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--sender":
        port, params, optimizer, seed, mode = argv[1:6]
        return asyncio.run(_sender(int(port), int(params), optimizer, int(seed), mode == "hashed"))
    args = build_parser().parse_args(argv)
    params = parse_count(args.params or ("1M" if args.quick else "10M"))
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats {args.repeats}: must lie in [1, {MAX_REPEATS}]")
    try:
        result = run(params, args.optimizer, args.repeats, hashed=args.hashed)
    except (OSError, RuntimeError) as error:
        print(f"swarmshake bench rejoin: {error}", file=sys.stderr)
        return EXIT_UNKNOWN
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        print(
            f"state transfer of {params:,} params ({result['state_bytes'] / 1e6:.0f} MB): "
            f"p50 {result['seconds']['p50']:.3f}s = {result['gb_per_s']['p50']:.2f} GB/s "
            f"(best {result['gb_per_s']['best']:.2f} GB/s), verified {result['verified']}",
            file=sys.stderr,
        )
    return EXIT_VALID if result["verified"] else EXIT_UNKNOWN


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
