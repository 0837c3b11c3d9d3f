"""Runs a Mosquitto broker as a child process on loopback for a run or a test.

Mosquitto is the Debian package's binary; the config is written per run (listen
address, persistence off, optional password file) so nothing touches the
system's broker configuration.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from swarmshake.chaos.child_process import stop_child
from swarmshake.chaos.toxiproxy.server import free_port

START_DEADLINE_S = 10.0  # mosquitto listens within ~20 ms of exec


def mosquitto_binary() -> Path:
    found = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None
    )
    if not found:
        raise FileNotFoundError("mosquitto not found: run `make setup` (apt-get install mosquitto)")
    return Path(found)


def mosquitto_version() -> str:
    completed = subprocess.run(
        [str(mosquitto_binary()), "-h"], capture_output=True, text=True, timeout=10, check=False
    )
    first = (completed.stdout or completed.stderr).splitlines()
    return first[0].strip() if first else "unknown"


class MosquittoBroker:
    """``async with MosquittoBroker() as broker: broker.port``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        workdir: Path | None = None,
        pid_dir: Path | None = None,
    ):
        self.host = host
        self.port = port or free_port(host)
        self.pid_dir = pid_dir
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="swarmshake-mosquitto-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _write_config(self) -> Path:
        config = self.workdir / "mosquitto.conf"
        config.write_text(
            "\n".join(
                [
                    f"listener {self.port} {self.host}",
                    "allow_anonymous true",
                    "persistence false",
                    # A harness restarts nodes quickly: keep the will delay at zero and
                    # let a reconnecting client take over its session immediately.
                    "max_keepalive 60",
                    f"log_dest file {self.workdir / 'mosquitto.log'}",
                    "log_type error",
                    "log_type warning",
                    "log_type notice",
                    "",
                ]
            )
        )
        return config

    def _spawn(self) -> subprocess.Popen[bytes]:
        # Popen only forks and execs; waiting for the listener is awaited in start().
        return subprocess.Popen(
            [str(mosquitto_binary()), "-c", str(self._write_config())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def start(self) -> None:
        self._process = self._spawn()
        if self.pid_dir:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            (self.pid_dir / f"mosquitto-{self.port}.pid").write_text(str(self._process.pid))
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"mosquitto exited with {self._process.returncode}; "
                    f"log: {self.workdir / 'mosquitto.log'}"
                )
            try:
                _, writer = await asyncio.open_connection(self.host, self.port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.02)
        await self.stop()
        raise RuntimeError(f"mosquitto did not listen on {self.port} within {START_DEADLINE_S}s")

    async def stop(self) -> None:
        process, self._process = self._process, None
        await stop_child(process)
        if self.pid_dir:
            (self.pid_dir / f"mosquitto-{self.port}.pid").unlink(missing_ok=True)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def __aenter__(self) -> MosquittoBroker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
