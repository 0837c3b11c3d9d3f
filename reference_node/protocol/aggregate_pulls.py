"""The node core's aggregate pulls: how a node that lacks a committed value's bytes gets them.

An acceptor or learner told by its commit core to fetch a value's aggregate
(``commit.FetchAggregate``) either rebuilds it from the contributions it holds (same
inputs, same bits) or pulls it from a peer, and moves on to the next source when a
peer has no bytes, leaves its view, or does not answer within ``fetch_timeout_s``.
Both shells used to keep this bookkeeping themselves -- the runtime as a tuple per
pull retried in its poll loop, the simulator as a list per pull with a timer per
attempt -- and every difference between the two was a drift the agreement test had
to find (a rebuild tried again on each arriving contribution in one shell only; a
retry at the instant in one and up to half a second late in the other).  It lives
here once: ``AggregatePulls`` holds every pull of a node and decides each next step;
the shells perform its two actions and report what came of them.

Pure like every core: the node's clock time comes in as ``now``, no I/O.

| the shell tells it | when |
|---|---|
| ``value_seen(step, value_fp, contributors, core_step=)`` | a peer's ``AcceptRequest`` or ``Decided`` named a value (its contributors make a rebuild possible) |
| ``wanted(FetchAggregate, arrived=, alive=, holds=, now)`` | the commit core asked for a value's bytes |
| ``contribution(step, arrived, now)`` | a contribution of ``step`` arrived (a waiting pull may become a rebuild) |
| ``built(step, value_fp, contributors, alive=, now)`` | an aggregate over ``contributors`` was built (a rebuild, or the node's own proposal) |
| ``rebuild_failed(step, contributors, alive=, now)`` | a rebuild could not run (a contribution is gone) |
| ``held(step, value_fp)`` | the bytes are held (fetched, or built) |
| ``missing(step, value_fp, source=, alive=, now)`` | the peer ``source`` has no bytes |
| ``lost(step, value_fp, sources, alive=, now)`` | bytes the node counted on are gone (the apply found none) |
| ``view_changed(alive, now)`` | the detector's view changed |
| ``tick(now, alive)`` | at ``next_deadline()`` |
| ``forget_below(step)`` | the node's step reached ``step`` (a commit, an install) |

| action | the shell does |
|---|---|
| ``RebuildAggregate(step, contributors)`` | build the aggregate of exactly these contributions, then ``built`` (or ``rebuild_failed``) |
| ``RequestAggregate(step, value_fp, source)`` | ask ``source`` for the bytes; then ``held`` or ``missing`` |

Every action comes back from the call that decided it; none is queued.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from swarmshake.reference_node.protocol import commit as cm
from swarmshake.reference_node.protocol.node_core import NODE_DEFAULTS, NodeConfig, in_commit_window
from swarmshake.reference_node.protocol.structs import CoreAction

# Pulls a node keeps at once.  The commit core asks only for values of steps inside its
# window (steps_ahead_max ahead), a few per step at most (one per ballot's value);
# this bounds what a peer sending values for every step it may could make the node
# chase.  A pull past it is not started (counted in ``refused``): the commit core asks
# again at its next round.
MAX_PULLS = 256
# Values whose contributors a node remembers (those a peer's AcceptRequest or Decided
# named), for a rebuild should their bytes be wanted.  Only steps of the commit core's
# window are kept; a few values a step in a healthy run (one per ballot), so this bounds
# only what a peer naming many values could make the node keep.  A value past it is not
# remembered: its bytes, if wanted, are pulled instead of rebuilt.
MAX_VALUES = 1024


class RebuildAggregate(CoreAction, frozen=True, kw_only=True):
    """Build the aggregate of exactly ``contributors``' contributions of ``step``."""

    step: int
    contributors: tuple[str, ...]


class RequestAggregate(CoreAction, frozen=True, kw_only=True):
    """Ask ``source`` for the bytes of ``step``'s aggregate ``value_fp``."""

    step: int
    value_fp: str
    source: str


PullAction = RebuildAggregate | RequestAggregate


class AggregatePlan(msgspec.Struct, frozen=True, kw_only=True):
    rebuild: bool  # build it from the contributions held (same inputs, same bits)
    sources: tuple[str, ...]  # else pull from these, in this order


def plan_aggregate(
    node: str,
    action: cm.FetchAggregate,
    contributors: Iterable[str] | None,
    arrived: Iterable[str],
    alive: Iterable[str],
) -> AggregatePlan:
    """An acceptor or learner that lacks a value's bytes: rebuild it if it holds every
    contributor's gradient (``contributors``: the value's, if known), else pull it at
    once from the value's sources, the live ones first.  No proposer pushes an
    aggregate: a push of the whole aggregate to every acceptor would cost the
    proposer (n - 1) x its size a step on top of the contributions, and an acceptor
    that holds every contribution, the usual case, needs none."""
    others = tuple(s for s in action.sources if s != node)
    live = set(alive)
    ordered = tuple(s for s in others if s in live) + tuple(s for s in others if s not in live)
    return AggregatePlan(rebuild=rebuilds_now(contributors, arrived), sources=ordered)


def rebuilds_now(contributors: Iterable[str] | None, arrived: Iterable[str]) -> bool:
    """Whether a value's aggregate can be rebuilt from the gradients this node holds
    (``contributors``: the value's, None if unknown).  Asked when a pull is planned
    and again at every contribution that arrives while one waits: the value may come
    before the last of its gradients, and a rebuild then beats the pull (the runtime
    asked only when planning and waited out the pull; the simulator asked again)."""
    if contributors is None:
        return False
    # Asked at every contribution while a pull waits (64 nodes: ~4,000 times a node a
    # step): no copy of a set already given, and out at the first contributor missing.
    held = arrived if isinstance(arrived, set | frozenset) else set(arrived)
    return held.issuperset(contributors)


def pull_retry_at(sent_at: float, config: NodeConfig = NODE_DEFAULTS) -> float:
    """When a pull sent at ``sent_at`` (node clock) with no answer goes to the next
    source: ``fetch_timeout_s`` later, to the instant.  (The runtime retried only
    strictly after it, at its next poll -- up to half a second late -- and the
    simulator on its true clock, at the instant: clock-skew faults and the agreement
    test's time draws told them apart.)"""
    return sent_at + config.fetch_timeout_s


def pulls_to_move_on(
    asked: Mapping[tuple[int, str], str | None], alive: Iterable[str]
) -> list[tuple[int, str]]:
    """The pulls (``asked``: each pull's key and the peer its last request went to,
    None before any) whose peer left this node's view: each asks the next source now,
    not ``fetch_timeout_s`` later.  A node paused mid-transfer keeps its connection
    open and sends nothing (GPU run: a restarted node's pull of a 403 MB aggregate
    from a peer paused 0.5 s later waited out its 15 s timeout; that node alone could
    make a majority of contributors, and no step committed for 12.2 s)."""
    live = set(alive)
    return sorted(key for key, peer in asked.items() if peer is not None and peer not in live)


def fetch_source(
    node: str, sources: Iterable[str], attempt: int, alive: Iterable[str]
) -> str | None:
    """The peer a value's ``attempt``-th pull asks: round-robin over the sources this
    node's view holds alive, else over all of them (after a partition each side may
    think the other dead); None when no one but this node could serve it."""
    others = [s for s in sources if s != node]
    live_set = set(alive)
    live = [s for s in others if s in live_set]
    candidates = live or others
    return candidates[attempt % len(candidates)] if candidates else None


class _Pull:
    """One value's pull: where its bytes may be, how often it asked, when and whom last
    (``asked`` None: a rebuild is tried first; the pull starts at its deadline)."""

    __slots__ = ("sources", "contributors", "attempt", "sent_at", "asked")

    def __init__(self, sources: tuple[str, ...], contributors: tuple[str, ...] | None, now: float):
        self.sources = sources
        self.contributors = contributors
        self.attempt = 0
        self.sent_at = now
        self.asked: str | None = None


class AggregatePulls:
    """Every pull of one node: which values it lacks the bytes of, and what it does next."""

    def __init__(self, *, node: str, config: NodeConfig = NODE_DEFAULTS):
        self.node = node
        self._config = config
        self._pulls: dict[tuple[int, str], _Pull] = {}
        # The keys of the pulls under way, read-only for the shells: ``if not
        # pulls.pending`` is asked at every contribution (64 nodes: 4,000 times a node a
        # step), and a plain attribute costs no call.
        self.pending = self._pulls.keys()
        # (step, sorted contributors) -> the fingerprints a build under way must give:
        # a value whose rebuild gives another fingerprint is pulled from a peer.
        self._rebuilding: dict[tuple[int, tuple[str, ...]], set[str]] = {}
        # (step, value fp) -> the value's contributors, as a peer named them.
        self._values: dict[tuple[int, str], tuple[str, ...]] = {}
        self.mismatches = 0  # rebuilds that gave other bytes than the value named
        self.refused = 0  # pulls not started: MAX_PULLS were under way

    # -- what the shells read ---------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        return key in self._pulls

    def keys(self) -> list[tuple[int, str]]:
        return list(self._pulls)

    def asked(self, key: tuple[int, str]) -> str | None:
        """The peer ``key``'s pull last asked (None: none yet, or no such pull)."""
        pull = self._pulls.get(key)
        return None if pull is None else pull.asked

    def next_deadline(self) -> float | None:
        """When the earliest unanswered pull moves on to its next source."""
        if not self._pulls:
            return None
        return pull_retry_at(min(p.sent_at for p in self._pulls.values()), self._config)

    # -- events -----------------------------------------------------------------------

    def value_seen(
        self, step: int, value_fp: str, contributors: Iterable[str], *, core_step: int | None
    ) -> None:
        """A peer's ``AcceptRequest`` or ``Decided`` named this value: remember its
        contributors (a rebuild needs them) while its step is in the commit core's
        window (``core_step``: the core's step, None while none runs)."""
        if core_step is None or not in_commit_window(step, core_step, self._config):
            return
        key = (step, value_fp)
        if key in self._values or len(self._values) >= MAX_VALUES:
            return
        self._values[key] = tuple(sorted(contributors))

    def contributors(self, step: int, value_fp: str) -> tuple[str, ...] | None:
        """The contributors a peer named for this value, if one did."""
        return self._values.get((step, value_fp))

    def wanted(
        self,
        action: cm.FetchAggregate,
        *,
        arrived: Iterable[str],
        alive: Iterable[str],
        holds: bool,
        now: float,
    ) -> list[PullAction]:
        """The commit core asked for a value's bytes (``holds``: the node holds them
        already, and says so to its core).  Rebuilt when a peer named the value's
        contributors (``value_seen``) and all of theirs arrived, else pulled."""
        key = (action.step, action.value_fp)
        if holds or key in self._pulls:
            return []
        if len(self._pulls) >= MAX_PULLS:
            self.refused += 1
            return []
        alive = tuple(alive)
        known = self._values.get(key)
        plan = plan_aggregate(self.node, action, known, arrived, alive)
        self._pulls[key] = _Pull(plan.sources, known, now)
        if plan.rebuild:
            return self._rebuild(key)
        return self._ask(key, alive, now)

    def contribution(self, step: int, arrived: Iterable[str]) -> list[PullAction]:
        """A contribution of ``step`` arrived (``arrived``: every contributor of that
        step held now): a value whose bytes a pull waits for may now be rebuilt."""
        if not self._pulls:
            return []  # the usual case: nobody waits for bytes
        actions: list[PullAction] = []
        for key, pull in list(self._pulls.items()):
            if key[0] == step and rebuilds_now(pull.contributors, arrived):
                actions += self._rebuild(key)
        return actions

    def built(
        self,
        step: int,
        value_fp: str,
        contributors: Iterable[str],
        *,
        alive: Iterable[str],
        now: float,
    ) -> list[PullAction]:
        """An aggregate over ``contributors`` gave ``value_fp``: its pull is over, and a
        value over the same contributions that named other bytes is pulled at once."""
        self._pulls.pop((step, value_fp), None)
        expected = self._rebuilding.pop((step, tuple(sorted(contributors))), None)
        if not expected:
            return []  # the usual case: the node's own proposal, or a rebuild that matched
        actions: list[PullAction] = []
        alive = tuple(alive)
        for other in sorted(expected):
            if other != value_fp and (step, other) in self._pulls:
                self.mismatches += 1
                actions += self._ask((step, other), alive, now)
        return actions

    def rebuild_failed(
        self, step: int, contributors: Iterable[str], *, alive: Iterable[str], now: float
    ) -> list[PullAction]:
        """A rebuild could not run (a contribution it needed is gone): its values are
        pulled now rather than at the pull's deadline."""
        actions: list[PullAction] = []
        alive = tuple(alive)
        for expected in sorted(self._rebuilding.pop((step, tuple(sorted(contributors))), ())):
            pull = self._pulls.get((step, expected))
            if pull is not None and pull.asked is None:
                actions += self._ask((step, expected), alive, now)
        return actions

    def held(self, step: int, value_fp: str) -> None:
        """The node holds the bytes of ``step``'s ``value_fp``: its pull is over."""
        self._pulls.pop((step, value_fp), None)

    def missing(
        self, step: int, value_fp: str, *, source: str, alive: Iterable[str], now: float
    ) -> list[PullAction]:
        """``source`` has no bytes: if it is the peer asked last, ask the next one now.
        A refusal from a peer asked before (it came after that request timed out) is
        moot: the request to the current peer may still be answered, and moving on
        again would skip it."""
        pull = self._pulls.get((step, value_fp))
        if pull is None or pull.asked != source:
            return []
        return self._ask((step, value_fp), tuple(alive), now)

    def lost(
        self,
        step: int,
        value_fp: str,
        sources: Iterable[str],
        *,
        alive: Iterable[str],
        now: float,
    ) -> list[PullAction]:
        """Bytes the node counted on are not held (its apply found none): pull them from
        ``sources``, unless a pull is under way."""
        key = (step, value_fp)
        if key in self._pulls:
            return []
        others = tuple(s for s in sources if s != self.node)
        self._pulls[key] = _Pull(others, None, now)
        return self._ask(key, tuple(alive), now)

    def view_changed(self, alive: Iterable[str], now: float) -> list[PullAction]:
        """Pulls whose peer left the view ask the next source now (``pulls_to_move_on``)."""
        if not self._pulls:
            return []
        alive = tuple(alive)
        asked = {key: pull.asked for key, pull in self._pulls.items()}
        actions: list[PullAction] = []
        for key in pulls_to_move_on(asked, alive):
            actions += self._ask(key, alive, now)
        return actions

    def tick(self, now: float, alive: Iterable[str]) -> list[PullAction]:
        """Every pull unanswered for ``fetch_timeout_s`` asks its next source."""
        alive = tuple(alive)
        actions: list[PullAction] = []
        for key, pull in list(self._pulls.items()):
            if now >= pull_retry_at(pull.sent_at, self._config):
                actions += self._ask(key, alive, now)
        return actions

    def forget_below(self, step: int) -> None:
        """The node's step is ``step``: the pulls and builds of earlier steps are moot."""
        for key in [k for k in self._pulls if k[0] < step]:
            del self._pulls[key]  # in place: ``pending`` is a view of this dict
        self._rebuilding = {k: v for k, v in self._rebuilding.items() if k[0] >= step}
        for key in [k for k in self._values if k[0] < step]:
            del self._values[key]

    # -- decisions --------------------------------------------------------------------

    def _rebuild(self, key: tuple[int, str]) -> list[PullAction]:
        """Build the value from the contributions held, unless that build is under way."""
        contributors = self._pulls[key].contributors
        assert contributors is not None, "a rebuild needs the value's contributors"
        expected = self._rebuilding.setdefault((key[0], contributors), set())
        if key[1] in expected:
            return []
        expected.add(key[1])
        return [RebuildAggregate(step=key[0], contributors=contributors)]

    def _ask(self, key: tuple[int, str], alive: tuple[str, ...], now: float) -> list[PullAction]:
        """Ask the pull's next source (``fetch_source``); with none left, give it up."""
        pull = self._pulls[key]
        source = fetch_source(self.node, pull.sources, pull.attempt, alive)
        if source is None:
            del self._pulls[key]
            return []
        pull.attempt += 1
        pull.sent_at = now
        pull.asked = source
        return [RequestAggregate(step=key[0], value_fp=key[1], source=source)]

    def check_valid(self) -> None:
        assert len(self._pulls) <= MAX_PULLS, "more pulls than MAX_PULLS"
        assert len(self._values) <= MAX_VALUES, "more values than MAX_VALUES"
        for key, contributors in self._values.items():
            assert contributors == tuple(sorted(contributors)), f"value {key}: unsorted"
        for key, pull in self._pulls.items():
            assert self.node not in pull.sources, f"pull {key} would ask this node"
            assert pull.asked is None or pull.asked in pull.sources, f"pull {key} asked a stranger"
            assert (pull.asked is None) == (pull.attempt == 0), f"pull {key}: attempts vs asked"
        for (step, contributors), expected in self._rebuilding.items():
            assert contributors == tuple(sorted(contributors)), "unsorted rebuild key"
            assert expected, f"an empty rebuild entry for step {step}"
