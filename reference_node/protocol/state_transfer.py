"""The node core's state fetch: when a node fetches the cluster's state, from whom, and
what it installs.  One object, ``StateTransfer``, one ``handle(event, now)``.

A node that is behind (``commit.Behind``, a peer ahead), that restarts, or that was
just added fetches the state: the rejoin core (``rejoin.Rejoin``) runs the transfer
itself; around it a node decides whom to ask and what it knows of the cluster
(``node_core.rejoin_start``), what an offer's configuration means
(``offered_configuration``), whether bytes that overtook their offer wait for it
(``state_bytes_wait``), which configuration the installed state runs under, which
aggregate bytes outlive the install (``aggregates_to_keep``), and when a failed fetch
is tried again (``StateFetch``).  The runtime's step driver and the simulator's
``NodeApp`` each wrote that glue themselves (issue 12); it lives here, once.

| event (``handle``) | what the node does |
|---|---|
| ``FetchState`` | unless a fetch runs: the step is suspended (``StateFetch.begun``, ``SuspendSteps``), a rejoin core is built and begins |
| ``OfferArrived`` | a malformed configuration is dropped (``FrameRefused``); an offer from a source that has not added this joiner moves on to the next; else the rejoin core takes it, and bytes of that source that waited follow |
| ``BytesArrived`` | to the rejoin core, or (they came before their offer) kept until it comes |
| ``rejoin.CheckpointLoaded`` / ``rejoin.FetchFailed`` / ``rejoin.Tick`` | to the rejoin core |
| ``StateFailed`` | a transfer broke (the next source is asked), or the install or the checkpoint load failed (the fetch is over, tried again later) |
| ``SourceDead`` | the source asked was declared dead: the next one is asked now |
| ``StateInstalled`` | the state is in: the step runs again |

| action | the shell does |
|---|---|
| ``SuspendSteps`` | ``StepNode.detach()``; drop what waited on a persist of the old core |
| ``rejoin.RequestState`` | ask the source for its state (the worker expects its bytes) |
| ``rejoin.LoadCheckpoint`` | load the local checkpoint; answer ``rejoin.CheckpointLoaded`` (or ``StateFailed(source="checkpoint")``) |
| ``rejoin.RejoinDone`` | log it (``history_of``); ``InstallState`` follows |
| ``InstallState`` | install the state (genesis: nothing to install) under ``configuration``, keeping the aggregates it names; answer ``StateInstalled`` (or ``StateFailed``) |
| ``rejoin.RejoinFailed`` | count it; ``FetchRetry`` follows |
| ``FetchRetry(at)`` | begin a new fetch at ``at`` (None: a joiner, whose enrolment asks to join again) |
| ``FrameRefused(peer, reason)`` | log ``frame_drop`` |

Pure like every core: ``now`` comes in, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from swarmshake.reference_node.protocol import membership as mb
from swarmshake.reference_node.protocol import node_core as nc
from swarmshake.reference_node.protocol import rejoin as rj
from swarmshake.reference_node.protocol.bugs import NO_BUGS, BugSet
from swarmshake.reference_node.protocol.errors import LocalProtocolError, RemoteProtocolError
from swarmshake.reference_node.protocol.messages import StateOffer
from swarmshake.reference_node.protocol.structs import CoreAction, CoreEvent

# --- events ----------------------------------------------------------------------------------


class FetchState(CoreEvent, frozen=True, kw_only=True):
    """Fetch the cluster's state.  ``evidence``: the peer whose traffic showed this node
    is behind (None: the process starts, or a failed fetch is tried again); the rest
    is what ``node_core.rejoin_start`` and the rejoin core need to know of this node:
    its view, the members of the configuration it runs under and of the newest it
    recorded, the steps peers' messages carried, its own step, whether it holds the
    initial parameters, its local checkpoint and parameters, and its vote floor."""

    evidence: str | None
    own_step: int
    alive: tuple[str, ...]
    members: tuple[str, ...]
    newest_members: tuple[str, ...]
    peer_steps: dict[str, int]
    at_genesis: bool
    genesis_param_fp: str
    joining: bool
    local_checkpoint: rj.CheckpointInfo | None
    local_param_fp: str
    vote_floor: int

    def __post_init__(self) -> None:
        # -1: a restarted node that has not begun a step yet.
        if type(self.own_step) is not int or self.own_step < -1:
            raise LocalProtocolError(f"FetchState.own_step must be >= -1, got {self.own_step!r}")


class OfferArrived(CoreEvent, frozen=True, kw_only=True):
    """A peer's ``StateOffer`` (``joining``: this node is still a joiner)."""

    offer: StateOffer
    joining: bool


class BytesArrived(CoreEvent, frozen=True, kw_only=True):
    """The bytes of a state from ``source`` are in (staged, fingerprinted)."""

    source: str
    step: int
    computed_fp: str
    nbytes: int


class StateFailed(CoreEvent, frozen=True, kw_only=True):
    """The worker could not get or use a state: a transfer from ``source`` broke (the
    rejoin core tries the next source), or installing the fetched state or loading
    the local checkpoint failed (the fetch is over, tried again later)."""

    source: str
    reason: str


class SourceDead(CoreEvent, frozen=True, kw_only=True):
    """The detector declared ``peer`` dead: if the fetch asks it, the next source is
    asked now, not after the offer or transfer timeout (5-40 s; explore, seed 2: 11 s
    without a commit)."""

    peer: str


class StateInstalled(CoreEvent, frozen=True, kw_only=True):
    """The fetched state is installed: the node's step runs again."""


TransferEvent = (
    FetchState
    | OfferArrived
    | BytesArrived
    | StateFailed
    | SourceDead
    | StateInstalled
    | rj.CheckpointLoaded
    | rj.FetchFailed
    | rj.Tick
)


# --- actions -----------------------------------------------------------------------------------


class SuspendSteps(CoreAction, frozen=True, kw_only=True):
    """A fetch begins: the node's step is suspended (``StepNode.detach``); what its
    commit core still had queued (behind a persist) is moot."""


class InstallState(CoreAction, frozen=True, kw_only=True):
    """Install ``source``'s state of ``step`` (``rejoin.RejoinDone``), its next step being
    ``step + 1``, under ``configuration`` (the one its source offered with it, else the
    one this node recorded for that step); keep the aggregates of ``keep_from_step``
    and later and the ``pinned`` ones (``node_core.aggregates_to_keep``).  ``step`` is
    ``GENESIS_STEP`` for the initial parameters: nothing to install, step 0 next."""

    source: str
    step: int
    param_fp: str
    configuration: mb.Configuration
    keep_from_step: int
    pinned: tuple[tuple[int, str], ...]


class FetchRetry(CoreAction, frozen=True, kw_only=True):
    """The fetch failed: begin the next one at node-clock ``at`` (None: a joiner's
    enrolment asks to join again instead)."""

    at: float | None


class FrameRefused(CoreAction, frozen=True, kw_only=True):
    """Drop ``peer``'s frame for ``reason`` (``node_core.refusal_reason``'s, or an offer's
    ``BAD_OFFER``)."""

    peer: str
    reason: str


class StateTransfer:
    """One node's state fetches (module docstring)."""

    def __init__(
        self,
        *,
        node: str,
        incarnation: int,
        seed: int,
        configs: mb.Configurations,
        config: nc.NodeConfig = nc.NODE_DEFAULTS,
        bugs: BugSet = NO_BUGS,
    ):
        self.node = node
        self.incarnation = incarnation
        self.seed = seed
        self.configs = configs  # the configurations this node recorded (read only)
        self.config = config
        self.bugs = bugs
        self.fetch = nc.StateFetch(config)
        self.joining = False  # the fetch is a joiner's (its retry is its enrolment's)
        self.installing: str | None = None  # the source of the install under way
        self.rejoin: rj.Rejoin | None = None
        # The configuration each source offered with its state (one fetch).
        self.offered: dict[str, mb.Configuration] = {}
        # Bytes that came before their offer (state_bytes_wait): the latest transfer.
        self.waiting: BytesArrived | None = None
        # The value each durable acceptor record accepted: their bytes outlive an
        # install (node_core.aggregates_to_keep); the shells hand it over.
        self.accepted: Mapping[int, str] = {}

    @property
    def steps(self) -> bool:
        """Whether the node's step runs (``StateFetch.steps``)."""
        return self.fetch.steps

    def next_deadline(self) -> float | None:
        """The rejoin core's next deadline (None: none runs)."""
        return self.rejoin.next_deadline() if self.rejoin is not None else None

    def check_valid(self) -> None:
        self.fetch.check_valid()
        if self.rejoin is not None:
            self.rejoin.check_valid()
        assert self.rejoin is None or self.fetch.fetching or self.rejoin.phase == "done", (
            "a rejoin core running while the step runs"
        )

    def handle(self, event: TransferEvent, now: float) -> list[CoreAction]:
        out: list[CoreAction] = []
        match event:
            case FetchState():
                self._begin(event, now, out)
            case OfferArrived():
                self._on_offer(event, now, out)
            case BytesArrived():
                if self.rejoin is None:
                    return out  # an answer to a fetch that is over
                if nc.state_bytes_wait(self.rejoin, event.source):
                    self.waiting = event  # the bytes overtook their offer
                    return out
                self._rejoin(self._received(event), now, out)
            case StateFailed():
                self._on_state_failed(event, now, out)
            case SourceDead():
                if self.rejoin is not None and self.rejoin.source == event.peer:
                    failed = rj.FetchFailed(source=event.peer, reason="declared dead")
                    self._rejoin(failed, now, out)
            case StateInstalled():
                self.rejoin = None
                self.installing = None
                self.fetch.installed()
            case rj.CheckpointLoaded() | rj.FetchFailed() | rj.Tick():
                self._rejoin(event, now, out)
            case _:
                raise LocalProtocolError(f"StateTransfer takes no {type(event).__name__}")
        return out

    def _begin(self, event: FetchState, now: float, out: list) -> None:
        if self.rejoin is not None:
            return  # one fetch at a time
        self.fetch.begun()
        out.append(SuspendSteps())
        self.joining = event.joining
        self.installing = None
        self.offered = {}
        self.waiting = None
        start = nc.rejoin_start(
            self.node,
            alive=event.alive,
            members=event.members,
            newest_members=event.newest_members,
            peer_steps=event.peer_steps,
            own_step=event.own_step,
            evidence=event.evidence,
            at_genesis=event.at_genesis,
            genesis_param_fp=event.genesis_param_fp,
            joining=event.joining,
        )
        self.rejoin = rj.Rejoin(
            node=self.node,
            incarnation=self.incarnation,
            seed=self.seed,
            local_checkpoint=event.local_checkpoint,
            local_param_fp=event.local_param_fp,
            cluster_step=start.cluster_step,
            genesis_param_fp=start.genesis_param_fp,
            bugs=self.bugs,
            vote_floor=event.vote_floor,
        )
        self._rejoin(rj.Begin(live_peers=start.sources), now, out)

    def _on_state_failed(self, event: StateFailed, now: float, out: list) -> None:
        """The install under way, or the checkpoint load, failed: the fetch is over and
        tried again later.  Any other source's failure is a transfer's: the rejoin core
        moves on if it is the source it asks (a late one from a source it left is moot;
        the runtime once took one that came during a checkpoint load for the load's)."""
        rejoin = self.rejoin
        if rejoin is None:
            return
        loading = rejoin.phase == "checkpoint" and event.source == "checkpoint"
        if event.source == self.installing or loading:
            self.rejoin = None
            self.installing = None
            out.append(FetchRetry(at=self.fetch.failed(now, joining=self.joining)))
        elif event.source != "checkpoint":
            self._rejoin(rj.FetchFailed(source=event.source, reason=event.reason), now, out)

    def _on_offer(self, event: OfferArrived, now: float, out: list) -> None:
        if self.rejoin is None:
            return  # an offer for a fetch that is over
        offer = event.offer
        offered = nc.offered_configuration(
            offer.voters, offer.learners, offer.config_step,
            node=self.node, joining=event.joining,
        )  # fmt: skip
        if offered.refused == nc.BAD_OFFER:
            out.append(FrameRefused(peer=offer.sender, reason=offered.refused))
            return
        if offered.refused:
            self._rejoin(rj.FetchFailed(source=offer.sender, reason=offered.refused), now, out)
            return
        if offered.configuration is not None:
            self.offered[offer.sender] = offered.configuration
        state_offered = rj.StateOffered(
            source=offer.sender, step=offer.step, param_fp=offer.param_fp, nbytes=offer.nbytes
        )
        self._rejoin(state_offered, now, out)
        waiting = self.waiting
        if waiting is not None and waiting.source == offer.sender and self.rejoin is not None:
            self.waiting = None
            self._rejoin(self._received(waiting), now, out)

    @staticmethod
    def _received(event: BytesArrived) -> rj.StateReceived:
        return rj.StateReceived(
            source=event.source, step=event.step, computed_fp=event.computed_fp,
            nbytes=event.nbytes,
        )  # fmt: skip

    def _rejoin(self, event: rj.RejoinEvent, now: float, out: list) -> None:
        rejoin = self.rejoin
        if rejoin is None:
            return  # an answer to a fetch that is over
        try:
            actions = rejoin.handle(event, now)
        except RemoteProtocolError as error:
            source = getattr(event, "source", "") or "?"
            out.append(FrameRefused(peer=source, reason=nc.refusal_reason("rejoin", error.reason)))
            return
        for action in actions:
            out.append(action)
            if isinstance(action, rj.RequestState):
                self.waiting = None  # bytes of an attempt that is over
            elif isinstance(action, rj.RejoinDone):
                out.append(self._install(action))
            elif isinstance(action, rj.RejoinFailed):
                # No source answered and nothing local is usable: try again later (the
                # source may have restarted mid-transfer).  If no one can ever serve,
                # strict mode stalls by design and the history shows no rejoin_done.
                self.rejoin = None
                out.append(FetchRetry(at=self.fetch.failed(now, joining=self.joining)))

    def _install(self, done: rj.RejoinDone) -> InstallState:
        """The configuration the state runs under: the one its source offered with it,
        else (checkpoint, genesis) the one this node recorded for its step."""
        configuration = self.offered.get(done.source) or self.configs.after(done.step)
        self.offered = {}
        self.installing = done.source
        kept = nc.aggregates_to_keep(self.accepted, done.step, config=self.config)
        return InstallState(
            source=done.source,
            step=done.step,
            param_fp=done.param_fp,
            configuration=configuration,
            keep_from_step=kept.from_step,
            pinned=kept.pinned,
        )
