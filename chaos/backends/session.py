"""A running cluster driven from synchronous code: the pytest fixtures and ``swarmshake up``.

The backend and the nemesis are asyncio objects; a test written as a plain function
should not need an event loop of its own.  ``ClusterSession`` runs one loop in a
background thread, starts the cluster there and offers blocking methods, each
with a deadline, that run a coroutine on that loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from swarmshake.chaos import cleanup
from swarmshake.chaos import faults as F
from swarmshake.chaos.backends import make_backend
from swarmshake.chaos.backends.base import Backend, BackendError, ClusterSpec
from swarmshake.chaos.nemesis import Nemesis
from swarmshake.reference_node.protocol.history import HARNESS, EventWriter, RunMark

T = TypeVar("T")
CALL_TIMEOUT_S = 120.0  # up() on a cold machine (torch import in the zygote) is the slowest call
LOOP_START_TIMEOUT_S = 10.0


class ClusterSession:
    def __init__(self, backend_name: str, spec: ClusterSpec):
        self.spec = spec
        self.registry = cleanup.Registry.create(spec.run_id, spec.run_dir)
        self.backend: Backend = make_backend(backend_name, spec, self.registry)
        spec.events_dir().mkdir(parents=True, exist_ok=True)
        self.writer = EventWriter(spec.events_dir() / "harness.jsonl")
        self.nemesis = Nemesis(self.backend, self.writer, seed=spec.seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="swarmshake-cluster", daemon=True
        )
        self._up = False

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = CALL_TIMEOUT_S) -> T:
        """Run ``coroutine`` on the cluster's loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise BackendError(f"cluster call did not finish within {timeout_s}s") from None

    def up(self) -> ClusterSession:
        self._thread.start()
        self.call(self.backend.up())
        self._up = True
        self.mark("cluster_up")
        return self

    def mark(self, mark: str, **data: Any) -> None:
        self.writer.write(
            RunMark(t_wall=time.time(), t_mono=time.monotonic(), node=HARNESS, mark=mark, data=data)
        )

    def poll(self) -> None:
        self.call(_poll(self.backend), 10.0)

    def wait_until_steady(self, min_commit_step: int = 2, timeout_s: float = 60.0) -> float:
        """Block until every node committed ``min_commit_step`` (-1: is ready); seconds taken."""
        started = time.monotonic()
        last_alive_check = started
        while not self.backend.events.steady(min_commit_step):
            if time.monotonic() - started > timeout_s:
                steps = {n: s.last_commit_step for n, s in self.backend.events.summaries.items()}
                raise BackendError(
                    f"not steady within {timeout_s}s (min step {min_commit_step}): {steps}"
                )
            # Once a second: on Docker each check is an API call per node.
            if time.monotonic() - last_alive_check >= 1.0:
                last_alive_check = time.monotonic()
                all_exited = not self.call(_any_running(self.backend), 10.0)
            else:
                all_exited = False
            if all_exited:
                log = self.run_dir / "logs" / f"{self.spec.nodes[0]}.log"
                tail = log.read_text(errors="replace")[-600:].strip() if log.exists() else ""
                raise BackendError(
                    f"every node exited before steady state; {log} ends with:\n{tail}"
                )
            time.sleep(0.02)
            self.poll()
        return time.monotonic() - started

    def inject(self, op: F.FaultOp) -> None:
        self.call(self.nemesis.inject(op), 60.0)

    def heal(self, op: F.FaultOp) -> None:
        self.call(self.nemesis.heal(op), 60.0)

    def heal_all(self) -> None:
        self.call(self.nemesis.heal_all(), 60.0)

    @property
    def run_dir(self) -> Path:
        return self.spec.run_dir

    def down(self) -> None:
        try:
            if self._thread.is_alive():
                self.call(self.backend.down(), 60.0)
        finally:
            self.writer.close()
            if self._thread.is_alive():
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(LOOP_START_TIMEOUT_S)
            if not self._loop.is_running():
                self._loop.close()
            self.registry.close()

    def __enter__(self) -> ClusterSession:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc: object) -> None:
        self.down()


async def _any_running(backend: Backend) -> bool:
    return any(backend.node(name).is_running() for name in backend.spec.nodes)


async def _poll(backend: Backend) -> None:
    backend.events.poll()
