"""The reference node as a system under test: one system among the others.

A node is ``python -m swarmshake.reference_node --config node.toml``; its config
(``chaos/backends/node_config.py``) carries the harness's address book, so every
link it dials goes through the link's Toxiproxy proxies (``link_faults = "proxy"``,
its control and bulk ports on those channels).  It talks to the harness's broker
(``needs_broker``: clock skew, Byzantine switches, leave, its ``extra_ops``), writes
the full reference vocabulary of ``reference_node/protocol/history.py`` (which
``verify/history.py`` maps onto the neutral history), and is the one system whose
launch the local backend may fork from its torch-preloaded zygote.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import msgspec

from swarmshake.chaos.backends import node_config
from swarmshake.chaos.systems.base import Launch, NodeContext, System
from swarmshake.reference_node.config import StepSection
from swarmshake.reference_node.protocol import node_core
from swarmshake.reference_node.protocol.bugs import BUGS
from swarmshake.reference_node.protocol.detector import DetectorConfig
from swarmshake.reference_node.protocol.errors import ProtocolError
from swarmshake.reference_node.protocol.history import EVENT_KINDS
from swarmshake.reference_node.training.config import TrainingConfig

NODE_MODULE = "swarmshake.reference_node"
# "0,1,2,3": node i sees only GPU gpus[i % len] (CUDA_VISIBLE_DEVICES), so nodes with
# ``device = "cuda"`` each train on a GPU of their own; unset, every node sees all.
NODE_GPUS_ENV = "SWARMSHAKE_NODE_GPUS"
MAX_GPUS = 64  # more GPU indices than one host has is a typo


def node_gpus(value: str) -> list[str]:
    """The GPU indices of ``SWARMSHAKE_NODE_GPUS``, validated (harness-side input)."""
    gpus = [part.strip() for part in value.split(",")]
    if not 1 <= len(gpus) <= MAX_GPUS or not all(g.isdigit() and len(g) <= 3 for g in gpus):
        raise ValueError(
            f"{NODE_GPUS_ENV}={value!r}: expected GPU indices such as 0,1,2,3 (at most {MAX_GPUS})"
        )
    return gpus


class NodeSettings(NamedTuple):
    """The node core's settings a scenario's ``cluster.step`` and ``cluster.detector`` name."""

    node: node_core.NodeConfig
    checkpoint: node_core.CheckpointConfig
    detector: DetectorConfig


def node_settings(
    step: Mapping[str, Any], detector: Mapping[str, Any], training: Mapping[str, Any]
) -> NodeSettings:
    """``cluster.step``, ``cluster.detector`` and the training section read as the node
    reads its node.toml's ``[step]``, ``[detector]`` and ``[training]`` (nested tables
    become structs, unknown keys are refused), so the simulator runs the settings a
    real node would (the aggregation rule's fewest contributors among them);
    ``ValueError`` names the section and the field."""
    try:
        section = msgspec.convert(dict(step), StepSection)
    except (msgspec.ValidationError, ProtocolError, TypeError, ValueError) as error:
        raise ValueError(f"cluster.step: {error}") from None
    try:
        # The rule's fewest contributors raise the node core's minimum (and a rule that
        # admits no count of them is refused here).
        decisions = section.decisions(TrainingConfig.from_dict(dict(training)))
    except ValueError as error:
        raise ValueError(f"cluster.training: {error}") from None
    try:
        detector_config = msgspec.convert(dict(detector), DetectorConfig)
    except (msgspec.ValidationError, ProtocolError, TypeError, ValueError) as error:
        raise ValueError(f"cluster.detector: {error}") from None
    return NodeSettings(decisions, section.checkpointing(), detector_config)


class ReferenceSystem(System):
    name: ClassVar[str] = "reference"
    description: ClassVar[str] = "swarmshake's reference P2P training node (Paxos step commit)"
    link_faults = "proxy"
    ports: ClassVar[tuple[str, ...]] = ("control", "bulk", "http")
    proxied_ports: ClassVar[Mapping[str, str]] = {"control": "control", "bulk": "bulk"}
    needs_broker: ClassVar[bool] = True
    uses_zygote: ClassVar[bool] = True
    extra_ops: ClassVar[frozenset[str]] = frozenset(
        {"clock_skew", "byzantine", "broker_loss", "disk_full", "checkpoint_corrupt", "hold_bulk"}
    )
    produces: ClassVar[frozenset[str]] = frozenset(EVENT_KINDS)
    simulated: ClassVar[bool] = True
    planted_bugs: ClassVar[frozenset[str]] = frozenset(BUGS)
    serves_load: ClassVar[bool] = True
    replays_training: ClassVar[bool] = True
    # A step takes ~0.1 s: explore's timed draws already land inside every phase of
    # one, so no history kind fires them (a trigger would add a ~10 ms delay, no reach).
    fault_triggers: ClassVar[frozenset[str] | None] = frozenset()
    status_endpoint: ClassVar[tuple[str, str] | None] = ("http", "/status")

    def config_path(self, ctx: NodeContext) -> Path:
        return ctx.node_dir / "node.toml"

    def configure(self, ctx: NodeContext) -> None:
        peers = {
            peer: node_config.Endpoint(ports["control"][0], ports["control"][1], ports["bulk"][1])
            for peer, ports in ctx.peers.items()
        }
        assert ctx.broker is not None, "the reference node needs the broker"
        raw = node_config.build(
            ctx.spec, ctx.name, listen_host=ctx.address, control_port=ctx.ports["control"],
            bulk_port=ctx.ports["bulk"], http_port=ctx.ports["http"], peers=peers,
            broker_host=ctx.broker[0], broker_port=ctx.broker[1], run_dir=str(ctx.run_dir),
        )  # fmt: skip
        node_config.write(raw, self.config_path(ctx))

    def launch(self, ctx: NodeContext) -> Launch:
        spec = ctx.spec
        args = ["--config", str(self.config_path(ctx))]
        for bug in spec.bugs:
            args += ["--bug", bug]
        env = {"SWARMSHAKE_RUN_ID": spec.run_id, "SWARMSHAKE_NODE": ctx.name}
        gpus = os.environ.get(NODE_GPUS_ENV, "")
        if gpus:
            # Read by CUDA at the node's first CUDA call, after the zygote's fork.
            listed = node_gpus(gpus)
            env["CUDA_VISIBLE_DEVICES"] = listed[ctx.index % len(listed)]
        program = spec.node_program
        mounts: tuple[Path, ...] = ()
        if program.endswith(".py"):  # a test's stand-in program speaking the same config
            script = Path(program).resolve()
            argv: tuple[str, ...] = (ctx.python, str(script), *args)
            mounts = (script,)  # not in the node image: a container mounts it
        else:
            argv = (ctx.python, "-m", program, *args)
        return Launch(
            argv=argv, env=env, python_module=program, module_argv=tuple(args), mounts=mounts
        )
