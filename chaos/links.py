"""A directed link's two Toxiproxy proxies (control and bulk), changed together.

DESIGN.md, "The network": every directed link A→B has its own proxy per channel,
and A sends to B only on connections A dialled, so a proxy is a direction.  A fault
on a link must hit both channels at once, or a partition would leave heartbeats
flowing on bulk-only cuts (or tensors on control-only cuts).  ``apply_concurrently``
changes many links in parallel so a partition of 8 nodes (up to 112 proxy calls)
takes one round trip, not a hundred.

Toxics act on the ``upstream`` stream: bytes flowing from the dialling node (the
sender) to the listening node, the only direction a peer connection carries data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from swarmshake.chaos.toxiproxy import Toxic

CHANNELS = ("control", "bulk")
# A whole partition's proxy calls must finish within this; each call has its own
# 2 s deadline and a hung server is restarted, so 15 s covers a restart plus retries.
APPLY_DEADLINE_S = 15.0


class ProxyControl(Protocol):
    """What a link needs from a Toxiproxy supervisor (local process or container)."""

    async def set_enabled(self, name: str, enabled: bool) -> None: ...

    async def add_toxic(self, proxy: str, toxic: Toxic) -> None: ...

    async def remove_toxic(self, proxy: str, name: str) -> None: ...


def proxy_name(src: str, dst: str, channel: str) -> str:
    return f"{src}__{dst}__{channel}"


def broker_proxy_name(node: str) -> str:
    return f"{node}__broker"


class Link:
    """``src → dst``: ``await link.cut()``, ``await link.add_toxic("latency", {...})``."""

    def __init__(
        self, control: ProxyControl, src: str, dst: str, channels: tuple[str, ...] = CHANNELS
    ):
        """``channels``: the link's proxied channels (a system may proxy only ``control``)."""
        self._control = control
        self.src = src
        self.dst = dst
        self.proxies = tuple(proxy_name(src, dst, channel) for channel in channels)
        self.cut_now = False
        self.toxics: dict[str, dict[str, Any]] = {}  # kind -> attributes, as applied

    def __repr__(self) -> str:
        return f"Link({self.src}→{self.dst}, cut={self.cut_now}, toxics={sorted(self.toxics)})"

    async def _both(self, call: Callable[[str], Awaitable[None]]) -> None:
        await asyncio.gather(*(call(name) for name in self.proxies))

    async def cut(self) -> None:
        """Partition: the proxies close their connections and refuse new ones."""
        self.cut_now = True
        await self._both(lambda name: self._control.set_enabled(name, False))

    async def restore(self) -> None:
        self.cut_now = False
        await self._both(lambda name: self._control.set_enabled(name, True))

    async def add_toxic(
        self, kind: str, attributes: dict[str, Any], *, toxic_type: str = ""
    ) -> None:
        """Add (or replace) the toxic called ``kind`` on both channels."""
        toxic = Toxic(name=kind, type=toxic_type or kind, stream="upstream", attributes=attributes)  # type: ignore[arg-type]
        self.toxics[kind] = attributes
        await self._both(lambda name: self._control.add_toxic(name, toxic))

    async def remove_toxic(self, kind: str) -> None:
        if self.toxics.pop(kind, None) is None:
            return
        await self._both(lambda name: self._control.remove_toxic(name, kind))

    async def heal(self) -> None:
        """Undo every fault on this link."""
        await asyncio.gather(*(self.remove_toxic(kind) for kind in list(self.toxics)))
        if self.cut_now:
            await self.restore()


async def apply_concurrently(
    links: Iterable[Link], change: Callable[[Link], Awaitable[None]]
) -> int:
    """Apply ``change`` to every link at once, under one deadline; returns the count."""
    chosen = list(links)
    async with asyncio.timeout(APPLY_DEADLINE_S):
        await asyncio.gather(*(change(link) for link in chosen))
    return len(chosen)
