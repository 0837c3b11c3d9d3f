"""Asyncio-side driver of the membership core (``protocol.membership.Membership``).

The configuration (voters, learners) changes only through committed steps, one node
at a time (DESIGN); this module keeps what the runtime needs around the core:

- ``ConfigHistory``: the configurations this node saw committed, by the step that
  committed them, persisted atomically in ``<data_dir>/membership.json`` so a restart
  (and a checkpoint restore) starts its commit core with the configuration that
  governed its state's step, and a node that left knows it must join again.
- ``MembershipDriver``: feeds the core (join and leave requests, deaths, caught-up
  learners, committed changes), logs ``config_change`` *before* acting on it, and
  tells the detector the new members.

Which configuration governs a step: a change committed at step ``c`` takes effect
from step ``c + 1`` (commit core), so the state after applying step ``k`` runs under
the newest change with ``c <= k``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import msgspec

from swarmshake.reference_node.protocol import membership as mb
from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.node_core import history_of
from swarmshake.reference_node.runtime.events import EventLog

FILE_NAME = "membership.json"
# Configurations kept on disk: a checkpoint is at most a few hundred steps old and
# membership changes are rare (one per join or leave), so 64 reach far past any
# checkpoint still on disk while keeping the file a few KB.
HISTORY_KEPT = 64
GENESIS = -1  # the "step" of the initial configuration (nothing committed yet)


class Configuration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The configuration committed at ``step`` (``GENESIS``: the initial one)."""

    step: int
    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(sorted(self.voters + self.learners))


class _File(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    history: list[Configuration]


class MembershipFileError(ValueError):
    """``membership.json`` is unreadable: the message names the file and the fix."""


class ConfigHistory:
    def __init__(self, data_dir: Path, initial: Configuration):
        self.path = data_dir / FILE_NAME
        self.entries: list[Configuration] = [initial]

    @classmethod
    def load(cls, data_dir: Path, initial: Configuration) -> ConfigHistory:
        """The persisted history, or ``initial`` when there is none yet."""
        store = cls(data_dir, initial)
        try:
            raw = store.path.read_bytes()
        except FileNotFoundError:
            return store
        try:
            entries = msgspec.json.decode(raw, type=_File).history
        except msgspec.DecodeError as error:
            # Written atomically, so this is not a torn write: refuse to guess a
            # configuration (a wrong one can break S3).
            raise MembershipFileError(
                f"{store.path}: unreadable ({error}); delete it to start from the "
                "configured members"
            ) from None
        if entries:
            store.entries = sorted(entries, key=lambda entry: entry.step)
        return store

    def latest(self) -> Configuration:
        return self.entries[-1]

    def after(self, step: int) -> Configuration:
        """The configuration the state after committing ``step`` runs under."""
        chosen = self.entries[0]
        for entry in self.entries:
            if entry.step <= step:
                chosen = entry
        return chosen

    def record(self, entry: Configuration) -> None:
        """A change committed here (steps only grow, so it goes last)."""
        self.entries = [e for e in self.entries if e.step < entry.step] + [entry]
        del self.entries[:-HISTORY_KEPT]
        self.save()

    def reset(self, entry: Configuration) -> None:
        """State installed from a peer: its configuration replaces everything newer."""
        self.entries = [e for e in self.entries if e.step < entry.step] + [entry]
        del self.entries[:-HISTORY_KEPT]
        self.save()

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


def initial_configuration(members: list[str], node: str, join: bool) -> Configuration:
    """From the config file: every member votes, except this node when it joins."""
    voters = tuple(sorted(m for m in members if not (join and m == node)))
    return Configuration(step=GENESIS, voters=voters)


class MembershipDriver:
    """Feeds ``Membership`` and performs its actions; one per control process."""

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
        self.incarnation = incarnation
        self.configs = configs
        self.events = events
        self._now = now
        self._members_changed = members_changed
        self._bugs = bugs
        self.rejected_joins = 0
        self.core = self._core_for(configs.latest())

    def _core_for(self, configuration: Configuration) -> mb.Membership:
        core = mb.Membership(
            node=self.node,
            voters=configuration.voters,
            learners=configuration.learners,
            incarnation=self.incarnation,
            bugs=self._bugs,
        )
        core.config_step = configuration.step
        return core

    @property
    def current(self) -> Configuration:
        core = self.core
        return Configuration(step=core.config_step, voters=core.voters, learners=core.learners)

    def is_member(self) -> bool:
        return self.core.role(self.node) != "absent"

    def restart_at(
        self, configuration: Configuration, *, from_peer: bool, tell_detector: bool
    ) -> None:
        """The node's state was replaced (start, rejoin): its configuration comes with
        it.  Pending requests die with the old core; joiners and leavers ask again."""
        if from_peer:
            self.configs.reset(configuration)
        self.core = self._core_for(configuration)
        if tell_detector and self.is_member():
            self._members_changed(configuration.members)

    def feed(self, event: object) -> list[object]:
        """Feed one event; returns the ``ConfigChanged`` actions performed."""
        try:
            actions = self.core.handle(event, self._now())  # type: ignore[arg-type]
        except RemoteProtocolError:
            # e.g. a join storm past PENDING_CHANGES_MAX: the joiner asks again later.
            self.rejected_joins += 1
            return []
        changed: list[object] = []
        for action in actions:
            match action:
                case mb.ConfigChanged():
                    entry = Configuration(
                        step=action.step, voters=action.voters, learners=action.learners
                    )
                    # DESIGN: log before acting (the history shows every change).
                    cls, fields = history_of(action, node=self.node)  # type: ignore[misc]
                    self.events.log(cls, **fields)
                    self.configs.record(entry)
                    if self.node in entry.members:
                        self._members_changed(entry.members)
                    changed.append(action)
                case mb.JoinRejected():
                    # No wire message says "rejected": the joiner times out and, if it
                    # was declared dead, restarts with a higher incarnation.
                    self.rejected_joins += 1
                case mb.MustRejoin():
                    pass  # the control process already restarts on SelfDeclaredDead
        return changed

    def committed(self, step: int, change: object) -> list[object]:
        """A committed value carried ``change``: apply it (step order is the caller's)."""
        if step <= self.core.config_step:
            return []  # already applied (a configuration that came with a state transfer)
        try:
            return self.feed(mb.ConfigCommitted(step=step, change=change))  # type: ignore[arg-type]
        except LocalProtocolError as error:
            # The commit core validated the change against the same configuration, so
            # this is a driver bug; say so loudly rather than diverge silently.
            raise LocalProtocolError(f"membership and commit cores disagree: {error}") from None

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
