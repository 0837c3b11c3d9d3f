"""Asyncio driver of the step-commit core (``protocol.commit.StepCommit``).

One training step ``s`` on this node, as the driver runs it:

1. ``Contribute(s)``: the worker computes this node's gradient and streams it to
   every other member on the bulk channel (it logs ``agg_send`` before each send).
2. Contributions arrive (``ContributionArrived``).  The step's coordinator proposes
   once every member in its detector view has contributed, or ``contribution_wait_s``
   after its own contribution with whatever arrived: it asks the worker to
   aggregate that set and feeds ``ProposeValue`` with the aggregate's fingerprint.
   Other nodes propose too, but only when the coordinator is out of their view or
   the step is still undecided ``takeover_s`` later, so the fast path has one
   proposer (the core's retries with backoff handle the rest).
3. The core's actions are performed in order: events logged *before* the sends they
   describe, acceptor records persisted (fsync) before any later action.  An
   acceptor that must hold a value's bytes first rebuilds the aggregate from the
   contributions it holds and compares fingerprints, and fetches it from the
   proposer over the bulk channel only if that fails.
4. ``ApplyStep`` -> the worker applies the aggregate -> ``Applied`` -> the core says
   ``Committed`` (logged as ``commit``) and moves to ``s + 1``.

A node that finds peers beyond its reach (``Behind``, or a restart behind the
cluster) pulls the live state from a peer in streamed chunks, verified against
its fingerprint, and restarts its commit core at the installed step.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol import messages as msgs
from swarmshake.reference_node.protocol import rejoin as rj
from swarmshake.reference_node.protocol.detector import ViewChanged
from swarmshake.reference_node.protocol.errors import RemoteProtocolError
from swarmshake.reference_node.runtime import ipc

if TYPE_CHECKING:
    from swarmshake.reference_node.runtime.node import ControlProcess

IDLE_RECHECK_S = 0.5  # bound on any wait; every input that matters also wakes the loop
FETCH_RETRY_S = 1.0  # a fetch that got no answer is retried from the next source
RECORDS_KEPT = 32  # acceptor records kept on disk (the core retains 16 steps)
# Action batches that may wait on one acceptor fsync: inbound messages arrive at most
# a few hundred per second, so this many means the disk hung for minutes; the node
# stops rather than grow without bound.
MAX_DEFERRED_BATCHES = 100_000


def _resume_on_loop(loop, callback, rest, generation, done) -> None:  # noqa: ANN001
    """Done-callback of a persist (runs on the fsync thread): continue on the loop."""
    loop.call_soon_threadsafe(callback, done, rest, generation)


class AcceptorStore:
    """Durable acceptor records, one small file per step, written atomically with fsync."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(cm.AcceptorRecord)

    def write(self, record: cm.AcceptorRecord) -> None:
        final = self.folder / f"step-{record.step:012d}.json"
        temporary = self.folder / f".{final.name}.tmp"
        with open(temporary, "wb") as handle:
            handle.write(self._encoder.encode(record))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        for old in sorted(self.folder.glob("step-*.json"))[:-RECORDS_KEPT]:
            old.unlink(missing_ok=True)

    def load(self) -> list[cm.AcceptorRecord]:
        records = []
        for path in sorted(self.folder.glob("step-*.json")):
            try:
                records.append(self._decoder.decode(path.read_bytes()))
            except (msgspec.DecodeError, OSError):
                continue  # a torn write of the newest record: its reply was never sent
        return records


class StepDriver:
    def __init__(self, node: ControlProcess):
        self.node = node
        self.config = node.config
        self.name = node.node
        self.members = node.members
        self.store = AcceptorStore(node.config.data_dir / "acceptor")
        self.persisted = self.store.load()
        assert node.worker_ready is not None
        self.step = node.worker_ready.step  # the next step to run
        self.param_fp = node.worker_ready.param_fp
        # Acceptor records are fsynced on this thread, off the control loop (perform()).
        self._persist_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="acceptor-fsync"
        )
        self._persisting = False
        self._deferred: collections.deque[list] = collections.deque()
        self._generation = 0  # bumped when the core is replaced: its queued actions are moot
        self.core = self._new_core(self.step)
        self.committed = 0
        self._wake = asyncio.Event()
        # Per-step bookkeeping for the current step (reset when the step advances).
        self.contributed_at: float | None = None
        self.requested_contribution = -1
        self.arrived: dict[int, set[str]] = {}
        self.proposed = False
        self.building = None
        self.values: dict[tuple[int, str], msgs.StepValue] = {}
        self.fetching: dict[tuple[int, str], tuple[tuple[str, ...], int, float]] = {}
        # (step, contributors) -> fingerprints that a local rebuild must reproduce.
        self.rebuilds: dict[tuple[int, tuple[str, ...]], set[str]] = {}
        self.pending_apply: tuple[int, str] | None = None
        self.applying = False
        self.rejoin: rj.Rejoin | None = None
        self.rejoin_started = 0.0
        self.rejoin_durations: list[float] = []
        self.started_at = time.monotonic()
        self.step_started_at = time.monotonic()
        self.step_durations: list[float] = []
        self.peer_steps: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.loop_iterations = 0
        self.last_due: float | None = None

    def _new_core(self, first_step: int) -> cm.StepCommit:
        return cm.StepCommit(
            node=self.name,
            voters=self.members,
            first_step=first_step,
            seed=self.config.node.seed,
            persisted=tuple(r for r in self.persisted if r.step >= first_step),
            bugs=self.config.bug_set,
        )

    # -- inputs --------------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def on_message(self, message: msgs.Message) -> None:
        step = getattr(message, "step", None)
        if step is not None:
            self.peer_steps[message.sender] = max(self.peer_steps.get(message.sender, -1), step)
        if isinstance(message, msgs.StateRequest):
            self.node.to_worker(ipc.ServeState(requester=message.sender))
            return
        if isinstance(message, msgs.StateOffer):
            self.feed_rejoin(
                rj.StateOffered(
                    source=message.sender,
                    step=message.step,
                    param_fp=message.param_fp,
                    nbytes=message.nbytes,
                )
            )
            return
        if isinstance(message, msgs.AcceptRequest | msgs.Decided):
            self.values[(message.step, message.value.agg_fp)] = message.value
        if isinstance(message, cm.CommitMessage.__args__):  # type: ignore[attr-defined]
            if self.rejoin is not None:
                return  # our core restarts at the installed step; older traffic is moot
            self.feed(cm.MessageReceived(message=message))
        self.wake()

    def on_detector_action(self, action: object) -> None:
        if isinstance(action, ViewChanged):
            self.feed(cm.ViewUpdated(alive=tuple(action.alive)))
            self.wake()

    def on_worker(self, message: object) -> None:
        match message:
            case ipc.Contributed():
                if message.step == self.step:
                    self.contributed_at = self.node.clock.now()
                    self.arrived.setdefault(message.step, set()).add(self.name)
            case ipc.ContributionArrived():
                self.arrived.setdefault(message.step, set()).add(message.sender)
            case ipc.AggregateHeld():
                self._on_aggregate_held(message)
            case ipc.AggregateMissing():
                self._on_aggregate_missing(message)
            case ipc.Applied():
                self._on_applied(message)
            case ipc.StateServing():
                offer = msgs.StateOffer(
                    sender=self.name,
                    step=message.step,
                    param_fp=message.param_fp,
                    nbytes=message.nbytes,
                )
                self.node.send_message(message.requester, offer)
            case ipc.StateStaged():
                if message.source == "checkpoint":
                    self.feed_rejoin(
                        rj.CheckpointLoaded(step=message.step, computed_fp=message.computed_fp)
                    )
                else:
                    self.feed_rejoin(
                        rj.StateReceived(
                            source=message.source,
                            step=message.step,
                            computed_fp=message.computed_fp,
                            nbytes=message.nbytes,
                        )
                    )
            case ipc.StateInstalled():
                self._on_state_installed(message)
            case ipc.StateFailed():
                self.errors["state_failed"] = self.errors.get("state_failed", 0) + 1
                if self.rejoin is not None and self.rejoin.phase in ("done", "checkpoint"):
                    self.rejoin = None  # install or checkpoint load failed: start over later
                elif message.source != "checkpoint":
                    self.feed_rejoin(rj.FetchFailed(source=message.source, reason=message.reason))
            case ipc.CheckpointDone():
                pass
        self.wake()

    # -- the core ------------------------------------------------------------------------------

    def feed(self, event: object) -> None:
        try:
            actions = self.core.handle(event, self.node.clock.now())  # type: ignore[arg-type]
        except RemoteProtocolError as error:
            self.node.drops.drop(
                f"commit_{error.reason}", getattr(getattr(event, "message", None), "sender", "")
            )
            return
        self.perform(actions)

    def perform(self, actions: list) -> None:
        """Perform the core's actions in order.  A ``Persist`` (fsync: milliseconds,
        at times hundreds under disk load) runs on the persistence thread so the
        control loop keeps sending heartbeats; every later action -- of this batch
        and of batches produced meanwhile -- waits in ``_deferred`` until the record
        is durable, so nothing a peer sees ever precedes the persist."""
        if self._persisting:
            if len(self._deferred) >= MAX_DEFERRED_BATCHES:
                self._deferred.clear()  # never performed: to peers, lost messages
                self.node.request_stop(
                    f"acceptor store: {MAX_DEFERRED_BATCHES} action batches waited on one fsync"
                )
                return
            self._deferred.append(list(actions))
            return
        self._perform_until_persist(list(actions))

    def _perform_until_persist(self, actions: list) -> None:
        for index, action in enumerate(actions):
            if isinstance(action, cm.Persist):
                self._persisting = True
                generation = self._generation
                rest = actions[index + 1 :]
                loop = asyncio.get_running_loop()
                future = self._persist_pool.submit(self.store.write, action.record)
                future.add_done_callback(
                    functools.partial(_resume_on_loop, loop, self._persisted, rest, generation)
                )
                return
            self._perform_one(action)

    def _persisted(self, done: concurrent.futures.Future, rest: list, generation: int) -> None:
        self._persisting = False
        error = done.exception()
        if error is not None:
            # Not durable: the vote must never be sent.  Stop the node (a disk that
            # fails fsync cannot keep an acceptor's promises).
            self._deferred.clear()
            self.node.request_stop(f"acceptor store write failed: {error!r}")
            return
        if generation == self._generation:  # else: the core was replaced meanwhile
            self._perform_until_persist(rest)
        while not self._persisting and self._deferred:
            self._perform_until_persist(self._deferred.popleft())
        self.wake()

    def _perform_one(self, action: object) -> None:
        events = self.node.events
        match action:
            case cm.Proposed():
                events.log(
                    history.Propose,
                    step=action.step,
                    ballot=list(action.ballot),
                    value_fp=action.value.agg_fp,
                    contributors=list(action.value.contributors),
                )
            case cm.Promised():
                events.log(
                    history.Promise, step=action.step, ballot=list(action.ballot), to=action.to
                )
            case cm.AcceptedValue():
                events.log(
                    history.Accept,
                    step=action.step,
                    ballot=list(action.ballot),
                    value_fp=action.value.agg_fp,
                    contributors=list(action.value.contributors),
                    to=action.to,
                    holds_bytes=action.holds_bytes,
                )
            case cm.Send():
                for peer in action.to:
                    self.node.send_message(peer, action.message)
            case cm.FetchAggregate():
                self._fetch(action.step, action.value_fp, action.sources)
            case cm.ApplyStep():
                self.pending_apply = (action.step, action.value.agg_fp)
                self.values[(action.step, action.value.agg_fp)] = action.value
                self._maybe_apply()
            case cm.Committed():
                events.log(
                    history.Commit,
                    step=action.step,
                    value_fp=action.value.agg_fp,
                    contributors=list(action.value.contributors),
                    param_fp=action.param_fp,
                    voters=list(action.voters),
                    quorum=list(action.quorum),
                )
            case cm.Behind():
                self._start_rejoin(action.peer)

    # -- aggregates ------------------------------------------------------------------------------

    def _fetch(self, step: int, agg_fp: str, sources: tuple[str, ...]) -> None:
        key = (step, agg_fp)
        if key in self.fetching:
            return  # already on its way
        value = self.values.get(key)
        held = self.arrived.get(step, set())
        if value is not None and set(value.contributors) <= held:
            # Rebuild locally from the contributions we hold (same inputs, same bits);
            # fetch over the network only if the fingerprint differs.
            contributors = tuple(sorted(value.contributors))
            self.rebuilds.setdefault((step, contributors), set()).add(agg_fp)
            self.fetching[key] = (sources, 0, self.node.clock.now())
            self.node.to_worker(ipc.BuildAggregate(step=step, contributors=list(contributors)))
            return
        self._fetch_from(key, sources, 0)

    def _fetch_from(self, key: tuple[int, str], sources: tuple[str, ...], index: int) -> None:
        alive = self.node.detector.core.alive_view()
        live = [s for s in sources if s in alive and s != self.name]
        candidates = live or [s for s in sources if s != self.name]
        if not candidates:
            self.fetching.pop(key, None)
            return
        source = candidates[index % len(candidates)]
        self.fetching[key] = (sources, index + 1, self.node.clock.now())
        self.node.to_worker(ipc.FetchAggregate(step=key[0], agg_fp=key[1], source=source))

    def _on_aggregate_held(self, message: ipc.AggregateHeld) -> None:
        key = (message.step, message.agg_fp)
        contributors = tuple(message.contributors)
        if contributors:  # the answer to a BuildAggregate
            if self.building == (message.step, contributors) and not self.proposed:
                self.building = None
                if self.core.step == message.step:
                    self.proposed = True
                    value = msgs.StepValue(agg_fp=message.agg_fp, contributors=list(contributors))
                    self.values[key] = value
                    self.feed(cm.ProposeValue(step=message.step, value=value))
            for expected in self.rebuilds.pop((message.step, contributors), set()):
                if expected != message.agg_fp and (message.step, expected) in self.fetching:
                    # A peer's aggregate over the same set differs from ours: fetch its bytes.
                    self.errors["rebuild_mismatch"] = self.errors.get("rebuild_mismatch", 0) + 1
                    sources, index, _ = self.fetching[(message.step, expected)]
                    self._fetch_from((message.step, expected), sources, index)
        self.fetching.pop(key, None)
        core_step = self.core.step
        if core_step <= message.step <= core_step + self.core.config.steps_ahead_max:
            self.feed(cm.HoldsAggregate(step=message.step, value_fp=message.agg_fp))
        self._maybe_apply()

    def _on_aggregate_missing(self, message: ipc.AggregateMissing) -> None:
        if not message.agg_fp:  # a BuildAggregate that could not run
            if self.building is not None and self.building[0] == message.step:
                self.building = None  # propose later with what arrives next
            self.errors["aggregate_failed"] = self.errors.get("aggregate_failed", 0) + 1
            return
        key = (message.step, message.agg_fp)
        if self.pending_apply == key and self.applying:
            self.applying = False  # not held yet: fetch, then apply on arrival
            if key not in self.fetching:
                sources = tuple(m for m in self.members if m != self.name)
                self._fetch_from(key, sources, 0)
            return
        if key in self.fetching:
            sources, index, _ = self.fetching[key]
            self._fetch_from(key, sources, index)

    def _maybe_apply(self) -> None:
        if self.pending_apply is None or self.applying:
            return
        step, agg_fp = self.pending_apply
        self.applying = True
        self.node.to_worker(ipc.ApplyCommitted(step=step, agg_fp=agg_fp))

    def _on_applied(self, message: ipc.Applied) -> None:
        self.applying = False
        if self.pending_apply != (message.step, message.agg_fp):
            return
        self.pending_apply = None
        self.param_fp = message.param_fp
        self.feed(cm.Applied(step=message.step, param_fp=message.param_fp))
        self._advance_to(self.core.step)
        self.committed += 1

    # -- rejoin -----------------------------------------------------------------------------------

    def _start_rejoin(self, peer: str) -> None:
        """Run the rejoin core: ``peer`` showed we are behind."""
        if self.rejoin is not None:
            return
        ready = self.node.worker_ready
        assert ready is not None
        local = None
        if ready.checkpoint_path and ready.step > 0:
            local = rj.CheckpointInfo(
                path=ready.checkpoint_path, step=ready.step - 1, param_fp=ready.param_fp
            )
        self.rejoin = rj.Rejoin(
            node=self.name,
            incarnation=self.node.incarnation,
            seed=self.config.node.seed,
            local_checkpoint=local,
            local_param_fp=self.param_fp,
            cluster_step=self.peer_steps.get(peer, -1),
            bugs=self.config.bug_set,
        )
        self.rejoin_started = time.monotonic()
        alive = self.node.detector.core.alive_view()
        ahead = tuple(p for p in alive if p != self.name and self.peer_steps.get(p, -1) > self.step)
        self.feed_rejoin(rj.Begin(live_peers=ahead or (peer,)))

    def feed_rejoin(self, event: object) -> None:
        if self.rejoin is None:
            return  # an answer to a rejoin that is over
        try:
            actions = self.rejoin.handle(event, self.node.clock.now())  # type: ignore[arg-type]
        except RemoteProtocolError as error:
            self.node.drops.drop(f"rejoin_{error.reason}", getattr(event, "source", ""))
            return
        events = self.node.events
        for action in actions:
            match action:
                case rj.RequestState():
                    events.log(
                        history.RejoinBegin,
                        step=self.step,
                        source=action.source,
                        from_step=action.from_step,
                    )
                    self.node.to_worker(ipc.ExpectState(source=action.source))
                    self.node.send_message(
                        action.source,
                        msgs.StateRequest(sender=self.name, incarnation=self.node.incarnation),
                    )
                case rj.LoadCheckpoint():
                    events.log(
                        history.RejoinBegin,
                        step=self.step,
                        source="checkpoint",
                        from_step=action.step,
                    )
                    self.node.to_worker(ipc.LoadCheckpointFile(path=action.path))
                case rj.RejoinDone():
                    events.log(
                        history.RejoinDone,
                        step=action.step,
                        source=action.source,
                        param_fp=action.param_fp,
                        nbytes=action.nbytes,
                        verified=action.verified,
                    )
                    self.node.to_worker(
                        ipc.InstallStaged(source=action.source, next_step=action.step)
                    )
                case rj.RejoinFailed():
                    self.errors["rejoin_failed"] = self.errors.get("rejoin_failed", 0) + 1
                    self.rejoin = None  # retried when peers are still ahead
        self.wake()

    def _on_state_installed(self, message: ipc.StateInstalled) -> None:
        # Actions of the replaced core still waiting on a persist are dropped: to the
        # peers that is message loss, which the commit protocol tolerates.
        self._generation += 1
        self._deferred.clear()
        self.rejoin = None
        self.rejoin_durations.append(time.monotonic() - self.rejoin_started)
        self.param_fp = message.param_fp
        self.persisted = self.store.load()
        self.core = self._new_core(message.next_step)
        self.pending_apply = None
        self.applying = False
        self.peer_steps = {}
        self._advance_to(message.next_step)
        self.feed(cm.ViewUpdated(alive=tuple(self.node.detector.core.alive_view())))

    # -- the step loop ------------------------------------------------------------------------------

    def _advance_to(self, step: int) -> None:
        now = time.monotonic()
        if step != self.step:
            self.step_durations.append(now - self.step_started_at)
            if len(self.step_durations) > 1000:  # bounded: the recent window is what matters
                del self.step_durations[:500]
        self.step = step
        self.step_started_at = now
        self.contributed_at = None
        self.proposed = False
        self.building = None
        self.arrived = {s: c for s, c in self.arrived.items() if s >= step}
        self.values = {k: v for k, v in self.values.items() if k[0] >= step - 4}
        self.fetching = {k: v for k, v in self.fetching.items() if k[0] >= step}
        self.rebuilds = {k: v for k, v in self.rebuilds.items() if k[0] >= step}

    def _done(self) -> bool:
        limit = self.config.step.max_steps
        return bool(limit) and self.step >= limit

    def _behind_peers(self) -> str | None:
        """A live peer at least two steps ahead: catching up step by step would lag."""
        alive = set(self.node.detector.core.alive_view())
        ahead = [(s, p) for p, s in self.peer_steps.items() if p in alive and s >= self.step + 2]
        return max(ahead)[1] if ahead else None

    def _maybe_progress(self, now: float) -> float | None:
        """Start what is due; returns the next node-clock time something is due."""
        if self.rejoin is not None:
            return self.rejoin.next_deadline()
        peer = self._behind_peers()
        if peer is not None and self.pending_apply is None:
            self._start_rejoin(peer)
            return None
        if self._done():
            return None
        step = self.step
        if self.requested_contribution < step:
            self.requested_contribution = step
            others = [m for m in self.members if m != self.name]
            self.node.to_worker(ipc.Contribute(step=step, to=others))
            return None
        if self.contributed_at is None or self.proposed or self.building is not None:
            return None
        arrived = self.arrived.get(step, set())
        view = set(self.node.detector.core.alive_view()) & set(self.members)
        coordinator = self.core.coordinator(step)
        wait_s = self.config.step.contribution_wait_s
        if self.name == coordinator:
            due = self.contributed_at + wait_s
            if view <= arrived or now >= due:
                self._build(arrived)
                return None
            return due
        # Takeover: the coordinator is gone from our view, or the step is stuck.
        due = self.contributed_at + wait_s + self.config.step.round_timeout_s
        if coordinator not in view and (view <= arrived or now >= self.contributed_at + wait_s):
            self._build(arrived)
            return None
        if now >= due:
            self._build(arrived)
            return None
        return due

    def _build(self, arrived: set[str]) -> None:
        contributors = tuple(sorted(arrived))
        self.building = (self.step, contributors)
        self.node.to_worker(ipc.BuildAggregate(step=self.step, contributors=list(contributors)))

    def _retry_stale_fetches(self, now: float) -> None:
        for key, (sources, index, since) in list(self.fetching.items()):
            if now - since > FETCH_RETRY_S:
                self._fetch_from(key, sources, index)

    async def run(self, group: asyncio.TaskGroup) -> None:
        del group  # every task this driver needs is this one loop
        clock = self.node.clock
        while True:
            now = clock.now()
            deadline = self.core.next_deadline()
            if deadline is not None and deadline <= now:
                self.feed(cm.Tick())
                continue
            rejoin_deadline = self.rejoin.next_deadline() if self.rejoin else None
            if rejoin_deadline is not None and rejoin_deadline <= now:
                self.feed_rejoin(rj.Tick())
                continue
            due = self._maybe_progress(now)
            self.loop_iterations += 1
            self.last_due = due
            self._retry_stale_fetches(now)
            wake_at = min((t for t in (deadline, due) if t is not None), default=None)
            delay = (
                IDLE_RECHECK_S
                if wake_at is None
                else min(IDLE_RECHECK_S, clock.host_delay_s(wake_at - now))
            )
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(delay, 0.0)):
                    await self._wake.wait()

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        recent = self.step_durations[-50:]
        return {
            "core_step": self.core.step,
            "phase": self.core.phase,
            "coordinator": self.core.coordinator(self.core.step),
            "rejoining": self.rejoin.phase if self.rejoin else "",
            "rejoin_durations_s": [round(d, 3) for d in self.rejoin_durations[-10:]],
            "step_time_s_mean_recent": sum(recent) / len(recent) if recent else 0.0,
            "step_time_s_median_recent": sorted(recent)[len(recent) // 2] if recent else 0.0,
            "dropped_by_core": self.core.dropped,
            "contributed": self.contributed_at is not None,
            "arrived": sorted(self.arrived.get(self.step, ())),
            "building": list(self.building[1]) if self.building else None,
            "proposed": self.proposed,
            "loop_iterations": self.loop_iterations,
            "last_due_in_s": None
            if self.last_due is None
            else self.last_due - self.node.clock.now(),
            "pending_apply": list(self.pending_apply) if self.pending_apply else None,
            "fetching": [f"{s}:{fp}" for s, fp in self.fetching],
            "errors": dict(self.errors),
        }
