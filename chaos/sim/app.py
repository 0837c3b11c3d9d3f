"""The simulator's shell of the node: abstract training driven through the node core
(``protocol/node_core.py``) and the step-commit, membership, rejoin and
checkpoint-policy cores (DRIVERS.md), one ``NodeApp`` per node process.

This module decides nothing: the step (``step_node.StepNode``: who proposes and
when, the one proposal a step, rebuild or fetch and from whom, when to apply),
which acceptor records stay and the vote floor (``prune_records``), whom a rejoin
asks (``rejoin_sources``), the change a proposal carries (``change_to_propose``) and
the history event of every core action (``history_of``) are the node core's, the
same code the runtime's ``step_driver`` runs.  What is here turns simulated I/O into the cores' events and their actions
into simulated I/O:

1. compute (``compute_s``, slower when throttled), then log ``agg_send`` and send the
   contribution to every other member (bulk channel), as the runtime's worker does;
   tell the step node (``OwnContribution``), and every arrival (``ContributionArrived``);
2. a ``BuildValue`` is aggregated at once (the simulated worker is instantaneous) and
   reported back (``AggregateHeld``), which proposes it;
3. a ``RebuildAggregate`` is built at once and reported once the action list is done;
   a ``RequestAggregate`` goes to the peer it names (or, for bytes held already, is
   answered at once, as the runtime's worker does); no proposer pushes an aggregate;
4. ``ApplyAggregate`` adds the aggregate of exactly the committed contributors to the
   integer parameters; ``Committed`` logs ``commit`` with the parameters' fingerprint.

What survives a crash is ``NodeDisk``: acceptor records (``Persist``), their vote
floor, the bytes of accepted values, the last checkpoint and the configurations the
node saw committed.  A restarted node runs the rejoin core (state from a live peer,
verified by fingerprint; else the local checkpoint) and starts its commit core after
the step it got, under the configuration that came with it.

Joins and clean leaves are the node core's ``Enrolment`` and the protocol's
``NodeMembership``, as in the runtime's step driver: a node outside the newest
configuration it knows asks to be added, starts its detector once a member's traffic
shows it was, and fetches the state; a leaver asks to be removed, votes until the
removal commits (or a member confirms it, ``LeaveConfirmed``) and stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec

from swarmshake.chaos.sim import training
from swarmshake.reference_node.protocol import aggregate_pulls as ap
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import rejoin
from swarmshake.reference_node.protocol import state_transfer as st
from swarmshake.reference_node.protocol import step_apply as sa
from swarmshake.reference_node.protocol import step_node as sn
from swarmshake.reference_node.protocol.commit import (
    AcceptorRecord,
    Behind,
    CommitMessage,
    Committed,
    MessageReceived,
    Persist,
    Send,
    StepCommit,
)
from swarmshake.reference_node.protocol.commit import Tick as CommitTick
from swarmshake.reference_node.protocol.history import (
    AggSend,
    CheckpointFail,
    CheckpointWrite,
    FrameDrop,
)
from swarmshake.reference_node.protocol.membership import (
    Configuration,
    Configurations,
    JoinRequested,
    LearnerCaughtUp,
    LeaveRequested,
    NodeMembership,
    PeerAlive,
    PeerDeclaredDead,
    initial_configuration,
)
from swarmshake.reference_node.protocol.messages import (
    GENESIS_STEP,
    AggregateRequest,
    JoinRequest,
    LeaveConfirmed,
    LeaveNotice,
    StateOffer,
    StateRequest,
)


class AppSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The simulated workload; defaults give ~1 step/s on the 50 ± 25 ms envelope.
    The node's decision knobs are ``node`` (the node core's ``NodeConfig``)."""

    compute_s: float = 0.5  # one local training step
    # 10M float32 parameters: 40 MB, 0.4 s on the 100 MB/s bulk channel, so a tensor
    # is visibly slower than a vote (what ``ack-before-apply`` gets wrong).
    aggregate_nbytes: int = 40_000_000
    state_nbytes: int = 40_000_000
    node: nc.NodeConfig = nc.NODE_DEFAULTS
    # When to checkpoint: the node core's configuration, every 10 steps here rather
    # than the runtime's 50: a simulated run lasts tens of steps, and restarts from a
    # checkpoint must happen in it (a workload setting, like a suite's
    # ``step: {checkpoint_every: 5}``; the decision is the core's).
    checkpoint: nc.CheckpointConfig = nc.CheckpointConfig(every_steps=10)


# --- sim-internal bulk messages (the bytes the real node moves as tensors) -----------------


class Contribution(msgspec.Struct, frozen=True):
    step: int
    sender: str


class AggregateBytes(msgspec.Struct, frozen=True):
    step: int
    value_fp: str
    contributors: tuple[str, ...]


class NoAggregate(msgspec.Struct, frozen=True):
    step: int
    value_fp: str


class StateBytes(msgspec.Struct, frozen=True):
    step: int
    params: tuple[int, ...]
    nbytes: int


# The timers of the node core's parts, one armed deadline each (NodeApp._arm).
_CORE_TIMERS = ("commit_tick", "lead_tick", "pull_tick", "enrolment_tick", "rejoin_tick")
_STATE_MESSAGES = (StateOffer, StateBytes)
_COMMIT_MESSAGES = CommitMessage.__args__  # type: ignore[attr-defined]
# What the runtime's worker reports for a write on a full disk (OSError, errno 28).
DISK_FULL_REASON = "OSError: [Errno 28] No space left on device"


@dataclass
class NodeDisk:
    """What a node's disk keeps across crashes."""

    records: dict[int, AcceptorRecord] = field(default_factory=dict)
    checkpoint: tuple[int, tuple[int, ...], str] | None = None  # (step, params, fp)
    # The bytes of every aggregate the node held, written when it got them (as the
    # runtime's aggregate store): an acceptor vouched for holding them, and a retry
    # must adopt that value (explore, seed 2: a restarted acceptor's value could be
    # fetched from no one and commits stopped).  Kept for the node core's
    # ``aggregates_kept_steps`` below the applied step.
    aggregates: dict[tuple[int, str], tuple[str, ...]] = field(default_factory=dict)
    # The value each kept record accepted (step -> aggregate fp), kept with the records
    # as the runtime's aggregate store keeps ``accepted``: node_core's
    # aggregates_to_keep reads it after every apply.
    accepted: dict[int, str] = field(default_factory=dict)
    # The highest step whose acceptor record was pruned (node_core.prune_records),
    # written before the records go: this node never votes at or below it again.
    floor: int = -1
    # The configurations this node saw committed (the runtime's membership.json);
    # None until its first process starts (then: every simulated node votes).
    configs: Configurations | None = None


class NodeApp:
    def __init__(self, sim: Any, proc: Any, settings: AppSettings, disk: NodeDisk, first: bool):
        self.sim = sim
        self.proc = proc
        self.name = proc.name
        self.settings = settings
        self.config = settings.node
        self.disk = disk
        self.first = first
        self.bugs = sim.bugs
        self.commit_generation = 0  # bumped with every new commit core (gradient timers)
        if disk.configs is None:
            disk.configs = Configurations(initial_configuration(sim.names, self.name, join=False))
        self.membership = NodeMembership(
            node=self.name, incarnation=proc.incarnation, configs=disk.configs, bugs=sim.bugs
        )
        # The configuration the state a restart starts from runs under (the runtime's
        # worker loads the newest checkpoint at start), as the runtime's step driver.
        ready_step = disk.checkpoint[0] + 1 if disk.checkpoint is not None else 0
        self.membership.restart_at(disk.configs.after(ready_step - 1), from_peer=False)
        started = proc.clock.local(proc.started_at)
        self.enrolment = nc.Enrolment(
            joining=self.membership.starts_as_joiner(),
            now=started,
            join_timeout_s=nc.JOIN_TIMEOUT_S,
            leave_timeout_s=nc.LEAVE_TIMEOUT_S,
            config=self.config,
        )
        self.removal_answers = nc.RemovalAnswers(self.config)
        # The node core's state fetch: whether the step runs or the state is fetched
        # (the commit core is detached meanwhile: ``commit`` is None), from whom, and
        # what is installed.
        self.transfer = st.StateTransfer(
            node=self.name, incarnation=proc.incarnation, seed=sim.core_seed,
            configs=disk.configs, config=self.config, bugs=sim.bugs,
        )  # fmt: skip
        self.transfer.accepted = disk.accepted  # changed in place by _persist
        self.checkpoints = nc.Checkpointing(settings.checkpoint, started, restarted=not first)
        self.params = training.INITIAL_PARAMS
        self.param_step = -1  # the committed step the parameters hold (-1: initial)
        # The simulated worker's memory: each aggregate it holds, by its contributors
        # (the bytes' stand-in); the node core's record of them is ``held``.
        self.memory_aggregates: dict[tuple[int, str], tuple[str, ...]] = dict(disk.aggregates)
        self.alive_view: tuple[str, ...] = self.detector_members()
        # The node core's step part: the commit core (attached while steps run), who
        # proposes and when, the pulls, the apply and the aggregates held.
        self.step_node = sn.StepNode(node=self.name, config=self.config, alive=self.alive_view)
        self.step_node.accepted = disk.accepted  # changed in place by _persist
        for step, value_fp in disk.aggregates:
            self.step_node.held.add(step, value_fp)
        # The time each kind of core timer is armed for (inf: none): one heap entry per
        # earlier deadline; a later one is armed when the earlier fires (``_arm``).
        self.timer_at = dict.fromkeys(_CORE_TIMERS, math.inf)
        self.lead_deadline_armed: float | None = None  # the leader deadline last armed
        self.peer_steps: dict[str, int] = {}  # the highest step each peer's messages carried
        # The simulated worker's staged state bytes: the latest transfer's (source, params).
        self.staged: tuple[str, tuple[int, ...]] | None = None

    @property
    def rejoin(self) -> rejoin.Rejoin | None:
        """The rejoin core of the fetch under way, if any (StateTransfer's)."""
        return self.transfer.rejoin

    @property
    def commit(self) -> StepCommit | None:
        """The commit core, None while no step runs (a fetch, a joiner)."""
        return self.step_node.core

    def detector_members(self) -> tuple[str, ...]:
        """Whom this process's detector watches at start: the newest configuration's
        members and itself (a joiner watches the members it would join), as the
        runtime's control process."""
        latest = self.membership.configs.latest()
        return tuple(sorted({*latest.members, self.name}))

    def detector_starts_now(self) -> bool:
        """A member heartbeats at once; a joiner once a member holds it as one."""
        return not self.enrolment.joining

    # --- plumbing -----------------------------------------------------------------------

    def _local(self, t: float) -> float:
        return self.proc.clock.local(t)

    def _true(self, local: float) -> float:
        clock = self.proc.clock
        return local if clock.identity else clock.true_time(local)

    def _log(self, cls: type, t: float, **fields: Any) -> None:
        self.sim.log(cls, self.proc, t, **fields)

    def _history(self, t: float, action: Any) -> None:
        if type(action) not in nc.LOGGED_ACTIONS:
            return  # sends, persists, fetches: not history (most actions)
        mapped = nc.history_of(action, node=self.name, step=self.step_node.leader.step)
        if mapped is not None:
            self.sim.log(mapped[0], self.proc, t, **mapped[1])

    def _send(
        self, t: float, to: str, message: Any, channel: str = "control", nbytes: int = 0
    ) -> None:
        self.sim.send(self.proc, t, to, message, nbytes=nbytes, channel=channel)

    def _timer(self, t: float, payload: tuple) -> None:
        self.sim.timer(self.proc, t, payload)

    def _arm(self, t: float, kind: str, deadline: float | None) -> None:
        """Arm the ``kind`` core timer for the node-clock ``deadline`` (None: nothing
        due), unless it is armed for an earlier time still to come."""
        if deadline is None:
            return
        at = max(self._true(deadline), t)
        armed = self.timer_at[kind]
        if at < armed or armed <= t:
            self.timer_at[kind] = at
            self._timer(at, (kind,))

    def _fired(self, t: float, kind: str) -> bool:
        """Whether the ``kind`` timer is due at ``t``; it is then disarmed.  (A heap
        entry of a deadline that moved later is a no-op.)"""
        if t < self.timer_at[kind]:
            return False
        self.timer_at[kind] = math.inf
        return True

    # --- lifecycle ----------------------------------------------------------------------

    def start(self, t: float) -> None:
        if self.enrolment.joining:
            self._enrolment_tick(t)  # asks to be added; no step until it is
        elif nc.rejoins_at_start(first_start=self.first, joining=False):
            self._start_rejoin(t)
        else:
            self._new_commit(t, 0)

    def _at_genesis(self) -> bool:
        """This node holds the initial parameters: it applied nothing in this life and
        loaded no checkpoint (the runtime's ``at_genesis``)."""
        return self.param_step < 0 and self.disk.checkpoint is None

    def _new_commit(
        self, t: float, first_step: int, configuration: Configuration | None = None
    ) -> None:
        records = tuple(r for s, r in sorted(self.disk.records.items()) if s >= first_step)
        conf = configuration or self.membership.configs.after(first_step - 1)
        voters, learners = nc.commit_roles(conf.voters, conf.learners, self.name)
        self.commit_generation += 1  # a gradient timer of the core it replaces is moot
        core = StepCommit(
            node=self.name,
            voters=voters,
            learners=learners,
            first_step=first_step,
            seed=self.sim.core_seed,
            persisted=records,
            bugs=self.bugs,
            vote_floor=self.disk.floor,
        )
        self.timer_at["commit_tick"] = math.inf
        # It sees the view, is told of the aggregates held, and its step begins.
        self._perform(t, self.step_node.attach(core, self._local(t)))
        self._arm_timers(t)
        self._rejoin_if_behind(t)

    def clock_changed(self, t: float) -> None:
        self.lead_deadline_armed = None  # the same local deadline maps to a new time
        self._arm_timers(t)

    def view_changed(self, t: float, alive: tuple[str, ...]) -> None:
        self.alive_view = alive
        self._step(t, nc.ViewChanged(alive=tuple(alive)))

    def peer_dead(self, t: float, peer: str) -> None:
        self._rejoin(t, st.SourceDead(peer=peer))
        if peer != self.name:
            self.checkpoints.failure(self._local(t))  # Young-Daly's input, as the runtime's
            incarnation = self.proc.detector.known_incarnation.get(peer, 0)
            self.membership.feed(
                PeerDeclaredDead(peer=peer, incarnation=incarnation), self._local(t)
            )

    def peer_alive(self, t: float, peer: str) -> None:
        incarnation = self.proc.detector.known_incarnation.get(peer, 0)
        self.membership.feed(PeerAlive(peer=peer, incarnation=incarnation), self._local(t))

    # --- the step loop: the node core's StepLeader ---------------------------------------

    def _step(self, t: float, event: Any, *, behind_check: bool = True) -> None:
        """Feed the node core's step part and perform its actions; arm what is due next.
        ``behind_check``: the runtime checks whether peers are ahead on every wake of
        its loop (``_behind_peers``); here after every event that can show it."""
        self._perform(t, self.step_node.handle(event, self._local(t)))
        self._arm_timers(t)
        if behind_check:
            self._rejoin_if_behind(t)

    def _arm_timers(self, t: float) -> None:
        commit_due, _, pulls_due = self.step_node.deadlines()
        self._arm(t, "commit_tick", commit_due)
        self._arm_lead_timer(t)
        self._arm(t, "pull_tick", pulls_due)

    def _arm_lead_timer(self, t: float) -> None:
        deadline = self.step_node.leader.next_deadline()
        if deadline is None or deadline == self.lead_deadline_armed:
            return  # most arrivals change no deadline: nothing to arm
        self.lead_deadline_armed = deadline
        self._arm(t, "lead_tick", deadline)

    def _computed(self, t: float, step: int) -> None:
        commit = self.commit
        if commit is None or commit.step != step:
            return  # a gradient of a step this node has left: never sent
        # To every other member, as the runtime's worker does: whoever ends up
        # proposing holds the gradients, and every acceptor can rebuild the aggregate.
        # (The most frequent event and message of a run: the engine logs and sends
        # them in one loop, and the peers share one read-only message.)
        name = self.name
        peers = [peer for peer in commit.members if peer != name]
        nbytes = self.settings.aggregate_nbytes
        self.sim.send_each_logged(
            self.proc, t, peers, Contribution(step, name), nbytes, AggSend, step
        )
        self._step(t, nc.OwnContribution(step=step), behind_check=False)

    # --- the node core's actions ---------------------------------------------------------

    def _rejoin_if_behind(self, t: float) -> None:
        """The runtime checks this on every wake of its step loop (``_behind_peers``);
        here after every commit-core event and every message that carries a step."""
        commit = self.commit
        if commit is None or self.rejoin is not None or self.step_node.apply.pending is not None:
            return
        peer = nc.peer_ahead(
            commit.step,
            self.peer_steps,
            self.alive_view,
            commit.config.state_transfer_gap_steps,
            commit.members,
        )
        if peer is not None:
            self._start_rejoin(t, evidence=peer)

    def _perform(self, t: float, actions: list) -> None:
        """Perform the step node's actions in order.  The simulated worker builds and
        applies at once: a proposal's build and an apply are answered at once, a
        rebuild and a fetch of bytes it holds once the list is done (as the runtime's
        worker answers later)."""
        answers: list[tuple[int, str, tuple[str, ...]]] = []  # (step, value fp, contributors)
        logged = nc.LOGGED_ACTIONS
        running = self.commit is not None
        for action in actions:
            if running and self.commit is None:
                return  # a Behind earlier in the list handed the node to the rejoin core
            kind = type(action)
            if kind in logged:  # _history's own test, without the call
                self._history(t, action)
            if kind is Send:
                self._send_commit(t, action)
            elif kind is Persist:
                if not self.proc.up:
                    return  # killed before the write: the rest of the list is lost too
                self._persist(action.record)
            elif kind is ap.RequestAggregate:
                key = (action.step, action.value_fp)
                if key in self.memory_aggregates or key in self.disk.aggregates:
                    # Held already (a build since the pull was decided): the runtime's
                    # worker answers such a fetch at once, without asking the peer.
                    answers.append((*key, ()))
                    continue
                request = AggregateRequest(sender=self.name, step=key[0], value_fp=key[1])
                self._send(t, action.source, request)
            elif kind is ap.RebuildAggregate:
                step, contributors = action.step, action.contributors
                answers.append((step, self._build(step, contributors), contributors))
            elif kind is nc.BuildValue:
                step, contributors = action.step, action.contributors
                value_fp = self._build(step, contributors)
                change = self.membership.core.change_for_next_step()
                held = sn.AggregateHeld(
                    step=step, value_fp=value_fp, contributors=contributors, change=change
                )
                self._perform(t, self.step_node.handle(held, self._local(t)))
            elif kind is sa.ApplyAggregate:
                self._apply(t, action)
            elif kind is Committed:
                self._committed(t, action)
            elif kind is sn.StepStarted:
                if action.contributes:
                    # Tagged with the commit core it is for: one started before a state
                    # was installed (even at the same step) comes from the parameters
                    # the install replaced and is dropped, as the runtime's worker does.
                    done_at = t + self.settings.compute_s / self.proc.cpu_fraction
                    self._timer(done_at, ("computed", action.step, self.commit_generation))
            elif kind is sn.StateDiverged:
                self._start_rejoin(t)  # never here: the simulated worker applies at once
            elif kind is sn.MessageRefused:
                reason = nc.refusal_reason("commit", action.reason)
                self._log(FrameDrop, t, peer=action.sender or "?", reason=reason)
                self.refused(t, action.sender, action.reason)
            elif kind is Behind:
                nc.note_peer_step(self.peer_steps, action.peer, action.peer_step)
                self._start_rejoin(t, evidence=action.peer)
        # Told after the list is done, as the runtime's worker answers them later.
        for step, value_fp, contributors in answers:
            if running and self.commit is None:
                return
            held = sn.AggregateHeld(step=step, value_fp=value_fp, contributors=contributors)
            self._perform(t, self.step_node.handle(held, self._local(t)))

    def _persist(self, record: AcceptorRecord) -> None:
        disk = self.disk
        disk.records[record.step] = record
        if record.accepted_value is not None:
            disk.accepted[record.step] = record.accepted_value.agg_fp
        else:
            disk.accepted.pop(record.step, None)
        pruning = nc.prune_records(disk.records, disk.floor, config=self.config, bugs=self.bugs)
        disk.floor = pruning.floor  # durable before the records go
        for step in pruning.steps:
            del disk.records[step]
            disk.accepted.pop(step, None)

    def _hold(self, step: int, value_fp: str, contributors: tuple[str, ...]) -> None:
        """The simulated worker now holds the aggregate's bytes: durably, as the
        runtime's worker writes every aggregate it holds before it reports it
        (aggregate_store.py); the node core is told (``AggregateHeld``) by the caller."""
        self.memory_aggregates[(step, value_fp)] = contributors
        self.disk.aggregates[(step, value_fp)] = contributors

    def _prune_aggregates(
        self, from_step: int, pinned: tuple[tuple[int, str], ...], *, memory: bool = True
    ) -> None:
        """Drop the aggregate bytes the node core does not keep (below ``from_step``,
        unless ``pinned``: ``aggregates_to_keep``): from the disk, and (``memory``) from
        memory, as the runtime's worker does after an apply.  An installed state prunes
        the disk only, as the worker's ``install_staged``: the bytes it holds in memory
        stay until its next apply (a checkpoint fallback below them may still
        re-propose them)."""
        kept = set(pinned)
        aggregates = self.disk.aggregates
        for key in [k for k in aggregates if k[0] < from_step and k not in kept]:
            del aggregates[key]
        if not memory:
            return
        in_memory = self.memory_aggregates
        for key in [k for k in in_memory if k[0] < from_step]:
            del in_memory[key]

    def _build(self, step: int, contributors: tuple[str, ...]) -> str:
        """The simulated worker's build of exactly ``contributors``' aggregate (a
        proposal's or a rebuild's): held at once, durably; its fingerprint."""
        value_fp = training.fingerprint(training.aggregate(self.sim.seed, step, contributors))
        self._hold(step, value_fp, contributors)
        return value_fp

    def _send_commit(self, t: float, action: Send) -> None:
        message = action.message
        for peer in action.to:
            self._send(t, peer, message)

    def _apply(self, t: float, action: sa.ApplyAggregate) -> None:
        """The simulated worker applies at once, and answers (``AggregateApplied``)."""
        step, value = action.step, action.value
        update = training.aggregate(self.sim.seed, step, value.contributors)
        self.params = training.apply(self.params, update)
        self.param_step = step
        self._prune_aggregates(action.keep_from_step, action.pinned)
        applied = sn.AggregateApplied(
            step=step, value_fp=value.agg_fp, param_fp=training.fingerprint(self.params)
        )
        self._perform(t, self.step_node.handle(applied, self._local(t)))

    def _committed(self, t: float, action: Committed) -> None:
        value = action.value
        if value.config_change is not None:
            self._config_committed(t, action.step, value.config_change)
        write = self.checkpoints.committed(
            action.step, self._local(t), changes_configuration=value.config_change is not None
        )
        if write is not None and self.name in self.sim.full_disks:
            # The worker's write fails (ENOSPC) and the node trains on, as the runtime's.
            self.checkpoints.failed(self._local(t), DISK_FULL_REASON)
            self._log(CheckpointFail, t, step=write.step, reason=DISK_FULL_REASON, errno=28)
        elif write is not None:
            # The simulated worker writes at once: the measured cost is zero.
            self.checkpoints.done(self._local(t))
            self.disk.checkpoint = (write.step, self.params, action.param_fp)
            self._log(
                CheckpointWrite,
                t,
                step=write.step,
                path=f"checkpoints/{self.name}/step-{write.step}",
                sha256=action.param_fp,
                param_fp=action.param_fp,
                nbytes=self.settings.state_nbytes,
            )

    # --- membership: joins and clean leaves (node_core.Enrolment) -------------------------

    def refused(self, t: float, peer: str, reason: str) -> None:
        """A message of ``peer``'s was refused (``RemoteProtocolError.reason``): one
        from a node removed here is answered with its removal (node_core.RemovalAnswers),
        any other non-member is heartbeated (node_core.heartbeats_stranger)."""
        configs = self.membership.configs
        step = self.removal_answers.refused(peer, reason, configs, self._local(t))
        if step is not None:
            self._send(t, peer, LeaveConfirmed(sender=self.name, step=step))
        if nc.heartbeats_stranger(peer, reason):
            self.sim.stranger_heard(self.proc, t, peer)

    def _confirm_removal(self, t: float, peer: str) -> None:
        """Tell ``peer`` its removal committed here, if it did (node_core.removal_step)."""
        step = nc.removal_step(self.membership.configs, peer)
        if step is not None:
            self._send(t, peer, LeaveConfirmed(sender=self.name, step=step))

    def _config_committed(self, t: float, step: int, change: Any) -> None:
        self._membership_changed(t, self.membership.committed(step, change, self._local(t)))
        self._enrol(t, self.enrolment.configuration_committed(step, change, node=self.name))

    def _membership_changed(self, t: float, changed: list) -> None:
        for action in changed:
            self._history(t, action)  # logged before the detector hears of it
            members = self.membership.watched_members(action)
            if members is not None:
                self.sim.members_changed(self.proc, t, members)

    def begin_leave(self, t: float, reason: str) -> None:
        """A clean leave (the harness's ``leave`` command): removed through a committed
        step, voting until then (bounded by the leave timeout), then stop."""
        configured = self._configured()
        self._enrol(
            t,
            self.enrolment.begin_leave(
                reason,
                self._local(t),
                member=self.name in configured.members,
                last_voter=configured.voters == (self.name,),
            ),
        )

    def _configured(self) -> StepCommit | Configuration:
        """The voters and members this node acts on: its commit core's, else (no core
        runs: rejoining, joining) its membership's configuration."""
        return self.commit if self.commit is not None else self.membership.current

    def _enrol(self, t: float, actions: list) -> None:
        """Perform the enrolment core's actions, as the runtime's step driver."""
        incarnation = self.proc.incarnation
        for action in actions:
            if isinstance(action, nc.StopNode):
                self.sim.stop(self.name, t, action.reason)
            elif isinstance(action, nc.RestartAsJoiner):
                self.sim.restart_node(self.name, t, action.reason)
            elif isinstance(action, nc.RequestRemoval):
                self._membership_changed(
                    t,
                    self.membership.feed(
                        LeaveRequested(peer=self.name, incarnation=incarnation), self._local(t)
                    ),
                )
            elif isinstance(action, nc.StartDetector):
                self.sim.start_detector(self.proc, t)
            elif isinstance(action, nc.FetchStateFrom):
                if self.rejoin is None:
                    self._start_rejoin(t, evidence=action.peer)
            elif isinstance(action, nc.ConfirmRemoval):
                self._confirm_removal(t, action.peer)
            elif isinstance(action, nc.SendJoinRequest):
                request = JoinRequest(sender=self.name, incarnation=incarnation)
                for voter in action.to:
                    self._send(t, voter, request)
            elif isinstance(action, nc.SendLeaveNotice):
                notice = LeaveNotice(sender=self.name, incarnation=incarnation)
                for voter in action.to:
                    self._send(t, voter, notice)
        self._arm_enrolment_timer(t)

    def _enrolment_tick(self, t: float) -> None:
        enrolment = self.enrolment
        if enrolment.leaving is None and not enrolment.joining:
            return
        self._heartbeat_evidence(t)
        self._enrol(
            t,
            enrolment.tick(
                self._local(t),
                voters=self._configured().voters,
                join_voters=self.membership.configs.latest().voters,
                fetching=self.rejoin is not None,
            ),
        )

    def _arm_enrolment_timer(self, t: float) -> None:
        deadline = self.enrolment.next_deadline(fetching=self.rejoin is not None)
        self._arm(t, "enrolment_tick", deadline)

    def _heartbeat_evidence(self, t: float) -> None:
        """A joiner whose detector runs (a member's traffic started it) still takes
        members' heartbeats for evidence, as the runtime's dispatch takes every
        unflagged one: when the fetch from the first member fails, the next comes from
        another.  (explore --leaves, 4 nodes, seed 6: a joiner whose source crashed fell
        back to its checkpoint and sat there, asking to join, while a member that had
        added it heartbeated it; it never learned the members it was added beside.)
        Looked up at each enrolment tick, from the streams that reach it now."""
        detector = self.proc.detector
        if not self.enrolment.joining or self.rejoin is not None:
            return
        if detector is None or not detector.started:
            return  # the engine's join look hands over a stopped detector's first evidence
        members = self.membership.configs.latest().members
        for peer in self.sim.heartbeat_evidence(self.name, t):
            self._enrol(t, self.enrolment.evidence(peer, members))

    def join_evidence(self, t: float, peers: list[str]) -> None:
        """Members' heartbeats or commit traffic reached this joiner (in arrival
        order): they hold it as a member, so its add is committed there."""
        if not self.enrolment.joining:
            return
        members = self.membership.configs.latest().members
        for peer in peers:
            self._enrol(t, self.enrolment.evidence(peer, members))
        self._enrolment_tick(t)

    # --- messages -----------------------------------------------------------------------

    def receive(self, t: float, sender: str, message: Any) -> None:
        if type(message) is Contribution:  # the most frequent message by far
            self._contribution(t, message)
        elif isinstance(message, _COMMIT_MESSAGES):
            step = message.step  # running_step + note_peer_step, without the calls (hot path)
            if step > self.peer_steps.get(sender, -1):
                self.peer_steps[sender] = step
            if self.enrolment.joining:
                self.join_evidence(t, [sender])
            elif self.commit is not None:
                self._step(t, MessageReceived(message=message))
        elif isinstance(message, (JoinRequest, LeaveNotice)):
            if self.enrolment.takes_requests:
                event = JoinRequested if isinstance(message, JoinRequest) else LeaveRequested
                fed = event(peer=message.sender, incarnation=message.incarnation)
                self._membership_changed(t, self.membership.feed(fed, self._local(t)))
                if isinstance(message, LeaveNotice):
                    self._confirm_removal(t, message.sender)
        elif isinstance(message, LeaveConfirmed):
            members = self.membership.configs.latest().members
            recorded = False
            if self.enrolment.confirms_removal(message.sender, members):
                # On disk before the stop or restart (its next process joins).
                recorded = self.membership.removal_confirmed(message.step)
            self._enrol(
                t,
                self.enrolment.removal_confirmed(
                    message.sender, members, step=message.step, recorded=recorded
                ),
            )
        elif isinstance(message, AggregateBytes):
            self._aggregate_bytes(t, message)
        elif isinstance(message, AggregateRequest):
            # From memory, else from the disk (a pinned aggregate outside the apply
            # window), as the runtime's worker serves them (worker.serve_aggregate).
            key = (message.step, message.value_fp)
            contributors = self.memory_aggregates.get(key) or self.disk.aggregates.get(key)
            if contributors is None:
                self._send(t, sender, NoAggregate(message.step, message.value_fp))
            else:
                reply = AggregateBytes(message.step, message.value_fp, contributors)
                self._send(t, sender, reply, "bulk", self.settings.aggregate_nbytes)
        elif isinstance(message, NoAggregate):
            unavailable = sn.AggregateUnavailable(
                step=message.step, value_fp=message.value_fp, source=sender
            )
            self._step(t, unavailable, behind_check=False)
        elif isinstance(message, StateRequest):
            self._serve_state(t, sender)
        elif isinstance(message, _STATE_MESSAGES):
            self._state_arrived(t, sender, message)

    def _contribution(self, t: float, message: Contribution) -> None:
        step_node = self.step_node
        commit = step_node.core
        # A sender past this node's step shows it the decision is there (PeerAt).
        ahead = commit is not None and message.step > commit.step
        arrived = nc.ContributionArrived(step=message.step, sender=message.sender)
        if ahead:
            self._step(t, arrived)
        else:
            # The most frequent event of a run (one per peer per step): when it only
            # told the leader (no action), the leader's timer is the one that may move.
            actions = step_node.handle(arrived, self.proc.clock.local(t))
            if actions:
                self._perform(t, actions)
                self._arm_timers(t)
            else:
                self._arm_lead_timer(t)
        commit = step_node.core
        if commit is not None and commit.learners and message.step == commit.step:
            if message.sender in commit.learners:
                # A learner computed a gradient for our current step: it holds the
                # committed state of the step before, i.e. it has caught up.
                caught_up = LearnerCaughtUp(peer=message.sender, step=message.step)
                self._membership_changed(t, self.membership.feed(caught_up, self._local(t)))

    def bulk_reset(self, t: float, sender: str, message: Any) -> None:
        """A bulk transfer from ``sender`` broke off (its process died): a state
        transfer fails now, as the runtime's worker reports it (``StateFailed``),
        instead of after the rejoin's fetch timeout.  A lost aggregate is pulled
        again at its fetch timeout."""
        if isinstance(message, StateBytes):
            self._rejoin(t, st.StateFailed(source=sender, reason="connection reset"))

    def _aggregate_bytes(self, t: float, message: AggregateBytes) -> None:
        if (message.step, message.value_fp) in self.step_node.held:
            return
        self._hold(message.step, message.value_fp, message.contributors)
        self._step(t, sn.AggregateHeld(step=message.step, value_fp=message.value_fp))

    # --- rejoin -------------------------------------------------------------------------

    def _start_rejoin(self, t: float, evidence: str | None = None) -> None:
        checkpoint = self.disk.checkpoint
        info = None
        local_fp = training.INITIAL_FP
        if checkpoint is not None:
            info = rejoin.CheckpointInfo(
                path=f"checkpoints/{self.name}/step-{checkpoint[0]}",
                step=checkpoint[0],
                param_fp=checkpoint[2],
            )
            local_fp = checkpoint[2]
        own_step = self.commit.step if self.commit is not None else self.step_node.leader.step
        if self.commit is not None and self.param_step >= 0:
            local_fp = training.fingerprint(self.params)  # a live node that fell behind
        conf = self.membership.current
        voters, learners = nc.commit_roles(conf.voters, conf.learners, self.name)
        fetch = st.FetchState(
            evidence=evidence,
            own_step=own_step,
            alive=tuple(self.alive_view),
            members=tuple(sorted(voters + learners)),
            newest_members=self.membership.configs.latest().members,
            peer_steps=dict(self.peer_steps),
            at_genesis=self._at_genesis(),
            genesis_param_fp=training.INITIAL_FP,
            joining=self.enrolment.joining,
            local_checkpoint=info,
            local_param_fp=local_fp,
            vote_floor=self.disk.floor,
        )
        self._rejoin(t, fetch)

    def _rejoin(self, t: float, event: Any) -> None:
        """Feed the node core's state fetch; perform its actions."""
        for action in self.transfer.handle(event, self._local(t)):
            self._history(t, action)
            kind = type(action)
            if kind is st.SuspendSteps:
                self.step_node.detach()
            elif kind is rejoin.RequestState:
                request = StateRequest(sender=self.name, incarnation=self.proc.incarnation)
                self._send(t, action.source, request)
            elif kind is rejoin.LoadCheckpoint:
                step, params, _ = self.disk.checkpoint
                self.params = params
                loaded = rejoin.CheckpointLoaded(
                    step=step, computed_fp=training.fingerprint(params)
                )
                self._rejoin(t, loaded)
            elif kind is st.InstallState:
                self._rejoined(t, action)
            elif kind is st.FetchRetry:
                if action.at is None:
                    self._heartbeat_evidence(t)  # as after a fallback install
                    self._arm_enrolment_timer(t)  # a joiner asks to be added again
                else:
                    self._timer(max(self._true(action.at), t), ("rejoin_begin",))
            elif kind is st.FrameRefused:
                self._log(FrameDrop, t, peer=action.peer, reason=action.reason)
        if self.rejoin is not None:
            self._arm(t, "rejoin_tick", self.rejoin.next_deadline())

    def _rejoined(self, t: float, install: st.InstallState) -> None:
        """The simulated worker installs at once: the staged bytes of a peer, the
        checkpoint it loaded, or (genesis) the initial parameters it holds."""
        staged = self.staged
        if install.source == "local":  # stale-rejoin: whatever the disk holds, unverified
            self.params = (
                self.disk.checkpoint[1] if self.disk.checkpoint else training.INITIAL_PARAMS
            )
        elif staged is not None and staged[0] == install.source:
            self.params = staged[1]
        self.staged = None
        self.param_step = install.step
        self._rejoin(t, st.StateInstalled())
        self.peer_steps = {}
        self._prune_aggregates(install.keep_from_step, install.pinned, memory=False)
        configuration = install.configuration
        from_peer = nc.state_from_peer(install.source)
        # Not named by the state's configuration: (still) a joiner, or a removed leaver.
        self._enrol(
            t,
            self.enrolment.installed(
                member=self.name in configuration.members, from_peer=from_peer
            ),
        )
        watched = self.membership.restart_at(
            configuration, from_peer=from_peer, held_as_member=self.enrolment.held_as_member
        )
        self.sim.members_changed(self.proc, t, watched)
        if self.enrolment.joining:
            # A joiner runs no step until it is added; evidence that came during the
            # fetch is acted on at once (the runtime's dispatch kept taking it).
            self._heartbeat_evidence(t)
            self._arm_enrolment_timer(t)
            return
        self._new_commit(t, install.step + 1, configuration)

    def _serve_state(self, t: float, requester: str) -> None:
        serve = nc.state_to_serve(
            joining=self.enrolment.joining,
            at_genesis=self._at_genesis(),
            fetching=not self.transfer.steps,
        )
        configs = self.membership.configs
        if serve == nc.SERVE_GENESIS:
            offer = nc.state_offer(
                self.name, step=GENESIS_STEP, param_fp=training.INITIAL_FP, nbytes=0,
                configs=configs,
            )  # fmt: skip
            self._send(t, requester, offer)  # no bytes follow
            return
        if serve is None:
            return
        nbytes = self.settings.state_nbytes
        offer = nc.state_offer(
            self.name, step=self.param_step, param_fp=training.fingerprint(self.params),
            nbytes=nbytes, configs=configs,
        )  # fmt: skip
        self._send(t, requester, offer)
        self._send(t, requester, StateBytes(self.param_step, self.params, nbytes), "bulk", nbytes)

    def _state_arrived(self, t: float, sender: str, message: StateOffer | StateBytes) -> None:
        if self.rejoin is None:
            return
        if isinstance(message, StateOffer):
            self._rejoin(t, st.OfferArrived(offer=message, joining=self.enrolment.joining))
            return
        # Staged by the simulated worker (the latest transfer), as the runtime's worker
        # stages the bytes it expects; installed if the fetch takes them.
        self.staged = (sender, message.params)
        arrived = st.BytesArrived(
            source=sender, step=message.step,
            computed_fp=training.fingerprint(message.params), nbytes=message.nbytes,
        )  # fmt: skip
        self._rejoin(t, arrived)

    # --- timers -------------------------------------------------------------------------

    def _due_before_pulls(self, t: float) -> None:
        """What the runtime's loop does before it moves unanswered pulls on, at one
        instant (``StepDriver.poll``): the commit core's timer, the rejoin core's, then
        the step's leader.  A pull's timeout due at the same instant as one of those
        waits for them, whichever timer was armed first.  (Agreement test: a leader's
        proposal due at a pull's timeout built the very value pulled, so the runtime
        asked nobody and the simulator asked the next source.)  Each fires only if it
        is due (its branch of ``timer`` checks), and its own heap entry is then a no-op."""
        for kind in ("commit_tick", "rejoin_tick", "lead_tick"):
            self.timer(t, (kind,))

    def timer(self, t: float, payload: tuple) -> None:
        kind = payload[0]
        if kind == "computed":
            if self.commit is not None and payload[2] == self.commit_generation:
                self._computed(t, payload[1])
        elif kind == "lead_tick":
            if self._fired(t, kind):
                self.lead_deadline_armed = None  # fired: arm whatever is due next
                self._step(t, nc.Tick(), behind_check=False)
        elif kind == "commit_tick":
            if self.commit is not None and self._fired(t, kind):
                self._step(t, CommitTick())
        elif kind == "pull_tick":
            if self._fired(t, kind):
                self._due_before_pulls(t)
                self._step(t, sn.PullsDue(), behind_check=False)
        elif kind == "rejoin_begin":
            retry_at = self.transfer.fetch.retry_at  # node-clock time (node_core.StateFetch)
            if self.rejoin is None and retry_at is not None:
                at = self._true(retry_at)
                if at > t:
                    self._timer(at, ("rejoin_begin",))  # its clock moved: not due yet
                else:
                    self._start_rejoin(t)
        elif kind == "enrolment_tick":
            if self._fired(t, kind):
                self._enrolment_tick(t)
        elif kind == "rejoin_tick":
            if self.rejoin is not None and self._fired(t, kind):
                self._rejoin(t, rejoin.Tick())
