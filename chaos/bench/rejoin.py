"""``swarmshake bench rejoin [--params 100M]``: state transfer for a rejoining node.

Measures the path a restarted node's state takes from a live peer, with the node
runtime's own pieces and nothing else: the sender streams its ``TrainingState`` in
the checkpoint byte format (``checkpoint.state_chunks``, header hashed first, as
``worker.serve_state`` does), cut into ``bulk.split("state")`` chunks, msgpack-encoded
(``frames.PayloadCodec``) and framed with HMAC (``frames.FrameEncoder``, bulk
channel) over a loopback TCP connection; the receiver, another process, decodes and
authenticates the frames (``FrameDecoder``), reassembles and verifies the state (``checkpoint.StateAssembler``)
and checks its fingerprint against the one the sender announced.  Timed from the
request to the verified state.

Live mode (default, what a rejoin uses): the frames are already authenticated
(HMAC) and ordered by TCP, so the payload is not hashed a second time
(``state_chunks(hash_payload=False)``, ``StateAssembler(require_payload_hash=False)``)
and lands in a receive buffer kept across transfers (paged in once, as a worker
keeps its parameter memory); the parameter fingerprint is still verified at the
end.  ``--hashed`` measures the checkpoint-format path with the payload SHA-256.

The goal (issue 8) is ≥ 1 GB/s.  The runtime's worker adds asyncio plumbing on top;
``bench recovery``'s ``restart`` cells measure the whole rejoin on real clusters.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from swarmshake.chaos.commands._args import EXIT_UNKNOWN, EXIT_VALID, ArgumentParser, UsageError
from swarmshake.reference_node.checkpoint import StateAssembler, state_chunks
from swarmshake.reference_node.runtime.bulk import BulkChunk, BulkMessage, split
from swarmshake.reference_node.runtime.frames import (
    Channel,
    DropCounter,
    FrameDecoder,
    FrameEncoder,
    FrameVerifier,
    PayloadCodec,
)
from swarmshake.reference_node.training.optimizer import BUFFER_NAMES
from swarmshake.reference_node.training.state import TrainingState

MAX_PARAMS = 1_000_000_000  # 4 GB of parameters: beyond that the machine's memory is measured
MAX_REPEATS = 50
CONNECT_TIMEOUT_S = 120.0  # the sender builds (and hashes) the state before it connects
TRANSFER_TIMEOUT_S = 600.0  # one transfer; 4 GB at 10 MB/s would still finish
RECV_BYTES = 4 << 20
RUN_KEY = b"swarmshake-bench-rejoin"  # a fixed key: both ends are this benchmark


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


def _recv_exact(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = connection.recv(size - len(data))
        if not piece:
            raise ConnectionError("peer closed the connection")
        data += piece
    return data


def sender(port: int, params: int, optimizer: str, seed: int, repeats: int, hashed: bool) -> int:
    """The live peer: builds its state, then serves one state stream per request byte."""
    state = make_state(params, optimizer, seed)
    fingerprint = state.param_fingerprint()
    codec: PayloadCodec[BulkMessage] = PayloadCodec(BulkMessage, DropCounter())
    encoder = FrameEncoder(
        run_key=RUN_KEY, sender="n1", incarnation=1, receiver="n2", channel=Channel.BULK
    )
    with socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S) as connection:
        connection.settimeout(TRANSFER_TIMEOUT_S)
        for _ in range(repeats):
            if _recv_exact(connection, 1) != b"R":
                return 1
            chunks = state_chunks(state, node="n1", hash_payload=hashed)
            for chunk in split("state", state.step, fingerprint, chunks):
                connection.sendall(encoder.encode_bytes(codec.encode(chunk)))
    return 0


def receive_one(
    connection: socket.socket,
    verifier: FrameVerifier,
    max_payload_bytes: int,
    payload_buffer: torch.Tensor | None,
) -> tuple[float, int, bool]:
    """Request a state and take it in; ``(seconds, payload bytes, fingerprint ok)``.
    ``payload_buffer`` None: the hashed (checkpoint-format) path."""
    codec: PayloadCodec[BulkMessage] = PayloadCodec(BulkMessage, verifier.counter)
    decoder = FrameDecoder(verifier, Channel.BULK, "n1")
    assembler = StateAssembler(
        max_payload_bytes=max_payload_bytes,
        require_payload_hash=payload_buffer is None,
        payload_buffer=payload_buffer,
    )
    buffer = bytearray(RECV_BYTES)
    started = time.perf_counter()
    connection.sendall(b"R")
    announced = ""
    while True:
        received = connection.recv_into(buffer)
        if not received:
            raise ConnectionError("the sender closed the connection mid-transfer")
        for frame in decoder.feed(bytes(buffer[:received])):
            message = codec.decode(frame)
            if not isinstance(message, BulkChunk) or message.kind != "state":
                raise RuntimeError(f"unexpected bulk message {message!r}")
            assembler.feed(message.data)
            announced = message.key
            if message.last:
                state = assembler.finish()
                ok = state.param_fingerprint() == announced
                return time.perf_counter() - started, assembler.received_bytes, ok
        if decoder.closed is not None:
            raise RuntimeError(f"frame stream broken: {decoder.closed}")


def run(
    params: int, optimizer: str, repeats: int, seed: int = 0, hashed: bool = False
) -> dict[str, Any]:
    payload_bytes = params * 4 * (1 + len(BUFFER_NAMES[optimizer]))
    # Live mode's receive buffer, paged in before timing (zeros touch every page).
    payload_buffer = None if hashed else torch.zeros(payload_bytes + 64, dtype=torch.uint8)
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(CONNECT_TIMEOUT_S)
        port = server.getsockname()[1]
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "swarmshake.chaos.bench.rejoin",
                "--sender",
                str(port),
                str(params),
                optimizer,
                str(seed),
                str(repeats),
                "hashed" if hashed else "live",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            connection, _ = server.accept()
        except TimeoutError:
            process.kill()
            raise RuntimeError(
                f"the sender did not connect: {process.communicate()[1][-800:]}"
            ) from None
        with connection:
            connection.settimeout(TRANSFER_TIMEOUT_S)
            verifier = FrameVerifier(run_key=RUN_KEY, receiver="n2", counter=DropCounter())
            transfers = [
                receive_one(connection, verifier, payload_bytes + (1 << 20), payload_buffer)
                for _ in range(repeats)
            ]
        process.wait(timeout=60)
    seconds = [t for t, _, _ in transfers]
    nbytes = transfers[0][1]
    return {
        "params": params,
        "mode": "hashed" if hashed else "live",
        "optimizer": optimizer,
        "state_bytes": nbytes,
        "repeats": repeats,
        "seconds": {"min": min(seconds), "p50": statistics.median(seconds), "max": max(seconds)},
        "gb_per_s": {
            "best": nbytes / min(seconds) / 1e9,
            "p50": nbytes / statistics.median(seconds) / 1e9,
        },
        # The figure: median transfer rate, GB/s (10^9 bytes per second).
        "throughput_gbps": nbytes / statistics.median(seconds) / 1e9,
        "verified": all(ok for _, _, ok in transfers),
        "frame_drops": dict(verifier.counter.counts),
        "goal_gb_per_s": 1.0,
        # Wall-clock figures on a shared machine mean little without its load.
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--sender":
        port, params, optimizer, seed, repeats, mode = argv[1:7]
        return sender(int(port), int(params), optimizer, int(seed), int(repeats), mode == "hashed")
    parser = ArgumentParser(prog="swarmshake bench rejoin", description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="10M", help="parameter count, e.g. 100M (default 10M)")
    parser.add_argument("--optimizer", choices=sorted(BUFFER_NAMES), default="sgd")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--hashed", action="store_true", help="hash the payload too (checkpoint format path)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    params = parse_count(args.params)
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
