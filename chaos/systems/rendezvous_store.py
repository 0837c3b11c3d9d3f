"""A c10d TCPStore server: the rendezvous point of a TorchElastic cluster.

``python -m swarmshake.chaos.systems.rendezvous_store HOST PORT`` serves until
SIGTERM.  It runs as a cluster service, outside every node, so crashing a node
never takes the rendezvous with it (the agents are started with ``is_host=false``).
"""

from __future__ import annotations

import signal
import sys
import threading
from datetime import timedelta


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit() or not 0 < int(argv[1]) < 65536:
        print("usage: rendezvous_store HOST PORT", file=sys.stderr)
        return 64
    import torch.distributed as dist

    store = dist.TCPStore(
        argv[0], int(argv[1]), is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=60),
    )  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"rendezvous store on {argv[0]}:{argv[1]}", flush=True)
    while not stop.wait(1.0):  # the store serves from its own threads
        pass
    del store
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
