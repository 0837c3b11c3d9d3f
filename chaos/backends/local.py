"""The local backend: nodes, Mosquitto and Toxiproxy as child processes on loopback.

The default backend and what ``make demo`` uses: no Docker, no root needed (except
for the ``disk_full`` fault, which mounts a full tmpfs over a node's checkpoint
folder).  Nodes are forked from a zygote that has torch imported (``zygote.py``
says why), each in its own process group, so a crash or pause signals a node's
control and worker processes together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from swarmshake.chaos.backends.base import (
    Backend,
    BackendError,
    BrokerHandle,
    ClusterSpec,
    NodeHandle,
    UnsupportedFault,
)
from swarmshake.chaos.cleanup import Registry, process_state, unmount
from swarmshake.chaos.links import (
    Link,
    broker_proxy_name,
    proxy_name,
)
from swarmshake.chaos.mosquitto import MosquittoBroker
from swarmshake.chaos.systems.base import Launch, NodeContext, ServiceSpec
from swarmshake.chaos.toxiproxy import ChannelSplit, ToxiproxyServer

HOST = "127.0.0.1"
ZYGOTE_READY_TIMEOUT_S = 120.0  # importing torch on a loaded 2-core machine took up to ~20 s
SPAWN_TIMEOUT_S = 10.0  # a fork answers in milliseconds; past this the zygote is wedged
EXIT_WAIT_S = 5.0  # a SIGKILLed group is reaped within milliseconds
STOP_GRACE_S = 3.0  # a node's clean shutdown (flush events, close sockets) takes < 1 s
PROXY_CREATE_CONCURRENCY = 16  # Toxiproxy serialises proxy creation; more buys nothing
SIGNAL_EFFECT_TIMEOUT_S = 1.0  # SIGSTOP/SIGCONT take effect within a scheduler tick
PORT_RANGE_FLOOR = 20000  # below: well-known and registered services
DUTY_PERIOD_S = 0.02  # CPU-throttle duty cycle: short enough not to look like a pause
MAX_NODE_PROCESSES = 4096  # a node's process tree is a launcher and a few workers; bounds the walk
DISK_FULL_TMPFS = "64k"  # holds the copied checkpoints' names, not their data


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def reserve_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct free ports, chosen *below* the kernel's ephemeral range.

    Every listener of a cluster (nodes and proxies) gets a port picked here, before
    anything starts.  Ports from the ephemeral range could be handed to someone
    else's outgoing connection (or a ``:0`` listener) between our pick and our bind;
    ports below it are only taken by explicit binds.
    """
    low_ephemeral, _ = _ephemeral_range()
    low = PORT_RANGE_FLOOR
    high = max(low + count * 4, low_ephemeral - 1)
    rng = random.Random()
    chosen: list[int] = []
    tried = 0
    while len(chosen) < count:
        tried += 1
        if tried > count * 50:
            raise BackendError(f"could not find {count} free ports in {low}..{high}")
        port = rng.randrange(low, high)
        if port in chosen:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        chosen.append(port)
    return chosen


# Registry names of the two Toxiproxy servers (control + broker, bulk).
TOXIPROXY_NAMES = ("toxiproxy", "toxiproxy-bulk")


class Zygote:
    """Client of ``zygote.py``: asks it to fork nodes and hears when they exit."""

    def __init__(self, registry: Registry | None, log_path: Path):
        self.registry = registry
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None
        self.exited: dict[int, int] = {}
        self._waiters: dict[int, asyncio.Future[int]] = {}
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._next_id = 0
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        with open(self.log_path, "ab") as log:  # noqa: ASYNC230 - a local file, opened once
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "swarmshake.chaos.backends.zygote", "",
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True,  # Ctrl-C is the harness's to handle, not the nodes'
                limit=1 << 20,
            )  # fmt: skip
        if self.registry:
            self.registry.add_process("zygote", self.process.pid)
        self._reader = asyncio.create_task(self._read_loop())

    async def wait_ready(self) -> dict[str, Any]:
        assert self._ready is not None
        try:
            async with asyncio.timeout(ZYGOTE_READY_TIMEOUT_S):
                return await self._ready
        except TimeoutError:
            raise BackendError(
                f"node zygote not ready within {ZYGOTE_READY_TIMEOUT_S}s; log: {self.log_path}"
            ) from None

    async def _read_loop(self) -> None:
        assert self.process and self.process.stdout
        stdout = self.process.stdout
        while line := await stdout.readline():
            message = json.loads(line)
            if message.get("ready") and self._ready and not self._ready.done():
                self._ready.set_result(message)
            elif "exited" in message:
                self.exited[message["exited"]] = message["status"]
            elif "id" in message:
                waiter = self._waiters.pop(message["id"], None)
                if waiter and not waiter.done():
                    if "pid" in message:
                        waiter.set_result(message["pid"])
                    else:
                        waiter.set_exception(BackendError(f"zygote: {message.get('error')}"))
        if self._ready and not self._ready.done():
            self._ready.set_exception(BackendError(f"node zygote exited; log: {self.log_path}"))
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(BackendError("node zygote exited"))

    async def spawn(
        self, program: str, argv: list[str], log: Path, env: dict[str, str], cwd: str = ""
    ) -> int:
        assert self.process and self.process.stdin
        async with self._lock:
            self._next_id += 1
            request_id = self._next_id
            waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._waiters[request_id] = waiter
            request = {
                "id": request_id,
                "program": program,
                "argv": argv,
                "log": str(log),
                "env": env,
                "cwd": cwd,
            }
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            await self.process.stdin.drain()
        async with asyncio.timeout(SPAWN_TIMEOUT_S):
            return await waiter

    def alive(self, pid: int) -> bool:
        return pid not in self.exited and process_state(pid) not in (None, "Z")

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin:
            process.stdin.close()  # EOF: the zygote kills its children and exits
        try:
            async with asyncio.timeout(EXIT_WAIT_S):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
        if self._reader:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self.registry:
            self.registry.remove_process("zygote")


class LocalNode(NodeHandle):
    """One node: a process group started from the system's ``Launch``.

    A launch that names a Python module is forked from the zygote when the backend
    runs one (the reference node's fast path); any other command, or any node in a
    network namespace, is executed (``ip netns exec <ns> argv…``) in a new session.
    """

    def __init__(self, backend: LocalBackend, name: str, launch: Launch):
        self.backend = backend
        self.name = name
        self.launch = launch
        self.pid: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.starts = 0
        self._throttle: asyncio.Task[None] | None = None
        self._disk_mount: Path | None = None

    @property
    def log_path(self) -> Path:
        return self.backend.spec.run_dir / "logs" / f"{self.name}.log"

    async def start(self) -> None:
        launch = self.launch
        env = dict(launch.env)
        cwd = str(launch.cwd) if launch.cwd else ""
        zygote = self.backend.zygote
        netns = self.backend.netns
        if launch.python_module and zygote is not None and netns is None:
            self.process = None
            self.pid = await zygote.spawn(
                launch.python_module, list(launch.module_argv), self.log_path, env, cwd
            )
        else:
            argv = [*(netns.exec_prefix(self.name) if netns else []), *launch.argv]
            self.process = await asyncio.to_thread(spawn_command, argv, env, cwd, self.log_path)
            self.pid = self.process.pid
        self.starts += 1
        self.paused = False
        if self.backend.registry:
            self.backend.registry.add_process(f"node-{self.name}", self.pid, group=True)

    def is_running(self) -> bool:
        if self.pid is None:
            return False
        if self.process is not None:
            return self.process.poll() is None and process_state(self.pid) not in (None, "Z")
        zygote = self.backend.zygote
        return zygote is not None and zygote.alive(self.pid)

    def _signal(self, signum: int) -> None:
        if self.pid is None:
            return
        # The node's group first, then every descendant that left it: a launcher such
        # as torchrun starts its workers in sessions of their own, and a crash or a
        # pause must hit the whole node, not only the launcher.
        strays = [pid for pid in descendants(self.pid) if _pgid(pid) != self.pid]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    async def _wait_exit(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.is_running():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    async def crash(self) -> None:
        await self._stop_throttle()
        self._signal(signal.SIGKILL)
        if not await self._wait_exit(EXIT_WAIT_S):
            raise BackendError(f"{self.name} (pid {self.pid}) survived SIGKILL for {EXIT_WAIT_S}s")
        self.paused = False
        if self.backend.registry:
            self.backend.registry.remove_process(f"node-{self.name}")

    async def stop(self) -> None:
        await self._stop_throttle()
        if self.paused:
            self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        if not await self._wait_exit(STOP_GRACE_S):
            await self.crash()
        if self.backend.registry:
            self.backend.registry.remove_process(f"node-{self.name}")
        await self.set_disk_full(False)

    async def restart(self) -> None:
        if self.is_running():
            await self.crash()
        await self.start()

    async def _wait_state(self, stopped: bool) -> None:
        """Signals are delivered asynchronously: return once the kernel shows the effect."""
        deadline = time.monotonic() + SIGNAL_EFFECT_TIMEOUT_S
        while self.pid is not None and time.monotonic() < deadline:
            state = process_state(self.pid)
            if state is None or state == "Z" or (state == "T") == stopped:
                return
            await asyncio.sleep(0.001)

    async def pause(self) -> None:
        await self._stop_throttle()
        self._signal(signal.SIGSTOP)
        self.paused = True
        await self._wait_state(stopped=True)

    async def resume(self) -> None:
        await self._stop_throttle()
        self._signal(signal.SIGCONT)
        self.paused = False
        await self._wait_state(stopped=False)

    async def set_cpu_fraction(self, fraction: float) -> None:
        """A SIGSTOP/SIGCONT duty cycle: runs ``fraction`` of every 20 ms.

        Why not cgroups: they need root and a writable cgroup tree, which CI
        containers often lack; the duty cycle works for any user, and at 20 ms it
        stays far below the detector's suspicion timeout, so the node is slow, not
        paused.  (The Docker backend uses ``docker update --cpus``.)
        """
        await self._stop_throttle()
        if fraction >= 1.0:
            return

        async def duty() -> None:
            try:
                while True:
                    self._signal(signal.SIGCONT)
                    await asyncio.sleep(DUTY_PERIOD_S * fraction)
                    self._signal(signal.SIGSTOP)
                    await asyncio.sleep(DUTY_PERIOD_S * (1.0 - fraction))
            finally:
                if not self.paused:
                    self._signal(signal.SIGCONT)

        self._throttle = asyncio.create_task(duty())

    async def _stop_throttle(self) -> None:
        task, self._throttle = self._throttle, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def set_disk_full(self, full: bool) -> None:
        """Mount a full tmpfs over the checkpoint folder (existing files copied in)."""
        folder = self.backend.spec.checkpoint_dir(self.name)
        if not full:
            mount, self._disk_mount = self._disk_mount, None
            if mount is not None:
                await asyncio.to_thread(unmount, str(mount))
                if self.backend.registry:
                    self.backend.registry.remove_mount(mount)
            return
        if self._disk_mount is not None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(_mount_full_tmpfs, folder)
        self._disk_mount = folder
        if self.backend.registry:
            self.backend.registry.add_mount(folder)


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (parents before children), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    frontier = [root]
    while frontier and len(found) < MAX_NODE_PROCESSES:
        parent = frontier.pop(0)
        for child in children.get(parent, []):
            found.append(child)
            frontier.append(child)
    return found


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def spawn_command(
    argv: list[str], env: dict[str, str], cwd: str, log: Path
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its own process group), output to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        try:
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, **env}, cwd=cwd or None, start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            raise BackendError(f"cannot start {argv[0]}: {error.strerror}") from None


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the group, SIGKILL it after ``grace_s``, and reap the leader."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
            return


def _mount_full_tmpfs(folder: Path) -> None:
    staging = folder.with_name(folder.name + ".before-disk-full")
    subprocess.run(["rm", "-rf", str(staging)], check=False, timeout=30)
    subprocess.run(["cp", "-a", str(folder), str(staging)], check=True, timeout=60)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_FULL_TMPFS}", "tmpfs", str(folder)],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        raise UnsupportedFault(
            "disk_full on the local backend mounts a tmpfs and needs root (CAP_SYS_ADMIN): "
            f"{mounted.stderr.strip()}"
        )
    # Keep the newest checkpoints readable where they fit, then fill what is left.
    subprocess.run(f"cp -a {staging}/. {folder}/ 2>/dev/null", shell=True, timeout=60, check=False)
    subprocess.run(["dd", "if=/dev/zero", f"of={folder}/.disk-full-filler", "bs=4k"],
                   capture_output=True, timeout=30, check=False)  # fmt: skip
    subprocess.run(["rm", "-rf", str(staging)], check=False, timeout=30)


class LocalBroker(BrokerHandle):
    def __init__(self, backend: LocalBackend, port: int):
        self.backend = backend
        self.port = port
        self.process: MosquittoBroker | None = None
        self._lost = False

    async def start(self) -> None:
        workdir = self.backend.spec.run_dir / "broker"
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = MosquittoBroker(
            host=HOST, port=self.port, workdir=workdir, auth=self.backend.broker_auth()
        )
        self.backend.broker_auth().write_harness_file(
            self.backend.spec.run_dir / "harness" / "mqtt-credentials.json"
        )
        await self.process.start()
        if self.backend.registry and self.process.pid:
            self.backend.registry.add_process("mosquitto", self.process.pid)

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            await process.stop()
        if self.backend.registry:
            self.backend.registry.remove_process("mosquitto")

    async def lose(self) -> None:
        if self.process and self.process.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)  # a lost broker says no goodbye
        await self.stop()
        self._lost = True

    async def restore(self) -> None:
        if self._lost:
            await self.start()
            self._lost = False

    @property
    def lost(self) -> bool:
        return self._lost


class LocalBackend(Backend):
    name = "local"
    supported_ops = frozenset(
        {
            "crash", "restart", "pause", "resume", "cpu_throttle", "disk_full",
            "checkpoint_corrupt", "clock_skew", "byzantine", "churn", "broker_loss",
            "partition", "heal", "latency", "bandwidth", "blackhole", "reset_peer",
            "slicer", "limit_data", "slow_close", "hold_bulk",
        }
    )  # fmt: skip

    def __init__(self, spec: ClusterSpec, *, registry: Registry | None = None):
        super().__init__(spec)
        self.registry = registry
        self.zygote: Zygote | None = None  # the reference node's fast path, started by up
        self.netns: Any = None  # chaos.netns.NetnsNetwork for ``link_faults = "netns"``
        self.services: dict[str, subprocess.Popen[bytes]] = {}
        self.toxiproxy: ChannelSplit | None = None
        self._nodes: dict[str, LocalNode] = {}
        self._links: dict[tuple[str, str], Link] = {}
        self._broker: LocalBroker | None = None
        self.node_ports: dict[str, tuple[int, ...]] = {}
        self._proxy_ports: list[int] = []
        self.timings: dict[str, float] = {}
        self.incidents: list[dict[str, Any]] = []

    def _incident(self, kind: str, data: dict[str, Any]) -> None:
        self.incidents.append({"kind": kind, "t_mono": time.monotonic(), **data})
        if kind == "toxiproxy_restart":
            self._register_toxiproxy()  # the restarted server's new pid

    async def up(self) -> None:
        spec = self.spec
        system = self.system
        started = time.monotonic()
        for folder in ("logs", "events", "checkpoints", "nodes"):
            (spec.run_dir / folder).mkdir(parents=True, exist_ok=True)
        self.record_system()
        if system.uses_zygote and system.link_faults != "netns":
            # The zygote's torch import is the slow part: start it first, overlap the rest.
            self.zygote = Zygote(self.registry, spec.run_dir / "logs" / "zygote.log")
            await self.zygote.start()
        n = len(spec.nodes)
        per_node = len(system.ports)
        proxied = system.link_faults == "proxy" and not spec.direct_links
        services = system.services(spec)
        extra = 3 + len(services)  # broker, the two Toxiproxy APIs, one port per service
        channels = system.link_channels()  # channel -> proxied port (proxy systems)
        broker_proxies = n if system.needs_broker else 0
        proxy_count = n * (n - 1) * len(channels) + broker_proxies if proxied else 0
        ports = reserve_ports(per_node * n + extra + proxy_count)
        self._proxy_ports = ports[per_node * n + extra :]
        broker_port, api_port, bulk_api_port = ports[per_node * n : per_node * n + 3]
        service_ports = ports[per_node * n + 3 : per_node * n + extra]
        for index, name in enumerate(spec.nodes):
            self.node_ports[name] = tuple(ports[index * per_node : (index + 1) * per_node])
        if system.needs_broker:
            self._broker = LocalBroker(self, broker_port)
        if system.link_faults == "netns":
            from swarmshake.chaos.netns import NetnsLink, NetnsNetwork

            self.netns = NetnsNetwork(spec.run_id, registry=self.registry)
            await self.netns.create(spec.nodes)
            addresses = dict(self.netns.addresses)
            service_host = self.netns.hub_address
            for src in spec.nodes:
                for dst in spec.nodes:
                    if src != dst:
                        self._links[(src, dst)] = NetnsLink(self.netns, src, dst)  # type: ignore[assignment]
        else:
            addresses = {name: HOST for name in spec.nodes}
            service_host = HOST
        listeners: dict[str, int] = {}
        if proxied:
            # Bulk proxies get their own server (chaos/toxiproxy/split.py says why).
            self.toxiproxy = ChannelSplit(*(
                ToxiproxyServer(
                    host=HOST, port=port, log_path=spec.run_dir / "logs" / f"{name}.log",
                    on_incident=self._incident,
                )
                for name, port in (("toxiproxy", api_port), ("toxiproxy-bulk", bulk_api_port))
            ))  # fmt: skip
            starts = [s.start() for s in self.toxiproxy.servers]
            if self._broker is not None:
                starts.append(self._broker.start())
            await asyncio.gather(*starts)
            self._register_toxiproxy()
            listeners = await self._create_proxies()
        elif self._broker is not None:
            await self._broker.start()
            if system.link_faults == "proxy":
                listeners = self._direct_listeners()
        service_addresses: dict[str, tuple[str, int]] = {}
        for service, port in zip(services, service_ports, strict=True):
            await self._start_service(service, service_host, port)
            service_addresses[service.name] = (service_host, port)
        self.timings["infrastructure_s"] = time.monotonic() - started
        for index, name in enumerate(spec.nodes):
            ctx = self._context(name, index, addresses, listeners, service_addresses)
            system.configure(ctx)
            self._nodes[name] = LocalNode(self, name, system.launch(ctx))
        if self.zygote is not None:
            await self.zygote.wait_ready()
            self.timings["zygote_ready_s"] = time.monotonic() - started
        await asyncio.gather(*(node.start() for node in self._nodes.values()))
        self.timings["nodes_spawned_s"] = time.monotonic() - started

    def _context(
        self,
        name: str,
        index: int,
        addresses: dict[str, str],
        listeners: dict[str, int],
        services: dict[str, tuple[str, int]],
    ) -> NodeContext:
        """What node ``name`` is told: its ports, and what it dials for each peer."""
        system = self.system
        peers: dict[str, dict[str, tuple[str, int]]] = {}
        for peer in self.spec.nodes:
            if peer == name:
                continue
            own = dict(zip(system.ports, self.node_ports[peer], strict=True))
            if listeners:  # proxied (or direct) links: dial the listener named
                own.update({
                    port_name: listeners[proxy_name(name, peer, channel)]
                    for channel, port_name in system.link_channels().items()
                })  # fmt: skip
            peers[peer] = {port_name: (addresses[peer] if not listeners else HOST, port)
                           for port_name, port in own.items()}  # fmt: skip
        broker = None
        if self._broker is not None:
            port = listeners.get(broker_proxy_name(name), self._broker.port)
            broker = (HOST, port)
        return NodeContext(
            spec=self.spec, name=name, index=index, address=addresses[name],
            ports=dict(zip(system.ports, self.node_ports[name], strict=True)), peers=peers,
            addresses=addresses, services=services, run_dir=self.spec.run_dir,
            python=sys.executable, broker=broker,
        )  # fmt: skip

    async def _start_service(self, service: ServiceSpec, host: str, port: int) -> None:
        """A cluster service in the hub namespace (or on loopback), outside every node's."""
        launch = service.launch(host, port)
        prefix = self.netns.exec_prefix(None) if self.netns is not None else []
        log = self.spec.run_dir / "logs" / f"{service.name}.log"
        process = await asyncio.to_thread(
            spawn_command, [*prefix, *launch.argv], dict(launch.env),
            str(launch.cwd) if launch.cwd else "", log,
        )  # fmt: skip
        self.services[service.name] = process
        if self.registry:
            self.registry.add_process(f"service-{service.name}", process.pid, group=True)

    def _register_toxiproxy(self) -> None:
        if self.registry is None or self.toxiproxy is None:
            return
        for name, server in zip(TOXIPROXY_NAMES, self.toxiproxy.servers, strict=True):
            if server.pid:
                self.registry.add_process(name, server.pid)

    def _proxied_upstreams(self) -> list[tuple[str, int]]:
        """(proxy name, the port it forwards to) for every proxy of a ``proxy`` system:
        one per directed link and channel (``System.link_channels``), and one per
        node's broker connection when the system talks to the broker."""
        ports = self.system.ports
        channels = self.system.link_channels()
        wanted: list[tuple[str, int]] = []
        for src in self.spec.nodes:
            if self._broker is not None:
                wanted.append((broker_proxy_name(src), self._broker.port))
            for dst in self.spec.nodes:
                if src == dst:
                    continue
                own = dict(zip(ports, self.node_ports[dst], strict=True))
                for channel, port_name in channels.items():
                    wanted.append((proxy_name(src, dst, channel), own[port_name]))
        return wanted

    def _direct_listeners(self) -> dict[str, int]:
        """``links: direct``: every "proxy" port is the destination's own listener."""
        return dict(self._proxied_upstreams())

    async def _create_proxies(self) -> dict[str, int]:
        assert self.toxiproxy is not None
        wanted = self._proxied_upstreams()
        gate = asyncio.Semaphore(PROXY_CREATE_CONCURRENCY)
        toxiproxy = self.toxiproxy

        listen_ports = dict(zip((name for name, _ in wanted), self._proxy_ports, strict=True))

        async def create(name: str, port: int) -> tuple[str, int]:
            async with gate:
                proxy = await toxiproxy.create_proxy(
                    name, f"{HOST}:{listen_ports[name]}", f"{HOST}:{port}"
                )
                return name, proxy.listen_port

        listeners = dict(await asyncio.gather(*(create(n, p) for n, p in wanted)))
        for src in self.spec.nodes:
            for dst in self.spec.nodes:
                if src != dst:
                    self._links[(src, dst)] = Link(
                        toxiproxy, src, dst, tuple(self.system.link_channels())
                    )
        return listeners

    async def down(self) -> None:
        errors: list[str] = []
        stop_nodes = [node.stop() for node in self._nodes.values() if node.pid is not None]
        for result in await asyncio.gather(*stop_nodes, return_exceptions=True):
            if isinstance(result, BaseException):
                errors.append(repr(result))
        if self.zygote is not None:
            await self.zygote.stop()
        for name, process in list(self.services.items()):
            await asyncio.to_thread(stop_process_group, process, STOP_GRACE_S)
            if self.registry:
                self.registry.remove_process(f"service-{name}")
        self.services.clear()
        if self._broker is not None:
            await self._broker.stop()
        if self.toxiproxy is not None:
            await asyncio.gather(*(server.stop() for server in self.toxiproxy.servers))
            if self.registry:
                for name in TOXIPROXY_NAMES:
                    self.registry.remove_process(name)
            self.toxiproxy = None
        if self.netns is not None:
            await self.netns.destroy()
        if errors:
            raise BackendError(f"down: {'; '.join(errors)}")

    def broker_address(self) -> tuple[str, int]:
        return HOST, self.broker.port

    def node_endpoint(self, name: str, port_name: str) -> tuple[str, int] | None:
        ports = self.node_ports.get(name)
        if ports is None or port_name not in self.system.ports:
            return None
        address = self.netns.addresses[name] if self.netns else HOST
        return address, ports[self.system.ports.index(port_name)]

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "toxiproxy": self.toxiproxy.control.url if self.toxiproxy else None,
            "toxiproxy_bulk": self.toxiproxy.bulk.url if self.toxiproxy else None,
            "broker": f"{HOST}:{self._broker.port}" if self._broker else None,
            "nodes": {
                name: {
                    "pid": node.pid,
                    "running": node.is_running(),
                    "paused": node.paused,
                    **{
                        f"{port_name}_port": port
                        for port_name, port in zip(
                            self.system.ports, self.node_ports[name], strict=True
                        )
                    },
                    "address": self.netns.addresses[name] if self.netns else HOST,
                    "log": str(node.log_path),
                }
                for name, node in self._nodes.items()
            },
            "system": self.system.name,
            "services": {name: process.pid for name, process in self.services.items()},
            "incidents": self.incidents,
        }
