"""The simulated network: per directed link latency ± jitter, bandwidth, black holes
and cuts (partitions, symmetric or one-way).

A link A→B is FIFO, like the TCP connection A dialled to B (DESIGN: messages travel
only on connections the sender dialled), so an arrival is never earlier than the
previous arrival on the same link.  Latency is drawn uniformly from ``delay ± jitter``
with the link's own seeded stream, so the draws of one link do not depend on traffic
elsewhere.  A cut or black-holed link swallows messages (Toxiproxy's ``timeout`` toxic:
data disappears; our connections re-dial after the heal).

Faults are *overrides* keyed by the op that set them, so healing one kind (latency)
leaves another (a partition) in place — the same scoping ``heal`` has in the harness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from swarmshake.chaos.sim.rng import RngStreams

MS = 0.001
LINK_STATES_MAX = 200_000  # FIFO bookkeeping; idle links are pruned past this


@dataclass(frozen=True, slots=True)
class LinkProfile:
    """The default latency of every link (the envelope the detector is tuned for)."""

    delay_ms: float = 50.0
    jitter_ms: float = 25.0
    bandwidth_kbps: float = 0.0  # control channel; 0: unlimited (its messages are small)
    bulk_kbps: float = 100_000.0  # bulk channel (tensors): 100 MB/s, loopback-proxy order


class Network:
    """Where and when a message sent now arrives; ``None`` when it is lost."""

    __slots__ = (
        "profile",
        "_rngs",
        "_links",
        "_rngs_by_sender",
        "cut",
        "blackholed",
        "latency",
        "bandwidth",
        "slowness",
        "_fast_path",
        "_default_latency",
        "_bulk_rate",
        "_control_rate",
    )

    def __init__(self, profile: LinkProfile, rngs: RngStreams):
        self.profile = profile
        self._rngs = rngs
        self._links: dict[tuple[str, str, str], list[float]] = {}
        self._rngs_by_sender: dict[tuple[str, str], object] = {}
        self.cut: dict[str, set[tuple[str, str]]] = {}  # op key -> cut directed links
        self.blackholed: dict[str, set[tuple[str, str]]] = {}
        self.latency: dict[tuple[str, str], tuple[float, float]] = {}  # (delay_s, jitter_s)
        self.bandwidth: dict[tuple[str, str], float] = {}  # bytes per second
        # A CPU-throttled sender: its messages leave up to this many seconds late.
        self.slowness: dict[str, float] = {}
        self._fast_path = True  # no fault active: skip the override lookups
        # The profile's numbers in the units the hot path uses, computed once (the
        # same floats as computing them per message).
        self._default_latency = (profile.delay_ms * MS, profile.jitter_ms * MS)
        self._bulk_rate = profile.bulk_kbps * 1000.0
        self._control_rate = profile.bandwidth_kbps * 1000.0 if profile.bandwidth_kbps > 0 else None

    def _refresh(self) -> None:
        self._fast_path = not (
            any(self.cut.values())
            or any(self.blackholed.values())
            or self.latency
            or self.bandwidth
            or self.slowness
        )

    # --- faults ------------------------------------------------------------------------

    def set_cut(self, key: str, links: set[tuple[str, str]]) -> None:
        self.cut[key] = set(links)
        self._refresh()

    def set_blackhole(self, key: str, links: set[tuple[str, str]]) -> None:
        self.blackholed.setdefault(key, set()).update(links)
        self._refresh()

    def set_latency(self, links: set[tuple[str, str]], delay_ms: float, jitter_ms: float) -> None:
        for link in links:
            self.latency[link] = (delay_ms * MS, jitter_ms * MS)
        self._refresh()

    def set_bandwidth(self, links: set[tuple[str, str]], rate_kbps: float) -> None:
        for link in links:
            self.bandwidth[link] = rate_kbps * 1000.0
        self._refresh()

    def heal(self, scope: str, links: set[tuple[str, str]] | None = None) -> None:
        """Undo faults of ``scope`` (``all``, ``partition`` or a link op) on ``links``
        (``None``: everywhere)."""

        def prune(table: dict) -> None:
            if links is None:
                table.clear()
            else:
                for link in links:
                    table.pop(link, None)

        if scope in ("all", "partition"):
            self.cut.clear()
        if scope in ("all", "blackhole"):
            if links is None:
                self.blackholed.clear()
            else:
                for cut in self.blackholed.values():
                    cut.difference_update(links)
        if scope in ("all", "latency"):
            prune(self.latency)
        if scope in ("all", "bandwidth"):
            prune(self.bandwidth)
        self._refresh()

    def connected(self, src: str, dst: str) -> bool:
        if self._fast_path:
            return True
        link = (src, dst)
        return not any(link in cut for cut in self.cut.values()) and not any(
            link in hole for hole in self.blackholed.values()
        )

    def set_slowness(self, node: str, extra_s: float) -> None:
        if extra_s > 0.0:
            self.slowness[node] = extra_s
        else:
            self.slowness.pop(node, None)
        self._refresh()

    def delay_bounds(self, src: str, dst: str) -> tuple[float, float]:
        """``(min, max)`` one-way delay of ``src → dst`` now, sender slowness included."""
        delay, jitter = self.latency.get((src, dst), self._default_latency)
        return delay - jitter, delay + jitter + self.slowness.get(src, 0.0)

    def sample_delay(self, src: str, dst: str, rng: object) -> float:
        """One delay of ``src → dst`` drawn from ``rng``."""
        delay, jitter = (
            self.latency.get((src, dst), self._default_latency)
            if self.latency
            else self._default_latency
        )
        draw = rng.random  # type: ignore[attr-defined]
        if jitter > 0.0:
            delay += (draw() * 2.0 - 1.0) * jitter
        extra = self.slowness.get(src) if self.slowness else None
        if extra:
            delay += draw() * extra
        return delay

    # --- delivery ----------------------------------------------------------------------

    def _sender_rng(self, src: str, channel: str) -> object:
        # One stream per sender and channel, not per link: a 1,000-node run touches up
        # to a million links, and a Random each would cost gigabytes.  A node's sends
        # happen in a deterministic order, so its draws do too.
        key = (src, channel)
        rng = self._rngs_by_sender.get(key)
        if rng is None:
            rng = self._rngs_by_sender[key] = self._rngs.get("send", src, channel)
        return rng

    def arrival(
        self, src: str, dst: str, now: float, nbytes: int = 0, channel: str = "control"
    ) -> float | None:
        """The arrival time of a message sent now on ``src → dst``, or ``None`` if lost.

        ``channel`` is ``"control"`` or ``"bulk"``: DESIGN gives every link two
        connections so a tensor never delays a heartbeat; each is FIFO on its own.

        Without a fault (``_fast_path``) this is the general path below with every
        override absent: the same draws and the same float operations, in one call."""
        if not self._fast_path:
            return self._arrival_with_faults(src, dst, now, nbytes, channel)
        key = (src, dst, channel)
        state = self._links.get(key)
        if state is None:
            state = self._links[key] = [-math.inf, 0.0]  # [last arrival, busy until]
            if len(self._links) > LINK_STATES_MAX:
                self._prune(now)
        departure = now
        rate = self._bulk_rate if channel == "bulk" else self._control_rate
        if rate and nbytes:
            busy = state[1]
            departure = (now if now >= busy else busy) + nbytes / rate  # max(now, busy)
            state[1] = departure
        rng = self._rngs_by_sender.get((src, channel))
        if rng is None:
            rng = self._sender_rng(src, channel)
        delay, jitter = self._default_latency  # sample_delay without overrides
        if jitter > 0.0:
            delay += (rng.random() * 2.0 - 1.0) * jitter  # type: ignore[attr-defined]
        arrival = departure + delay
        if arrival < state[0]:
            arrival = state[0]  # FIFO: one TCP connection per direction and channel
        state[0] = arrival
        return arrival

    def _arrival_with_faults(
        self, src: str, dst: str, now: float, nbytes: int, channel: str
    ) -> float | None:
        if not self.connected(src, dst):
            return None
        key = (src, dst, channel)
        state = self._links.get(key)
        if state is None:
            state = self._links[key] = [-math.inf, 0.0]  # [last arrival, busy until]
            if len(self._links) > LINK_STATES_MAX:
                self._prune(now)
        departure = now
        rate = self.bandwidth.get((src, dst)) if self.bandwidth else None
        if channel == "bulk":
            rate = min(rate or math.inf, self._bulk_rate)
        elif rate is None:
            rate = self._control_rate
        if rate and nbytes:
            departure = max(now, state[1]) + nbytes / rate
            state[1] = departure
        rng = self._rngs_by_sender.get((src, channel))
        if rng is None:
            rng = self._sender_rng(src, channel)
        arrival = departure + self.sample_delay(src, dst, rng)
        if arrival < state[0]:
            arrival = state[0]  # FIFO: one TCP connection per direction and channel
        state[0] = arrival
        return arrival

    def _prune(self, now: float) -> None:
        """Forget links idle since before ``now``: their FIFO constraint is void."""
        self._links = {k: v for k, v in self._links.items() if v[0] > now or v[1] > now}
