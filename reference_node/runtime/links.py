"""TCP peer links: one listener per channel, one dialled connection per (peer, channel).

DESIGN.md, "The network": messages from A to B travel only on connections that A
dialled to B, so a directed Toxiproxy proxy is a direction.  Hence a listener never
writes on an accepted connection (it only reads frames) and an ``OutboundLink``
never reads.  The address an ``OutboundLink`` dials is looked up in the
``AddressBook`` at every dial, so a book updated from config or MQTT (pointing at
a link's proxy) takes effect on the next redial.

Every await has a deadline (``asyncio.timeout``), every queue a bound, and every
task an owner: the ``PeerLinks`` object runs all its tasks inside one TaskGroup
given to ``run``; inbound connection handlers are spawned into that group too.

I/O goes through non-blocking sockets and the loop's ``sock_*`` calls rather than
asyncio streams, because the bulk channel moves hundreds of MB (state transfer,
issue 4's >= 1 GB/s goal) and streams copy every byte several times: a frame is
sent with one gathering ``sendmsg`` (header, payload and tag where they lie) and
received with ``recv_into`` straight into the connection's reusable buffer, where
its tag is checked in place.  A received frame's payload is therefore a view that
is valid until the frame handler returns.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from swarmshake.reference_node.runtime.frames import (
    HEADER_BYTES,
    TAG_BYTES,
    Buffer,
    Channel,
    DropCounter,
    DropReason,
    Frame,
    FrameEncoder,
    FrameVerifier,
    Payload,
)

LISTEN_BACKLOG = 128  # pending connects: a cluster's peers redialling at once, with room


class PeerAddress(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    host: str
    control_port: int
    bulk_port: int

    def port(self, channel: Channel) -> int:
        return self.control_port if channel == Channel.CONTROL else self.bulk_port


class AddressBook:
    """Where to dial each peer.  Updated from config (harness) or MQTT announcements.

    Harness entries win over self-announcements (DESIGN: a node's self-announced
    address is used only without a harness).
    """

    def __init__(self, entries: dict[str, PeerAddress] | None = None):
        self._harness: dict[str, PeerAddress] = dict(entries or {})
        self._announced: dict[str, PeerAddress] = {}

    def set_harness(self, node_id: str, address: PeerAddress) -> None:
        self._harness[node_id] = address

    def set_announced(self, node_id: str, address: PeerAddress) -> None:
        self._announced[node_id] = address

    def lookup(self, node_id: str) -> PeerAddress | None:
        return self._harness.get(node_id) or self._announced.get(node_id)

    def peers(self) -> set[str]:
        return set(self._harness) | set(self._announced)


@dataclass(frozen=True)
class LinkTimeouts:
    """Deadlines of the link layer, in seconds, with why each has its value."""

    # Loopback connects take microseconds; a black-holed proxy never answers.
    connect_s: float = 1.0
    # A peer whose socket buffer stays full this long is stalled or black-holed:
    # close and redial rather than block the sender forever.
    drain_s: float = 2.0
    # An idle dialled connection sends a keepalive this often, so the receiver's
    # idle deadline below means "peer or link is gone", not "nothing to say".
    keepalive_s: float = 1.0
    # Receiver closes a connection silent for this long (3 keepalives missed).
    idle_s: float = 3.0
    # Time allowed for one frame's body once its header arrived, plus size/rate:
    # a peer stalling mid-frame cannot pin a buffer for longer.
    body_base_s: float = 5.0
    body_min_bytes_per_s: float = 1e6
    # Processing of one inbound frame by the owner's handler (local work).
    handler_s: float = 30.0
    # Redial backoff: capped exponential with full jitter.  The cap bounds how long
    # a healed link stays unused; the floor keeps a dead peer from costing CPU.
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 1.0


@dataclass
class LinkStats:
    connects: int = 0
    dial_failures: int = 0
    disconnects: int = 0
    frames_sent: int = 0
    bytes_sent: int = 0
    frames_received: int = 0
    bytes_received: int = 0
    queue_dropped_oldest: int = 0
    queue_rejected: int = 0
    inbound_refused: int = 0
    handler_timeouts: int = 0
    not_connected_dropped: int = 0
    per_peer_connected: dict[str, bool] = field(default_factory=dict)


class Backoff:
    """Capped exponential backoff with full jitter (AWS architecture blog's variant),
    from a seeded generator so runs are reproducible."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random):
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    def next_delay_s(self) -> float:
        ceiling = min(self._max_s, self._initial_s * (2**self._attempt))
        self._attempt = min(self._attempt + 1, 30)
        return self._rng.uniform(ceiling / 2, ceiling)


class QueueFull(Exception):
    """A bulk send found its queue full past its deadline."""


class OutboundLink:
    """The connection this node dials to one peer on one channel, with its send queue.

    Queue policy: control uses drop-oldest (a fresh heartbeat or vote supersedes a
    stale one, and the protocol retries what matters); bulk rejects when full after
    waiting up to the caller's deadline (dropping a middle chunk would corrupt a
    stream, so the sender must see back-pressure instead).
    """

    def __init__(
        self,
        *,
        peer: str,
        channel: Channel,
        encoder: FrameEncoder,
        book: AddressBook,
        stats: LinkStats,
        timeouts: LinkTimeouts,
        rng: random.Random,
        queue_frames: int,
    ):
        self.peer = peer
        self.channel = channel
        self._encoder = encoder
        self._book = book
        self._stats = stats
        self._timeouts = timeouts
        self._backoff = Backoff(timeouts.backoff_initial_s, timeouts.backoff_max_s, rng)
        # Payloads may be views of a caller's memory (a tensor): the caller keeps it
        # unchanged until ``drained`` says the queue was written.
        self._queue: collections.deque[Payload] = collections.deque()
        self._drained = asyncio.Event()  # set while nothing is queued or being written
        self._drained.set()
        self._queue_frames = queue_frames
        self._has_items = asyncio.Event()
        self._has_room = asyncio.Event()
        self._has_room.set()
        self.connected = False
        self._kick = asyncio.Event()  # cut the current connection (tests, address change)

    def send_nowait(self, payload: Payload) -> bool:
        """Queue a payload; drop-oldest on a full control queue, reject on bulk."""
        if len(self._queue) >= self._queue_frames:
            if self.channel == Channel.CONTROL:
                self._queue.popleft()
                self._stats.queue_dropped_oldest += 1
            else:
                self._stats.queue_rejected += 1
                return False
        self._queue.append(payload)
        self._drained.clear()
        self._has_items.set()
        if len(self._queue) >= self._queue_frames:
            self._has_room.clear()
        return True

    async def send(self, payload: Payload, timeout_s: float) -> None:
        """Queue a payload, waiting for room up to ``timeout_s``; raises QueueFull."""
        try:
            async with asyncio.timeout(timeout_s):
                while len(self._queue) >= self._queue_frames:
                    await self._has_room.wait()
        except TimeoutError:
            self._stats.queue_rejected += 1
            raise QueueFull(f"send queue to {self.peer} full for {timeout_s}s") from None
        self.send_nowait(payload)

    def queued(self) -> int:
        return len(self._queue)

    async def drained(self, timeout_s: float) -> None:
        """Wait until every queued payload was written (or dropped with its
        connection); raises TimeoutError after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            await self._drained.wait()

    def reconnect(self) -> None:
        """Drop the current connection, or cut a redial backoff short (the peer's
        address changed, or it came back after a crash)."""
        self._kick.set()

    async def run(self) -> None:
        while True:
            address = self._book.lookup(self.peer)
            sock: socket.socket | None = None
            self._kick.clear()  # this dial is the reconnect asked for until now
            try:
                if address is None:
                    raise ConnectionError(f"no address for {self.peer}")
                async with asyncio.timeout(self._timeouts.connect_s):
                    sock = await dial(address.host, address.port(self.channel))
                self._stats.connects += 1
                self.connected = True
                self._stats.per_peer_connected[f"{self.peer}/{self.channel.name.lower()}"] = True
                self._backoff.reset()
                await self._pump(sock)
            except (OSError, TimeoutError, ConnectionError):
                # A dial or a write failed: count it and redial after a backoff.
                if self.connected:
                    self._stats.disconnects += 1
                else:
                    self._stats.dial_failures += 1
            finally:
                self.connected = False
                self._stats.per_peer_connected[f"{self.peer}/{self.channel.name.lower()}"] = False
                if sock is not None:
                    sock.close()  # non-blocking: never waits on a dead peer
                if not self._queue:
                    self._drained.set()  # a frame cut mid-write went with its connection
            # A reconnect request (the peer is back, or moved) ends the backoff early.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._backoff.next_delay_s()):
                    await self._kick.wait()

    async def _pump(self, sock: socket.socket) -> None:
        # The peer never writes on this connection, so EOF or an error on its read
        # side means the peer closed or reset it: redial before writing into it.
        # (Frames written before the reset arrives are lost, as on any TCP link;
        # the protocol retries what matters.)
        while True:
            if self._kick.is_set():
                raise ConnectionError("reconnect requested")
            if peer_closed(sock):
                raise ConnectionError("peer closed the connection")
            if not self._queue:
                self._drained.set()
                self._has_items.clear()
                try:
                    async with asyncio.timeout(self._timeouts.keepalive_s):
                        await self._has_items.wait()
                except TimeoutError:
                    await self._write(sock, self._encoder.encode_parts(b""))
                    continue
                continue
            payload = self._queue.popleft()
            self._has_room.set()
            await self._write(sock, self._encoder.encode_parts(payload))

    async def _write(self, sock: socket.socket, parts: Sequence[Buffer]) -> None:
        nbytes = sum(len(part) for part in parts)
        # As long as the receiver allows a frame's body (same rate floor): a peer
        # that takes longer is stalled or black-holed; close and redial.
        deadline_s = self._timeouts.drain_s + nbytes / self._timeouts.body_min_bytes_per_s
        async with asyncio.timeout(deadline_s):
            await send_parts(sock, parts)
        self._stats.frames_sent += 1
        self._stats.bytes_sent += nbytes


async def dial(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to ``host:port`` (first address that answers)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last_error: OSError = ConnectionError(f"{host}:{port} resolves to no address")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            # Frames are written whole; Nagle would only delay a frame's short tail.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
            return sock
        except OSError as error:
            sock.close()
            last_error = error
        except BaseException:
            sock.close()
            raise
    raise last_error


def peer_closed(sock: socket.socket) -> bool:
    """True if the peer closed or reset a connection it never writes on."""
    try:
        data = sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return False  # open, nothing to read: the normal case
    except OSError:
        return True
    # b"" is EOF; a byte breaks the rule that the dialled side is never written to.
    del data
    return True


async def send_parts(sock: socket.socket, parts: Sequence[Buffer]) -> None:
    """Write ``parts`` in order: one gathering ``sendmsg`` while the socket takes it,
    then the loop's ``sock_sendall`` (which keeps an offset, no copy) for the rest."""
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    try:
        sent = sock.sendmsg(views)
    except (BlockingIOError, InterruptedError):
        sent = 0
    loop = asyncio.get_running_loop()
    for view in views:
        if sent >= view.nbytes:
            sent -= view.nbytes
            continue
        await loop.sock_sendall(sock, view[sent:])
        sent = 0


async def _readable(sock: socket.socket, timeout_s: float) -> bool:
    """Wait until ``sock`` has bytes (or EOF) to read, at most ``timeout_s``."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(sock.fileno(), lambda: ready.done() or ready.set_result(None))
    try:
        async with asyncio.timeout(max(timeout_s, 0.0)):
            await ready
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(sock.fileno())


async def recv_exactly_into(sock: socket.socket, view: memoryview, timeout_s: float) -> int:
    """Fill ``view`` from ``sock`` within ``timeout_s``; returns how many bytes came
    (all of them, unless the peer closed or the time ran out).

    Reads only when the socket is readable and never under a cancellation, so no
    byte read is ever dropped with a cancelled call; and when the deadline passes it
    reads once more before giving up, so a late wake-up of this loop (a loaded
    machine, a long local job) is not taken for a silent peer: the deadline is the
    peer's, on the bytes it sent."""
    deadline = time.monotonic() + timeout_s
    filled = 0
    while filled < view.nbytes:
        try:
            received = sock.recv_into(view[filled:])
        except (BlockingIOError, InterruptedError):
            remaining_s = deadline - time.monotonic()
            if await _readable(sock, remaining_s) or remaining_s > 0:
                continue
            try:
                received = sock.recv_into(view[filled:])  # the last chance: already here?
            except (BlockingIOError, InterruptedError):
                return filled
        if not received:
            break
        filled += received
    return filled


class ReceiveBuffer:
    """One inbound connection's frame body buffer, reused frame after frame (no
    allocation, and its pages stay mapped).  It grows to the largest frame the
    connection carried, which the channel's payload cap bounds."""

    def __init__(self) -> None:
        self._data = bytearray()

    def view(self, nbytes: int) -> memoryview:
        if len(self._data) < nbytes:
            # A new buffer rather than a resize: a view a handler wrongly kept stays
            # valid (and a bytearray with live views cannot be resized anyway).
            self._data = bytearray(nbytes)
        return memoryview(self._data)[:nbytes]


FrameHandler = Callable[[Frame], Awaitable[None] | None]


async def read_frame(
    sock: socket.socket,
    verifier: FrameVerifier,
    channel: Channel,
    timeouts: LinkTimeouts,
    peer_label: str = "",
    buffer: ReceiveBuffer | None = None,
) -> Frame | DropReason | None:
    """Read frames until one is good; returns it, a fatal DropReason (close the
    connection; already counted) or None at a clean end of stream or idle timeout.
    The frame's payload is a view of ``buffer``, valid until the next read."""
    buffer = buffer or ReceiveBuffer()
    raw_header = bytearray(HEADER_BYTES)
    while True:
        got = await recv_exactly_into(sock, memoryview(raw_header), timeouts.idle_s)
        if got < HEADER_BYTES:
            if got:  # a header cut short: by EOF or a peer stalling mid-frame
                verifier.counter.drop(DropReason.TRUNCATED, peer_label)
                return DropReason.TRUNCATED
            return None  # a clean end, or silence for idle_s
        header_bytes = bytes(raw_header)
        header = verifier.parse_header(header_bytes, channel)
        if isinstance(header, DropReason):
            verifier.counter.drop(header, peer_label)
            return header
        body_deadline_s = (
            timeouts.body_base_s + header.payload_bytes / timeouts.body_min_bytes_per_s
        )
        body = buffer.view(header.payload_bytes + TAG_BYTES)
        if await recv_exactly_into(sock, body, body_deadline_s) != body.nbytes:
            verifier.counter.drop(DropReason.TRUNCATED, header.sender)
            return DropReason.TRUNCATED
        result = verifier.verify(header_bytes, header, body)
        if isinstance(result, DropReason):
            verifier.counter.drop(result, header.sender)
            continue
        return result


class PeerLinks:
    """All links of one node on one channel: a listener and one dialler per peer.

    ``serve(task_group, ready)`` listens (``ready`` set once it accepts) and spawns
    the diallers; the caller's TaskGroup owns every task.  Inbound
    frames (keepalives excluded) go to ``on_frame``.
    """

    def __init__(
        self,
        *,
        node_id: str,
        incarnation: int,
        run_key: bytes,
        channel: Channel,
        listen_host: str,
        listen_port: int,
        book: AddressBook,
        on_frame: FrameHandler,
        counter: DropCounter | None = None,
        timeouts: LinkTimeouts | None = None,
        queue_frames: int | None = None,
        payload_cap_bytes: int | None = None,
        max_inbound_connections: int = 64,
        seed: int = 0,
    ):
        self.node_id = node_id
        self.incarnation = incarnation
        self.channel = channel
        self._run_key = run_key
        self._listen = (listen_host, listen_port)
        self.book = book
        self._on_frame = on_frame
        self.counter = counter or DropCounter()
        self.timeouts = timeouts or LinkTimeouts()
        # Control: 256 small frames is several seconds of heartbeats and votes to all
        # peers; older ones are stale.  Bulk: 4 chunks in flight keeps the socket
        # busy while bounding memory to 4 x the bulk cap.
        self._queue_frames = queue_frames or (256 if channel == Channel.CONTROL else 4)
        self._payload_cap_bytes = payload_cap_bytes
        caps = {channel: payload_cap_bytes} if payload_cap_bytes else None
        self.verifier = FrameVerifier(
            run_key=run_key, receiver=node_id, counter=self.counter, payload_caps_bytes=caps
        )
        self.stats = LinkStats()
        # Bounds file descriptors and handler tasks a flood of connections can cost.
        self._max_inbound = max_inbound_connections
        self._inbound = 0
        self._rng = random.Random(f"{seed}/{node_id}/{incarnation}/{channel}")
        self._outbound: dict[str, OutboundLink] = {}
        self._task_group: asyncio.TaskGroup | None = None
        self.bound_port: int | None = None

    def link(self, peer: str) -> OutboundLink:
        """The dialled link to ``peer``, created (and its dialler started) on first use."""
        link = self._outbound.get(peer)
        if link is None:
            if self._task_group is None:
                raise RuntimeError("PeerLinks.serve must be running before sending")
            encoder = FrameEncoder(
                run_key=self._run_key,
                sender=self.node_id,
                incarnation=self.incarnation,
                receiver=peer,
                channel=self.channel,
                payload_cap_bytes=self._payload_cap_bytes,
            )
            link = OutboundLink(
                peer=peer,
                channel=self.channel,
                encoder=encoder,
                book=self.book,
                stats=self.stats,
                timeouts=self.timeouts,
                rng=self._rng,
                queue_frames=self._queue_frames,
            )
            self._outbound[peer] = link
            self._task_group.create_task(link.run(), name=f"dial-{peer}-{self.channel.name}")
        return link

    def send_nowait(self, peer: str, payload: Payload, *, only_if_connected: bool = False) -> bool:
        """Queue ``payload`` for ``peer``.  ``only_if_connected`` drops it while the link is
        down: a heartbeat queued during an outage would arrive as a burst that says
        nothing about the peer's liveness now."""
        link = self.link(peer)
        if only_if_connected and not link.connected:
            self.stats.not_connected_dropped += 1
            return False
        return link.send_nowait(payload)

    async def send(self, peer: str, payload: Payload, timeout_s: float) -> None:
        await self.link(peer).send(payload, timeout_s)

    async def drained(self, peer: str, timeout_s: float) -> None:
        """Wait until everything queued to ``peer`` was written (``OutboundLink.drained``)."""
        await self.link(peer).drained(timeout_s)

    def connected(self, peer: str) -> bool:
        link = self._outbound.get(peer)
        return link is not None and link.connected

    async def serve(
        self, task_group: asyncio.TaskGroup, ready: asyncio.Event | None = None
    ) -> None:
        """Listen until cancelled (run it as a task of ``task_group``, which also owns
        the diallers and connection handlers); ``ready`` is set once it accepts."""
        self._task_group = task_group
        listener = listen_socket(*self._listen)
        try:
            self.bound_port = listener.getsockname()[1]
            for peer in sorted(self.book.peers() - {self.node_id}):
                self.link(peer)
            if ready is not None:
                ready.set()  # the socket listens: connects queue in its backlog
            await self._accept_loop(listener)  # until cancelled
        finally:
            listener.close()
            self._task_group = None

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError:
                # Out of descriptors or a connection reset before accept: keep serving
                # the others, after a pause so a persistent error cannot spin.
                await asyncio.sleep(self.timeouts.backoff_initial_s)
                continue
            self._accept(sock)

    def _accept(self, sock: socket.socket) -> None:
        if self._inbound >= self._max_inbound or self._task_group is None:
            self.stats.inbound_refused += 1
            sock.close()
            return
        sock.setblocking(False)
        self._inbound += 1
        self._task_group.create_task(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        try:
            peer_label = "{}:{}".format(*sock.getpeername()[:2])
        except OSError:
            peer_label = "?:0"
        buffer = ReceiveBuffer()
        try:
            while True:
                result = await read_frame(
                    sock, self.verifier, self.channel, self.timeouts, peer_label, buffer
                )
                if result is None or isinstance(result, DropReason):
                    return  # end of stream, idle, or a frame we cannot re-align after
                self.stats.frames_received += 1
                self.stats.bytes_received += len(result.payload) + HEADER_BYTES + TAG_BYTES
                if result.is_keepalive:
                    continue
                # The handler must be done with the payload (a view of ``buffer``)
                # before the next frame is read into it: it is awaited here.
                handled = self._on_frame(result)
                if handled is not None:
                    async with asyncio.timeout(self.timeouts.handler_s):
                        await handled
        except (OSError, ConnectionError):
            return
        except TimeoutError:
            # The local handler overran; closing the connection pushes back on the
            # sender, which redials once we are ready again.
            self.stats.handler_timeouts += 1
            return
        finally:
            self._inbound -= 1
            sock.close()


def listen_socket(host: str, port: int) -> socket.socket:
    """A non-blocking listening TCP socket on ``host:port`` (port 0: any free one)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, kind, proto)
    try:
        # A restarted node rebinds its port while old connections sit in TIME_WAIT.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(LISTEN_BACKLOG)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener
