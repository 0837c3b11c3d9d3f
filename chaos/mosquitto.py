"""Runs a Mosquitto broker as a child process on loopback for a run or a test.

Mosquitto is the Debian package's binary; the config is written per run (listen
address, persistence off, password file, ACL) so nothing touches the system's broker
configuration.

Nothing connects anonymously (DESIGN.md, "MQTT"): ``BrokerAuth`` makes per-run
credentials, one user per node (named as the node) and one for the harness, and an
ACL in which a node publishes only its own announcement (its last will is that topic
too) and telemetry, and reads only its own commands and address book, the broadcast
command topic and the announcements; only the harness publishes commands and address
books.  The password file is hashed by the Debian package's ``mosquitto_passwd -U``
(PBKDF2-SHA512) from a plaintext file written 0600, so no secret is on a command line.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
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


# Longer than any node id (frames.NODE_ID_PATTERN allows 16), so no node can be it.
HARNESS_USER = "swarmshake-harness"
PASSWD_DEADLINE_S = 30.0  # mosquitto_passwd hashes a few dozen entries in milliseconds


def mosquitto_passwd_binary() -> Path:
    found = shutil.which("mosquitto_passwd") or (
        "/usr/bin/mosquitto_passwd" if os.path.exists("/usr/bin/mosquitto_passwd") else None
    )
    if not found:
        raise FileNotFoundError(
            "mosquitto_passwd not found: run `make setup` (apt-get install mosquitto)"
        )
    return Path(found)


def node_password(broker_secret_hex: str, user: str) -> str:
    """A user's broker password, derived from the run's broker secret (held by the
    harness only; a node gets just its own password), so the harness and the node
    config writer agree without passing passwords around."""
    secret = bytes.fromhex(broker_secret_hex)
    return hmac.new(
        secret, b"swarmshake/mqtt-password/v1/" + user.encode(), hashlib.sha256
    ).hexdigest()


def write_secret(path: Path, text: str) -> Path:
    """Write ``text`` to a file only its owner can read (0600 from creation on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(descriptor, 0o600)  # an existing file keeps its mode through O_CREAT
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)
    return path


@dataclass(frozen=True)
class BrokerAuth:
    """One run's broker users: ``passwords[user]``; nodes are users named as the node."""

    topic_prefix: str
    passwords: dict[str, str]

    @classmethod
    def create(
        cls,
        topic_prefix: str,
        nodes: tuple[str, ...] | list[str] = (),
        broker_secret_hex: str | None = None,
    ) -> BrokerAuth:
        """Users for the harness and ``nodes``; passwords derived from the run's broker
        secret (``ClusterSpec.broker_secret_hex``), or a fresh one."""
        secret = broker_secret_hex or secrets.token_hex(32)
        users = (HARNESS_USER, *nodes)
        return cls(topic_prefix.rstrip("/"), {user: node_password(secret, user) for user in users})

    @property
    def harness_password(self) -> str:
        return self.passwords[HARNESS_USER]

    def acl(self) -> str:
        prefix = self.topic_prefix
        return "\n".join(
            [
                "# Written per run by swarmshake (chaos/mosquitto.py); %u is the user name.",
                f"user {HARNESS_USER}",
                f"topic readwrite {prefix}/#",
                "",
                # Patterns apply to every user; a node's user name is its node id.  The
                # two without %u (every announcement, the broadcast command topic) are
                # meant for every user: mosquitto logs a warning about them, harmless.
                f"pattern write {prefix}/nodes/%u/announce",
                f"pattern write {prefix}/nodes/%u/telemetry",
                f"pattern read {prefix}/nodes/%u/command",
                f"pattern read {prefix}/nodes/%u/addressbook",
                f"pattern read {prefix}/nodes/+/announce",
                f"pattern read {prefix}/command",
                "",
            ]
        )

    def write_broker_files(self, folder: Path) -> tuple[Path, Path]:
        """``passwd`` (hashed) and ``acl`` in ``folder``, both 0600."""
        passwd = write_secret(
            folder / "passwd", "".join(f"{u}:{p}\n" for u, p in self.passwords.items())
        )
        completed = subprocess.run(
            [str(mosquitto_passwd_binary()), "-U", str(passwd)],
            capture_output=True,
            text=True,
            timeout=PASSWD_DEADLINE_S,
            check=False,
        )
        if completed.returncode != 0:
            passwd.unlink(missing_ok=True)  # never leave the plaintext behind
            raise RuntimeError(f"mosquitto_passwd -U failed: {completed.stderr.strip()}")
        passwd.chmod(0o600)
        return passwd, write_secret(folder / "acl", self.acl())

    def write_harness_file(self, path: Path) -> Path:
        """The harness's own credentials (0600), for a person driving ``swarmshake up``."""
        return write_secret(
            path,
            json.dumps({"username": HARNESS_USER, "password": self.harness_password}) + "\n",
        )


def auth_config_lines(folder: str) -> list[str]:
    """Config lines for the password file and ACL found in ``folder`` (as the broker
    sees it: a host path, or the mount point in a container)."""
    lines = ["allow_anonymous false", f"password_file {folder}/passwd", f"acl_file {folder}/acl"]
    if os.geteuid() == 0:
        # As root, mosquitto drops to user "mosquitto", who cannot read the 0600
        # files root wrote; stay root (the broker only listens on loopback or a
        # project network).
        lines.append("user root")
    return lines


class MosquittoBroker:
    """``async with MosquittoBroker() as broker: broker.port``.

    Clients log in: ``broker.auth`` holds the users (``auth`` given, or one made for
    ``topic_prefix`` with only the harness user).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        workdir: Path | None = None,
        pid_dir: Path | None = None,
        auth: BrokerAuth | None = None,
        topic_prefix: str = "swarmshake",
    ):
        self.host = host
        self.port = port or free_port(host)
        self.pid_dir = pid_dir
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="swarmshake-mosquitto-"))
        self.auth = auth or BrokerAuth.create(topic_prefix)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _write_config(self) -> Path:
        config = self.workdir / "mosquitto.conf"
        self.auth.write_broker_files(self.workdir)
        config.write_text(
            "\n".join(
                [
                    f"listener {self.port} {self.host}",
                    *auth_config_lines(str(self.workdir)),
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
