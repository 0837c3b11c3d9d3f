"""Asyncio-side driver of the membership core (``protocol.membership``).

The decisions (which configuration governs which step, what a restart keeps, what
the detector watches after a change) are the protocol's ``NodeMembership`` and
``Configurations``, the same code the simulator runs.  This module adds what only
the runtime does:

- ``ConfigHistory``: ``Configurations`` persisted atomically in
  ``<data_dir>/membership.json``, so a restart and a checkpoint restore start their
  commit core with the configuration that governed their state's step, and a node
  that left knows it must join again.
- ``MembershipDriver``: feeds ``NodeMembership``, logs ``config_change`` *before*
  acting on it (the file write, the detector), and tells the detector the members.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import msgspec

from swarmshake.reference_node.protocol import membership as mb
from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.membership import (
    GENESIS_CONFIG_STEP as GENESIS,  # noqa: F401 (the runtime's name for it)
)
from swarmshake.reference_node.protocol.membership import (
    Configuration,
    Configurations,
    initial_configuration,  # noqa: F401 (node.py builds the initial one here)
)
from swarmshake.reference_node.protocol.node_core import history_of
from swarmshake.reference_node.runtime.events import EventLog

FILE_NAME = "membership.json"


class _File(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    history: list[Configuration]


class MembershipFileError(ValueError):
    """``membership.json`` is unreadable: the message names the file and the fix."""


class ConfigHistory(Configurations):
    """``Configurations`` kept in ``<data_dir>/membership.json``; the driver saves
    after it logged what changed (DESIGN: log before acting)."""

    def __init__(self, data_dir: Path, initial: Configuration, entries=()):
        super().__init__(initial, entries)
        self.path = data_dir / FILE_NAME

    @classmethod
    def load(cls, data_dir: Path, initial: Configuration) -> ConfigHistory:
        """The persisted history, or ``initial`` when there is none yet."""
        path = data_dir / FILE_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(data_dir, initial)
        try:
            entries = msgspec.json.decode(raw, type=_File).history
        except msgspec.DecodeError as error:
            # Written atomically, so this is not a torn write: refuse to guess a
            # configuration (a wrong one can break S3).
            raise MembershipFileError(
                f"{path}: unreadable ({error}); delete it to start from the configured members"
            ) from None
        return cls(data_dir, initial, entries)

    def save(self) -> None:
        """Atomic: temp file, fsync, rename, fsync folder (a crash keeps old or new)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{FILE_NAME}.tmp.{os.getpid()}")
        with open(temporary, "wb") as handle:
            handle.write(msgspec.json.encode(_File(history=self.entries)))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


class MembershipDriver:
    """Feeds ``NodeMembership`` and performs its actions; one per control process."""

    def __init__(
        self,
        *,
        node: str,
        incarnation: int,
        configs: ConfigHistory,
        events: EventLog,
        now: Callable[[], float],
        members_changed: Callable[[tuple[str, ...]], None],
        bugs: BugSet = NO_BUGS,
    ):
        self.node = node
        self.configs = configs
        self.events = events
        self._now = now
        self._members_changed = members_changed
        self.state = mb.NodeMembership(
            node=node, incarnation=incarnation, configs=configs, bugs=bugs
        )

    @property
    def core(self) -> mb.Membership:
        return self.state.core

    @property
    def current(self) -> Configuration:
        return self.state.current

    def is_member(self) -> bool:
        return self.state.is_member()

    def restart_at(
        self,
        configuration: Configuration,
        *,
        from_peer: bool,
        tell_detector: bool,
        held_as_member: bool = False,
    ) -> None:
        """The node's state was replaced (start, rejoin): its configuration comes with
        it (``NodeMembership.restart_at``)."""
        watched = self.state.restart_at(
            configuration, from_peer=from_peer, held_as_member=held_as_member
        )
        if from_peer:
            self.configs.save()
        if tell_detector:
            self._members_changed(watched)

    def removal_confirmed(self, step: int) -> bool:
        """A member committed this node's removal at ``step`` (it missed that step);
        returns whether that was news (then it is on disk)."""
        if not self.state.removal_confirmed(step):
            return False
        self.configs.save()
        return True

    def feed(self, event: object) -> list[object]:
        """Feed one event; returns the ``ConfigChanged`` actions performed."""
        changed = self.state.feed(event, self._now())  # type: ignore[arg-type]
        self._perform(changed)
        return list(changed)

    def committed(self, step: int, change: object) -> list[object]:
        """A committed value carried ``change``: apply it (step order is the caller's)."""
        changed = self.state.committed(step, change, self._now())  # type: ignore[arg-type]
        self._perform(changed)
        return list(changed)

    def _perform(self, changed: list[mb.ConfigChanged]) -> None:
        for action in changed:
            # DESIGN: log before acting (the history shows every change).  The record
            # is in memory already; the file follows the log.
            cls, fields = history_of(action, node=self.node)  # type: ignore[misc]
            self.events.log(cls, **fields)
            self.configs.save()
            members = self.state.watched_members(action)
            if members is not None:
                self._members_changed(members)

    @property
    def rejected_joins(self) -> int:
        return self.state.rejected_joins

    def status(self) -> dict[str, object]:
        core = self.core
        return {
            "voters": list(core.voters),
            "learners": list(core.learners),
            "config_step": core.config_step,
            "role": core.role(self.node),
            "pending": [json.loads(msgspec.json.encode(p)) for p in core.pending],
            "rejected_joins": self.rejected_joins,
        }
