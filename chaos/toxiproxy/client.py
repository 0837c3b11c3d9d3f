"""A typed asyncio client of Toxiproxy's REST API (v2.x).

Every call has a deadline: Toxiproxy's API can hang when a toxic is removed under
traffic (Toxiproxy issues #159, #558), and a hung call must not hang the harness.
A call past its deadline raises ``ToxiproxyHungError``; ``ToxiproxyServer``
(server.py) answers that by restarting the server and re-creating its proxies.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import msgspec

from swarmshake.chaos.toxiproxy.http import HttpPool, HttpTransportError

# Toxiproxy answers in well under 10 ms on loopback; 2 s is far past any healthy
# answer and short enough that a fault schedule's timing stays meaningful.
DEFAULT_CALL_TIMEOUT_S = 2.0

ToxicType = Literal[
    "latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data"
]
Stream = Literal["upstream", "downstream"]


class Toxic(msgspec.Struct, kw_only=True, frozen=True):
    """One toxic on a proxy.  ``downstream`` acts on bytes flowing server → client."""

    name: str
    type: ToxicType
    stream: Stream = "downstream"
    toxicity: float = 1.0
    attributes: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if not 0.0 <= self.toxicity <= 1.0:
            raise ValueError(f"toxic {self.name!r}: toxicity {self.toxicity} is not in [0, 1]")


class Proxy(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    listen: str  # "host:port"
    upstream: str  # "host:port"
    enabled: bool = True
    toxics: list[Toxic] = []

    @property
    def listen_port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


class ToxiproxyError(RuntimeError):
    """Toxiproxy refused a call; the message carries its status and answer."""


class ToxiproxyHungError(ToxiproxyError):
    """A call passed its deadline or the server stopped answering."""


_proxy_map = msgspec.json.Decoder(dict[str, Proxy])
_proxy_one = msgspec.json.Decoder(Proxy)
_toxic_one = msgspec.json.Decoder(Toxic)
_toxic_list = msgspec.json.Decoder(list[Toxic])


class ToxiproxyClient:
    """Talks to one server.  Use several instances to drive several servers at once."""

    def __init__(self, base_url: str, *, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S):
        self.base_url = base_url.rstrip("/")
        self.call_timeout_s = call_timeout_s
        # One bounded connection pool per client (http.py says why not httpx).
        self._http = HttpPool(self.base_url)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> ToxiproxyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, body: Any = None) -> bytes:
        content = None if body is None else msgspec.json.encode(body)
        try:
            async with asyncio.timeout(self.call_timeout_s):
                status, answer = await self._http.request(method, path, content or b"")
        except TimeoutError as error:
            raise ToxiproxyHungError(
                f"{method} {self.base_url}{path}: no answer within {self.call_timeout_s}s"
            ) from error
        except HttpTransportError as error:
            raise ToxiproxyHungError(f"{method} {self.base_url}{path}: {error}") from error
        if status >= 400:
            text = answer.decode(errors="replace").strip()
            raise ToxiproxyError(f"{method} {path}: HTTP {status}: {text}")
        return answer

    async def version(self) -> str:
        return (await self._call("GET", "/version")).decode().strip()

    async def proxies(self) -> dict[str, Proxy]:
        return _proxy_map.decode(await self._call("GET", "/proxies"))

    async def create_proxy(
        self, name: str, listen: str, upstream: str, *, enabled: bool = True
    ) -> Proxy:
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled}
        return _proxy_one.decode(await self._call("POST", "/proxies", body))

    async def get_proxy(self, name: str) -> Proxy:
        return _proxy_one.decode(await self._call("GET", f"/proxies/{name}"))

    async def set_enabled(self, name: str, enabled: bool) -> Proxy:
        """Disabling a proxy closes its connections and refuses new ones."""
        return _proxy_one.decode(await self._call("POST", f"/proxies/{name}", {"enabled": enabled}))

    async def delete_proxy(self, name: str) -> None:
        await self._call("DELETE", f"/proxies/{name}")

    async def toxics(self, proxy: str) -> list[Toxic]:
        return _toxic_list.decode(await self._call("GET", f"/proxies/{proxy}/toxics"))

    async def add_toxic(self, proxy: str, toxic: Toxic) -> Toxic:
        return _toxic_one.decode(await self._call("POST", f"/proxies/{proxy}/toxics", toxic))

    async def update_toxic(self, proxy: str, name: str, attributes: dict[str, Any]) -> Toxic:
        body = {"attributes": attributes}
        return _toxic_one.decode(await self._call("POST", f"/proxies/{proxy}/toxics/{name}", body))

    async def remove_toxic(self, proxy: str, name: str) -> None:
        await self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        await self._call("POST", "/reset")
