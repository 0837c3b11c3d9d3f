"""A minimal launcher of local node processes (the tests' cluster; the harness's
``local`` backend builds on it).

Writes one TOML file per node into ``RUN_DIR/config/``, with fixed loopback ports
picked up front so every node's address book is complete before any starts, and
starts each node as ``python -m swarmshake.reference_node --config FILE``.  Node
output goes to ``RUN_DIR/logs/<node>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swarmshake.reference_node.config import to_toml

STATUS_TIMEOUT_S = 2.0  # a node's /status answers in milliseconds unless it is stopped


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Distinct free ports (held open together while picking, so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextlib.contextmanager
def run_dir_or_scratch(run_dir: Path | None, prefix: str) -> Iterator[Path]:
    """A benchmark's run directory: ``run_dir`` when given (kept), else a scratch
    folder removed once the figures are read, on success or failure."""
    if run_dir is not None:
        yield run_dir
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        yield Path(scratch)


class LocalCluster:
    def __init__(
        self,
        run_dir: Path,
        nodes: list[str],
        *,
        training: dict[str, Any] | None = None,
        step: dict[str, Any] | None = None,
        detector: dict[str, Any] | None = None,
        mqtt: dict[str, Any] | None = None,
        extra: dict[str, dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
    ):
        self.run_dir = Path(run_dir).resolve()
        self.nodes = list(nodes)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        ports = free_ports(3 * len(nodes))
        self.ports = {
            node: {"control": ports[3 * i], "bulk": ports[3 * i + 1], "http": ports[3 * i + 2]}
            for i, node in enumerate(nodes)
        }
        self.run_key_hex = secrets.token_hex(32)
        self.env = {**os.environ, **(env or {})}
        (self.run_dir / "config").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for node in nodes:
            raw: dict[str, Any] = {
                "node": {"id": node, "members": self.nodes, "run_dir": str(self.run_dir)},
                "network": {
                    "listen_host": "127.0.0.1",
                    "control_port": self.ports[node]["control"],
                    "bulk_port": self.ports[node]["bulk"],
                    "http_port": self.ports[node]["http"],
                    "run_key_hex": self.run_key_hex,
                },
                "peers": {
                    peer: {
                        "host": "127.0.0.1",
                        "control_port": self.ports[peer]["control"],
                        "bulk_port": self.ports[peer]["bulk"],
                    }
                    for peer in nodes
                    if peer != node
                },
                "training": training or {},
                "step": step or {},
                # Nodes started together on a small machine come up seconds apart
                # (each imports torch); a peer that has not started yet is not a
                # crash, so first heartbeats get a long grace.  Detection of a node
                # that was up is unaffected (its watch has heartbeat deadlines).
                "detector": {"startup_grace_s": 20.0, **(detector or {})},
                "mqtt": mqtt,
            }
            for section, fields in (extra or {}).items():
                raw.setdefault(section, {}).update(fields)
            self.config_path(node).write_text(to_toml({k: v for k, v in raw.items() if v}))

    def config_path(self, node: str) -> Path:
        return self.run_dir / "config" / f"{node}.toml"

    def start(self, node: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.run_dir / "logs" / f"{node}.log").open("ab")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "swarmshake.reference_node",
                "--config",
                str(self.config_path(node)),
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.run_dir,
        )
        log.close()
        self.processes[node] = process
        return process

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node)

    def kill(self, node: str, signum: int = signal.SIGKILL) -> None:
        process = self.processes[node]
        process.send_signal(signum)
        if signum in (signal.SIGKILL, signal.SIGTERM):
            process.wait(timeout=30)

    def alive(self, node: str) -> bool:
        process = self.processes.get(node)
        return process is not None and process.poll() is None

    def status(self, node: str) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{self.ports[node]['http']}/status"
        try:
            with urllib.request.urlopen(url, timeout=STATUS_TIMEOUT_S) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            return None

    def ready(self, node: str) -> bool:
        status = self.status(node)
        return bool(status and status.get("ready"))

    def wait_ready(self, nodes: list[str] | None = None, timeout_s: float = 180.0) -> None:
        nodes = nodes or self.nodes
        self.wait_for(lambda: all(self.ready(n) for n in nodes), timeout_s, what=f"{nodes} ready")

    def wait_for(self, predicate, timeout_s: float, poll_s: float = 0.2, what: str = "") -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            for node, process in self.processes.items():
                if process.poll() not in (None, 0, -signal.SIGKILL, -signal.SIGTERM):
                    raise RuntimeError(
                        f"{node} exited with {process.returncode}:\n{self.log_tail(node)}"
                    )
            time.sleep(poll_s)
        raise TimeoutError(f"not within {timeout_s}s: {what}")

    def log_tail(self, node: str, lines: int = 30) -> str:
        path = self.run_dir / "logs" / f"{node}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
