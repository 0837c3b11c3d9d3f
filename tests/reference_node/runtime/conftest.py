"""Shared fixtures: a real Mosquitto broker on a free loopback port, always killed."""

from __future__ import annotations

import getpass
import socket
import subprocess
import time
from pathlib import Path

import pytest

MOSQUITTO = "/usr/sbin/mosquitto"
MQTT_USER, MQTT_PASSWORD = "node", "s3cret-test"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Broker:
    """A mosquitto process with a password file; ``stop``/``start`` keep the port."""

    def __init__(self, directory: Path):
        self.port = free_port()
        self.user, self.password = MQTT_USER, MQTT_PASSWORD
        self.directory = directory
        passwords = directory / "passwd"
        subprocess.run(
            ["mosquitto_passwd", "-b", "-c", str(passwords), MQTT_USER, MQTT_PASSWORD],
            check=True,
            capture_output=True,
        )
        passwords.chmod(0o600)
        self.config = directory / "mosquitto.conf"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous false\n"
            f"password_file {passwords}\n"
            "persistence false\n"
            # As root, mosquitto drops to user "mosquitto", who cannot read pytest's
            # private temp folder; stay the current user instead.
            f"user {getpass.getuser()}\n"
        )
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=(self.directory / "broker.log").open("ab"),
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"mosquitto did not listen on {self.port}")

    def node_mqtt(self, topic_prefix: str = "swarmshake/test", **extra: object) -> dict:
        """The ``[mqtt]`` section of a node (LocalCluster's ``mqtt=``) for this broker;
        a one-second keepalive so a lost broker is noticed within a test's time."""
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "username": self.user,
            "password": self.password,
            "topic_prefix": topic_prefix,
            "keepalive_s": 1,
            **extra,
        }

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=5)
            self.process = None


@pytest.fixture
def broker(tmp_path):
    if not Path(MOSQUITTO).exists():
        pytest.skip("mosquitto is not installed (apt-get install -y mosquitto)")
    server = Broker(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
