"""Two Toxiproxy supervisors behind one interface: bulk proxies on their own server.

One Toxiproxy process copies every byte of every link.  With a 1M-parameter model
and 8 nodes that is ~220 MB of gradients a step, and a heartbeat queued in the same
process waits behind the copying: on 2 cores, 8 fault-free nodes saw 387 suspicions
and 183 false deaths with one server and none with the nodes dialling each other
directly.  A second server for the bulk channel keeps the control proxies (and the
broker's) in a process that is almost idle, which the kernel's scheduler runs as
soon as a heartbeat arrives, as a real network's switch would not queue a 100-byte
packet behind another flow's megabytes for a fifth of a second.

``ChannelSplit`` routes each call by proxy name (``proxy_name(..., "bulk")`` ends in
``__bulk``), so ``Link`` and everything else see one ``ProxyControl``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from swarmshake.chaos.toxiproxy.client import Proxy, Toxic

BULK_SUFFIX = "__bulk"  # chaos/links.proxy_name(src, dst, "bulk")


class ChannelSplit:
    """``control`` serves control-channel and broker proxies, ``bulk`` the bulk ones."""

    def __init__(self, control: Any, bulk: Any):
        self.control = control
        self.bulk = bulk

    def server_for(self, proxy: str) -> Any:
        return self.bulk if proxy.endswith(BULK_SUFFIX) else self.control

    @property
    def servers(self) -> tuple[Any, Any]:
        return self.control, self.bulk

    async def create_proxy(self, name: str, listen: str, upstream: str, **options: Any) -> Any:
        return await self.server_for(name).create_proxy(name, listen, upstream, **options)

    async def delete_proxy(self, name: str) -> None:
        await self.server_for(name).delete_proxy(name)

    async def set_enabled(self, name: str, enabled: bool) -> None:
        await self.server_for(name).set_enabled(name, enabled)

    async def add_toxic(self, proxy: str, toxic: Toxic) -> None:
        await self.server_for(proxy).add_toxic(proxy, toxic)

    async def remove_toxic(self, proxy: str, name: str) -> None:
        await self.server_for(proxy).remove_toxic(proxy, name)

    async def reset(self) -> None:
        await asyncio.gather(self.control.reset(), self.bulk.reset())

    def proxy(self, name: str) -> Proxy:
        return self.server_for(name).proxy(name)
