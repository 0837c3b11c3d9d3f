"""The control process's event log: history events stamped with both clocks.

``t_mono`` is the host's true monotonic clock (shared by every process of a run);
the node's possibly skewed clock is what the cores see, not what events record
(DESIGN.md).  One ``write`` and flush per event (``history.EventWriter``), so a
SIGKILL loses at most the last line.  Callers log a send or a vote *before* doing it.
"""

from __future__ import annotations

import time
from pathlib import Path

from swarmshake.reference_node.protocol import history


class EventLog:
    def __init__(self, path: Path, node: str, incarnation: int):
        self._writer = history.EventWriter(path)
        self.node = node
        self.incarnation = incarnation
        self.epoch = 0  # the detector view epoch, stamped on every event
        self.lamport = 0
        self.counts: dict[str, int] = {}

    def log(
        self,
        cls: type[history.EventBase],
        step: int = -1,
        incarnation: int | None = None,
        epoch: int | None = None,
        **fields: object,
    ) -> None:
        """``incarnation`` defaults to the process's; a ``refute`` records the raised one.
        ``epoch``: a ``view_change`` starts a new view epoch, stamped from then on."""
        if epoch is not None:
            self.epoch = epoch
        self.lamport += 1
        event = cls(
            t_wall=time.time(),
            t_mono=time.monotonic(),
            node=self.node,
            incarnation=self.incarnation if incarnation is None else incarnation,
            epoch=self.epoch,
            step=step,
            lamport=self.lamport,
            **fields,
        )
        self._writer.write(event)
        kind = cls.__struct_config__.tag  # type: ignore[attr-defined]
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def close(self) -> None:
        self._writer.close()
