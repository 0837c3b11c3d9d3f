"""Runs a Toxiproxy server as a child process and keeps it answering.

The supervisor remembers the desired state (proxies, their enabled flag, their
toxics) of everything created through it.  When a call hangs (Toxiproxy issues
#159, #558) it kills the server, starts a new one on the same API port,
re-creates that state and records the incident through ``on_incident`` so the
run's history shows it.  Only a bounded number of restarts is attempted: a
server that keeps hanging is a broken environment, reported as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from swarmshake.chaos.child_process import stop_child
from swarmshake.chaos.toxiproxy.client import (
    DEFAULT_CALL_TIMEOUT_S,
    Proxy,
    Toxic,
    ToxiproxyClient,
    ToxiproxyHungError,
)

T = TypeVar("T")

START_DEADLINE_S = 10.0  # the server answers /version within ~50 ms of exec
MAX_RESTARTS = 3  # more than this in one run means the environment is broken


def project_root() -> Path:
    return Path(__file__).resolve().parents[2]


def toxiproxy_binary() -> Path:
    """The server built by ``make setup`` (``.tools/bin``), else one on PATH."""
    override = os.environ.get("SWARMSHAKE_TOXIPROXY")
    candidates = [Path(override)] if override else []
    candidates.append(project_root() / ".tools" / "bin" / "toxiproxy-server")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    from shutil import which

    found = which("toxiproxy-server")
    if found:
        return Path(found)
    raise FileNotFoundError(
        "toxiproxy-server not found: run `make setup` (builds it into .tools/bin)"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class ToxiproxyServer:
    """``async with ToxiproxyServer() as toxi: await toxi.create_proxy(...)``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | None = None,
        pid_dir: Path | None = None,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        on_incident: Callable[[str, dict[str, Any]], None] | None = None,
    ):
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self.pid_dir = pid_dir
        self.call_timeout_s = call_timeout_s
        self.on_incident = on_incident
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._client: ToxiproxyClient | None = None
        self._proxies: dict[str, Proxy] = {}  # desired state, re-created after a restart

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def client(self) -> ToxiproxyClient:
        if self._client is None:
            raise RuntimeError("ToxiproxyServer is not started")
        return self._client

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def __aenter__(self) -> ToxiproxyServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _spawn(self) -> subprocess.Popen[bytes]:
        # Popen only forks and execs (about a millisecond); the slow part, waiting
        # for the API to answer, is awaited in start().
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            return subprocess.Popen(
                [str(toxiproxy_binary()), "-host", self.host, "-port", str(self.port)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to the harness must not kill it mid-heal
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()

    async def start(self) -> None:
        self._process = self._spawn()
        if self.pid_dir:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            (self.pid_dir / f"toxiproxy-{self.port}.pid").write_text(str(self._process.pid))
        self._client = ToxiproxyClient(self.url, call_timeout_s=self.call_timeout_s)
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"toxiproxy-server exited with {self._process.returncode} at start "
                    f"(port {self.port} taken?); log: {self.log_path}"
                )
            try:
                await self._client.version()
                return
            except ToxiproxyHungError:
                if time.monotonic() > deadline:
                    await self.stop()
                    raise RuntimeError(
                        f"toxiproxy-server did not answer within {START_DEADLINE_S}s"
                    ) from None
                await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        process, self._process = self._process, None
        await stop_child(process)
        if self.pid_dir:
            with contextlib.suppress(FileNotFoundError):
                (self.pid_dir / f"toxiproxy-{self.port}.pid").unlink()

    async def restart(self, reason: str) -> None:
        """Kill the server, start a new one on the same port, re-create the desired state."""
        if self.restarts >= MAX_RESTARTS:
            raise ToxiproxyHungError(
                f"toxiproxy hung again after {MAX_RESTARTS} restarts ({reason}); giving up"
            )
        self.restarts += 1
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            await asyncio.to_thread(self._process.wait)
        self._process = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self.start()
        for proxy in self._proxies.values():
            await self.client.create_proxy(
                proxy.name, proxy.listen, proxy.upstream, enabled=proxy.enabled
            )
            for toxic in proxy.toxics:
                await self.client.add_toxic(proxy.name, toxic)
        if self.on_incident:
            self.on_incident(
                "toxiproxy_restart",
                {"reason": reason, "restarts": self.restarts, "proxies": len(self._proxies)},
            )

    async def _supervised(
        self, call: Callable[[], Awaitable[T]], what: str, *, recorded: bool = True
    ) -> T | None:
        """Run a call; on a hang restart the server.  A change already ``recorded`` in
        the desired state is re-applied by the restart itself, so it is not sent twice."""
        try:
            return await call()
        except ToxiproxyHungError as error:
            await self.restart(f"{what}: {error}")
            return None if recorded else await call()

    # --- calls that change state: recorded so a restart can re-create it ----------------

    async def create_proxy(
        self, name: str, listen: str, upstream: str, *, enabled: bool = True
    ) -> Proxy:
        proxy = await self._supervised(
            lambda: self.client.create_proxy(name, listen, upstream, enabled=enabled),
            f"create {name}",
            recorded=False,
        )
        assert proxy is not None
        self._proxies[name] = proxy
        return proxy

    async def delete_proxy(self, name: str) -> None:
        self._proxies.pop(name, None)
        await self._supervised(lambda: self.client.delete_proxy(name), f"delete {name}")

    async def set_enabled(self, name: str, enabled: bool) -> None:
        # Record first: if the call hangs, the restart re-creates the wanted state.
        self._proxies[name] = _replace(self._proxies[name], enabled=enabled)
        await self._supervised(lambda: self.client.set_enabled(name, enabled), f"enable {name}")

    async def add_toxic(self, proxy: str, toxic: Toxic) -> None:
        current = self._proxies[proxy]
        kept = [t for t in current.toxics if t.name != toxic.name]
        self._proxies[proxy] = _replace(current, toxics=[*kept, toxic])
        await self._supervised(lambda: self.client.add_toxic(proxy, toxic), f"toxic {proxy}")

    async def remove_toxic(self, proxy: str, name: str) -> None:
        current = self._proxies[proxy]
        self._proxies[proxy] = _replace(
            current, toxics=[t for t in current.toxics if t.name != name]
        )

        async def remove() -> None:
            live = {t.name for t in await self.client.toxics(proxy)}
            if name in live:  # after a restart the toxic may already be gone
                await self.client.remove_toxic(proxy, name)

        await self._supervised(remove, f"remove toxic {proxy}/{name}")

    async def reset(self) -> None:
        self._proxies = {
            name: _replace(proxy, enabled=True, toxics=[]) for name, proxy in self._proxies.items()
        }
        await self._supervised(self.client.reset, "reset")

    def proxy(self, name: str) -> Proxy:
        return self._proxies[name]


def _replace(proxy: Proxy, **changes: Any) -> Proxy:
    import msgspec

    return msgspec.structs.replace(proxy, **changes)
