"""Fixtures for the toolchain tests: real Toxiproxy, Mosquitto, dockerd and TLC."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator

import pytest

from swarmshake.chaos.toxiproxy import ToxiproxyServer, toxiproxy_binary


def require_toxiproxy() -> None:
    try:
        toxiproxy_binary()
    except FileNotFoundError as error:
        pytest.fail(f"{error} — `make test` builds it; this is a broken set-up, not a skip")


@pytest.fixture
async def toxiproxy(tmp_path) -> AsyncIterator[ToxiproxyServer]:
    require_toxiproxy()
    async with ToxiproxyServer(log_path=tmp_path / "toxiproxy.log") as server:
        yield server


class EchoServer:
    """A TCP echo server on loopback: the upstream behind a proxy."""

    def __init__(self) -> None:
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def __aenter__(self) -> EchoServer:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        # Python 3.11's wait_closed can hang on live connections; closing is enough.


@pytest.fixture
async def echo_server() -> AsyncIterator[EchoServer]:
    async with EchoServer() as server:
        yield server


def mosquitto_binary() -> str:
    found = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if shutil.os.path.exists("/usr/sbin/mosquitto") else None
    )
    if not found:
        pytest.fail(
            "mosquitto not installed — `make setup` installs it (apt-get install mosquitto)"
        )
    return found
