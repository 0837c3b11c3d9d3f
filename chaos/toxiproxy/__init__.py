"""Toxiproxy control: a typed asyncio client of its REST API and a supervisor of
the server process that restarts a hung server and re-creates its proxies.

Why not toxiproxy-python: it is synchronous (requests), keeps host and port at
class level (one server per interpreter) and depends on the ``future`` package;
the harness drives faults concurrently and may talk to two servers at once (local
and Docker).  A test keeps showing that toxiproxy-python works against our server.
"""

from swarmshake.chaos.toxiproxy.client import (
    Proxy,
    Toxic,
    ToxiproxyClient,
    ToxiproxyError,
    ToxiproxyHungError,
)
from swarmshake.chaos.toxiproxy.server import ToxiproxyServer, toxiproxy_binary
from swarmshake.chaos.toxiproxy.split import ChannelSplit

__all__ = [
    "ChannelSplit",
    "Proxy",
    "Toxic",
    "ToxiproxyClient",
    "ToxiproxyError",
    "ToxiproxyHungError",
    "ToxiproxyServer",
    "toxiproxy_binary",
]
