"""A small real TCP program that reads a node's ``node.toml``: the backends' test node.

It exercises what the harness controls without the cost of training: it listens on
its control and bulk ports, dials every peer through the address book (the link
proxies) and sends a timestamped heartbeat line every 20 ms on both channels, keeps
an MQTT session through its broker proxy and records the harness commands it gets,
and writes a checkpoint file every 200 ms.  Everything it observes goes to
``<run_dir>/nodes/<id>/observed.jsonl`` so a test can see a fault's effect:
heartbeats stop across a partition, arrive late under a latency toxic, commands
arrive, checkpoint writes fail with ENOSPC under disk_full.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import tomllib
from pathlib import Path

import aiomqtt

HEARTBEAT_INTERVAL_S = 0.02
CHECKPOINT_INTERVAL_S = 0.2


def main() -> int:
    args = sys.argv[1:]
    config = tomllib.loads(Path(args[args.index("--config") + 1]).read_text())
    asyncio.run(Node(config).run())
    return 0


class Node:
    def __init__(self, config: dict):
        self.config = config
        self.id = config["node"]["id"]
        run_dir = Path(config["node"]["run_dir"])
        self.folder = run_dir / "nodes" / self.id
        self.folder.mkdir(parents=True, exist_ok=True)
        self.checkpoints = run_dir / "checkpoints" / self.id
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.observed = open(self.folder / "observed.jsonl", "a", buffering=1)  # noqa: SIM115
        events = run_dir / "events"
        events.mkdir(parents=True, exist_ok=True)
        self.events = open(events / f"{self.id}.jsonl", "a", buffering=1)  # noqa: SIM115
        self.incarnation = len(list(self.folder.glob("incarnation-*")))
        (self.folder / f"incarnation-{self.incarnation}").touch()

    def observe(self, **fields) -> None:
        self.observed.write(
            json.dumps({"t": time.monotonic(), "pid": os.getpid(), **fields}) + "\n"
        )

    def event(self, kind: str, **fields) -> None:
        record = {"kind": kind, "t_wall": time.time(), "t_mono": time.monotonic(),
                  "node": self.id, "incarnation": self.incarnation, **fields}  # fmt: skip
        self.events.write(json.dumps(record) + "\n")

    async def run(self) -> None:
        network = self.config["network"]
        self.event("start", seed=self.config["node"].get("seed", 0))

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while line := await reader.readline():
                    sender, channel, sent = line.decode().split()
                    self.observe(kind="hb", peer=sender, channel=channel,
                                 delay_ms=(time.monotonic() - float(sent)) * 1000)  # fmt: skip
            writer.close()

        host = network["listen_host"]
        servers = [
            await asyncio.start_server(accept, host, network["control_port"]),
            await asyncio.start_server(accept, host, network["bulk_port"]),
        ]
        self.event("ready")
        async with asyncio.TaskGroup() as group:
            for peer, address in self.config.get("peers", {}).items():
                for channel in ("control", "bulk"):
                    group.create_task(
                        self.dial(peer, channel, address["host"], address[f"{channel}_port"])
                    )
            group.create_task(self.mqtt())
            group.create_task(self.checkpoint_loop())
        for server in servers:
            server.close()

    async def dial(self, peer: str, channel: str, host: str, port: int) -> None:
        while True:
            try:
                async with asyncio.timeout(1.0):
                    _, writer = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.05)
                continue
            try:
                while True:
                    writer.write(f"{self.id} {channel} {time.monotonic()}\n".encode())
                    async with asyncio.timeout(1.0):
                        await writer.drain()
                    await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            except (OSError, TimeoutError):
                self.observe(kind="link_broken", peer=peer, channel=channel)
                writer.close()
                await asyncio.sleep(0.05)

    async def mqtt(self) -> None:
        settings = self.config["mqtt"]
        topic = f"{settings['topic_prefix']}/nodes/{self.id}/command"
        # The broker takes no anonymous clients: log in as the harness issued.
        password = settings.get("password")
        if settings.get("password_file"):
            # Read once, before the first connect; a few bytes from the local disk.
            password = Path(settings["password_file"]).read_text().strip()  # noqa: ASYNC240
        while True:
            try:
                async with aiomqtt.Client(
                    settings["host"], settings["port"], keepalive=2,
                    username=settings.get("username"), password=password,
                ) as client:  # fmt: skip
                    await client.subscribe(topic, qos=1)
                    self.observe(kind="mqtt_connected")
                    async for message in client.messages:
                        # A stand-in trusts the broker's ACL and unwraps the harness's
                        # signed envelope unchecked (the reference node checks the MAC).
                        command = json.loads(json.loads(message.payload)["body"])
                        self.observe(kind="command", command=command)
                        if command.get("command") == "leave":
                            self.event("stop", reason=command.get("reason", ""))
                            os._exit(0)
            except aiomqtt.MqttError:
                self.observe(kind="mqtt_lost")
                await asyncio.sleep(0.1)

    async def checkpoint_loop(self) -> None:
        index = 0
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            index += 1
            try:
                (self.checkpoints / f"ckpt-{index:06d}.bin").write_bytes(os.urandom(8192))
                self.observe(kind="checkpoint", ok=True)
            except OSError as error:
                self.observe(kind="checkpoint", ok=False, errno=error.errno)


if __name__ == "__main__":
    raise SystemExit(main())
