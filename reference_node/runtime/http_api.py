"""The node's HTTP API: ``GET /status`` (JSON), ``GET /metrics`` (Prometheus text),
``POST /infer`` (the current model on a posted batch).

Why h11 over asyncio streams rather than aiohttp: the API has three routes and runs
on the latency-critical control loop, so it should add no framework, no extra task
machinery and no new dependency tree; h11 (already installed, python-hyper's
sans-IO HTTP/1.1 parser, STYLE.md's model of a core) does the protocol parsing
that is easy to get wrong, and this module keeps only routing, limits and
deadlines.  ``/infer`` never computes on the control loop: ``infer`` hands the
batch to the worker process and awaits its answer with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

import h11
import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# Bounds, each with its reason:
MAX_BODY_BYTES = 1 << 20  # an /infer batch of 256 x 1024 floats as JSON fits; more is abuse
MAX_INFER_BATCH = 256  # keeps one request's worker time to milliseconds at CI size
MAX_CONNECTIONS = 64  # load tests use tens of clients; each costs a task and a socket
READ_TIMEOUT_S = 5.0  # a client that stops mid-request releases its slot
INFER_TIMEOUT_S = 10.0  # the worker may be mid-step; past this the caller gets a 503
WRITE_TIMEOUT_S = 5.0
MAX_REQUESTS_PER_CONNECTION = 1000  # keep-alive, but not forever
LINGER_S = 1.0  # how long a closing connection drains a client's unread upload


class InferRequest(msgspec.Struct, forbid_unknown_fields=True):
    inputs: Annotated[list[list[float]], msgspec.Meta(min_length=1, max_length=MAX_INFER_BATCH)]


class InferUnavailable(Exception):
    """The worker cannot answer now (busy past the deadline, or restarting)."""


Infer = Callable[[list[list[float]]], Awaitable[list[list[float]]]]


@dataclass
class HttpStats:
    requests: dict[str, int] = field(default_factory=dict)
    refused_connections: int = 0

    def count(self, route: str, status: int) -> None:
        key = f"{route} {status}"
        self.requests[key] = self.requests.get(key, 0) + 1


class HttpApi:
    """Serves the three routes; ``serve`` runs until cancelled inside the caller's TaskGroup."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        status: Callable[[], dict[str, object]],
        registry: CollectorRegistry,
        infer: Infer,
        input_dim: int,
    ):
        self._listen = (host, port)
        self._status = status
        self._registry = registry
        self._infer = infer
        self._input_dim = input_dim
        self._decoder = msgspec.json.Decoder(InferRequest)
        self._encoder = msgspec.json.Encoder()
        self.stats = HttpStats()
        self._open = 0
        self._group: asyncio.TaskGroup | None = None
        self.bound_port: int | None = None

    async def serve(self, group: asyncio.TaskGroup, ready: asyncio.Event | None = None) -> None:
        self._group = group
        server = await asyncio.start_server(self._accept, *self._listen, reuse_address=True)
        try:
            self.bound_port = server.sockets[0].getsockname()[1]
            if ready is not None:
                ready.set()
            await asyncio.Event().wait()  # until cancelled
        finally:
            server.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= MAX_CONNECTIONS or self._group is None:
            self.stats.refused_connections += 1
            writer.transport.abort()
            return
        self._open += 1
        self._group.create_task(self._connection(reader, writer))

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024)
        try:
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                request, body = await self._read_request(conn, reader)
                if request is None:
                    return
                status, content_type, payload = await self._route(request, body)
                await self._respond(conn, writer, status, content_type, payload)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return
        except (OSError, TimeoutError, h11.ProtocolError):
            return  # a broken or slow client costs only its own connection
        finally:
            self._open -= 1
            await _lingering_close(reader, writer)

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        body = bytearray()
        async with asyncio.timeout(READ_TIMEOUT_S):
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(65536)
                    conn.receive_data(data)
                    if not data and request is None:
                        return None, b""
                    continue
                if isinstance(event, h11.Request):
                    request = event
                    length = _content_length(event)
                    if length is not None and length > MAX_BODY_BYTES:
                        return event, _TOO_LARGE
                elif isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > MAX_BODY_BYTES:
                        return request, _TOO_LARGE
                elif isinstance(event, h11.EndOfMessage):
                    return request, bytes(body)
                elif isinstance(event, h11.ConnectionClosed):
                    return None, b""

    async def _respond(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        status: int,
        content_type: str,
        payload: bytes,
    ) -> None:
        headers = [("content-type", content_type), ("content-length", str(len(payload)))]
        if status == 413:
            headers.append(("connection", "close"))
        data = conn.send(h11.Response(status_code=status, headers=headers))
        data += conn.send(h11.Data(data=payload))
        data += conn.send(h11.EndOfMessage())
        writer.write(data)
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await writer.drain()

    async def _route(self, request: h11.Request, body: bytes) -> tuple[int, str, bytes]:
        path = request.target.decode("latin-1").split("?", 1)[0]
        method = request.method.decode("latin-1")
        routes = {"/status": "GET", "/metrics": "GET", "/infer": "POST"}
        if path not in routes:
            result = _error(404, f"no route {path}; try /status, /metrics, /infer")
        elif method != routes[path]:
            result = _error(405, f"{path} takes {routes[path]}")
        elif body is _TOO_LARGE:
            result = _error(413, f"body over {MAX_BODY_BYTES} bytes")
        elif path == "/status":
            result = (200, "application/json", self._encoder.encode(self._status()))
        elif path == "/metrics":
            result = (200, CONTENT_TYPE_LATEST, generate_latest(self._registry))
        else:
            result = await self._handle_infer(body)
        self.stats.count(path if path in routes else "other", result[0])
        return result

    async def _handle_infer(self, body: bytes) -> tuple[int, str, bytes]:
        try:
            request = self._decoder.decode(body)
        except msgspec.DecodeError as error:
            return _error(400, f'body must be {{"inputs": [[float, ...], ...]}}: {error}')
        for index, row in enumerate(request.inputs):
            if len(row) != self._input_dim:
                return _error(
                    400, f"inputs[{index}] has {len(row)} values, the model takes {self._input_dim}"
                )
            if not all(math.isfinite(value) for value in row):
                return _error(400, f"inputs[{index}] holds NaN or inf")
        try:
            async with asyncio.timeout(INFER_TIMEOUT_S):
                outputs = await self._infer(request.inputs)
        except (TimeoutError, InferUnavailable) as error:
            return _error(503, f"inference unavailable: {error or 'worker busy past deadline'}")
        return 200, "application/json", self._encoder.encode({"outputs": outputs})


_TOO_LARGE = b"__body_too_large__"  # identity-compared sentinel, never a real body


async def _lingering_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close so that the client reads our response: send FIN, then discard what it is
    still sending (closing with unread input makes the kernel send a reset, which
    can destroy the response in flight, e.g. a 413 for an oversized upload)."""
    with contextlib.suppress(Exception):
        if writer.can_write_eof():
            writer.write_eof()
        discarded = 0
        async with asyncio.timeout(LINGER_S):
            while discarded <= MAX_BODY_BYTES * 2:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                discarded += len(chunk)
    writer.transport.abort()


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _error(status: int, message: str) -> tuple[int, str, bytes]:
    return status, "application/json", msgspec.json.encode({"error": message})
