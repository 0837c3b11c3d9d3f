"""The local channel between a node's control process and its worker process.

A Unix socketpair carries length-prefixed msgpack messages (one tagged union per
direction).  Only small messages travel here (commands, fingerprints, contributor
lists, inference batches); tensors stay in the worker, which owns the bulk links.
Either side treats EOF as the death of the other and exits: the node dies as a
whole (DESIGN.md, the control/worker split).
"""

from __future__ import annotations

import asyncio
import struct

import msgspec

from swarmshake.reference_node.training.behaviour import ByzantineBehaviour

# Inference batches (256 x 1024 floats) are the largest legitimate message.
MAX_IPC_BYTES = 8 * 1024 * 1024
_LENGTH = struct.Struct("!I")
# The worker reports at least this often; silence for WORKER_SILENCE_S means it hung.
WORKER_REPORT_S = 0.5
WORKER_SILENCE_S = 30.0

NodeList = list[str]


class _Msg(msgspec.Struct, kw_only=True, frozen=True, tag_field="op"):
    pass


# --- control -> worker ---------------------------------------------------------------------


class WorkerInit(_Msg, tag="init"):
    config_toml_path: str
    overrides_json: str
    incarnation: int
    bulk_port: int
    # Where this node's worker dials each peer's worker (bulk channel).
    peers: dict[str, tuple[str, int]]
    resume_from_checkpoint: bool = True


class UpdatePeers(_Msg, tag="update_peers"):
    peers: dict[str, tuple[str, int]]


class Contribute(_Msg, tag="contribute"):
    """Compute this node's contribution for ``step`` and send it to ``to`` (bulk)."""

    step: int
    to: NodeList


class ShardPlan(_Msg, tag="shard_plan"):
    """Sharded aggregation (protocol.sharding): ``step``'s shard owners (its sorted
    members) and who aggregates each shard now in this node's view (``plan[i]``).
    Sent before ``Contribute`` and again whenever a view change moves a shard."""

    step: int
    owners: NodeList
    plan: NodeList


class BuildAggregate(_Msg, tag="build_aggregate"):
    """Aggregate the held contributions of ``contributors`` for ``step``."""

    step: int
    contributors: NodeList


class FetchAggregate(_Msg, tag="fetch_aggregate"):
    """Ask ``source`` (its worker) for the aggregate ``agg_fp`` of ``step``."""

    step: int
    agg_fp: str
    source: str


class ApplyCommitted(_Msg, tag="apply"):
    step: int
    agg_fp: str
    # Which stored aggregates stay (node_core.aggregates_to_keep): every one of
    # ``keep_from_step`` and later, and the ``pinned`` (step, fingerprint) values this
    # node's kept acceptor records accepted; the worker drops the rest.
    keep_from_step: int = 0
    pinned: list[tuple[int, str]] = []


class ExpectState(_Msg, tag="expect_state"):
    """Rejoin: accept a state stream from ``source`` (bulk), verify it, stage it."""

    source: str


class ServeState(_Msg, tag="serve_state"):
    """A peer asked for our state: snapshot it, report the offer, stream it."""

    requester: str


class LoadCheckpointFile(_Msg, tag="load_checkpoint"):
    """Rejoin fallback: read and verify a local checkpoint, stage it."""

    path: str


class InstallStaged(_Msg, tag="install_staged"):
    """The rejoin core accepted the staged state: make it the replica's state.

    ``source = "local"`` exists only under the ``stale-rejoin`` bug: keep the local
    (stale) parameters and jump to ``next_step``, with no transfer and no check."""

    source: str
    next_step: int = -1
    # As in ApplyCommitted: the stored aggregates that stay.
    keep_from_step: int = 0
    pinned: list[tuple[int, str]] = []


class WriteCheckpoint(_Msg, tag="write_checkpoint"):
    replicate_to: NodeList = []


class HoldBulk(_Msg, tag="hold_bulk"):
    """Send no bulk frame to ``peers`` (empty: release); the harness's ``hold_bulk``."""

    peers: NodeList = []


class SetBehaviour(_Msg, tag="set_behaviour"):
    behaviour: ByzantineBehaviour


class Infer(_Msg, tag="infer"):
    request_id: int
    inputs: list[list[float]]


class Shutdown(_Msg, tag="shutdown"):
    pass


class Ping(_Msg, tag="ping"):
    """Keeps the worker's silence deadline from firing while the control is idle."""


class SetClock(_Msg, tag="set_clock"):
    """A clock-skew fault reached the node (``mqtt_messages.SetClock``, validated
    there): the worker's timers (shard gathers, replica restores) run on a clock skewed
    as the control process's is (DESIGN: skew acts on the node's injected clock)."""

    offset_s: float
    drift_ppm: float


class SetIncarnation(_Msg, tag="set_incarnation"):
    """The node refuted a suspicion with a higher incarnation: stamp events with it."""

    incarnation: int


ToWorker = (
    WorkerInit
    | UpdatePeers
    | Contribute
    | ShardPlan
    | BuildAggregate
    | FetchAggregate
    | ApplyCommitted
    | ExpectState
    | ServeState
    | LoadCheckpointFile
    | InstallStaged
    | WriteCheckpoint
    | HoldBulk
    | SetBehaviour
    | Infer
    | Shutdown
    | Ping
    | SetClock
    | SetIncarnation
)


# --- worker -> control ---------------------------------------------------------------------


class WorkerReady(_Msg, tag="ready"):
    step: int
    param_fp: str
    bulk_port: int
    worker_pid: int
    source: str  # "initial" | "checkpoint"
    torch_version: str
    threads: int
    cpu_flags: str
    checkpoint_path: str = ""  # the checkpoint loaded at start (the rejoin fallback)
    # The fingerprint of the initial parameters (derived from the seed, the same on
    # every node): the rejoin core's genesis state.
    initial_param_fp: str = ""
    # (step, fingerprint) of the aggregates reloaded from the worker's aggregate store
    # (aggregate_store.py): an accept persisted before the restart may claim them, so
    # the commit core must learn it holds them (HoldsAggregate) and peers may fetch them.
    stored_aggregates: list[tuple[int, str]] = []


class Contributed(_Msg, tag="contributed"):
    step: int
    loss: float
    samples: int


class ContributionArrived(_Msg, tag="contribution_arrived"):
    step: int
    sender: str


class AggregateHeld(_Msg, tag="aggregate_held"):
    """The worker holds the aggregate ``agg_fp`` of ``step`` over ``contributors``, and
    its bytes are durable (aggregate_store.py: an accept may claim them from now on)."""

    step: int
    agg_fp: str
    contributors: NodeList


class AggregateStoreFailed(_Msg, tag="aggregate_store_failed"):
    """The aggregate could not be made durable (aggregate_store.py): this node must not
    vote for it, and a disk that fails writes cannot keep an acceptor's promises."""

    step: int
    agg_fp: str
    reason: str


class AggregateMissing(_Msg, tag="aggregate_missing"):
    step: int
    missing: NodeList
    agg_fp: str = ""
    reason: str = ""
    # A BuildAggregate that could not run: the contributors it was asked for (a build
    # the leader replaced meanwhile fails too, and is not the current one's failure).
    contributors: NodeList = []
    # A FetchAggregate's: the peer that refused the bytes, or sent wrong ones.
    source: str = ""
    # An ApplyCommitted's refused because the worker's parameters are at another step
    # (that step; -1: not this reason): pulling the bytes again cannot help.
    state_step: int = -1


class Applied(_Msg, tag="applied"):
    step: int  # the step whose aggregate was applied; the state is now at step + 1
    agg_fp: str
    param_fp: str


class StateServing(_Msg, tag="state_serving"):
    """We are streaming our state to ``requester``: what the ``StateOffer`` says."""

    requester: str
    step: int  # the last committed step the state holds
    param_fp: str
    nbytes: int


class StateStaged(_Msg, tag="state_staged"):
    """A received state (or a local checkpoint) verified by its hashes, not yet installed."""

    source: str  # a peer, or "checkpoint"
    step: int  # the last committed step it holds
    computed_fp: str
    nbytes: int


class StateInstalled(_Msg, tag="state_installed"):
    next_step: int  # the step this node runs next
    param_fp: str
    source: str


class StateFailed(_Msg, tag="state_failed"):
    source: str
    reason: str


class CheckpointDone(_Msg, tag="checkpoint_done"):
    step: int  # the state's step (the next step to run)
    path: str
    param_fp: str = ""


class CheckpointFailed(_Msg, tag="checkpoint_failed"):
    """A checkpoint write the worker could not finish (a full or failing disk): the
    node trains on, and the next write the policy asks for tries again."""

    step: int  # the state's step, as in CheckpointDone
    reason: str
    errno: int = 0


class InferResult(_Msg, tag="infer_result"):
    request_id: int
    outputs: list[list[float]] = []
    error: str = ""


class WorkerReport(_Msg, tag="report"):
    """Periodic liveness and counters of the worker (bulk links, drops)."""

    step: int
    param_fp: str
    bulk_drops: dict[str, int]
    bulk_bytes_sent: int
    bulk_bytes_received: int
    queue_rejected: int
    last_step_s: float = 0.0
    # Sends of a blob to a peer that the same blob, still being queued to it, answered.
    bulk_sends_coalesced: int = 0


FromWorker = (
    WorkerReady
    | Contributed
    | ContributionArrived
    | AggregateHeld
    | AggregateStoreFailed
    | AggregateMissing
    | Applied
    | StateServing
    | StateStaged
    | StateInstalled
    | StateFailed
    | CheckpointDone
    | CheckpointFailed
    | InferResult
    | WorkerReport
)


class IpcError(Exception):
    """The other process is gone or sent something that is not a message."""


class IpcChannel:
    """One end of the socketpair, as asyncio streams with typed send/receive."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, receive_type: object
    ):
        self._reader = reader
        self._writer = writer
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(receive_type)

    @classmethod
    async def from_socket(cls, sock, receive_type: object) -> IpcChannel:  # noqa: ANN001
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_IPC_BYTES + 16)
        return cls(reader, writer, receive_type)

    def send(self, message: _Msg) -> None:
        """Write one message (non-blocking; the kernel buffer plus asyncio's transport
        buffer absorb bursts, and ``drain`` in ``flush`` bounds them)."""
        data = self._encoder.encode(message)
        if len(data) > MAX_IPC_BYTES:
            raise IpcError(f"{type(message).__name__} of {len(data)} bytes exceeds {MAX_IPC_BYTES}")
        self._writer.write(_LENGTH.pack(len(data)) + data)

    async def flush(self, timeout_s: float = 5.0) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self._writer.drain()
        except (ConnectionError, TimeoutError) as error:
            raise IpcError(f"the other process does not read: {error!r}") from None

    async def receive(self, timeout_s: float) -> object:
        try:
            async with asyncio.timeout(timeout_s):
                (length,) = _LENGTH.unpack(await self._reader.readexactly(_LENGTH.size))
                if length > MAX_IPC_BYTES:
                    raise IpcError(f"message of {length} bytes exceeds {MAX_IPC_BYTES}")
                data = await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            raise IpcError("the other process closed the channel") from None
        except TimeoutError:
            raise IpcError(f"no message for {timeout_s}s: the other process hung") from None
        try:
            return self._decoder.decode(data)
        except msgspec.DecodeError as error:
            raise IpcError(f"undecodable message: {error}") from None

    def close(self) -> None:
        self._writer.transport.abort()
