"""Churn: nodes leave (crash or clean leave) and come back at a seeded random rate.

Departures are a Poisson process of ``events_per_min``; a departed node returns
after ``down_s``.  Churn never takes the live count below ``min_alive`` (a fraction
of the cluster when < 1, else a count), so it cannot remove a majority unless the
scenario asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Awaitable, Callable

MAX_CONCURRENT_RETURNS = 64  # pending comebacks; one per node at most in practice


class Churn:
    def __init__(
        self,
        *,
        nodes: list[str],
        cluster_size: int,
        events_per_min: float,
        min_alive: float,
        down_s: float,
        crash_fraction: float,
        rng: random.Random,
        depart: Callable[[str, bool], Awaitable[None]],
        come_back: Callable[[str], Awaitable[None]],
    ):
        self.nodes = nodes
        self.min_alive = math.ceil(min_alive * cluster_size) if min_alive < 1 else int(min_alive)
        self.cluster_size = cluster_size
        self.events_per_min = events_per_min
        self.down_s = down_s
        self.crash_fraction = crash_fraction
        self.rng = rng
        self.depart = depart
        self.come_back = come_back
        self.down: set[str] = set()
        self.departures = 0
        self._task: asyncio.Task[None] | None = None
        self._returns: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        if self.events_per_min <= 0:
            return
        while True:
            await asyncio.sleep(self.rng.expovariate(self.events_per_min / 60.0))
            alive = [n for n in self.nodes if n not in self.down]
            if self.cluster_size - len(self.down) - 1 < self.min_alive or not alive:
                continue
            if len(self._returns) >= MAX_CONCURRENT_RETURNS:
                continue
            victim = self.rng.choice(sorted(alive))
            crash = self.rng.random() < self.crash_fraction
            self.down.add(victim)
            self.departures += 1
            await self.depart(victim, crash)
            task = asyncio.create_task(self._return_later(victim))
            self._returns.add(task)
            task.add_done_callback(self._returns.discard)

    async def _return_later(self, node: str) -> None:
        await asyncio.sleep(self.down_s)
        await self.come_back(node)
        self.down.discard(node)

    async def stop(self) -> None:
        """Stop churning and bring every departed node back now."""
        tasks = [t for t in (self._task, *self._returns) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for node in sorted(self.down):
            await self.come_back(node)
        self.down.clear()
