"""The worker's side of sharded aggregation: it moves shards, it decides nothing.

Who owns which shard, and who replaces a dead owner, is ``protocol.sharding``'s
decision, made by the control process from the step's members and its detector
view and handed over as ``ipc.ShardPlan``.  Per step this moves:

1. ``contribute``: shard ``i`` of this node's wire payload to ``plan[i]`` (its own
   shards stay here); the payload is kept until the step is applied, so a shard
   whose owner changes (``replan``) is sent again to the new owner.
2. An owner holding shard ``i`` from every one of the step's owners (the fast path:
   every member contributed) aggregates it at once and sends the result to every
   member (``shard_aggregate``, key ``i/n/contributors``).  For any other
   contributor set (a straggler left out, a dead node) a node asks the shard's
   current owner for it (``BulkRequest(kind="shard_aggregate")``); the owner
   answers once it holds that set's inputs.
3. ``gather(step, contributors)``: the whole aggregate, the shards joined in order,
   and its fingerprint: what ``BuildAggregate`` returns on this path.  It waits for
   a broadcast shard ``BROADCAST_GRACE_S`` before asking, asks again every
   ``REQUEST_RETRY_S`` (and at once when the plan moves the shard), and gives up
   after ``GATHER_TIMEOUT_S``: the control process then proposes again or fetches
   the whole aggregate from the proposer, as on the all-to-all path.
4. Repair: an owner that still lacks a member's shard ``INPUT_WAIT_S`` after its own
   contribution (or when asked for a set naming that member) asks the member for it
   (``BulkRequest(kind="shard")``), and the member sends it again from the payload it
   keeps until the step is applied.  A shard lost on the way is otherwise never sent
   again, and no set naming its sender can be aggregated: the leader leaves missing
   contributors out only while a majority stays in, and never itself.  Session 26
   caught this at start-up, 2 runs in 21: Toxiproxy accepts a connection and drops it
   when the peer's listener is not up yet, taking the frames written into it, so one
   owner lacked two members' shards of step 0 and no node ever proposed.

An aggregated shard is computed by ``training.aggregation.aggregate`` over the
shard's slices of the contributors' (decoded) gradients, the same kernels as the
whole vector: the joined shards are bit-equal to the all-to-all aggregate
(tests/reference_node/runtime/test_sharded.py).  The plain mean drops a contribution
holding a NaN or inf anywhere from the whole vector; an owner sees one shard, so each
sender marks its shard keys when its whole gradient is not finite (``i/n!``) and the
owners drop it from every shard alike.

Trust: an owner's aggregated shard is taken as sent (acceptors do not recompute it,
as an all-to-all acceptor rebuilds the aggregate): a Byzantine *owner* could bias
its shard.  The threat model's Byzantine nodes send bad gradients, which the robust
rules absorb; a node that also lies about its aggregation is not covered here.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

import torch

from swarmshake.reference_node.protocol import history
from swarmshake.reference_node.protocol import sharding as sh
from swarmshake.reference_node.protocol.errors import LocalProtocolError
from swarmshake.reference_node.runtime import ipc
from swarmshake.reference_node.runtime.bulk import BulkChunk, BulkRefusal, BulkRequest, split
from swarmshake.reference_node.training.aggregation import (
    AggregationError,
    aggregate_shard,
    all_finite,
    join_shards,
)
from swarmshake.reference_node.training.wire import WireError, decode, shard_payload

if TYPE_CHECKING:
    from swarmshake.reference_node.runtime.worker import AggregateOutcome, Worker

# A broadcast shard of the full contributor set leaves its owner as soon as the
# last input arrives there; healthy inputs land within ~0.1 s of each other, so this
# long without it means the owner is slow or gone: ask (the plan may have moved it).
BROADCAST_GRACE_S = 0.3
# An asked owner that has not answered this long later is asked again (it may have
# been waiting for an input that a replanned contributor only now resent).
REQUEST_RETRY_S = 0.5
# One gather gives up after this long without a chunk of a missing shard: the control
# process then proposes again (BuildFailed) or pulls the whole aggregate from the
# proposer (its fetch retry).  Longer than a detection (~0.15 s) plus the start of a
# resend; a shard still arriving keeps its gather going (a 100M model's shards, 100 MB
# each, take seconds on a loaded host).
GATHER_TIMEOUT_S = 3.0
# ... and after this long in all, arriving or not: a peer trickling bytes at the link's
# rate floor must not hold the step (the whole aggregate can still be fetched).
GATHER_MAX_S = 60.0
# Shards whose chunks are arriving, remembered per step (see ``chunk_arrived``): the
# contributor sets a step may hold times the owners, with room; more is a peer
# flooding us, and such a shard is only asked for again as before.
ARRIVING_PER_STEP_MAX = 256
# Contributor sets whose aggregated shards are held per step: the full set plus a
# few retries without stragglers; more is a peer flooding us.
RESULT_SETS_PER_STEP_MAX = 8
# Steps whose shard inputs an owner holds at once: a rejoining owner (its state still
# behind) keeps aggregating the newest steps' shards for the others, and forgets the
# oldest beyond this many (each is one shard of every peer's gradient).
INPUT_STEPS_MAX = 4
# Arrivals are told to the control process for its current step and this many ahead
# (worker.AHEAD_STEPS): a rejoining owner's far-ahead shards are not its steps.
AHEAD_STEPS_REPORTED = 2
# Requests waiting at an owner for their inputs, per step: a few per peer.
WAITING_PER_STEP_MAX = 256
# An owner asked again for a shard whose inputs it still lacks this long after the
# first request names the contributors it lacks (a refusal): healthy shards land
# within ~0.1 s of each other, a 100M model's within ~0.5 s; the asker then leaves
# them out (node_core.BuildFailed.missing) instead of failing the same way again.
INPUT_WAIT_S = 1.0
# An owner asks a member for a shard it lacks (step 4 of the module docstring) at most
# once per this long: the member's answer is one shard, on a link that delivered the
# request, so a second ask within this time would only send the same bytes twice.
PULL_RETRY_S = INPUT_WAIT_S


class ShardInputsMissing(AggregationError):
    """An owner lacks these contributors' shards (``missing``) for the asked set."""

    def __init__(self, message: str, missing: tuple[str, ...]):
        super().__init__(message)
        self.missing = missing


class ShardExchange:
    def __init__(self, worker: Worker):
        self.worker = worker
        self.node = worker.node
        self.config = worker.config.training
        self.numel = worker.replica.model.parameter_count
        self.owners: dict[int, tuple[str, ...]] = {}  # step -> its owners (sorted members)
        self.plans: dict[int, tuple[str, ...]] = {}  # step -> who aggregates shard i now
        self.payloads: dict[int, memoryview] = {}  # step -> this node's whole wire payload
        self.own: dict[int, torch.Tensor] = {}  # step -> this node's decoded contribution
        # step -> contributors whose whole gradient holds a NaN or inf (their key says
        # so): the plain mean drops them from every shard (aggregate_shard).
        self.non_finite: dict[int, set[str]] = {}
        self.inputs: dict[tuple[int, int], dict[str, torch.Tensor]] = {}  # (step, shard)
        self.reported: dict[int, set[str]] = {}  # step -> senders reported as arrived
        self.results: dict[tuple[int, tuple[str, ...]], dict[int, torch.Tensor]] = {}
        self.computing: dict[tuple[int, int, tuple[str, ...]], asyncio.Task[None]] = {}
        self.waiting: dict[tuple[int, int, tuple[str, ...]], set[str]] = {}
        self.refused: dict[tuple[int, tuple[str, ...]], AggregationError] = {}
        self.waiting_since: dict[tuple[int, int, tuple[str, ...]], float] = {}
        self.gathers: dict[tuple[int, tuple[str, ...]], asyncio.Task[AggregateOutcome]] = {}
        # (step, aggregated shard's key, owner) -> node time its last chunk arrived: a
        # shard on its way is not asked for again (a second send of it would be
        # wasted), and it keeps its gather from timing out.
        self.arriving: dict[tuple[int, str, str], float] = {}
        self._changed: dict[int, asyncio.Event] = {}
        self.bounds_cache: dict[int, tuple[tuple[int, int], ...]] = {}
        # step -> its shard count as the keys of its shards say (a rejoining owner
        # has no plan for the steps it aggregates for the others)
        self.counts: dict[int, int] = {}
        # (step, shard, member) -> node time this owner last asked the member for its
        # shard; (step, shard, owner) -> when this member last sent its shard there.
        # Bounded: only steps whose inputs or payload are held (forget_through and
        # _keep_newest_input_steps drop the rest), times their shards and members.
        self.pulled: dict[tuple[int, int, str], float] = {}
        self.shard_sent_at: dict[tuple[int, int, str], float] = {}
        # (step, shard, owner) -> sends of this node's shard there not yet handed to
        # the link (bounded like shard_sent_at; an entry leaves when its sends end)
        self.shards_sending: dict[tuple[int, int, str], int] = {}

    # -- plan and contribution ----------------------------------------------------------------

    def bounds(self, count: int) -> tuple[tuple[int, int], ...]:
        cached = self.bounds_cache.get(count)
        if cached is None:
            cached = self.bounds_cache[count] = sh.shard_bounds(self.numel, count)
        return cached

    def set_plan(self, message: ipc.ShardPlan) -> None:
        step = message.step
        if step < self.worker.replica.step:
            return  # a plan of a step already applied
        owners, plan = tuple(message.owners), tuple(message.plan)
        before = self.plans.get(step)
        self.owners[step] = owners
        self.plans[step] = plan
        if before is None or len(before) != len(plan):
            return
        for index in sh.reassigned(before, plan):
            # Contributors keep their payload until the step commits: resend the
            # shard to its new owner (DESIGN: a send is logged before it is done).
            if step in self.payloads:
                self._place_own_shard(step, index)
        self._bump(step)  # gathers ask the new owners

    def contribute(self, step: int, payload: memoryview, own: torch.Tensor) -> None:
        """Send this node's shards of ``step`` to their owners (plan of ``set_plan``)."""
        if step not in self.plans:
            self.worker.drops.drop("shard_plan_missing", self.node)
            return
        self.payloads[step] = payload
        self.own[step] = own
        if not all_finite(own):
            self.non_finite.setdefault(step, set()).add(self.node)
        for index in range(len(self.plans[step])):
            self._place_own_shard(step, index)
        self.worker.spawn(self._watch_inputs(step))

    def _place_own_shard(self, step: int, index: int) -> None:
        owner = self.plans[step][index]
        count = len(self.plans[step])
        if owner == self.node:
            start, end = self.bounds(count)[index]
            self._add_input(step, index, self.node, self.own[step][start:end])
            return
        self._send_own_shard(step, index, owner)

    def _send_own_shard(self, step: int, index: int, owner: str) -> None:
        key = (step, index, owner)
        self.shard_sent_at[key] = self.worker.clock.now()
        count = len(self.plans[step])
        start, end = self.bounds(count)[index]
        piece = shard_payload(self.config, self.payloads[step], self.numel, start, end)
        self.worker.log(history.AggSend, step=step, to=owner, nbytes=piece.nbytes)
        finite = self.node not in self.non_finite.get(step, ())
        chunks = split("shard", step, sh.shard_key(index, count, finite), piece)
        # On its way until the link took it: an owner's ask for it meanwhile sends
        # nothing more (a 100M model's shard, 100 MB, queued behind a checkpoint
        # replica to the same peer, would otherwise be sent once per ask).
        self.shards_sending[key] = self.shards_sending.get(key, 0) + 1
        self.worker.spawn(self._send_shard(key, owner, chunks))

    async def _send_shard(self, key: tuple[int, int, str], owner: str, chunks) -> None:  # noqa: ANN001
        try:
            await self.worker.send_blob(owner, chunks)
        finally:
            left = self.shards_sending.pop(key, 1) - 1
            if left > 0:
                self.shards_sending[key] = left

    # -- repair: an owner asks for the shards it lacks --------------------------------------------

    async def _watch_inputs(self, step: int) -> None:
        """While this node's payload of ``step`` is held (until the step is applied),
        every ``INPUT_WAIT_S`` ask the members whose shard of a shard this node owns
        never came (step 4 of the module docstring).  Bounded by ``GATHER_MAX_S``."""
        clock = self.worker.clock
        started = clock.now()
        while clock.now() - started < GATHER_MAX_S:
            await asyncio.sleep(clock.host_delay_s(INPUT_WAIT_S))
            plan, owners = self.plans.get(step), self.owners.get(step)
            if step not in self.payloads or plan is None or owners is None:
                return  # applied, or a state was installed
            now = clock.now()
            lacking_any = False
            for index, owner in enumerate(plan):
                if owner != self.node:
                    continue
                held = self.inputs.get((step, index), {})
                lacking = self._silent(step, index, set(owners) - held.keys(), now)
                lacking_any = lacking_any or bool(lacking)
                self._pull_inputs(step, index, len(plan), lacking, now)
            if not lacking_any:
                return

    def _pull_inputs(
        self, step: int, index: int, count: int, members: list[str], now: float
    ) -> None:
        """Ask each of ``members`` for its shard ``index`` of ``step`` (PULL_RETRY_S
        apart): it was lost on the way, or its sender is dead and never answers."""
        request = BulkRequest(kind="shard", step=step, key=sh.shard_key(index, count))
        for member in members:
            key = (step, index, member)
            if member == self.node or now - self.pulled.get(key, -math.inf) < PULL_RETRY_S:
                continue
            self.pulled[key] = now
            self.worker.spawn(self.worker.send_blob(member, iter([request])))

    def on_shard_request(self, sender: str, request: BulkRequest) -> None:
        """An owner lacks this node's shard: send it again (the payload is kept until
        the step is applied; a step this node has not computed yet is sent when it
        is, by ``contribute``)."""
        try:
            index, count, contributors, _ = sh.parse_shard_key(request.key)
        except ValueError:
            self.worker.drops.drop("bad_shard_key", sender)
            return
        step = request.step
        plan = self.plans.get(step)
        if contributors is not None or (plan is not None and len(plan) != count):
            self.worker.drops.drop("bad_shard_key", sender)
            return
        if plan is None or step not in self.payloads:
            return  # not computed yet (contribute sends it), or applied: moot
        key = (step, index, sender)
        sent_at = self.shard_sent_at.get(key, -math.inf)
        if key in self.shards_sending or self.worker.clock.now() - sent_at < PULL_RETRY_S:
            return  # on its way (or sent just now)
        self._send_own_shard(step, index, sender)

    # -- inbound --------------------------------------------------------------------------------

    def on_chunk_blob(self, sender: str, chunk: BulkChunk, blob: bytearray) -> None:
        try:
            index, count, contributors, finite = sh.parse_shard_key(chunk.key)
            start, end = self.bounds(count)[index]
        except (ValueError, LocalProtocolError):
            self.worker.drops.drop("bad_shard_key", sender)
            return
        known = self.owners.get(chunk.step)
        if (known is not None and len(known) != count) or self.counts.setdefault(
            chunk.step, count
        ) != count:
            self.worker.drops.drop("shard_count_mismatch", sender)
            return
        if chunk.kind == "shard":
            if contributors is not None:
                self.worker.drops.drop("bad_shard_key", sender)
                return
            try:
                tensor = (
                    decode(self.config, blob, end - start)
                    if end > start
                    else torch.empty(0, dtype=torch.float32)
                )
                if end == start and len(blob) != 0:
                    raise WireError("an empty shard carries no bytes")
            except WireError:
                self.worker.drops.drop("wrong_tensor_size", sender)
                return
            if not finite:
                self.non_finite.setdefault(chunk.step, set()).add(sender)
            self._add_input(chunk.step, index, sender, tensor)
            self._keep_newest_input_steps()
            return
        if contributors is None or len(blob) != 4 * (end - start):
            self.worker.drops.drop("wrong_tensor_size", sender)
            return
        key = (chunk.step, contributors)
        if key not in self.results and self._result_sets(chunk.step) >= RESULT_SETS_PER_STEP_MAX:
            self.worker.drops.drop("too_many_shard_sets", sender)
            return
        tensor = (
            torch.frombuffer(blob, dtype=torch.float32)
            if end > start
            else torch.empty(0, dtype=torch.float32)
        )
        self._store_result(chunk.step, contributors, index, tensor)

    def chunk_arrived(self, sender: str, chunk: BulkChunk) -> None:
        """A chunk of a blob not yet whole: a shard (an owner's input) or an aggregated
        shard on its way, whose sender is therefore not missing."""
        if chunk.kind == "shard":
            try:
                index = sh.parse_shard_key(chunk.key)[0]
            except ValueError:
                return  # refused when it is whole
            key = (chunk.step, f"input:{index}", sender)
        else:
            key = (chunk.step, chunk.key, sender)
        if key not in self.arriving and (
            sum(1 for k in self.arriving if k[0] == chunk.step) >= ARRIVING_PER_STEP_MAX
        ):
            return
        self.arriving[key] = self.worker.clock.now()

    def _silent(self, step: int, index: int, names: set[str], now: float) -> list[str]:
        """Of ``names`` (contributors whose shard ``index`` this owner lacks), those from
        whom no chunk of it arrived within ``INPUT_WAIT_S``: a shard still arriving
        (100 MB of a 100M model's) is late, not missing."""
        return sorted(
            name
            for name in names
            if now - self.arriving.get((step, f"input:{index}", name), -math.inf) >= INPUT_WAIT_S
        )

    def on_request(self, sender: str, request: BulkRequest) -> None:
        try:
            index, count, contributors, _ = sh.parse_shard_key(request.key)
        except ValueError:
            self.worker.drops.drop("bad_shard_key", sender)
            return
        if contributors is None:
            self.worker.drops.drop("bad_shard_key", sender)
            return
        step = request.step
        if self.counts.setdefault(step, count) != count:
            self.worker.drops.drop("shard_count_mismatch", sender)
            return
        held = self.results.get((step, contributors), {}).get(index)
        if held is not None:
            self._send_result(sender, step, index, count, contributors, held)
            return
        waiting_key = (step, index, contributors)
        if sum(len(w) for k, w in self.waiting.items() if k[0] == step) >= WAITING_PER_STEP_MAX:
            self.worker.drops.drop("too_many_shard_requests", sender)
            return
        self.waiting.setdefault(waiting_key, set()).add(sender)
        self._maybe_compute(step, index, contributors)
        if waiting_key in self.computing:
            return
        now = self.worker.clock.now()
        since = self.waiting_since.setdefault(waiting_key, now)
        lacking = self._silent(
            step, index, set(contributors) - self.inputs.get((step, index), {}).keys(), now
        )
        if now - since > INPUT_WAIT_S and lacking:
            self._pull_inputs(step, index, count, lacking, now)
            refusal = BulkRefusal(
                kind="shard_aggregate",
                step=step,
                key=request.key,
                reason=f"shard {index}: no input from {', '.join(lacking)}",
                missing=lacking,
            )
            self.worker.spawn(self.worker.send_blob(sender, iter([refusal])))

    def on_refusal(self, sender: str, refusal: BulkRefusal) -> None:
        try:
            _, _, contributors, _ = sh.parse_shard_key(refusal.key)
        except ValueError:
            self.worker.drops.drop("bad_shard_key", sender)
            return
        if contributors is None or (refusal.step, contributors) not in self.gathers:
            return
        missing = tuple(name for name in refusal.missing if name in contributors)
        reason = f"a shard owner refused: {refusal.reason[:120]}"
        self.refused[(refusal.step, contributors)] = (
            ShardInputsMissing(reason, missing) if missing else AggregationError(reason)
        )
        self._bump(refusal.step)

    def _keep_newest_input_steps(self) -> None:
        own_step = self.worker.replica.step
        # The steps this node runs now are never the ones forgotten: far-ahead shards
        # (a peer's, while this node is rejoining) cannot push out the current step's.
        current = range(own_step, own_step + AHEAD_STEPS_REPORTED + 1)
        steps = sorted({step for step, _ in self.inputs if step not in current})
        for old in steps[:-INPUT_STEPS_MAX]:
            self.counts.pop(old, None)
            for key in [k for k in self.inputs if k[0] == old]:
                del self.inputs[key]
            for table in (self.waiting, self.waiting_since, self.pulled):
                for key in [k for k in table if k[0] == old]:
                    del table[key]

    # -- owners: aggregate a shard ----------------------------------------------------------------

    def _add_input(self, step: int, index: int, sender: str, tensor: torch.Tensor) -> None:
        self.inputs.setdefault((step, index), {})[sender] = tensor
        reported = self.reported.setdefault(step, set())
        own_step = self.worker.replica.step
        in_window = own_step <= step <= own_step + AHEAD_STEPS_REPORTED
        if sender != self.node and sender not in reported and in_window:
            reported.add(sender)
            self.worker.channel.send(ipc.ContributionArrived(step=step, sender=sender))
        for waiting_step, waiting_index, contributors in list(self.waiting):
            if waiting_step == step and waiting_index == index:
                self._maybe_compute(step, index, contributors)
        owners = self.owners.get(step)
        if owners is not None and set(owners) <= self.inputs[(step, index)].keys():
            # Every member's shard is here: the fast path's set, sent to everyone.
            self._maybe_compute(step, index, owners, broadcast=True)
        self._bump(step)

    def _maybe_compute(
        self, step: int, index: int, contributors: tuple[str, ...], broadcast: bool = False
    ) -> None:
        held = self.inputs.get((step, index), {})
        key = (step, index, contributors)
        if key in self.computing or not set(contributors) <= held.keys():
            return
        chosen = {name: held[name] for name in contributors}
        non_finite = frozenset(self.non_finite.get(step, ()))
        self.computing[key] = self.worker.spawn(self._compute(key, chosen, non_finite, broadcast))

    def _aggregate_shard(
        self,
        count: int,
        index: int,
        chosen: dict[str, torch.Tensor],
        non_finite: frozenset[str],
    ) -> torch.Tensor | AggregationError:
        start, end = self.bounds(count)[index]
        return aggregate_shard(self.config, end - start, chosen, non_finite)

    async def _compute(
        self,
        key: tuple[int, int, tuple[str, ...]],
        chosen: dict[str, torch.Tensor],
        non_finite: frozenset[str],
        broadcast: bool,
    ) -> None:
        step, index, contributors = key
        count = len(self.owners.get(step, ())) or self.counts.get(step, 0)
        if count == 0:
            return  # the step was forgotten meanwhile (INPUT_STEPS_MAX)
        result = await self.worker.run_compute(
            self._aggregate_shard, count, index, chosen, non_finite
        )
        waiters = self.waiting.pop(key, set())
        if isinstance(result, AggregationError):
            shard_key = sh.aggregate_shard_key(index, count, contributors)
            refusal = BulkRefusal(
                kind="shard_aggregate", step=step, key=shard_key, reason=str(result)[:200]
            )
            for peer in waiters - {self.node}:
                self.worker.spawn(self.worker.send_blob(peer, iter([refusal])))
            if (step, contributors) in self.gathers:
                self.refused[(step, contributors)] = result
                self._bump(step)
            return
        self._store_result(step, contributors, index, result)
        peers = set(waiters)
        if broadcast:
            peers |= set(self.owners.get(step, ()))
        for peer in sorted(peers - {self.node}):
            self._send_result(peer, step, index, count, contributors, result)

    def _send_result(
        self,
        peer: str,
        step: int,
        index: int,
        count: int,
        contributors: tuple[str, ...],
        result: torch.Tensor,
    ) -> None:
        payload = memoryview(result.numpy()).cast("B")
        key = sh.aggregate_shard_key(index, count, contributors)
        self.worker.spawn(self.worker.send_blob(peer, split("shard_aggregate", step, key, payload)))

    # -- everyone: gather the whole aggregate --------------------------------------------------

    def _result_sets(self, step: int) -> int:
        return sum(1 for s, _ in self.results if s == step)

    def _store_result(
        self, step: int, contributors: tuple[str, ...], index: int, tensor: torch.Tensor
    ) -> None:
        if step < self.worker.replica.step:
            return
        held = self.results.setdefault((step, contributors), {})
        held[index] = tensor
        count = len(self.owners.get(step, ())) or None
        key = (step, contributors)
        if count is not None and len(held) == count and key not in self.gathers:
            # Every shard is here before anyone asked: join and store it now, so the
            # fsync is off the vote's path (like the all-to-all prebuild).
            self.gathers[key] = self.worker.spawn(self._gather(step, contributors))
        self._bump(step)

    def gather(self, step: int, contributors: tuple[str, ...]) -> asyncio.Task[AggregateOutcome]:
        key = (step, tuple(sorted(contributors)))
        task = self.gathers.get(key)
        if task is None or (task.done() and isinstance(task.result(), AggregationError)):
            self.refused.pop(key, None)
            task = self.gathers[key] = self.worker.spawn(self._gather(*key))
        return task

    async def _gather(self, step: int, contributors: tuple[str, ...]) -> AggregateOutcome:
        clock = self.worker.clock  # node time: a clock-skew fault moves these timers too
        started = clock.now()
        asked: dict[int, tuple[str, float]] = {}
        key = (step, contributors)
        while True:
            if step < self.worker.replica.step:
                return AggregationError(f"step {step} was applied meanwhile")
            owners = self.owners.get(step)
            plan = self.plans.get(step)
            if owners is None or plan is None:
                return AggregationError(f"no shard plan for step {step}")
            if not set(contributors) <= set(owners):
                return AggregationError(f"contributors {contributors} are not step {step}'s owners")
            refused = self.refused.pop(key, None)
            if refused is not None:
                return refused
            count = len(plan)
            held = self.results.get(key, {})
            missing = [index for index in range(count) if index not in held]
            if not missing:
                break
            now = clock.now()
            shard_keys = {
                index: sh.aggregate_shard_key(index, count, contributors) for index in missing
            }
            progress = max(
                (
                    self.arriving.get((step, shard_keys[index], plan[index]), started)
                    for index in missing
                ),
                default=started,
            )
            if now - max(started, progress) > GATHER_TIMEOUT_S:
                return AggregationError(
                    f"shards {missing} of step {step} not received: none arriving for "
                    f"{GATHER_TIMEOUT_S}s"
                )
            if now - started > GATHER_MAX_S:
                return AggregationError(
                    f"shards {missing} of step {step} not received in {GATHER_MAX_S}s"
                )
            broadcast_due = contributors == owners and now - started < BROADCAST_GRACE_S
            for index in missing:
                owner = plan[index]
                if owner == self.node:
                    self.waiting.setdefault((step, index, contributors), set()).add(self.node)
                    self._maybe_compute(step, index, contributors)
                    lacking = self._silent(
                        step,
                        index,
                        set(contributors) - self.inputs.get((step, index), {}).keys(),
                        now,
                    )
                    if lacking and now - started > INPUT_WAIT_S:
                        self._pull_inputs(step, index, count, lacking, now)
                        return ShardInputsMissing(
                            f"shard {index}: no input from {', '.join(lacking)}", tuple(lacking)
                        )
                    continue
                if broadcast_due:
                    continue
                arrived_at = self.arriving.get((step, shard_keys[index], owner))
                if arrived_at is not None and now - arrived_at < REQUEST_RETRY_S:
                    continue  # on its way: asking again would only send it twice
                previous = asked.get(index)
                if previous is None or previous[0] != owner or now - previous[1] > REQUEST_RETRY_S:
                    asked[index] = (owner, now)
                    request = BulkRequest(kind="shard_aggregate", step=step, key=shard_keys[index])
                    self.worker.spawn(self.worker.send_blob(owner, iter([request])))
            changed = self._changed.setdefault(step, asyncio.Event())
            wait_s = BROADCAST_GRACE_S if broadcast_due else REQUEST_RETRY_S
            try:
                async with asyncio.timeout(clock.host_delay_s(wait_s)):  # bounded: re-asks
                    await changed.wait()
            except TimeoutError:
                pass
        held = self.results[key]
        parts = [held[index] for index in range(len(held))]
        whole, agg_fp = await self.worker.run_compute(join_shards, parts)
        self.worker.make_durable(step, agg_fp, whole)
        return whole, agg_fp

    def _bump(self, step: int) -> None:
        event = self._changed.pop(step, None)
        if event is not None:
            event.set()

    # -- forgetting -------------------------------------------------------------------------------

    def forget_through(self, step: int) -> None:
        """Drop everything of steps <= ``step`` (applied, or a state was installed)."""
        tables = (
            self.owners,
            self.plans,
            self.payloads,
            self.own,
            self.reported,
            self.non_finite,
            self.counts,
        )
        for table in tables:
            for key in [k for k in table if k <= step]:
                del table[key]
        for table in (
            self.inputs,
            self.results,
            self.computing,
            self.waiting,
            self.refused,
            self.waiting_since,
            self.arriving,
            self.pulled,
            self.shard_sent_at,
            self.shards_sending,
        ):
            for key in [k for k in table if k[0] <= step]:
                del table[key]
        for key in [k for k in self.gathers if k[0] <= step]:
            del self.gathers[key]
        for key in [k for k in self._changed if k <= step]:
            self._changed.pop(key).set()  # wake gathers so they return
