"""TorchElastic as a system under test: ``torchrun --max-restarts`` around plain DDP over gloo.

The baseline most users have today: every node is one ``torchrun`` agent with one
worker (``chaos/systems/torchelastic_worker.py``); the agents meet in a c10d
rendezvous whose store runs as a cluster service outside every node
(``chaos/systems/rendezvous_store.py``), so no node's crash takes the store down.
When a worker fails (a peer died inside an all-reduce, a collective timed out) its
agent restarts the whole worker group, which re-forms from the live agents and
resumes from the newest checkpoint any member holds.  A restarted node's agent joins
the running group at the next rendezvous round.

gloo dials the addresses it learns from the store at run time, so link faults reach
it in a network namespace per node (``link_faults = "netns"``, ``chaos/netns.py``).
Nothing to install: ``torchrun`` ships with torch.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from swarmshake.chaos.netns import NODE_IF
from swarmshake.chaos.systems.base import (
    Launch,
    NodeContext,
    ServiceSpec,
    System,
    SystemConfigError,
    which,
)

WORKER_MODULE = "swarmshake.chaos.systems.torchelastic_worker"
STORE_MODULE = "swarmshake.chaos.systems.rendezvous_store"
MAX_STEPS = 1_000_000


class TorchElasticSystem(System):
    name: ClassVar[str] = "torchelastic"
    description: ClassVar[str] = "torchrun --max-restarts, plain DDP over gloo, checkpoint restarts"
    link_faults = "netns"
    ports: ClassVar[tuple[str, ...]] = ()  # gloo and the agents pick their own ports
    produces: ClassVar[frozenset[str]] = frozenset(
        {"start", "stop", "step_committed", "membership", "rejoin_begin", "rejoin_done",
         "collective", "fault", "run_mark"}
    )  # fmt: skip
    # Every worker imports torch; the agents meet in a rendezvous before the first step.
    steady_timeout_s: ClassVar[float] = 120.0
    # Seen here: a group stalls for its 10 s gloo timeout, then restarts from a
    # checkpoint through a new rendezvous, and had committed nothing new 14 s after
    # the fault (the recovery bench's 8 s quiesce ended first).
    settle_s: ClassVar[float] = 25.0
    option_defaults: ClassVar[dict[str, Any]] = {
        "max_restarts": 100,  # worker-group restarts an agent allows before it gives up
        "min_nodes": 0,  # 0: one fewer than the cluster (the group goes on without one node)
        "collective_timeout_s": 10.0,  # gloo's timeout: how long a lost peer stalls a step
        "step_interval_s": 0.2,  # pause between steps: 2 cores are shared by every node
        "checkpoint_every": 5,
        "max_steps": 100_000,
        "lr": 0.05,
        "last_call_timeout_s": 1,  # rendezvous waits this long for late joiners (whole seconds)
        "monitor_interval_s": 0.5,  # how often an agent looks at its worker and waiters
        # torch's default: the workers' bootstrap store is shared with rank 0's agent.
        # Found here (torch 2.15): a node restarted into a running job then waits for
        # MASTER_ADDR of the new round, which rank 0 (holding its cached store info)
        # never writes; every agent dies after the 60 s store timeout.  False sets
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, which publishes it every round.
        "share_rendezvous_store": True,
    }

    def validate_options(self) -> None:
        o = self.options
        checks = {
            "max_restarts": 0 <= int(o["max_restarts"]) <= 10_000,
            "min_nodes": 0 <= int(o["min_nodes"]) <= 64,
            "collective_timeout_s": 1.0 <= float(o["collective_timeout_s"]) <= 3600.0,
            "step_interval_s": 0.0 <= float(o["step_interval_s"]) <= 60.0,
            "checkpoint_every": 1 <= int(o["checkpoint_every"]) <= MAX_STEPS,
            "max_steps": 1 <= int(o["max_steps"]) <= MAX_STEPS,
            "lr": 0.0 < float(o["lr"]) <= 10.0,
            "last_call_timeout_s": 1 <= int(o["last_call_timeout_s"]) <= 600,
            "monitor_interval_s": 0.05 <= float(o["monitor_interval_s"]) <= 60.0,
        }
        checks["share_rendezvous_store"] = isinstance(o["share_rendezvous_store"], bool)
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise SystemConfigError(
                f"system torchelastic: option {bad[0]} = {o[bad[0]]!r} is out of range"
            )

    def check(self) -> list[str]:
        problems = []
        if which("torchrun") is None:
            problems.append("torchrun not found: it ships with torch (pip install torch)")
        return problems

    def services(self, spec: Any) -> list[ServiceSpec]:
        def launch(host: str, port: int) -> Launch:
            return Launch(argv=(sys.executable, "-m", STORE_MODULE, host, str(port)))

        return [ServiceSpec(name="rendezvous", launch=launch)]

    def launch(self, ctx: NodeContext) -> Launch:
        o = self.options
        n = len(ctx.spec.nodes)
        low = int(o["min_nodes"]) or max(1, n - 1)
        store_host, store_port = ctx.services["rendezvous"]
        torchrun = which("torchrun") or "torchrun"
        training = dict(ctx.spec.node_config.get("training", {}))
        hidden = training.get("hidden", [64, 64])
        rdzv_conf = (
            f"is_host=false,last_call_timeout={int(o['last_call_timeout_s'])},join_timeout=120"
        )
        argv = (
            torchrun,
            f"--nnodes={min(low, n)}:{n}",
            "--nproc-per-node=1",
            f"--max-restarts={int(o['max_restarts'])}",
            f"--monitor-interval={o['monitor_interval_s']}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={store_host}:{store_port}",
            f"--rdzv-id={ctx.spec.run_id}",
            f"--rdzv-conf={rdzv_conf}",
            f"--local-addr={ctx.address}",
            "-m",
            WORKER_MODULE,
        )
        env = {
            "SWARMSHAKE_RUN_ID": ctx.spec.run_id,
            "SWARMSHAKE_NODE": ctx.name,
            "SWARMSHAKE_EVENTS": str(ctx.events_path),
            "SWARMSHAKE_CHECKPOINTS": str(ctx.checkpoint_dir),
            "SWARMSHAKE_SEED": str(ctx.spec.seed),
            "SWARMSHAKE_HIDDEN": ",".join(str(int(h)) for h in hidden),
            # The reference node's defaults (TrainingConfig): the same model on every system.
            "SWARMSHAKE_INPUT_DIM": str(int(training.get("input_dim", 32))),
            "SWARMSHAKE_OUTPUT_DIM": str(int(training.get("output_dim", 8))),
            "SWARMSHAKE_LR": str(float(o["lr"])),
            "SWARMSHAKE_STEP_INTERVAL_S": str(float(o["step_interval_s"])),
            "SWARMSHAKE_CHECKPOINT_EVERY": str(int(o["checkpoint_every"])),
            "SWARMSHAKE_MAX_STEPS": str(int(o["max_steps"])),
            "SWARMSHAKE_COLLECTIVE_TIMEOUT_S": str(float(o["collective_timeout_s"])),
            # gloo binds and dials on the namespace's own interface, not the host's name.
            "GLOO_SOCKET_IFNAME": NODE_IF if ctx.address != "127.0.0.1" else "lo",
            "OMP_NUM_THREADS": "1",
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0" if o["share_rendezvous_store"] else "1",
            "PYTHONUNBUFFERED": "1",
        }
        return Launch(argv=argv, env=env, cwd=ctx.run_dir)
