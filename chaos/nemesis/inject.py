"""The real-backend interpreter of fault ops: ``await nemesis.inject(op)`` / ``heal(op)``.

Every op is recorded as a ``fault`` event of the harness.  The order is chosen so
the history never understates a fault: an inject is logged *before* its effect and
a heal *after* its effect completed, so the window a checker sees always contains
the real one (a node is never judged alive while it may already be down).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.chaos import faults as F
from swarmshake.chaos.backends.base import Backend, BackendError, UnsupportedFault
from swarmshake.chaos.links import Link, apply_concurrently
from swarmshake.chaos.nemesis.churn import Churn
from swarmshake.reference_node.protocol.history import HARNESS, EventWriter, Fault
from swarmshake.reference_node.runtime.mqtt_messages import (
    HoldBulk,
    Leave,
    SetByzantine,
    SetClock,
)
from swarmshake.reference_node.training.behaviour import ByzantineBehaviour  # torch-free

# Toxiproxy toxic type and attributes for each link op (attribute names are Toxiproxy's).
_TOXICS = {
    "latency": ("latency", lambda op: {"latency": int(op.delay_ms), "jitter": int(op.jitter_ms)}),
    "bandwidth": ("bandwidth", lambda op: {"rate": max(1, int(op.rate_kbps))}),
    "blackhole": ("timeout", lambda op: {"timeout": int(op.timeout_ms)}),
    "reset_peer": ("reset_peer", lambda op: {"timeout": int(op.timeout_ms)}),
    "slicer": ("slicer", lambda op: {"average_size": op.average_size,
                                      "size_variation": op.size_variation, "delay": op.delay_us}),
    "limit_data": ("limit_data", lambda op: {"bytes": op.limit_bytes}),
    "slow_close": ("slow_close", lambda op: {"delay": int(op.delay_ms)}),
}  # fmt: skip
_BYZANTINE_MODES = {"noise": "gaussian_noise"}  # fault-catalog name -> node behaviour name
COMMAND_OPS = frozenset({"clock_skew", "byzantine", "hold_bulk"})


class FaultNotApplicable(BackendError):
    """The op cannot act now (e.g. no checkpoint to corrupt yet); nothing was changed."""


class Nemesis:
    def __init__(self, backend: Backend, writer: EventWriter | None, *, seed: int = 0):
        self.backend = backend
        self.writer = writer
        self.rng = random.Random(seed)
        self.cluster = list(backend.spec.nodes)
        self.cut: set[tuple[str, str]] = set()
        self.churn: Churn | None = None
        self.gone_for_good: set[str] = set()  # permanent crashes: the quiesce keeps them down
        self.applied: list[tuple[float, str, str]] = []  # (t_mono, op, phase), for progress
        self.lamport = 0

    # --- recording -------------------------------------------------------------------

    def _record(self, op: str, phase: str, target: list[str], params: dict[str, Any]) -> None:
        now = time.monotonic()
        self.lamport += 1
        self.applied.append((now, op, phase))
        if self.writer is None:
            return
        event = Fault(
            t_wall=time.time(), t_mono=now, node=HARNESS, lamport=self.lamport,
            op=op, target=target, params=params, phase=phase,  # type: ignore[arg-type]
        )  # fmt: skip
        self.writer.write(event)

    @staticmethod
    def _params(op: F.FaultOp) -> dict[str, Any]:
        data = msgspec.to_builtins(op)
        data.pop("op", None)
        return data

    # --- public ----------------------------------------------------------------------

    def check_supported(self, op: F.FaultOp) -> None:
        names = {op.name}
        if isinstance(op, F.Heal) and op.scope not in ("all", "partition", "churn"):
            names.add(op.scope)
        for name in names:
            if name not in self.backend.ops():
                raise UnsupportedFault(self.backend.unsupported_reason(name))

    async def inject(self, op: F.FaultOp) -> None:
        """Apply ``op`` (a heal-type op such as ``restart`` or ``heal`` is applied too)."""
        self.check_supported(op)
        if isinstance(op, F.Heal):
            await self._heal_scope(op)
            return
        if isinstance(op, F.Partition):
            cuts = op.cut_links(self.cluster, self.rng)
            target = sorted({n for pair in cuts for n in pair})
            self._record(
                op.name, "inject", target, {**self._params(op), "cuts": sorted(map(list, cuts))}
            )
            await self._cut(cuts)
            return
        self._record(op.name, "inject", self._targets(op), self._params(op))
        await self._apply(op)

    async def heal(self, op: F.FaultOp) -> None:
        """Undo ``op`` (what ``op.heal()`` names), recorded as ``op``'s heal."""
        undo = op.heal()
        if undo is None:
            return
        if isinstance(undo, F.Heal):
            await self._heal_scope(undo, recorded_as=op.name)
            return
        await self._apply(undo)
        self._record(op.name, "heal", self._targets(op), self._params(undo))

    async def heal_all(self) -> None:
        """The quiesce step: every fault undone, every node running and unpaused."""
        await self._heal_scope(F.Heal(scope="churn"))
        await self._heal_scope(F.Heal(scope="all"))
        for name in self.cluster:
            node = self.backend.node(name)
            await node.set_cpu_fraction(1.0)
            await node.set_disk_full(False)
            if getattr(node, "paused", False):
                await node.resume()
                self._record("pause", "heal", [name], {})
            if not node.is_running() and name not in self.gone_for_good:
                await node.restart()
                self._record("crash", "heal", [name], {"quiesce": True})
        if self.backend.broker.lost:
            await self.backend.broker.restore()
            self._record("broker_loss", "heal", [], {})

    # --- internals -------------------------------------------------------------------

    def _targets(self, op: F.FaultOp) -> list[str]:
        targets = op.targets()
        return self.cluster if F.ALL in targets else targets

    def _nodes(self, op: F.FaultOp) -> list[str]:
        names = self._targets(op)
        unknown = sorted(set(names) - set(self.cluster))
        if unknown:
            raise BackendError(
                f"{op.name}: unknown node(s) {unknown}; the cluster has {self.cluster}"
            )
        return names

    async def _each_node(self, op: F.FaultOp, action: str, *args: Any) -> None:
        nodes = [self.backend.node(name) for name in self._nodes(op)]
        await asyncio.gather(*(getattr(node, action)(*args) for node in nodes))

    async def _apply(self, op: F.FaultOp) -> None:  # noqa: C901 - one branch per op type
        match op:
            case F.Crash():
                if op.permanent:
                    self.gone_for_good.update(self._nodes(op))
                await self._each_node(op, "crash")
            case F.Restart():
                await self._each_node(op, "restart")
            case F.Pause():
                await self._each_node(op, "pause")
            case F.Resume():
                await self._each_node(op, "resume")
            case F.CpuThrottle():
                await self._each_node(op, "set_cpu_fraction", op.cpu_fraction)
            case F.DiskFull():
                await self._each_node(op, "set_disk_full", op.full)
            case F.CheckpointCorrupt():
                for name in self._nodes(op):
                    await asyncio.to_thread(
                        corrupt_newest_checkpoint, self.backend.spec.checkpoint_dir(name), op.mode
                    )
            case F.ClockSkew():
                command = SetClock(
                    command_id=f"clock_skew-{self.lamport}",
                    offset_s=op.offset_ms / 1000.0,
                    drift_ppm=op.drift_ppm,
                )
                await asyncio.gather(
                    *(self.backend.send_command(n, command) for n in self._nodes(op))
                )
            case F.Byzantine():
                await asyncio.gather(*(self._byzantine(n, op) for n in self._nodes(op)))
            case F.HoldBulk():
                peers = [] if op.release else self.cluster if F.ALL in op.to else list(op.to)
                unknown = sorted(set(peers) - set(self.cluster))
                if unknown:
                    raise BackendError(f"hold_bulk: unknown peer(s) {unknown} in to")
                await asyncio.gather(
                    *(
                        self.backend.send_command(
                            n, HoldBulk(command_id=f"hold_bulk-{self.lamport}", peers=peers)
                        )
                        for n in self._nodes(op)
                    )
                )
            case F.BrokerLoss():
                await (self.backend.broker.lose() if op.lost else self.backend.broker.restore())
            case F.Churn():
                await self._start_churn(op)
            case F.Netem():
                apply = getattr(self.backend, "apply_netem", None)
                if apply is None:
                    raise UnsupportedFault(
                        f"netem is unsupported on the {self.backend.name} backend"
                    )
                await apply(sorted(op.directed_links(self.cluster)), op)
            case F.LinkOp():
                toxic_type, attributes = _TOXICS[op.name]
                links = self._links(op.directed_links(self.cluster))
                await apply_concurrently(
                    links,
                    lambda link: link.add_toxic(op.name, attributes(op), toxic_type=toxic_type),
                )
            case _:
                raise UnsupportedFault(f"no real-backend interpreter for op {op.name!r}")

    async def _byzantine(self, node: str, op: F.Byzantine) -> None:
        since = self.backend.events.summaries[node].last_commit_step + 1
        behaviour = ByzantineBehaviour(
            mode=_BYZANTINE_MODES.get(op.mode, op.mode),  # type: ignore[arg-type]
            seed=self.rng.randrange(1 << 31),
            magnitude=op.scale if op.mode in ("sign_flip", "scaled") else 10.0,
            noise_std=op.scale if op.mode == "noise" else 1.0,
            since_step=max(since, 0),
        )
        command = SetByzantine(command_id=f"byzantine-{self.lamport}", behaviour=behaviour)
        await self.backend.send_command(node, command)

    def _links(self, pairs: set[tuple[str, str]]) -> list[Link]:
        return [self.backend.link(a, b) for a, b in sorted(pairs)]

    async def _cut(self, cuts: set[tuple[str, str]]) -> None:
        self.cut |= cuts
        # Bound per instance: a link is a Toxiproxy ``Link`` or a namespace's ``NetnsLink``.
        await apply_concurrently(self._links(cuts), lambda link: link.cut())

    async def _start_churn(self, op: F.Churn) -> None:
        if self.churn is not None:
            await self.churn.stop()

        async def depart(name: str, crash: bool) -> None:
            if crash:
                self._record("crash", "inject", [name], {"by": "churn"})
                await self.backend.node(name).crash()
            else:
                self._record("restart", "inject", [name], {"by": "churn", "leave": True})
                try:
                    await self.backend.send_command(name, Leave(reason="churn"))
                except BackendError:
                    # No broker: leave the hard way, and say so (the checkers take a
                    # logged leave for a process that runs on until its ``stop``).
                    self._record("crash", "inject", [name], {"by": "churn"})
                    await self.backend.node(name).crash()

        async def come_back(name: str) -> None:
            await self.backend.node(name).restart()
            self._record("crash", "heal", [name], {"by": "churn"})

        self.churn = Churn(
            nodes=self._nodes(op), cluster_size=len(self.cluster), events_per_min=op.events_per_min,
            min_alive=op.min_alive, down_s=op.down_s, crash_fraction=op.crash_fraction,
            rng=random.Random(self.rng.randrange(1 << 31)), depart=depart, come_back=come_back,
        )  # fmt: skip
        self.churn.start()

    async def _heal_scope(self, heal: F.Heal, *, recorded_as: str | None = None) -> None:
        scope = heal.scope
        if scope == "churn":
            if self.churn is None:
                return  # nothing churns: nothing to heal or record
            churn, self.churn = self.churn, None
            await churn.stop()
            self._record(recorded_as or "churn", "heal", [], {"departures": churn.departures})
            return
        if scope == "all":
            await self.backend.reset_links()
            revert = getattr(self.backend, "clear_netem", None)
            if revert is not None:
                await revert()
            self.cut.clear()
            self._record(recorded_as or "heal", "heal", self.cluster, {"scope": "all"})
            return
        if scope == "partition":
            cuts, self.cut = self.cut, set()
            await apply_concurrently(self._links(cuts), lambda link: link.restore())
            self._record(
                recorded_as or "partition", "heal", sorted({n for p in cuts for n in p}), {}
            )
            return
        pairs = F.LinkOp(src=heal.src, dst=heal.dst, direction=heal.direction).directed_links(
            self.cluster
        )
        if scope == "netem":
            revert = getattr(self.backend, "clear_netem", None)
            if revert is not None:
                await revert(sorted(pairs))
        else:
            await apply_concurrently(self._links(pairs), lambda link: link.remove_toxic(scope))
        self._record(recorded_as or scope, "heal", sorted({n for p in pairs for n in p}), {})


def corrupt_newest_checkpoint(folder: Path, mode: str) -> Path:
    """Damage the newest file under ``folder``; ``FaultNotApplicable`` when there is none."""
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]
    if not files:
        raise FaultNotApplicable(f"checkpoint_corrupt: no checkpoint in {folder} yet")
    newest = max(files, key=lambda p: p.stat().st_mtime_ns)
    if mode == "delete":
        newest.unlink()
    elif mode == "truncate":
        size = newest.stat().st_size
        with open(newest, "r+b") as handle:
            handle.truncate(size // 2)
    else:
        data = bytearray(newest.read_bytes())
        if not data:
            raise FaultNotApplicable(f"checkpoint_corrupt: {newest} is empty")
        rng = random.Random(len(data))
        for _ in range(max(1, len(data) // 1000)):
            index = rng.randrange(len(data))
            data[index] ^= 0xFF
        newest.write_bytes(bytes(data))
    return newest
