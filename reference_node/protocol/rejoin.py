"""Rejoin core: how a restarted node gets back the cluster's state.

Policy: ask a live peer for the state of its latest committed step, choosing the
source by rendezvous hashing over the live peers that are not busy (so several nodes
restarting at once spread over different sources, and the choice is stable while the
view is); verify the received bytes by fingerprint against the source's offer; on a
timeout, failure or mismatch try the next source with a progressively longer timeout;
after ``sources_max`` attempts, or with no live peer, fall back to the local
checkpoint.

Genesis: a source that has committed nothing yet answers ``StateOffered(step=-1,
param_fp=<initial fingerprint>)`` and sends no bytes.  If this node has no checkpoint
either and the fingerprint equals ``genesis_param_fp`` (the initial parameters, which
every node derives from the seed), it joins before step 0: ``RejoinDone(step=-1)``.  Safe even if some other peer has
committed steps meanwhile: the commit core then starts at step 0 and consensus per
step (plus ``Behind``) brings it the committed values in order; the initial state is
the one state every replica provably had.  For the same reason genesis is the last
fallback when no source answered and there is no checkpoint (instead of
``RejoinFailed``): after a partition in which every live node was declared dead, all
of them restart at once and none can serve the others.  A driver that passes no
``genesis_param_fp`` (the default "") gets the old behaviour: a genesis offer counts
as a failed source and the last fallback is ``RejoinFailed``.  The node joins at a step boundary: ``RejoinDone.step`` is the committed
step it now holds, and the commit core starts at ``step + 1``.

How a driver uses it (see also DRIVERS.md)
------------------------------------------
``Rejoin(node=..., incarnation=..., seed=..., local_checkpoint=...)`` then
``handle(event, now)``:

- ``Begin(live_peers, busy)`` once the detector has a view after the restart;
- ``StateOffered(source, step, param_fp, nbytes)`` for a ``messages.StateOffer``;
- ``StateReceived(source, step, computed_fp, nbytes)`` once the bulk bytes arrived
  and the driver computed their fingerprint (the one fingerprint function);
- ``FetchFailed(source, reason)`` for a broken transfer;
- ``CheckpointLoaded(step, computed_fp)`` after a ``LoadCheckpoint``;
- ``Tick()`` at ``next_deadline()``.

Actions: ``RequestState`` -> log ``rejoin_begin(source, from_step)``, send a
``StateRequest``; ``LoadCheckpoint`` -> log ``rejoin_begin(source="checkpoint")`` and
load it; ``RejoinDone`` -> log ``rejoin_done``, install the state, start the commit
core at ``step + 1``; ``RejoinFailed`` -> nothing to load: the node cannot rejoin
(strict mode stalls by design; the reason says why).

``stale-rejoin`` (bug): ``Begin`` answers ``RejoinDone(source="local",
verified=False)`` with the stale local fingerprint at once, with no transfer.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.messages import GENESIS_STEP
from swarmshake.reference_node.protocol.structs import (
    Clock,
    CoreAction,
    CoreEvent,
    check_count,
    check_name,
    check_names,
    check_positive,
)

Phase = Literal["idle", "fetching", "checkpoint", "done", "failed"]

# (phase, input) -> next phase; everything that moves the rejoin lives here.
REJOIN_TRANSITIONS: dict[tuple[Phase, str], Phase] = {
    ("idle", "begin_with_source"): "fetching",
    ("idle", "begin_without_source"): "checkpoint",
    ("idle", "begin_stale"): "done",  # the stale-rejoin bug
    ("idle", "begin_nothing"): "failed",
    ("idle", "begin_genesis"): "done",  # no peer, no checkpoint: the initial state
    ("fetching", "verified"): "done",
    ("fetching", "next_source"): "fetching",
    ("fetching", "sources_exhausted"): "checkpoint",
    ("fetching", "nothing_left"): "failed",
    ("fetching", "genesis"): "done",
    ("checkpoint", "verified"): "done",
    ("checkpoint", "corrupt"): "failed",
}


class CheckpointInfo(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    step: int
    param_fp: str


class RejoinConfig(msgspec.Struct, frozen=True, kw_only=True):
    # Transfers of ~100M parameters over loopback take seconds; the first attempt gets
    # 5 s and each retry doubles it, so a slow but healthy source is not abandoned.
    fetch_timeout_s: float = 5.0
    fetch_timeout_max_s: float = 40.0
    sources_max: int = 3  # then the local checkpoint: bounded time before a fallback
    # The offer is one control message: request + reply take <= 2 x 75 ms in the
    # envelope plus the source's handling (Δ_proc 100 ms), so 1 s is a 4x margin.  A
    # source silent that long is dead or cut off (a just-restarted node's detector
    # still lists a crashed peer as alive); waiting out its 5-40 s fetch timeout
    # instead delayed commits past the recovery bound R (found by explore).
    offer_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self.fetch_timeout_s, "RejoinConfig.fetch_timeout_s")
        check_positive(self.fetch_timeout_max_s, "RejoinConfig.fetch_timeout_max_s")
        check_positive(self.offer_timeout_s, "RejoinConfig.offer_timeout_s")
        check_count(self.sources_max, "RejoinConfig.sources_max")


class Begin(CoreEvent, frozen=True, kw_only=True):
    live_peers: tuple[str, ...]
    busy: tuple[str, ...] = ()  # peers already serving a transfer

    def __post_init__(self) -> None:
        check_names(self.live_peers, "Begin.live_peers")
        check_names(self.busy, "Begin.busy")


class StateOffered(CoreEvent, frozen=True, kw_only=True):
    source: str
    step: int
    param_fp: str
    nbytes: int

    def __post_init__(self) -> None:
        check_name(self.source, "StateOffered.source")
        if self.step != GENESIS_STEP:
            check_count(self.step, "StateOffered.step")
        check_count(self.nbytes, "StateOffered.nbytes")


class StateReceived(CoreEvent, frozen=True, kw_only=True):
    source: str
    step: int
    computed_fp: str
    nbytes: int

    def __post_init__(self) -> None:
        check_name(self.source, "StateReceived.source")
        check_count(self.step, "StateReceived.step")
        check_count(self.nbytes, "StateReceived.nbytes")


class FetchFailed(CoreEvent, frozen=True, kw_only=True):
    source: str
    reason: str

    def __post_init__(self) -> None:
        check_name(self.source, "FetchFailed.source")


class CheckpointLoaded(CoreEvent, frozen=True, kw_only=True):
    step: int
    computed_fp: str

    def __post_init__(self) -> None:
        check_count(self.step, "CheckpointLoaded.step")


class Tick(CoreEvent, frozen=True, kw_only=True):
    pass


RejoinEvent = Begin | StateOffered | StateReceived | FetchFailed | CheckpointLoaded | Tick


class RequestState(CoreAction, frozen=True, kw_only=True):
    source: str
    attempt: int
    deadline: float
    from_step: int  # the step of the local checkpoint, -1 without one


class LoadCheckpoint(CoreAction, frozen=True, kw_only=True):
    path: str
    step: int
    param_fp: str


class RejoinDone(CoreAction, frozen=True, kw_only=True):
    source: str  # a peer, "checkpoint", or "local" (stale-rejoin bug)
    step: int
    param_fp: str
    nbytes: int
    verified: bool


class RejoinFailed(CoreAction, frozen=True, kw_only=True):
    reason: str


RejoinAction = RequestState | LoadCheckpoint | RejoinDone | RejoinFailed


def rendezvous_order(
    seed: int, node: str, incarnation: int, peers: tuple[str, ...]
) -> tuple[str, ...]:
    """Peers by decreasing rendezvous score for this (node, incarnation)."""

    def score(peer: str) -> tuple[int, str]:
        text = f"{seed}\x1f{node}\x1f{incarnation}\x1f{peer}".encode()
        return (-int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big"), peer)

    return tuple(sorted(peers, key=score))


class Rejoin:
    def __init__(
        self,
        *,
        node: str,
        incarnation: int,
        seed: int,
        local_checkpoint: CheckpointInfo | None = None,
        local_param_fp: str = "",
        cluster_step: int = -1,
        genesis_param_fp: str = "",
        config: RejoinConfig | None = None,
        bugs: BugSet = NO_BUGS,
        vote_floor: int = -1,
    ):
        check_name(node, "node")
        check_count(incarnation, "incarnation")
        check_count(seed, "seed")
        if vote_floor < -1:
            raise LocalProtocolError(f"vote_floor {vote_floor} must be >= -1")
        self.vote_floor = vote_floor  # the highest step whose acceptor record is gone
        self.node = node
        self.incarnation = incarnation
        self.seed = seed
        self.local_checkpoint = local_checkpoint
        self.local_param_fp = local_param_fp  # what is in memory/disk now (stale)
        self.cluster_step = cluster_step  # the step peers are at, if known
        self.genesis_param_fp = genesis_param_fp  # the initial parameters' fingerprint
        self.config = config or RejoinConfig()
        self.bugs = bugs
        self._stale = "stale-rejoin" in bugs
        self.phase: Phase = "idle"
        self.candidates: tuple[str, ...] = ()
        self.attempt = 0
        self.source: str | None = None
        self.offer: StateOffered | None = None
        self.deadline: float | None = None  # the offer's, then the transfer's
        self.fetch_deadline: float | None = None  # the whole transfer's
        self._clock = Clock()

    def handle(self, event: RejoinEvent, now: float) -> list[RejoinAction]:
        self._clock.check(now)
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"Rejoin cannot handle {type(event).__name__}")
        actions: list[RejoinAction] = []
        handler(self, event, now, actions)
        self._clock.last = now
        return actions

    def next_deadline(self, now: float | None = None) -> float | None:
        return self.deadline if self.phase == "fetching" else None

    def check_valid(self) -> None:
        """Invariants: a deadline only while fetching, a source only among the
        candidates, at most ``sources_max`` of them, an accepted offer only from the
        source being asked and never below the vote floor."""
        assert len(self.candidates) <= self.config.sources_max
        assert self.node not in self.candidates
        if self.phase == "fetching":
            assert self.source in self.candidates and self.deadline is not None
            assert self.attempt < len(self.candidates)
        if self.offer is not None:
            assert self.offer.source == self.source
            assert self.offer.step < 0 or self.offer.step >= self.vote_floor

    def snapshot(self) -> tuple:
        return (
            self.phase,
            self.candidates,
            self.attempt,
            self.source,
            self.offer,
            self.deadline,
            self.fetch_deadline,
            self._clock.last,
        )

    def _move(self, trigger: str) -> None:
        new_phase = REJOIN_TRANSITIONS.get((self.phase, trigger))
        if new_phase is None:
            raise LocalProtocolError(
                f"rejoin cannot {trigger} in phase {self.phase}", reason="order"
            )
        self.phase = new_phase

    def _on_begin(self, event: Begin, now: float, actions: list) -> None:
        if self.phase != "idle":
            raise LocalProtocolError("Begin twice", reason="order")
        if self._stale:
            self._move("begin_stale")
            actions.append(
                RejoinDone(
                    source="local",
                    step=max(self.cluster_step, 0),
                    param_fp=self.local_param_fp,
                    nbytes=0,
                    verified=False,
                )
            )
            return
        peers = tuple(p for p in event.live_peers if p != self.node and p not in event.busy)
        if not peers:  # every live peer busy: still better than the checkpoint alone
            peers = tuple(p for p in event.live_peers if p != self.node)
        self.candidates = rendezvous_order(self.seed, self.node, self.incarnation, peers)[
            : self.config.sources_max
        ]
        if self.candidates:
            self._move("begin_with_source")
            self._request(now, actions)
        elif self.local_checkpoint is not None:
            self._move("begin_without_source")
            self._load_checkpoint(actions)
        elif self.genesis_param_fp:
            self._move("begin_genesis")
            self._genesis("genesis", actions)
        else:
            self._move("begin_nothing")
            actions.append(RejoinFailed(reason="no live peer and no local checkpoint"))

    def _request(self, now: float, actions: list) -> None:
        self.source = self.candidates[self.attempt]
        self.offer = None
        timeout = min(
            self.config.fetch_timeout_s * 2**self.attempt, self.config.fetch_timeout_max_s
        )
        self.fetch_deadline = now + timeout
        self.deadline = min(now + self.config.offer_timeout_s, self.fetch_deadline)
        from_step = -1 if self.local_checkpoint is None else self.local_checkpoint.step
        actions.append(
            RequestState(
                source=self.source,
                attempt=self.attempt,
                deadline=self.fetch_deadline,
                from_step=from_step,
            )
        )

    def _next_source(self, now: float, actions: list) -> None:
        self.attempt += 1
        if self.attempt < len(self.candidates):
            self._move("next_source")
            self._request(now, actions)
        elif self.local_checkpoint is not None:
            self._move("sources_exhausted")
            self.deadline = None
            self._load_checkpoint(actions)
        elif self.genesis_param_fp:
            self._move("genesis")
            self.deadline = None
            self._genesis("genesis", actions)
        else:
            self._move("nothing_left")
            self.deadline = None
            actions.append(
                RejoinFailed(
                    reason=f"{len(self.candidates)} sources failed and no local checkpoint"
                )
            )

    def _genesis(self, source: str, actions: list) -> None:
        actions.append(
            RejoinDone(
                source=source,
                step=GENESIS_STEP,
                param_fp=self.genesis_param_fp,
                nbytes=0,
                verified=True,  # the initial parameters are derived, not received
            )
        )

    def _load_checkpoint(self, actions: list) -> None:
        checkpoint = self.local_checkpoint
        assert checkpoint is not None
        actions.append(
            LoadCheckpoint(path=checkpoint.path, step=checkpoint.step, param_fp=checkpoint.param_fp)
        )

    def _on_offer(self, event: StateOffered, now: float, actions: list) -> None:
        if self.phase != "fetching" or event.source != self.source:
            return  # a late answer from an abandoned source
        if event.step == GENESIS_STEP:
            if (
                self.genesis_param_fp
                and event.param_fp == self.genesis_param_fp
                and self.local_checkpoint is None
            ):
                self._move("verified")
                self.deadline = None
                self._genesis(event.source, actions)
            else:  # behind this node's own evidence, or a driver without genesis
                self._next_source(now, actions)
            return
        if event.step < self.vote_floor:
            # A source so far behind (cut off, or restarted from an old checkpoint)
            # that its next steps are ones whose acceptor records this node pruned:
            # installing it would have the node vote on them again without knowing
            # what it voted before (StepCommit's vote_floor).  A source behind this
            # node but above the floor is fine: the records make its votes consistent.
            self._next_source(now, actions)
            return
        self.offer = event
        self.deadline = self.fetch_deadline  # it answered: now the bytes get their time

    def _on_received(self, event: StateReceived, now: float, actions: list) -> None:
        if self.phase != "fetching" or event.source != self.source:
            return
        if self.offer is None:
            raise RemoteProtocolError(
                f"state bytes from {event.source} without an offer", reason="order"
            )
        if event.step != self.offer.step or event.computed_fp != self.offer.param_fp:
            self._next_source(now, actions)  # corrupted or inconsistent: never install it
            return
        self._move("verified")
        self.deadline = None
        actions.append(
            RejoinDone(
                source=event.source,
                step=event.step,
                param_fp=event.computed_fp,
                nbytes=event.nbytes,
                verified=True,
            )
        )

    def _on_failed(self, event: FetchFailed, now: float, actions: list) -> None:
        if self.phase == "fetching" and event.source == self.source:
            self._next_source(now, actions)

    def _on_checkpoint(self, event: CheckpointLoaded, now: float, actions: list) -> None:
        if self.phase != "checkpoint":
            raise LocalProtocolError("CheckpointLoaded without a LoadCheckpoint", reason="order")
        checkpoint = self.local_checkpoint
        assert checkpoint is not None
        if event.step != checkpoint.step or event.computed_fp != checkpoint.param_fp:
            self._move("corrupt")
            actions.append(
                RejoinFailed(reason=f"checkpoint {checkpoint.path} fails its fingerprint")
            )
            return
        self._move("verified")
        actions.append(
            RejoinDone(
                source="checkpoint",
                step=event.step,
                param_fp=event.computed_fp,
                nbytes=0,
                verified=True,
            )
        )

    def _on_tick(self, event: Tick, now: float, actions: list) -> None:
        if self.phase == "fetching" and self.deadline is not None and now >= self.deadline:
            self._next_source(now, actions)


_HANDLERS = {
    Begin: Rejoin._on_begin,
    StateOffered: Rejoin._on_offer,
    StateReceived: Rejoin._on_received,
    FetchFailed: Rejoin._on_failed,
    CheckpointLoaded: Rejoin._on_checkpoint,
    Tick: Rejoin._on_tick,
}
