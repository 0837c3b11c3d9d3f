"""The torchft workload: one replica group (one process, gloo, CPU) of a torchft job.

Every node is a replica group of world size 1 with its own TCPStore; the groups meet
through torchft's Lighthouse (a cluster service outside every node).  Each step runs
torchft's own loop: ``start_quorum`` (async: a restarted group heals from a live peer
over torchft's HTTP checkpoint transport), the gradient all-reduce over the quorum's
gloo group (``Manager.allreduce``, or torchft's DDP wrapper when ``SWARMSHAKE_TFT_DDP``
is 1), then ``should_commit`` and the optimizer step.

The history recorder (:class:`Recorder`) sits inside that loop and writes the neutral
schema of ``verify/history.py``: ``start``; ``membership`` when the quorum id changes
(members: the quorum's replica ids without torchft's per-start uuid); ``rejoin_begin``
/ ``rejoin_done`` when the group healed from a peer; ``collective`` just before the
all-reduce starts (the trigger point for a kill inside an all-reduce);
``step_committed`` after a committed step with the quorum's members as participants
and the parameters' fingerprint (``swarmshake.kernels``); ``stop`` on SIGTERM;
``node_error`` when the loop dies on an exception (torchft's DDP comm hook's
``assert fut._fut`` after a peer's kill, a gloo error the Manager let through),
before the process exits with status 1.
A step that ``should_commit`` refuses writes nothing: it was not applied.

Configured by the environment ``chaos/systems/torchft.py`` sets (``SWARMSHAKE_*``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from swarmshake.kernels.fingerprint import fingerprint_tensors
from swarmshake.verify.history import (
    Collective,
    EventWriter,
    MembershipChange,
    NodeError,
    RejoinBegin,
    RejoinDone,
    Start,
    StepCommitted,
    Stop,
)

# The reference node's defaults (reference_node/training/config.TrainingConfig), so a
# scenario's ``cluster.model`` names a model of the same parameter count on every system.
INPUT_DIM = 32
OUTPUT_DIM = 8
BATCH = 32
ERROR_TEXT_MAX = 500  # characters of an exception's message kept in a node_error event


class WorkerConfigError(ValueError):
    """A ``SWARMSHAKE_*`` setting is missing or out of range; the message names it."""


@dataclass(frozen=True)
class WorkerConfig:
    node: str
    address: str
    lighthouse: str  # http://host:port
    events: str
    seed: int
    hidden: tuple[int, ...]
    input_dim: int
    output_dim: int
    lr: float
    interval_s: float
    max_steps: int
    min_replicas: int
    timeout_s: float
    quorum_timeout_s: float
    ddp: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerConfig:
        def need(key: str) -> str:
            value = env.get(key, "")
            if not value:
                raise WorkerConfigError(f"{key} is not set")
            return value

        def number(key: str, default: str, cast: Callable[[str], Any], low: float, high: float):
            raw = env.get(key, default)
            try:
                value = cast(raw)
            except ValueError:
                raise WorkerConfigError(f"{key}={raw!r} is not a number") from None
            if not low <= value <= high:
                raise WorkerConfigError(f"{key}={raw!r} is out of range [{low}, {high}]")
            return value

        node = need("SWARMSHAKE_NODE")
        # torchft numbers replica groups by the trailing digits of their ids.
        if not node[-1:].isdigit():
            raise WorkerConfigError(f"SWARMSHAKE_NODE={node!r} must end in digits (torchft)")
        try:
            hidden = tuple(int(h) for h in env.get("SWARMSHAKE_HIDDEN", "64,64").split(",") if h)
        except ValueError:
            raise WorkerConfigError("SWARMSHAKE_HIDDEN must be integers, comma-separated") from None
        if not hidden or any(not 1 <= h <= 4096 for h in hidden):
            raise WorkerConfigError("SWARMSHAKE_HIDDEN: 1 to 4096 units a layer")
        lighthouse = need("SWARMSHAKE_LIGHTHOUSE")
        if not lighthouse.startswith("http://"):
            raise WorkerConfigError(f"SWARMSHAKE_LIGHTHOUSE={lighthouse!r}: http://host:port")
        ddp = env.get("SWARMSHAKE_TFT_DDP", "0")
        if ddp not in ("0", "1"):
            raise WorkerConfigError(f"SWARMSHAKE_TFT_DDP={ddp!r}: 0 or 1")
        return cls(
            node=node,
            address=need("SWARMSHAKE_ADDRESS"),
            lighthouse=lighthouse,
            events=need("SWARMSHAKE_EVENTS"),
            seed=number("SWARMSHAKE_SEED", "0", int, 0, 2**63 - 1),
            hidden=hidden,
            input_dim=number("SWARMSHAKE_INPUT_DIM", str(INPUT_DIM), int, 1, 4096),
            output_dim=number("SWARMSHAKE_OUTPUT_DIM", str(OUTPUT_DIM), int, 1, 4096),
            lr=number("SWARMSHAKE_LR", "0.05", float, 1e-9, 10.0),
            interval_s=number("SWARMSHAKE_STEP_INTERVAL_S", "0.2", float, 0.0, 60.0),
            max_steps=number("SWARMSHAKE_MAX_STEPS", "100000", int, 1, 1_000_000),
            min_replicas=number("SWARMSHAKE_MIN_REPLICAS", "1", int, 1, 64),
            timeout_s=number("SWARMSHAKE_TIMEOUT_S", "60", float, 0.1, 3600.0),
            quorum_timeout_s=number("SWARMSHAKE_QUORUM_TIMEOUT_S", "60", float, 0.1, 3600.0),
            ddp=ddp == "1",
        )


def replica_name(replica_id: str) -> str:
    """``n2:3f0c…`` -> ``n2``: torchft appends a uuid per start; the history names nodes."""
    return replica_id.split(":", 1)[0]


class Recorder:
    """Writes the neutral history from what the training loop sees (no torch needed)."""

    def __init__(self, writer: Any, node: str, incarnation: int = 1) -> None:
        self.writer = writer
        self.node = node
        self.incarnation = incarnation
        self.lamport = 0
        self.quorum_id = ""
        self.members: list[str] = []

    def emit(self, cls: type, step: int, **fields: object) -> None:
        self.lamport += 1
        self.writer.write(
            cls(t_wall=time.time(), t_mono=time.monotonic(), node=self.node,
                incarnation=self.incarnation, lamport=self.lamport, step=step, **fields)
        )  # fmt: skip

    def start(self, seed: int) -> None:
        self.emit(Start, -1, seed=seed, torch_version=str(torch.__version__), threads=1)

    def quorum(self, step: int, quorum_id: int, replica_ids: list[str]) -> None:
        """A quorum was formed; records ``membership`` only when its id changed."""
        qid = str(quorum_id)
        members = sorted(replica_name(r) for r in replica_ids)
        if qid == self.quorum_id and members == self.members:
            return
        self.quorum_id, self.members = qid, members
        self.emit(MembershipChange, step, members=members, quorum_id=qid, reason="quorum")

    def healed(self, step_before: int, step_after: int, source: str, param_fp: str) -> None:
        self.emit(RejoinBegin, step_before, source=source, from_step=step_before)
        self.emit(RejoinDone, step_after, source=source, param_fp=param_fp)

    def collective(self, step: int) -> None:
        self.emit(Collective, step, op="allreduce")

    def committed(self, step: int, param_fp: str, loss: float | None) -> None:
        if not self.members:
            raise RuntimeError("a step committed before any quorum was recorded")
        self.emit(StepCommitted, step, participants=list(self.members),
                  quorum_id=self.quorum_id, param_fp=param_fp, loss=loss)  # fmt: skip

    def stop(self, step: int, reason: str) -> None:
        self.emit(Stop, step, reason=reason)

    def error(self, step: int, error: BaseException) -> None:
        """The loop died on ``error``: one line naming it and its innermost frame."""
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        message = " ".join(str(error).split())  # torchft's bare asserts have none
        name = type(error).__name__
        text = (f"{name}: {message}" if message else name)[:ERROR_TEXT_MAX]
        self.emit(NodeError, step, error=text, where=where)


class _QuorumTap:
    """Stands between the Manager and its client to see each quorum's replica ids.

    torchft keeps ``QuorumResult.replica_ids`` to itself; this delegates every call
    and remembers the newest result (the quorum runs on torchft's own thread)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.last: Any = None

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        result = self._client._quorum(*args, **kwargs)
        with self._lock:
            self.last = result
        return result

    def newest(self) -> Any:
        with self._lock:
            return self.last

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def build_model(
    seed: int, hidden: tuple[int, ...], input_dim: int = INPUT_DIM, output_dim: int = OUTPUT_DIM
) -> nn.Module:
    torch.manual_seed(seed)  # every group builds the same initial model
    layers: list[nn.Module] = []
    width = input_dim
    for units in hidden:
        layers += [nn.Linear(width, units), nn.Tanh()]
        width = units
    layers.append(nn.Linear(width, output_dim))
    return nn.Sequential(*layers)


def batch(
    seed: int, step: int, replica: int, input_dim: int = INPUT_DIM, output_dim: int = OUTPUT_DIM
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step * 131 + replica)
    x = torch.randn(BATCH, input_dim, generator=generator)
    teacher = torch.Generator().manual_seed(seed + 7)
    w = torch.randn(input_dim, output_dim, generator=teacher)
    return x, torch.tanh(x @ w)


def run(cfg: WorkerConfig, stopping: threading.Event) -> int:
    import torch.distributed as dist
    from torchft import DistributedDataParallel, Manager, ProcessGroupGloo
    from torchft.checkpointing.http_transport import HTTPTransport

    class _Transport(HTTPTransport):
        """torchft advertises ``socket.gethostname()``, which a node's network
        namespace cannot reach; the node's own address can."""

        def address(self) -> str:
            port = self._server.socket.getsockname()[1]
            return f"http://{cfg.address}:{port}/checkpoint/"

    torch.set_num_threads(1)
    recorder = Recorder(EventWriter(cfg.events), cfg.node, incarnation=_incarnation(cfg))
    recorder.start(cfg.seed)
    replica = int("".join(c for c in cfg.node if c.isdigit()))
    model = build_model(cfg.seed, cfg.hidden, cfg.input_dim, cfg.output_dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": optimizer.state_dict()}

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])

    # The replica group's own store (world size 1): torchft's Manager dials it.
    store = dist.TCPStore(cfg.address, 0, is_master=True, wait_for_workers=False)
    timeout = timedelta(seconds=cfg.timeout_s)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=cfg.min_replicas,
        timeout=timeout,
        quorum_timeout=timedelta(seconds=cfg.quorum_timeout_s),
        rank=0,
        world_size=1,
        store_addr=cfg.address,
        store_port=store.port,
        lighthouse_addr=cfg.lighthouse,
        replica_id=cfg.node,
        hostname=cfg.address,
        checkpoint_transport=_Transport(timeout=timeout, num_chunks=0),
    )
    tap = _QuorumTap(manager._client)
    manager._client = tap
    net: nn.Module = DistributedDataParallel(manager, model) if cfg.ddp else model
    seen_quorum = None
    try:
        while not stopping.is_set():
            step_before = manager.current_step()
            if step_before >= cfg.max_steps:
                break
            optimizer.zero_grad()
            manager.start_quorum()
            x, y = batch(cfg.seed, step_before, replica, cfg.input_dim, cfg.output_dim)
            loss = nn.functional.mse_loss(net(x), y)
            recorder.collective(step_before)  # before the all-reduce starts
            loss.backward()  # the DDP wrapper all-reduces here through its comm hook
            if not cfg.ddp:
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                for work in [manager.allreduce(g) for g in grads]:
                    work.wait()
            quorum = tap.newest()
            if quorum is not None and quorum is not seen_quorum:
                seen_quorum = quorum
                recorder.quorum(step_before, quorum.quorum_id, list(quorum.replica_ids))
                if quorum.heal and quorum.recover_src_replica_rank is not None:
                    recorder.healed(step_before, manager.current_step(), "peer", _fp(model))
            step = manager.current_step()
            if manager.should_commit():
                optimizer.step()
                value = float(loss.item())
                recorder.committed(step, _fp(model), value if value == value else None)
            if cfg.interval_s:
                time.sleep(cfg.interval_s)
    except Exception as error:
        # Recorded, then raised on: the process exits with the error as it would
        # without the harness (the traceback goes to the node's log).
        recorder.error(manager.current_step(), error)
        raise
    recorder.stop(manager.current_step(), "sigterm" if stopping.is_set() else "max_steps")
    manager.shutdown(wait=False)
    return 0


def _fp(model: nn.Module) -> str:
    return fingerprint_tensors(p.detach() for p in model.parameters())


def _incarnation(cfg: WorkerConfig) -> int:
    """Counts this node's starts from its own history (a restart loses memory)."""
    try:
        with open(cfg.events, "rb") as f:
            return 1 + sum(1 for line in f if b'"kind":"start"' in line.replace(b" ", b""))
    except OSError:
        return 1


def main() -> int:
    try:
        cfg = WorkerConfig.from_env(os.environ)
    except WorkerConfigError as e:
        print(f"torchft worker: {e}", file=sys.stderr)
        return 64
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    return run(cfg, stopping)


if __name__ == "__main__":
    sys.exit(main())
