"""torchft as a system under test: N replica groups and a Lighthouse (PyPI ``torchft``).

Every node is one replica group (one process, gloo, CPU; ``chaos/systems/
torchft_worker.py``).  The groups find each other through torchft's Lighthouse
(``torchft_lighthouse``), which runs as a cluster service outside every node like
TorchElastic's rendezvous store, so no node fault takes it down.  A crashed group
drops out of the next quorum (after the Lighthouse's heartbeat timeout); a restarted
one joins a later quorum and heals its parameters from a live peer over torchft's
HTTP checkpoint transport, without a restart of the others.

gloo and torchft's managers dial addresses learnt at run time (from the Lighthouse
and the quorum's store), so link faults reach them in a network namespace per node
(``link_faults = "netns"``, ``chaos/netns.py``).  Install: the ``torchft`` extra
(``pip install 'swarmshake[torchft]'``; ``make setup`` does it).
"""

from __future__ import annotations

import importlib.util
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

WORKER_MODULE = "swarmshake.chaos.systems.torchft_worker"
MAX_STEPS = 1_000_000


class TorchFTSystem(System):
    name: ClassVar[str] = "torchft"
    description: ClassVar[str] = "torchft replica groups (gloo, CPU) and a Lighthouse"
    link_faults = "netns"
    ports: ClassVar[tuple[str, ...]] = ()  # the manager, store and gloo pick their own ports
    produces: ClassVar[frozenset[str]] = frozenset(
        {"start", "stop", "step_committed", "membership", "rejoin_begin", "rejoin_done",
         "collective", "node_error", "fault", "run_mark"}
    )  # fmt: skip
    # Every worker imports torch and waits for a Lighthouse quorum before its first step.
    steady_timeout_s: ClassVar[float] = 120.0
    # A group back from a crash waits for the next quorum and heals from a peer (~5 s
    # here); the recovery bench gives it as long as TorchElastic (below) to compare.
    settle_s: ClassVar[float] = 25.0
    bounds: ClassVar[dict[str, float]] = {
        # D: the Lighthouse drops a silent group after heartbeat_timeout_ms (5 s) and
        # the next quorum round forms without it; 20 s leaves room on a loaded machine.
        "detection_s": 20.0,
        # R: half of torchft's 60 s collective and quorum timeouts, so a stall of one
        # timeout is caught while a normal reconfiguration (about 5 s here) is not.
        "recovery_s": 30.0,
        # J: a restarted group waits for the next quorum, then heals from a peer.
        "rejoin_s": 60.0,
    }
    option_defaults: ClassVar[dict[str, Any]] = {
        "min_replicas": 0,  # 0: one fewer than the cluster (a quorum goes on without one)
        # torchft's defaults (60 s): how long a lost peer can stall a collective, a quorum.
        "timeout_s": 60.0,
        "quorum_timeout_s": 60.0,
        "heartbeat_timeout_ms": 5000,  # Lighthouse: a silent group is dead after this
        "join_timeout_ms": 60000,  # Lighthouse: waits this long for stragglers to join
        "ddp": False,  # torchft's DistributedDataParallel wrapper instead of Manager.allreduce
        "step_interval_s": 0.2,  # pause between steps: 2 cores are shared by every node
        "max_steps": 100_000,
        "lr": 0.05,
    }

    def validate_options(self) -> None:
        o = self.options
        try:
            checks = {
                "min_replicas": 0 <= int(o["min_replicas"]) <= 64,
                "timeout_s": 0.1 <= float(o["timeout_s"]) <= 3600.0,
                "quorum_timeout_s": 0.1 <= float(o["quorum_timeout_s"]) <= 3600.0,
                "heartbeat_timeout_ms": 50 <= int(o["heartbeat_timeout_ms"]) <= 3_600_000,
                "join_timeout_ms": 0 <= int(o["join_timeout_ms"]) <= 3_600_000,
                "ddp": isinstance(o["ddp"], bool),
                "step_interval_s": 0.0 <= float(o["step_interval_s"]) <= 60.0,
                "max_steps": 1 <= int(o["max_steps"]) <= MAX_STEPS,
                "lr": 0.0 < float(o["lr"]) <= 10.0,
            }
        except (TypeError, ValueError) as e:
            raise SystemConfigError(f"system torchft: an option is not a number: {e}") from None
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise SystemConfigError(
                f"system torchft: option {bad[0]} = {o[bad[0]]!r} is out of range"
            )

    def check(self) -> list[str]:
        problems = []
        if importlib.util.find_spec("torchft") is None:
            problems.append("torchft is not installed: pip install 'swarmshake[torchft]'")
        if which("torchft_lighthouse") is None:
            problems.append("torchft_lighthouse not found: it ships with torchft")
        return problems

    def min_replicas(self, nodes: int) -> int:
        return int(self.options["min_replicas"]) or max(1, nodes - 1)

    def services(self, spec: Any) -> list[ServiceSpec]:
        o = self.options
        low = self.min_replicas(len(spec.nodes))

        def launch(host: str, port: int) -> Launch:
            return Launch(
                argv=(
                    which("torchft_lighthouse") or "torchft_lighthouse",
                    f"--bind={host}:{port}",
                    f"--min_replicas={low}",
                    f"--join_timeout_ms={int(o['join_timeout_ms'])}",
                    f"--heartbeat_timeout_ms={int(o['heartbeat_timeout_ms'])}",
                ),
                env={"RUST_LOG": "info"},
            )

        return [ServiceSpec(name="lighthouse", launch=launch)]

    def launch(self, ctx: NodeContext) -> Launch:
        o = self.options
        if not ctx.name[-1:].isdigit():
            raise SystemConfigError(
                f"torchft numbers replica groups by trailing digits: {ctx.name!r}"
            )
        host, port = ctx.services["lighthouse"]
        training = dict(ctx.spec.node_config.get("training", {}))
        hidden = training.get("hidden", [64, 64])
        env = {
            "SWARMSHAKE_RUN_ID": ctx.spec.run_id,
            "SWARMSHAKE_NODE": ctx.name,
            "SWARMSHAKE_ADDRESS": ctx.address,
            "SWARMSHAKE_LIGHTHOUSE": f"http://{host}:{port}",
            "SWARMSHAKE_EVENTS": str(ctx.events_path),
            "SWARMSHAKE_SEED": str(ctx.spec.seed),
            "SWARMSHAKE_HIDDEN": ",".join(str(int(h)) for h in hidden),
            # The reference node's defaults (TrainingConfig): the same model on every system.
            "SWARMSHAKE_INPUT_DIM": str(int(training.get("input_dim", 32))),
            "SWARMSHAKE_OUTPUT_DIM": str(int(training.get("output_dim", 8))),
            "SWARMSHAKE_LR": str(float(o["lr"])),
            "SWARMSHAKE_STEP_INTERVAL_S": str(float(o["step_interval_s"])),
            "SWARMSHAKE_MAX_STEPS": str(int(o["max_steps"])),
            "SWARMSHAKE_MIN_REPLICAS": str(self.min_replicas(len(ctx.spec.nodes))),
            "SWARMSHAKE_TIMEOUT_S": str(float(o["timeout_s"])),
            "SWARMSHAKE_QUORUM_TIMEOUT_S": str(float(o["quorum_timeout_s"])),
            "SWARMSHAKE_TFT_DDP": "1" if o["ddp"] else "0",
            # gloo binds and dials on the namespace's own interface, not the host's name.
            "GLOO_SOCKET_IFNAME": NODE_IF if ctx.address != "127.0.0.1" else "lo",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        return Launch(argv=(ctx.python, "-m", WORKER_MODULE), env=env, cwd=ctx.run_dir)
