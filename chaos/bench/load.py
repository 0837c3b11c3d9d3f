"""Load under chaos: Locust users post ``/infer`` to the nodes while faults run.

``run_load`` starts Locust headless in a child process (it gevent-patches the
standard library on import, so it never runs inside the harness), with a bounded user
count, rate and duration, against loopback (or Docker bridge) addresses only.  Every
request is recorded (``RUN_DIR/load/requests.jsonl``); ``window_load`` then cuts them
by the run's fault windows (from ``RUN_DIR/events``) into ``RUN_DIR/load.json``,
which ``report.html`` and ``summary.md`` show.  The harness (``chaos/runner.py``, for a
scenario with a ``load:`` section) calls ``start_load`` once steady state is reached,
``stop_load`` at the end of the quiesce and ``write_load_results`` once the cluster is
down and the history complete; ``finish_load`` is the last two in one.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from swarmshake.reports.load_model import (
    LoadResults,
    read_request_records,
    window_load,
)

MAX_USERS = 64  # the node's HTTP API accepts 64 connections (http_api.MAX_CONNECTIONS)
MAX_DURATION_S = 3600.0  # a load test is a run's companion, not a soak test
MAX_RATE_PER_USER = 50.0  # requests/s per user; with MAX_USERS bounds the record file
STOP_GRACE_S = 30.0  # Locust's own shutdown (stop users, write stats) after --run-time
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DOCKER_NETWORKS = (ipaddress.ip_network("172.16.0.0/12"),)  # Docker's default bridge pool


class LoadConfigError(ValueError):
    """Bad targets or bounds; the message names the value and the fix."""


class LoadRunError(RuntimeError):
    """Locust failed to run; the message holds the tail of its output."""


def check_target(url: str, allowed_networks: Sequence[IPNetwork] = ()) -> str:
    """``url`` without a trailing slash, if it names an HTTP API on this machine:
    loopback, Docker's default bridge pool, or one of ``allowed_networks`` (the
    project's own Docker network, which Docker may have drawn from another pool)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise LoadConfigError(f"target {url!r}: write http://HOST:PORT (a node's HTTP API)")
    host = parts.hostname
    if host == "localhost":
        return url.rstrip("/")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise LoadConfigError(f"target {url!r}: give an IP address, not a name") from None
    networks = (*DOCKER_NETWORKS, *allowed_networks)
    if not (address.is_loopback or any(address in network for network in networks)):
        raise LoadConfigError(
            f"target {url!r}: load goes only to this machine (loopback) or the project's "
            "Docker network (172.16.0.0/12)"
        )
    return url.rstrip("/")


@dataclass
class LoadProcess:
    process: subprocess.Popen[str]
    records: Path
    targets: list[tuple[str, str]]
    users: int
    duration_s: float
    log: Path


def start_load(
    targets: list[str] | dict[str, str],
    *,
    users: int,
    duration_s: float,
    run_dir: Path,
    rate_per_user: float = 10.0,
    input_dim: int = 32,
    batch: int = 4,
    spawn_rate: float | None = None,
    allowed_networks: Sequence[IPNetwork] = (),
) -> LoadProcess:
    """Start Locust in the background; ``targets`` are URLs (named n1, n2 … in order)
    or a ``{node: url}`` mapping."""
    named = (
        list(targets.items())
        if isinstance(targets, dict)
        else [(f"n{i}", url) for i, url in enumerate(targets, start=1)]
    )
    if not named:
        raise LoadConfigError("no target: give at least one node URL")
    named = [(node, check_target(url, allowed_networks)) for node, url in named]
    if not 1 <= users <= MAX_USERS:
        raise LoadConfigError(f"users = {users} must lie in [1, {MAX_USERS}]")
    if not 1.0 <= duration_s <= MAX_DURATION_S:
        raise LoadConfigError(f"duration {duration_s}s must lie in [1, {MAX_DURATION_S:.0f}] s")
    spawn_rate = float(users) if spawn_rate is None else spawn_rate
    if not 0.0 < spawn_rate <= MAX_USERS:
        raise LoadConfigError(f"spawn_rate = {spawn_rate} must lie in (0, {MAX_USERS}] users/s")
    if not 0.1 <= rate_per_user <= MAX_RATE_PER_USER:
        raise LoadConfigError(
            f"rate_per_user = {rate_per_user} must lie in [0.1, {MAX_RATE_PER_USER}]"
        )
    load_dir = run_dir / "load"
    load_dir.mkdir(parents=True, exist_ok=True)
    records = load_dir / "requests.jsonl"
    records.unlink(missing_ok=True)
    log = load_dir / "locust.log"
    environment = {
        **os.environ,
        "SWARMSHAKE_LOAD_TARGETS": ",".join(f"{node}={url}" for node, url in named),
        "SWARMSHAKE_LOAD_RECORDS": str(records),
        "SWARMSHAKE_LOAD_INPUT_DIM": str(input_dim),
        "SWARMSHAKE_LOAD_BATCH": str(batch),
        "SWARMSHAKE_LOAD_RATE": str(rate_per_user),
    }
    locustfile = Path(__file__).with_name("locustfile.py")
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "--users",
        str(users),
        "--spawn-rate",
        str(spawn_rate),  # default: all users at once, so the fault phase sees full load
        "--run-time",
        f"{int(round(duration_s))}s",
        "--stop-timeout",
        "5",
        "--host",
        named[0][1],
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    with open(log, "w", encoding="utf-8") as log_file:
        process = subprocess.Popen(
            command, env=environment, stdout=log_file, stderr=subprocess.STDOUT, text=True
        )
    return LoadProcess(process, records, named, users, duration_s, log)


def stop_load(load: LoadProcess, *, stop_now: bool = False) -> int | None:
    """Wait for Locust to end (bounded; ``stop_now`` asks it to stop at once, as the
    harness does at the end of the quiesce); returns its exit status."""
    if stop_now and load.process.poll() is None:
        load.process.send_signal(signal.SIGTERM)  # Locust's graceful quit: stop users, summary
    try:
        load.process.wait(timeout=(0.0 if stop_now else load.duration_s) + STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        load.process.send_signal(signal.SIGINT)
        try:
            load.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            load.process.kill()
            load.process.wait()
    return load.process.returncode


def write_load_results(load: LoadProcess, run_dir: Path) -> LoadResults:
    """Cut the recorded requests by the run's fault windows into ``RUN_DIR/load.json``.
    Call it once the history is complete: a fault never healed lasts to its end."""
    if not load.records.is_file():
        tail = load.log.read_text(errors="replace")[-1500:] if load.log.is_file() else ""
        raise LoadRunError(f"Locust recorded no request (exit {load.process.returncode}): {tail}")
    records = read_request_records(load.records)
    sent = [r.t_mono for r in records]
    results = window_load(
        records,
        run_dir,
        users=load.users,
        # What ran, not what was allowed: the harness stops Locust before its --run-time.
        duration_s=round(max(sent) - min(sent), 3) if sent else 0.0,
        targets=[url for _, url in load.targets],
    )
    (run_dir / "load.json").write_bytes(msgspec.json.format(msgspec.json.encode(results), indent=2))
    return results


def finish_load(load: LoadProcess, run_dir: Path, *, stop_now: bool = False) -> LoadResults:
    """``stop_load`` then ``write_load_results``."""
    stop_load(load, stop_now=stop_now)
    return write_load_results(load, run_dir)


def node_http_targets(backend: Any) -> tuple[dict[str, str], list[IPNetwork]]:
    """``{node: base URL}`` of every node's HTTP API on a cluster that is up, and the
    networks those addresses lie in (for ``start_load(allowed_networks=…)``).

    ``Backend.node_endpoint`` says where each node's ``http`` port is: loopback for
    local nodes, the container's address in the project's own network for Docker ones
    (whose subnet is then allowed too)."""
    targets: dict[str, str] = {}
    for name in backend.spec.nodes:
        where = backend.node_endpoint(name, "http")
        if where is None:
            raise LoadConfigError(f"node {name}: the {backend.name} backend names no HTTP address")
        targets[name] = f"http://{where[0]}:{where[1]}"
    networks: list[IPNetwork] = []
    network = getattr(backend, "network", None)
    if network is not None:
        network.reload()
        for pool in network.attrs.get("IPAM", {}).get("Config") or []:
            if pool.get("Subnet"):
                networks.append(ipaddress.ip_network(pool["Subnet"], strict=False))
    return targets, networks


def records_so_far(load: LoadProcess) -> int:
    """Requests recorded until now (a cheap readiness probe: load has really started)."""
    if not load.records.is_file():
        return 0
    with open(load.records, "rb") as handle:
        return sum(1 for _ in handle)


def run_load(
    targets: list[str] | dict[str, str],
    *,
    users: int,
    duration_s: float,
    run_dir: Path,
    **options: float,
) -> LoadResults:
    """``start_load`` then ``finish_load``: the blocking form ``bench load`` uses."""
    return finish_load(
        start_load(targets, users=users, duration_s=duration_s, run_dir=run_dir, **options), run_dir
    )
