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

from dataclasses import dataclass

from swarmshake.chaos.sim.rng import RngStreams

MS = 0.001


@dataclass(frozen=True, slots=True)
class LinkProfile:
    """The default latency of every link (the envelope the detector is tuned for)."""

    delay_ms: float = 50.0
    jitter_ms: float = 25.0
    bandwidth_kbps: float = 0.0  # 0: unlimited (the control channel's messages are small)


@dataclass(slots=True)
class _LinkState:
    rng: object
    last_arrival: float = 0.0
    busy_until: float = 0.0


class Network:
    """Where and when a message sent now arrives; ``None`` when it is lost."""

    __slots__ = (
        "profile",
        "_rngs",
        "_links",
        "cut",
        "blackholed",
        "latency",
        "bandwidth",
        "slowness",
        "_fast_path",
    )

    def __init__(self, profile: LinkProfile, rngs: RngStreams):
        self.profile = profile
        self._rngs = rngs
        self._links: dict[tuple[str, str], _LinkState] = {}
        self.cut: dict[str, set[tuple[str, str]]] = {}  # op key -> cut directed links
        self.blackholed: dict[str, set[tuple[str, str]]] = {}
        self.latency: dict[tuple[str, str], tuple[float, float]] = {}  # (delay_s, jitter_s)
        self.bandwidth: dict[tuple[str, str], float] = {}  # bytes per second
        # A CPU-throttled sender: its messages leave up to this many seconds late.
        self.slowness: dict[str, float] = {}
        self._fast_path = True  # no fault active: skip the override lookups

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

    # --- delivery ----------------------------------------------------------------------

    def _state(self, src: str, dst: str) -> _LinkState:
        state = self._links.get((src, dst))
        if state is None:
            state = _LinkState(rng=self._rngs.get("link", src, dst))
            self._links[(src, dst)] = state
        return state

    def set_slowness(self, node: str, extra_s: float) -> None:
        if extra_s > 0.0:
            self.slowness[node] = extra_s
        else:
            self.slowness.pop(node, None)
        self._refresh()

    def delay_bounds(self, src: str, dst: str) -> tuple[float, float]:
        """``(min, max)`` one-way delay of ``src → dst`` now, sender slowness included."""
        delay, jitter = self.latency.get((src, dst), (self.profile.delay_ms * MS, self.profile.jitter_ms * MS))
        return delay - jitter, delay + jitter + self.slowness.get(src, 0.0)

    def sample_delay(self, src: str, dst: str, rng: object | None = None) -> float:
        """One delay of ``src → dst`` drawn from ``rng`` (the link's own stream by default)."""
        delay, jitter = self.latency.get((src, dst), (self.profile.delay_ms * MS, self.profile.jitter_ms * MS))
        draw = (rng or self._state(src, dst).rng).random  # type: ignore[attr-defined]
        if jitter > 0.0:
            delay += (draw() * 2.0 - 1.0) * jitter
        extra = self.slowness.get(src) if self.slowness else None
        if extra:
            delay += draw() * extra
        return delay

    def arrival(self, src: str, dst: str, now: float, nbytes: int = 0) -> float | None:
        """The arrival time of a message sent now on ``src → dst``, or ``None`` if lost."""
        if not self._fast_path and not self.connected(src, dst):
            return None
        state = self._state(src, dst)
        departure = now
        rate = self.bandwidth.get((src, dst)) if self.bandwidth else None
        if rate is None and self.profile.bandwidth_kbps > 0:
            rate = self.profile.bandwidth_kbps * 1000.0
        if rate:
            departure = max(now, state.busy_until) + nbytes / rate
            state.busy_until = departure
        arrival = max(departure + self.sample_delay(src, dst), state.last_arrival)
        state.last_arrival = arrival
        return arrival

    def forget(self, node: str) -> None:
        """A crashed node's connections are gone; FIFO order restarts with new ones."""
        for link in [link for link in self._links if node in link]:
            state = self._links[link]
            state.busy_until = 0.0
