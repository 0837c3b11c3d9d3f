"""Prometheus metrics of a node, read from its live counters at scrape time.

A custom collector rather than Counter objects updated in every code path: the
link, MQTT, detector and worker layers already keep their counters (they need
them for /status and tests), so the collector reports those, and nothing can
drift between what /status and /metrics say.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class NodeCollector:
    """Turns ``snapshot()`` (the node's status dict) into metric families."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]):
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        status = self._snapshot()
        step = GaugeMetricFamily("swarmshake_step", "Next step this node will run")
        step.add_metric([], status.get("step", -1))
        yield step
        committed = CounterMetricFamily("swarmshake_steps_committed", "Steps this node applied")
        committed.add_metric([], status.get("steps_committed", 0))
        yield committed
        drops = CounterMetricFamily(
            "swarmshake_frames_dropped", "Inbound frames dropped", labels=["channel", "reason"]
        )
        for channel in ("control", "bulk"):
            for reason, count in status.get("frame_drops", {}).get(channel, {}).items():
                drops.add_metric([channel, reason], count)
        yield drops
        connected = GaugeMetricFamily(
            "swarmshake_link_connected", "Dialled link is connected", labels=["link"]
        )
        for link, up in status.get("links", {}).items():
            connected.add_metric([link], 1 if up else 0)
        yield connected
        gap = GaugeMetricFamily(
            "swarmshake_heartbeat_gap_max_seconds", "Largest heartbeat gap seen", labels=["peer"]
        )
        for peer, summary in status.get("heartbeat_gaps", {}).items():
            gap.add_metric([peer], summary["max_ms"] / 1000)
        yield gap
        wire = CounterMetricFamily(
            "swarmshake_wire_bytes",
            "Bytes written to (sent) and read from (received) this node's sockets",
            labels=["channel", "direction"],
        )
        for channel, counts in status.get("wire_bytes", {}).items():
            for direction, count in counts.items():
                wire.add_metric([channel, direction], count)
        yield wire
        mqtt = GaugeMetricFamily("swarmshake_mqtt_connected", "Connected to the broker")
        mqtt.add_metric([], 1 if status.get("mqtt", {}).get("connected") else 0)
        yield mqtt
        mqtt_drops = CounterMetricFamily(
            "swarmshake_mqtt_dropped",
            "Inbound MQTT payloads dropped (forged, unsigned, replayed, malformed)",
            labels=["topic", "reason"],
        )
        for key, count in status.get("mqtt", {}).get("bad_payloads", {}).items():
            topic, _, reason = key.partition(":")
            mqtt_drops.add_metric([topic, reason], count)
        yield mqtt_drops
        step_time = GaugeMetricFamily("swarmshake_step_seconds", "Last local gradient computation")
        step_time.add_metric([], status.get("worker", {}).get("last_step_s", 0.0))
        yield step_time
        alive = GaugeMetricFamily("swarmshake_view_alive", "Members in the detector view")
        alive.add_metric([], len(status.get("view", [])))
        yield alive


def make_registry(snapshot: Callable[[], dict[str, Any]]) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(NodeCollector(snapshot))  # type: ignore[arg-type]
    return registry
