"""A node's incarnation: a counter persisted in its data folder, raised at every start.

SWIM-style detectors tell a restarted process from its previous life by a higher
incarnation, so the counter must survive crashes: it is written atomically (temp
file, fsync, rename, fsync folder) before the node says anything to a peer.
"""

from __future__ import annotations

from pathlib import Path

from swarmshake.reference_node.protocol import node_core
from swarmshake.reference_node.runtime.durable import write_atomically

FILE_NAME = "incarnation"


def read(data_dir: Path) -> int:
    path = data_dir / FILE_NAME
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0
    if not text.isdigit():
        raise ValueError(
            f"{path}: not an incarnation number ({text[:20]!r}); delete it to start at 1"
        )
    return int(text)


def store(data_dir: Path, value: int) -> None:
    write_atomically(data_dir, FILE_NAME, f"{value}\n".encode())


def next_incarnation(data_dir: Path) -> int:
    """Raise and persist the counter; returns this start's incarnation (the node
    core's ``next_incarnation``: the first is ``FIRST_INCARNATION``)."""
    value = node_core.next_incarnation(read(data_dir))
    store(data_dir, value)
    return value
