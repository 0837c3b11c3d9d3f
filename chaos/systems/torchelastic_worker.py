"""The TorchElastic workload: plain DDP over gloo, restarted from checkpoints by torchrun.

One worker per node (``torchrun --nproc-per-node=1``).  Every (re)start of the
worker group: join the process group, learn the members' names, agree on the newest
checkpoint any member holds and broadcast it from that member, then train.  The
history it records (``events/<node>.jsonl``, the neutral schema of
``verify/history.py``): ``start``; ``membership`` (the group, with a quorum id every
member computes alike); ``rejoin_begin``/``rejoin_done`` when state was restored;
``collective`` before each step's all-reduce (the trigger for "a kill inside an
all-reduce"); ``step_committed`` after each optimizer step, with the group as
participants and the parameters' fingerprint (``swarmshake.kernels``); ``stop`` on
SIGTERM.  Data and the initial model derive from (seed, step, rank), so the same
group trains the same values.

Configured by the environment the system sets (``SWARMSHAKE_*``, see
``chaos/systems/torchelastic.py``) and torchrun's (``RANK``, ``WORLD_SIZE``, …).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from swarmshake.kernels.fingerprint import fingerprint_tensors
from swarmshake.verify.history import (
    Collective,
    EventWriter,
    MembershipChange,
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
KEEP_CHECKPOINTS = 3  # older ones are deleted: the newest is what a restart loads


class Worker:
    def __init__(self) -> None:
        env = os.environ
        self.node = env["SWARMSHAKE_NODE"]
        self.rank = int(env["RANK"])
        self.world = int(env["WORLD_SIZE"])
        self.seed = int(env.get("SWARMSHAKE_SEED", "0"))
        self.hidden = [int(h) for h in env.get("SWARMSHAKE_HIDDEN", "64,64").split(",") if h]
        self.input_dim = int(env.get("SWARMSHAKE_INPUT_DIM", str(INPUT_DIM)))
        self.output_dim = int(env.get("SWARMSHAKE_OUTPUT_DIM", str(OUTPUT_DIM)))
        self.lr = float(env.get("SWARMSHAKE_LR", "0.05"))
        self.interval_s = float(env.get("SWARMSHAKE_STEP_INTERVAL_S", "0.2"))
        self.checkpoint_every = int(env.get("SWARMSHAKE_CHECKPOINT_EVERY", "5"))
        self.max_steps = int(env.get("SWARMSHAKE_MAX_STEPS", "100000"))
        self.timeout_s = float(env.get("SWARMSHAKE_COLLECTIVE_TIMEOUT_S", "10"))
        self.checkpoints = Path(env["SWARMSHAKE_CHECKPOINTS"])
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.writer = EventWriter(env["SWARMSHAKE_EVENTS"])
        self.incarnation = self._next_incarnation()
        self.lamport = 0
        self.step = -1
        self.members: list[str] = []
        self.quorum_id = ""
        self.stopping = False

    def _next_incarnation(self) -> int:
        """Counts this node's worker starts (a file: torchrun restarts lose memory)."""
        path = self.checkpoints / ".incarnation"
        try:
            value = int(path.read_text()) + 1
        except (OSError, ValueError):
            value = 1
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(value))
        os.replace(tmp, path)
        return value

    def emit(self, cls: type, **fields: object) -> None:
        self.lamport += 1
        fields.setdefault("step", self.step)
        self.writer.write(
            cls(t_wall=time.time(), t_mono=time.monotonic(), node=self.node,
                incarnation=self.incarnation, lamport=self.lamport, **fields)
        )  # fmt: skip

    # --- model and data ---------------------------------------------------------------

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.seed)  # every rank builds the same initial model
        layers: list[nn.Module] = []
        width = self.input_dim
        for hidden in self.hidden:
            layers += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        layers.append(nn.Linear(width, self.output_dim))
        return nn.Sequential(*layers)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step * 131 + self.rank)
        x = torch.randn(BATCH, self.input_dim, generator=generator)
        teacher = torch.Generator().manual_seed(self.seed + 7)
        w = torch.randn(self.input_dim, self.output_dim, generator=teacher)
        return x, torch.tanh(x @ w)

    # --- checkpoints ------------------------------------------------------------------

    def newest_checkpoint(self) -> tuple[int, Path | None]:
        found = sorted(self.checkpoints.glob("step-*.pt"))
        if not found:
            return -1, None
        newest = found[-1]
        return int(newest.stem.split("-")[1]), newest

    def save(self, model: nn.Module, step: int) -> None:
        path = self.checkpoints / f"step-{step:09d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save({"step": step, "model": model.state_dict()}, tmp)
        os.replace(tmp, path)  # a crash mid-write leaves the previous checkpoint whole
        for old in sorted(self.checkpoints.glob("step-*.pt"))[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)

    # --- the run ----------------------------------------------------------------------

    def run(self) -> int:
        torch.set_num_threads(1)
        self.emit(Start, seed=self.seed, torch_version=str(torch.__version__), threads=1)
        dist.init_process_group("gloo", timeout=timedelta(seconds=self.timeout_s))
        names: list[str | None] = [None] * self.world
        dist.all_gather_object(names, self.node)
        self.members = [str(n) for n in names]
        model = self.build_model()
        local_step, path = self.newest_checkpoint()
        steps = torch.tensor([local_step])
        gathered = [torch.zeros(1, dtype=torch.long) for _ in range(self.world)]
        dist.all_gather(gathered, steps)
        newest = max(int(t.item()) for t in gathered)
        source = min(r for r, t in enumerate(gathered) if int(t.item()) == newest)
        digest = hashlib.blake2s("+".join(self.members).encode(), digest_size=4).hexdigest()
        self.quorum_id = f"{newest + 1}-{digest}"  # the same on every member
        self.emit(MembershipChange, members=self.members, quorum_id=self.quorum_id,
                  reason="rendezvous")  # fmt: skip
        if newest >= 0:
            origin = "checkpoint" if source == self.rank else self.members[source]
            self.emit(RejoinBegin, source=origin, from_step=local_step)
            if self.rank == source and path is not None:
                model.load_state_dict(torch.load(path, weights_only=True)["model"])
            for tensor in model.state_dict().values():
                dist.broadcast(tensor, src=source)
            self.step = newest
            self.emit(RejoinDone, source=origin, param_fp=fingerprint_tensors(
                p.detach() for p in model.parameters()))  # fmt: skip
        ddp = nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=self.lr)
        step = newest + 1
        while step < self.max_steps and not self.stopping:
            x, y = self.batch(step)
            loss = nn.functional.mse_loss(ddp(x), y)
            optimizer.zero_grad()
            self.step = step
            self.emit(Collective, op="allreduce")  # logged before the all-reduce starts
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            self.emit(
                StepCommitted, participants=self.members, quorum_id=self.quorum_id,
                param_fp=fingerprint_tensors(p.detach() for p in model.parameters()),
                loss=float(loss.item()) if torch.isfinite(loss) else None,
            )  # fmt: skip
            if step % self.checkpoint_every == 0:
                self.save(model, step)
            step += 1
            if self.interval_s:
                time.sleep(self.interval_s)
        self.emit(Stop, reason="sigterm" if self.stopping else "max_steps")
        dist.destroy_process_group()
        return 0


def main() -> int:
    worker = Worker()

    def on_term(*_: object) -> None:
        worker.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
