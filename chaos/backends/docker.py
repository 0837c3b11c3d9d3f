"""The Docker backend: nodes, services, Mosquitto and Toxiproxy as containers on one network.

Everything runs on one project-created bridge network ``swarmshake-<run-id>``; every
container and the network carry ``swarmshake.project`` and ``swarmshake.run=<id>``
labels, so ``chaos/cleanup.py`` finds leftovers.  The run directory is bind-mounted
at the same absolute path in every node container, so events and checkpoints
survive container death and the node's config paths mean the same on both sides.

**Any system, one path.**  What starts follows from what the system declares
(``DockerPlan``), never from its name; the reference node is one system among the
others.  Every node runs its system's own command (``System.launch``, after
``System.configure`` wrote its files) in the node image, in its holder's namespace
(below), listening on fixed ports there (``DockerPlan.ports``); a program of the
harness's virtual environment (the interpreter, ``torchrun``, ``torchft_lighthouse``)
is run from the image's ``/opt/venv``, which holds the same pinned packages (the
``torchft`` extra included), and the launch's ``mounts`` (a script beside a suite, a
test's program) appear read-only at their host paths.  Then, by declaration:

- ``link_faults = "proxy"`` (the reference node; any system that dials the addresses
  it is given): Toxiproxy, the host's static binary mounted into a ``base_tag()``
  container (no registry can be reached), alias ``toxiproxy``; one proxy per
  directed link and proxied channel (``System.link_channels()``), each on its own
  port, and a node's ``ctx.peers`` name those listeners.  Nodes get ``NET_ADMIN`` so
  ``tc netem`` can act in their namespace.
- ``needs_broker``: Mosquitto, the host's Debian binary run in a base container with
  the host's library folder mounted read-only (same Debian release, so the same
  ABI), with the run's logins and ACL; reached through one proxy per node under
  ``proxy`` link faults (``broker_loss`` and the harness's MQTT commands act there),
  at its own address otherwise.
- ``link_faults = "netns"`` (torchft, TorchElastic): each node's holder namespace is
  its namespace for link faults: the same iptables/``tc`` rules as on the local
  backend (``chaos/netns.py``), entered from the host.
- ``System.services`` (a rendezvous store, a Lighthouse): each in a holder of its
  own on the project network, so no node fault reaches it; the nodes start once it
  accepts connections.

Crash is ``docker kill``, restart ``docker start`` (same container, new process,
new incarnation from the mounted data folder), pause ``docker pause``, CPU throttle
``docker update --cpu-quota``.  ``netem`` shapes the sending node's egress.

**Network holders.** Each node, service and the broker run in the network namespace
of a small holder container (``sleep infinity``) that owns the address and the DNS
alias, as a pod's sandbox does in Kubernetes.  A crash then kills the process but not
the host: a dial to the dead node is refused at once, as on the local backend.
Without holders the alias vanished with the killed container, and Toxiproxy, which
resolves its upstream inside its accept loop, waited on Docker's DNS for the unknown
name (5 s timeouts seen) while every client of that proxy queued in the backlog, so a
restarted node heard nothing from its peers for seconds and declared them dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmshake.chaos import docker_image
from swarmshake.chaos.backends.base import (
    Backend,
    BackendError,
    BrokerHandle,
    ClusterSpec,
    NodeHandle,
    UnsupportedFault,
)
from swarmshake.chaos.cleanup import LABEL, RUN_LABEL, Registry
from swarmshake.chaos.links import Link, broker_proxy_name, proxy_name
from swarmshake.chaos.mosquitto import auth_config_lines, mosquitto_binary
from swarmshake.chaos.netns import HolderNamespaces, NetnsLink
from swarmshake.chaos.systems.base import Launch, NodeContext, System
from swarmshake.chaos.toxiproxy import (
    ChannelSplit,
    Toxic,
    ToxiproxyClient,
    ToxiproxyHungError,
    toxiproxy_binary,
)

CONTROL_PORT, BULK_PORT, HTTP_PORT = 7001, 7002, 7003  # inside each node container
BROKER_PORT = 1883
TOXIPROXY_API_PORT = 8474
TOXIPROXY_BULK_API_PORT = 8475  # the bulk server's, in the same network namespace
FIRST_PROXY_PORT = 20000  # proxies listen on 20000.. inside the toxiproxy container
DOCKER_TIMEOUT_S = 60  # per Docker API call; image builds have their own
READY_TIMEOUT_S = 30.0  # Toxiproxy and Mosquitto answer within a second of start
STOP_GRACE_S = 3  # docker stop's SIGTERM → SIGKILL grace
HOST_LIBS = "/lib/x86_64-linux-gnu"


# docker pause/unpause retries (DockerNode._freezer_call says why).
FREEZER_TRIES = 3
FREEZER_RETRY_S = 0.2
# Node containers created at once by ``up`` (see there).
NODE_START_CONCURRENCY = 4
IMAGE_VENV_BIN = "/opt/venv/bin"  # the node image's virtual environment (docker_image.py)
SERVICE_PORT = 29400  # a cluster service's port, alone in its holder's namespace
# A service (rendezvous store, Lighthouse) listens once its interpreter has imported
# torch: up to ~20 s seen on a loaded 2-core machine; past this it is not coming.
SERVICE_READY_TIMEOUT_S = 90.0
SERVICE_PROBE_TIMEOUT_S = 1.0  # one connect to a container on the local bridge


class DockerNode(NodeHandle):
    def __init__(self, backend: DockerBackend, name: str, container: Any, address: str):
        self.backend = backend
        self.name = name
        self.container = container
        # The holder's address in the project network (module docstring): it stays
        # the node's across crashes and restarts.
        self.address = address
        self.paused = False

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.container, method), *args, **kwargs)

    def is_running(self) -> bool:
        with contextlib.suppress(Exception):
            self.container.reload()
            return self.container.status in ("running", "paused")
        return False

    async def crash(self) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.APIError):
            if self.paused:
                await self._call("unpause")
            await self._call("kill")
        self.paused = False

    async def stop(self) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.APIError):
            if self.paused:
                await self._call("unpause")
            await self._call("stop", timeout=STOP_GRACE_S)

    async def restart(self) -> None:
        if self.is_running():
            await self.crash()
        await self._call("start")
        self.paused = False

    async def pause(self) -> None:
        await self._freezer_call("pause")
        self.paused = True

    async def resume(self) -> None:
        await self._freezer_call("unpause")
        self.paused = False

    async def _freezer_call(self, method: str) -> None:
        """``docker pause``/``unpause`` with a few retries: the cgroup freezer fails
        transiently ("unable to freeze") while a task sits in uninterruptible sleep,
        as under heavy load; three tries 0.2 s apart, then the error stands."""
        import docker.errors

        for attempt in range(FREEZER_TRIES):
            try:
                await self._call(method)
                return
            except docker.errors.APIError:
                if attempt == FREEZER_TRIES - 1:
                    raise
                await asyncio.sleep(FREEZER_RETRY_S)

    async def set_cpu_fraction(self, fraction: float) -> None:
        period = 100_000
        quota = -1 if fraction >= 1.0 else max(1000, int(period * fraction))
        await self._call("update", cpu_period=period, cpu_quota=quota)

    async def set_disk_full(self, full: bool) -> None:
        if full:
            raise UnsupportedFault(
                "disk_full is unsupported on the docker backend (a mount cannot be added to a "
                "running container); use the local backend"
            )

    async def exec(self, command: list[str]) -> str:
        result = await self._call("exec_run", command)
        if result.exit_code != 0:
            raise BackendError(
                f"{self.name}: {' '.join(command)} failed: {result.output.decode()[-500:]}"
            )
        return result.output.decode()


class DockerBroker(BrokerHandle):
    def __init__(self, container: Any):
        self.container = container
        self._lost = False

    async def lose(self) -> None:
        await asyncio.to_thread(self.container.kill)
        self._lost = True

    async def restore(self) -> None:
        if self._lost:
            await asyncio.to_thread(self.container.start)
            self._lost = False

    @property
    def lost(self) -> bool:
        return self._lost


class ContainerToxiproxy:
    """Toxiproxy in a container, with the local supervisor's guarantees: every call has
    a deadline, and a hung server is restarted (``docker restart``) and its proxies
    and toxics re-created from the desired state kept here."""

    MAX_RESTARTS = 3

    def __init__(self, container: Any, url: str, on_incident: Any):
        self.container = container
        self.client = ToxiproxyClient(url)
        self.on_incident = on_incident
        self.restarts = 0
        self.state: dict[str, dict[str, Any]] = {}  # name -> {listen, upstream, enabled, toxics}

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                await self.client.version()
                return
            except ToxiproxyHungError:
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"toxiproxy container not answering within {READY_TIMEOUT_S}s"
                    ) from None
                await asyncio.sleep(0.05)

    async def _supervised(self, call: Any, what: str) -> Any:
        try:
            return await call()
        except ToxiproxyHungError as error:
            if self.restarts >= self.MAX_RESTARTS:
                raise
            self.restarts += 1
            await asyncio.to_thread(self.container.restart, timeout=1)
            await self.wait_ready()
            for name, proxy in self.state.items():
                await self.client.create_proxy(
                    name, proxy["listen"], proxy["upstream"], enabled=proxy["enabled"]
                )
                for toxic in proxy["toxics"].values():
                    await self.client.add_toxic(name, toxic)
            self.on_incident(
                "toxiproxy_restart", {"reason": f"{what}: {error}", "restarts": self.restarts}
            )
            return None

    async def create_proxy(self, name: str, listen: str, upstream: str) -> None:
        self.state[name] = {"listen": listen, "upstream": upstream, "enabled": True, "toxics": {}}
        await self._supervised(
            lambda: self.client.create_proxy(name, listen, upstream), f"create {name}"
        )

    async def set_enabled(self, name: str, enabled: bool) -> None:
        self.state[name]["enabled"] = enabled
        await self._supervised(lambda: self.client.set_enabled(name, enabled), f"enable {name}")

    async def add_toxic(self, proxy: str, toxic: Toxic) -> None:
        self.state[proxy]["toxics"][toxic.name] = toxic

        async def add() -> None:
            live = {t.name for t in await self.client.toxics(proxy)}
            if toxic.name in live:
                await self.client.remove_toxic(proxy, toxic.name)
            await self.client.add_toxic(proxy, toxic)

        await self._supervised(add, f"toxic {proxy}")

    async def remove_toxic(self, proxy: str, name: str) -> None:
        self.state[proxy]["toxics"].pop(name, None)

        async def remove() -> None:
            if name in {t.name for t in await self.client.toxics(proxy)}:
                await self.client.remove_toxic(proxy, name)

        await self._supervised(remove, f"remove toxic {proxy}/{name}")

    async def reset(self) -> None:
        for proxy in self.state.values():
            proxy["enabled"] = True
            proxy["toxics"].clear()
        await self._supervised(self.client.reset, "reset")


@dataclass(frozen=True)
class DockerPlan:
    """What the Docker backend starts for a system, read from what the system declares
    (``System.link_faults``, ``ports``, ``link_channels()``, ``needs_broker``), never
    from its name: the reference node and a user's system that declare the same get
    the same containers, proxies and addresses.

    ``ports`` are each node's listening ports, the same fixed numbers in every node's
    namespace (a node is alone in its holder's), from ``CONTROL_PORT`` on in the
    order of ``System.ports`` (the reference node: control 7001, bulk 7002, http 7003).
    """

    toxiproxy: bool  # link_faults == "proxy": one proxy per directed link and channel
    broker: bool  # needs_broker: Mosquitto in a holder of its own
    netns: bool  # link_faults == "netns": iptables/tc rules in the holders' namespaces
    channels: Mapping[str, str]  # link channel -> the proxied port's name
    ports: Mapping[str, int]  # port name -> port, inside each node's namespace

    @classmethod
    def of(cls, system: System) -> DockerPlan:
        return cls(
            toxiproxy=system.link_faults == "proxy", broker=system.needs_broker,
            netns=system.link_faults == "netns", channels=system.link_channels(),
            ports={name: CONTROL_PORT + i for i, name in enumerate(system.ports)},
        )  # fmt: skip

    def proxies(self, nodes: Sequence[str]) -> list[tuple[str, str]]:
        """(proxy name, upstream ``alias:port``) of every proxy, in creation order."""
        wanted: list[tuple[str, str]] = []
        for src in nodes if self.toxiproxy else ():
            if self.broker:
                wanted.append((broker_proxy_name(src), f"broker:{BROKER_PORT}"))
            for dst in nodes:
                if src != dst:
                    for channel, port_name in self.channels.items():
                        wanted.append((proxy_name(src, dst, channel), f"{dst}:{self.ports[port_name]}"))  # fmt: skip
        return wanted

    def context(
        self, spec: ClusterSpec, name: str, index: int, *, addresses: Mapping[str, str],
        listeners: Mapping[str, int], services: Mapping[str, tuple[str, int]],
        broker: tuple[str, int] | None,
    ) -> NodeContext:  # fmt: skip
        """What node ``name`` is told: a proxied port of a peer is dialled at its
        proxy's listener on the ``toxiproxy`` holder, any other at the peer's own
        address; the broker through the node's broker proxy when links are proxied,
        at ``broker`` (its own address) otherwise."""
        peers = {
            peer: {port_name: (addresses[peer], port) for port_name, port in self.ports.items()}
            for peer in spec.nodes if peer != name
        }  # fmt: skip
        if self.toxiproxy:
            for peer, dial in peers.items():
                for channel, port_name in self.channels.items():
                    dial[port_name] = ("toxiproxy", listeners[proxy_name(name, peer, channel)])
            if broker is not None:
                broker = ("toxiproxy", listeners[broker_proxy_name(name)])
        return NodeContext(
            spec=spec, name=name, index=index, address=addresses[name], ports=dict(self.ports),
            peers=peers, addresses=dict(addresses), services=dict(services),
            run_dir=spec.run_dir, python=f"{IMAGE_VENV_BIN}/python",
            broker=broker if self.broker else None,
        )  # fmt: skip


class DockerBackend(Backend):
    name = "docker"
    supported_ops = frozenset(
        {
            "crash", "restart", "pause", "resume", "cpu_throttle", "checkpoint_corrupt",
            "clock_skew", "byzantine", "churn", "broker_loss", "partition", "heal", "latency",
            "bandwidth", "blackhole", "reset_peer", "slicer", "limit_data", "slow_close", "netem",
            "hold_bulk",
        }
    )  # fmt: skip

    def __init__(self, spec: ClusterSpec, *, registry: Registry | None = None):
        super().__init__(spec)
        self.registry = registry
        self.labels = {LABEL: "1", RUN_LABEL: spec.run_id}
        self.client: Any = None
        self.network: Any = None
        self.toxiproxy: ChannelSplit | None = None
        self._broker: DockerBroker | None = None
        self._broker_ip = ""
        self._nodes: dict[str, DockerNode] = {}
        self._links: dict[tuple[str, str], Link] = {}
        self._netem_nodes: set[str] = set()
        # ``netns`` systems (module docstring): link faults in the holders'
        # namespaces; and the cluster services' containers by name.
        self.netns: HolderNamespaces | None = None
        self._services: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self.incidents: list[dict[str, Any]] = []

    def _name(self, role: str) -> str:
        return f"swarmshake-{self.spec.run_id}-{role}"

    async def _run(
        self, image: str, role: str, alias: str, *, netns: Any = None, **kwargs: Any
    ) -> Any:
        """Create and start a container: on the project network under ``alias``, or,
        given ``netns`` (a holder container), inside that holder's network namespace."""

        def start() -> Any:
            if netns is not None:
                network: dict[str, Any] = {"network_mode": f"container:{netns.id}"}
            else:
                # Created on the project network only (not also on docker0), reachable
                # by its alias, so eth0 inside is the cluster's interface (netem acts there).
                endpoint = self.client.api.create_endpoint_config(aliases=[alias])
                network = {"network": self.network.name,
                           "networking_config": {self.network.name: endpoint}}  # fmt: skip
            container = self.client.containers.create(
                image, name=self._name(role), labels=self.labels, detach=True, **network, **kwargs
            )
            container.start()
            return container

        return await asyncio.to_thread(start)

    async def _holder(self, alias: str) -> Any:
        """The network holder of ``alias`` (module docstring): owns its address and name."""
        return await self._run(
            docker_image.base_tag(), f"net-{alias}", alias,
            entrypoint=["sleep", "infinity"], init=True,  # init: SIGTERM ends it at once
        )  # fmt: skip

    def _ip(self, container: Any) -> str:
        container.reload()
        return container.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"]

    async def up(self) -> None:
        import docker

        started = time.monotonic()
        spec, system = self.spec, self.system
        plan = DockerPlan.of(system)
        if spec.direct_links:
            raise BackendError("links: direct is a local-backend mode; Docker nodes always "
                               "talk through Toxiproxy")  # fmt: skip
        for folder in ("logs", "events", "checkpoints", "nodes", *(("broker",) * plan.broker)):
            (spec.run_dir / folder).mkdir(parents=True, exist_ok=True)
        self.record_system()
        if self.registry:
            self.registry.uses_docker()
        self.client = await asyncio.to_thread(docker.from_env, timeout=DOCKER_TIMEOUT_S)
        node_image = await asyncio.to_thread(self._node_image)
        self.timings["image_s"] = time.monotonic() - started
        self.network = await asyncio.to_thread(
            self.client.networks.create, self._name("net"), driver="bridge", labels=self.labels
        )
        services = system.services(spec)
        # Every holder first, all at once: a name exists before anyone dials it.
        aliases = (*spec.nodes, *(f"service-{service.name}" for service in services),
                   *(("broker",) * plan.broker), *(("toxiproxy",) * plan.toxiproxy))  # fmt: skip
        holders = dict(
            zip(aliases, await asyncio.gather(*(self._holder(a) for a in aliases)), strict=True)
        )
        node_holders = {name: holders[name] for name in spec.nodes}
        addresses = {
            name: await asyncio.to_thread(self._ip, holder) for name, holder in node_holders.items()
        }
        # The broker and the two Toxiproxy servers start together (~0.5 s a container).
        infrastructure = []
        if plan.broker:
            infrastructure.append(self._start_broker(holders["broker"]))
        if plan.toxiproxy:
            infrastructure.append(self._start_toxiproxy(holders["toxiproxy"]))
        await asyncio.gather(*infrastructure)
        listeners = await self._create_proxies(plan) if plan.toxiproxy else {}
        if plan.netns:
            pids = {
                name: await asyncio.to_thread(self._pid, holder)
                for name, holder in node_holders.items()
            }
            self.netns = HolderNamespaces(spec.run_id, addresses=dict(addresses), holder_pids=pids)
            await self.netns.create(spec.nodes)
            for src in spec.nodes:
                for dst in spec.nodes:
                    if src != dst:
                        self._links[(src, dst)] = NetnsLink(self.netns, src, dst)  # type: ignore[assignment]
        uid = f"{os.getuid()}:{os.getgid()}"
        service_addresses: dict[str, tuple[str, int]] = {}
        for service in services:
            holder = holders[f"service-{service.name}"]
            host = await asyncio.to_thread(self._ip, holder)
            self._services[service.name] = await self._run_launch(
                node_image, f"service-{service.name}", service.launch(host, SERVICE_PORT),
                holder, uid,
            )  # fmt: skip
            service_addresses[service.name] = (host, SERVICE_PORT)
        await asyncio.gather(
            *(self._wait_listening(name, *address) for name, address in service_addresses.items())
        )
        self.timings["infrastructure_s"] = time.monotonic() - started
        broker = (self._broker_ip, BROKER_PORT) if plan.broker else None
        launches: dict[str, Launch] = {}
        for index, name in enumerate(spec.nodes):
            ctx = plan.context(
                spec, name, index, addresses=addresses, listeners=listeners,
                services=service_addresses, broker=broker,
            )  # fmt: skip
            system.configure(ctx)
            launches[name] = system.launch(ctx)
        # Containers start concurrently (one at a time cost ~0.5 s each under load), a
        # few at once: docker-py's connection pool holds 10 and dockerd serialises
        # parts of container creation anyway, so more buys nothing.
        gate = asyncio.Semaphore(NODE_START_CONCURRENCY)

        async def start_node(name: str) -> DockerNode:
            async with gate:
                container = await self._run_launch(
                    node_image, f"node-{name}", launches[name], node_holders[name], uid,
                    # netem: ``tc`` in the node's namespace (proxied links only).
                    cap_add=["NET_ADMIN"] if plan.toxiproxy else None,
                )  # fmt: skip
                return DockerNode(self, name, container, address=addresses[name])

        started_nodes = await asyncio.gather(*(start_node(name) for name in spec.nodes))
        self._nodes.update(zip(spec.nodes, started_nodes, strict=True))
        self.timings["nodes_started_s"] = time.monotonic() - started

    async def _start_broker(self, holder: Any) -> None:
        """Mosquitto in ``holder``'s namespace, with the run's logins and ACL as on the
        local backend (chaos/mosquitto.py); the folder is mounted at /broker, and the
        broker runs as this user so it reads the 0600 files."""
        spec = self.spec
        auth = self.broker_auth()
        auth.write_broker_files(spec.run_dir / "broker")
        auth.write_harness_file(spec.run_dir / "harness" / "mqtt-credentials.json")
        config = spec.run_dir / "broker" / "mosquitto.conf"
        config.write_text(
            "\n".join([f"listener {BROKER_PORT} 0.0.0.0", *auth_config_lines("/broker"),
                       "persistence false", ""])
        )  # fmt: skip
        broker = await self._run(
            docker_image.base_tag(), "broker", "broker", netns=holder,
            entrypoint=["/mosquitto", "-c", "/broker/mosquitto.conf"],
            environment={"LD_LIBRARY_PATH": "/hostlib"}, user=f"{os.getuid()}:{os.getgid()}",
            volumes={
                str(mosquitto_binary()): {"bind": "/mosquitto", "mode": "ro"},
                HOST_LIBS: {"bind": "/hostlib", "mode": "ro"},
                str(spec.run_dir / "broker"): {"bind": "/broker", "mode": "ro"},
            },
        )  # fmt: skip
        self._broker = DockerBroker(broker)
        self._broker_ip = await asyncio.to_thread(self._ip, holder)

    async def _start_toxiproxy(self, holder: Any) -> None:
        """Two Toxiproxy servers, control (+ broker) and bulk (chaos/toxiproxy/split.py
        says why), each its own container in the "toxiproxy" holder's namespace: one
        address and name for the nodes, and either server restarts on its own."""

        def server(role: str, api_port: int) -> Any:
            return self._run(
                docker_image.base_tag(), role, role, netns=holder,
                entrypoint=["/toxiproxy-server", "-host", "0.0.0.0", "-port", str(api_port)],
                volumes={str(toxiproxy_binary()): {"bind": "/toxiproxy-server", "mode": "ro"}},
            )  # fmt: skip

        toxi, toxi_bulk = await asyncio.gather(
            server("toxiproxy", TOXIPROXY_API_PORT),
            server("toxiproxy-bulk", TOXIPROXY_BULK_API_PORT),
        )
        toxi_ip = await asyncio.to_thread(self._ip, holder)

        def incident(kind: str, data: dict[str, Any]) -> None:
            self.incidents.append({"kind": kind, **data})

        self.toxiproxy = ChannelSplit(
            ContainerToxiproxy(toxi, f"http://{toxi_ip}:{TOXIPROXY_API_PORT}", incident),
            ContainerToxiproxy(toxi_bulk, f"http://{toxi_ip}:{TOXIPROXY_BULK_API_PORT}", incident),
        )
        await asyncio.gather(*(s.wait_ready() for s in self.toxiproxy.servers))

    async def _run_launch(
        self, image: str, role: str, launch: Launch, holder: Any, uid: str,
        cap_add: list[str] | None = None,
    ) -> Any:  # fmt: skip
        """``launch`` in the node image, in ``holder``'s namespace, output appended to
        ``logs/<role>.log`` in the mounted run directory: live (the runner quotes it
        when a node dies early), appended across restarts of the container, and kept
        after the container is removed, as on the local backend.  The run directory
        and the launch's ``mounts`` (read-only) appear at their host paths."""
        log = self.spec.run_dir / "logs" / f"{role.split('-', 1)[1]}.log"  # as local.py names it
        argv = in_image(launch.argv)
        entrypoint = ["/bin/sh", "-c", f'exec "$0" "$@" >>{shlex.quote(str(log))} 2>&1', *argv]
        run_dir = str(self.spec.run_dir)
        volumes = {run_dir: {"bind": run_dir, "mode": "rw"}}
        for mount in launch.mounts:
            if not mount.exists():  # Docker would create an empty folder in its place
                raise BackendError(f"{role}: launch mount {mount} does not exist on this host")
            volumes[str(mount)] = {"bind": str(mount), "mode": "ro"}
        return await self._run(
            image, role, role, netns=holder, entrypoint=entrypoint, user=uid,
            working_dir=str(launch.cwd) if launch.cwd else None,
            environment=dict(launch.env), volumes=volumes, cap_add=cap_add,
            # docker-init as PID 1: the node is then an ordinary child process (a
            # worker that sees its parent as PID 1 believes it was orphaned), and
            # zombies of restarted workers are reaped.
            init=True,
        )  # fmt: skip

    async def _wait_listening(self, service: str, host: str, port: int) -> None:
        """Return once ``service`` accepts a connection on ``host:port`` (its readiness);
        a container that exited, or no answer within the limit, is an error with its log."""
        deadline = time.monotonic() + SERVICE_READY_TIMEOUT_S
        container = self._services[service]
        while True:
            try:
                async with asyncio.timeout(SERVICE_PROBE_TIMEOUT_S):
                    _, writer = await asyncio.open_connection(host, port)
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return
            except (OSError, TimeoutError):
                pass
            await asyncio.to_thread(container.reload)
            log = self.spec.run_dir / "logs" / f"{service}.log"
            if container.status == "exited" or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise BackendError(
                    f"service {service} ({container.status}) not listening on {host}:{port} "
                    f"within {SERVICE_READY_TIMEOUT_S:.0f}s; {log}:\n{tail}"
                )
            await asyncio.sleep(0.2)

    @staticmethod
    def _pid(container: Any) -> int:
        container.reload()
        return int(container.attrs["State"]["Pid"])

    def _node_image(self) -> str:
        import docker.errors

        tag = docker_image.node_tag()
        try:
            self.client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        wheelhouse = (
            Path(os.environ.get("SWARMSHAKE_CACHE", Path.home() / ".cache/swarmshake"))
            / "wheelhouse"
        )
        try:
            return docker_image.build_node(self.client, wheelhouse)
        except Exception as error:  # noqa: BLE001 - any build failure means no Docker runs here
            raise BackendError(
                f"node image {tag} missing and could not be built ({error}); fix: `make image`"
            ) from None

    async def _create_proxies(self, plan: DockerPlan) -> dict[str, int]:
        """The proxies of ``plan`` (one per directed link and channel, one per node's
        broker connection), each listening on its own port: proxy name -> port."""
        assert self.toxiproxy is not None
        wanted = plan.proxies(self.spec.nodes)
        listeners = {name: FIRST_PROXY_PORT + i for i, (name, _) in enumerate(wanted)}
        toxiproxy = self.toxiproxy
        gate = asyncio.Semaphore(16)  # Toxiproxy serialises creation; more buys nothing

        async def create(name: str, upstream: str) -> None:
            async with gate:
                await toxiproxy.create_proxy(name, f"0.0.0.0:{listeners[name]}", upstream)

        await asyncio.gather(*(create(n, u) for n, u in wanted))
        for src in self.spec.nodes:
            for dst in self.spec.nodes:
                if src != dst:
                    self._links[(src, dst)] = Link(toxiproxy, src, dst, tuple(plan.channels))
        return listeners

    async def down(self) -> None:
        if self.client is None:
            return
        await asyncio.gather(
            *(node.stop() for node in self._nodes.values()), return_exceptions=True
        )
        await asyncio.to_thread(self._save_service_logs)
        if self.toxiproxy is not None:
            for server in self.toxiproxy.servers:
                with contextlib.suppress(Exception):
                    await server.client.aclose()
        from swarmshake.chaos.cleanup import remove_docker_objects

        await asyncio.to_thread(remove_docker_objects, self.spec.run_id)
        # Containers ran as this user, but a node may have created root-owned files
        # when run by an older image; make the run directory removable either way.
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.client.close)
        self.client = None

    def _save_service_logs(self) -> None:
        """Toxiproxy's and the broker's output to ``logs/`` before their containers go:
        which connections a proxy accepted, dialled or failed to dial explains most
        "why did this frame arrive late" questions."""
        services = {"broker": self._broker and self._broker.container}
        if self.toxiproxy is not None:
            services["toxiproxy"] = self.toxiproxy.control.container
            services["toxiproxy-bulk"] = self.toxiproxy.bulk.container
        for name, container in services.items():
            if container is None:
                continue
            with contextlib.suppress(Exception):
                output = container.logs(stdout=True, stderr=True, timestamps=True)
                (self.spec.run_dir / "logs" / f"{name}.log").write_bytes(output)

    def broker_address(self) -> tuple[str, int]:
        return self._broker_ip, BROKER_PORT

    async def apply_netem(self, links: list[tuple[str, str]], op: Any) -> None:
        """``tc netem`` on the egress of every sending node of ``links``.

        A node's peer traffic all goes to the Toxiproxy container, so netem acts on
        all of a sender's links at once; the fault event names the senders."""
        senders = sorted({src for src, _ in links})
        args = ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem"]
        if op.delay_ms:
            args += ["delay", f"{op.delay_ms}ms"]
        if op.loss_pct:
            args += ["loss", f"{op.loss_pct}%"]
        if op.duplicate_pct:
            args += ["duplicate", f"{op.duplicate_pct}%"]
        if op.reorder_pct:
            args += ["reorder", f"{op.reorder_pct}%"]
        if op.corrupt_pct:
            args += ["corrupt", f"{op.corrupt_pct}%"]
        try:
            await asyncio.gather(*(self.node(n).exec(args) for n in senders))
        except BackendError as error:
            if "qdisc kind is unknown" in str(error):
                raise UnsupportedFault(
                    "netem is unsupported on this machine: its kernel has no sch_netem qdisc "
                    "(modprobe sch_netem, or run on a stock Linux kernel)"
                ) from None
            raise
        self._netem_nodes |= set(senders)

    async def clear_netem(self, links: list[tuple[str, str]] | None = None) -> None:
        senders = (
            set(self._netem_nodes)
            if links is None
            else {src for src, _ in links} & self._netem_nodes
        )
        for name in sorted(senders):
            with contextlib.suppress(BackendError):
                await self.node(name).exec(["tc", "qdisc", "del", "dev", "eth0", "root"])
            self._netem_nodes.discard(name)

    def node_endpoint(self, name: str, port_name: str) -> tuple[str, int] | None:
        node = self._nodes.get(name)
        ports = DockerPlan.of(self.system).ports
        if node is None or not node.address or port_name not in ports:
            return None
        return node.address, ports[port_name]  # the project network's address: reachable here

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "network": self.network.name if self.network is not None else None,
            "toxiproxy": self.toxiproxy.control.client.base_url if self.toxiproxy else None,
            "toxiproxy_bulk": self.toxiproxy.bulk.client.base_url if self.toxiproxy else None,
            "broker": f"{self._broker_ip}:{BROKER_PORT}" if self._broker_ip else None,
            "nodes": {
                name: {
                    "container": node.container.name,
                    "running": node.is_running(),
                    "paused": node.paused,
                }
                for name, node in self._nodes.items()
            },
            "system": self.system.name,
            "addresses": dict(self.netns.addresses) if self.netns is not None else None,
            "services": {name: container.name for name, container in self._services.items()},
            "incidents": self.incidents,
        }


def in_image(argv: tuple[str, ...]) -> tuple[str, ...]:
    """``argv`` with a program of the harness's own virtual environment (its
    interpreter, ``torchrun``, ``torchft_lighthouse``) named by its path in the node
    image, whose ``/opt/venv`` holds the same pinned packages; others unchanged."""
    program = Path(argv[0])
    host_bin = Path(sys.executable).parent
    if program.is_absolute() and program.parent.resolve() == host_bin.resolve():
        return (f"{IMAGE_VENV_BIN}/{program.name}", *argv[1:])
    return argv


def docker_available() -> str | None:
    """None when Docker can run a cluster here, else the reason it cannot."""
    if shutil.which("docker") is None:
        return "the docker CLI/daemon is not installed (make setup installs docker.io)"
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except Exception as error:  # noqa: BLE001 - any failure: no Docker here
        return f"dockerd does not answer: {error}"
    return None
