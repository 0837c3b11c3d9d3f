"""Link faults without proxies: each node in its own network namespace.

Systems whose nodes dial addresses learned at run time (gloo, NCCL and gRPC find
their peers through a rendezvous store) cannot be pointed at a Toxiproxy proxy per
link.  Here every node runs in a namespace of its own, joined to a bridge by a veth
pair, and a fault on link ``A → B`` is a rule in ``A``'s namespace:

- cut / black hole: ``iptables -A OUTPUT -d B -j DROP`` (packets from A to B are
  lost; TCP connections between them stall, as on a real cut network);
- reset: ``iptables -A OUTPUT -p tcp -d B -j REJECT --reject-with tcp-reset``;
- bandwidth: an ``htb`` class per limited destination on A's interface, chosen by a
  ``u32`` filter on B's address;
- latency and jitter: ``netem``, only where the kernel has ``sch_netem``; otherwise
  the op is refused with "unsupported on this kernel: …" before the run starts
  (:func:`kernel_qdiscs`), never skipped silently.

Isolation: the bridge lives in a *hub* namespace of the run, not on the host, so
the project creates no interface, address, route or firewall rule on the host; the
private range below exists only inside the run's namespaces.  Cluster services
(a rendezvous store, a Lighthouse) run in the hub, on the bridge's address.  Every
namespace is named ``ssw-<tag>-…`` and recorded in the run's cleanup registry
(``chaos/cleanup.py``), so a killed harness's namespaces are removed by the next run.

That is the local backend (:class:`NetnsNetwork`).  On the Docker backend every node
already has a namespace of its own, its holder container's, on the project network;
:class:`HolderNamespaces` applies the same rules there (:class:`NetnsLink` unchanged).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import subprocess
from dataclasses import dataclass, field
from typing import Any

from swarmshake.chaos.backends.base import BackendError, UnsupportedFault

PREFIX = "ssw-"  # every namespace this module creates starts with this
SUBNET = "10.213.0"  # /24, only inside the run's own namespaces (never on the host)
HUB_HOST = 1  # the bridge's address in the hub: where services listen
NODE_HOST_OFFSET = 10  # node i (0-based) gets SUBNET.(10 + i)
MAX_NODES = 200  # addresses 10..209 of the /24
BRIDGE = "br0"
NODE_IF = "eth0"
IP_TIMEOUT_S = 10.0  # one `ip`/`iptables`/`tc` call takes milliseconds; past this it is wedged
FULL_RATE = "10gbit"  # the htb class of unlimited traffic


class NetnsError(BackendError):
    """A namespace command failed; the message holds the command and its stderr."""


def tag_of(run_id: str) -> str:
    return hashlib.blake2s(run_id.encode(), digest_size=4).hexdigest()


def hub_name(tag: str) -> str:
    return f"{PREFIX}{tag}-hub"


def node_ns_name(tag: str, node: str) -> str:
    return f"{PREFIX}{tag}-{node}"


def _run_sync(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False)


async def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = await asyncio.to_thread(_run_sync, argv)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.returncode}")
    return done


@functools.lru_cache(maxsize=1)
def kernel_qdiscs() -> dict[str, str]:
    """Which ``tc`` qdiscs this kernel has: ``{"netem": "" | "<why not>", "htb": …}``.

    Probed once per process on a dummy veth inside a throw-away namespace (the host's
    interfaces are never touched); an empty string means available."""
    probe = f"{PREFIX}probe-{tag_of(str(id(kernel_qdiscs)))}"
    found: dict[str, str] = {}
    _run_sync(["ip", "netns", "del", probe])
    created = _run_sync(["ip", "netns", "add", probe])
    if created.returncode != 0:
        why = f"cannot create a network namespace: {created.stderr.strip()}"
        return {"netem": why, "htb": why, "netns": why}
    try:
        _run_sync(["ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        for qdisc, args in (("netem", ["delay", "1ms"]), ("htb", ["default", "1"])):
            done = _run_sync(
                ["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "p0", "root",
                 "handle", "1:", qdisc, *args]
            )  # fmt: skip
            found[qdisc] = "" if done.returncode == 0 else (done.stderr.strip() or "tc failed")
            _run_sync(["ip", "netns", "exec", probe, "tc", "qdisc", "del", "dev", "p0", "root"])
        found["netns"] = ""
    finally:
        _run_sync(["ip", "netns", "del", probe])
    return found


def netns_unsupported(op: str) -> str | None:
    """Why ``op`` cannot act in a namespace on this kernel (None: it can)."""
    qdiscs = kernel_qdiscs()
    if qdiscs.get("netns"):
        return f"network namespaces are unavailable here (need root): {qdiscs['netns']}"
    if op == "latency" and qdiscs.get("netem"):
        return f"unsupported on this kernel: latency needs the sch_netem qdisc ({qdiscs['netem']})"
    if op == "bandwidth" and qdiscs.get("htb"):
        return f"unsupported on this kernel: bandwidth needs the sch_htb qdisc ({qdiscs['htb']})"
    return None


def list_namespaces() -> list[str]:
    done = _run_sync(["ip", "netns", "list"])
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def remove_namespaces(names: list[str]) -> int:
    """Delete the named namespaces (their veths and bridge go with them)."""
    removed = 0
    present = set(list_namespaces())
    for name in names:
        if name.startswith(PREFIX) and name in present:
            if _run_sync(["ip", "netns", "del", name]).returncode == 0:
                removed += 1
    return removed


@dataclass
class NetnsNetwork:
    """One run's namespaces: ``await net.create(nodes)`` … ``await net.destroy()``."""

    run_id: str
    registry: Any = None  # chaos.cleanup.Registry: records namespaces for the reaper
    tag: str = ""
    addresses: dict[str, str] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    _bandwidth: dict[str, dict[str, float]] = field(default_factory=dict)  # src -> dst -> kbps

    def __post_init__(self) -> None:
        self.tag = self.tag or tag_of(self.run_id)

    @property
    def hub(self) -> str:
        return hub_name(self.tag)

    @property
    def hub_address(self) -> str:
        return f"{SUBNET}.{HUB_HOST}"

    def ns(self, node: str) -> str:
        return node_ns_name(self.tag, node)

    def exec_prefix(self, node: str | None) -> list[str]:
        """Prefix that runs a command in ``node``'s namespace (None: the hub's)."""
        return ["ip", "netns", "exec", self.hub if node is None else self.ns(node)]

    async def _add_ns(self, name: str) -> None:
        await _run(["ip", "netns", "del", name], check=False)  # a leftover of a killed run
        await _run(["ip", "netns", "add", name])
        self.namespaces.append(name)
        if self.registry is not None:
            self.registry.add_netns(name)
        await _run(["ip", "-n", name, "link", "set", "lo", "up"])

    async def create(self, nodes: list[str] | tuple[str, ...]) -> None:
        if len(nodes) > MAX_NODES:
            raise NetnsError(f"a namespace network holds at most {MAX_NODES} nodes")
        why = kernel_qdiscs().get("netns")
        if why:
            raise NetnsError(f"network namespaces are unavailable here: {why}")
        await self._add_ns(self.hub)
        await _run(["ip", "-n", self.hub, "link", "add", BRIDGE, "type", "bridge"])
        await _run(["ip", "-n", self.hub, "addr", "add", f"{self.hub_address}/24", "dev", BRIDGE])
        await _run(["ip", "-n", self.hub, "link", "set", BRIDGE, "up"])
        for index, node in enumerate(nodes):
            ns = self.ns(node)
            address = f"{SUBNET}.{NODE_HOST_OFFSET + index}"
            await self._add_ns(ns)
            veth = f"v-{node}"[:15]
            await _run(
                ["ip", "-n", self.hub, "link", "add", veth, "type", "veth",
                 "peer", "name", NODE_IF, "netns", ns]
            )  # fmt: skip
            await _run(["ip", "-n", self.hub, "link", "set", veth, "master", BRIDGE, "up"])
            await _run(["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", NODE_IF])
            await _run(["ip", "-n", ns, "link", "set", NODE_IF, "up"])
            self.addresses[node] = address

    async def destroy(self) -> None:
        names, self.namespaces = self.namespaces, []
        await asyncio.to_thread(remove_namespaces, names)
        if self.registry is not None:
            for name in names:
                self.registry.remove_netns(name)

    # --- faults ----------------------------------------------------------------------------

    async def iptables(self, node: str, *rule: str) -> None:
        await _run([*self.exec_prefix(node), "iptables", "-w", "5", *rule])

    async def reset(self) -> None:
        """Every rule and qdisc removed: the heal of every link fault."""
        for node in self.addresses:
            await _run([*self.exec_prefix(node), "iptables", "-w", "5", "-F", "OUTPUT"])
            await _run(
                [*self.exec_prefix(node), "tc", "qdisc", "del", "dev", NODE_IF, "root"],
                check=False,  # no qdisc of ours is fine
            )
        self._bandwidth.clear()

    async def set_bandwidth(self, src: str, dst: str, rate_kbps: float | None) -> None:
        """Limit ``src → dst`` to ``rate_kbps`` (None lifts it); rebuilds src's htb tree."""
        why = netns_unsupported("bandwidth")
        if why:
            raise UnsupportedFault(why)
        limits = self._bandwidth.setdefault(src, {})
        if rate_kbps is None:
            limits.pop(dst, None)
        else:
            limits[dst] = rate_kbps
        prefix = self.exec_prefix(src)
        await _run([*prefix, "tc", "qdisc", "del", "dev", NODE_IF, "root"], check=False)
        if not limits:
            return
        tc = [*prefix, "tc"]
        await _run([*tc, "qdisc", "add", "dev", NODE_IF, "root", "handle", "1:", "htb",
                    "default", "1"])  # fmt: skip
        await _run([*tc, "class", "add", "dev", NODE_IF, "parent", "1:", "classid", "1:1",
                    "htb", "rate", FULL_RATE])  # fmt: skip
        for number, (peer, kbps) in enumerate(sorted(limits.items()), start=2):
            rate = f"{max(1, int(kbps))}kbit"
            await _run([*tc, "class", "add", "dev", NODE_IF, "parent", "1:", "classid",
                        f"1:{number}", "htb", "rate", rate, "ceil", rate])  # fmt: skip
            await _run([*tc, "filter", "add", "dev", NODE_IF, "parent", "1:", "protocol", "ip",
                        "prio", "1", "u32", "match", "ip", "dst",
                        f"{self.addresses[peer]}/32", "flowid", f"1:{number}"])  # fmt: skip


@dataclass
class HolderNamespaces(NetnsNetwork):
    """Namespaces that exist already: the Docker backend's network holders.

    Each node's holder container owns its namespace and address (``chaos/backends/
    docker.py``), so nothing is created or destroyed here; the same rules as on the
    local backend are entered from the host with ``nsenter --net=/proc/<pid>/ns/net``
    (the host's ``iptables`` and ``tc``: the node image needs neither).  A holder
    outlives its node's crashes and restarts, so its pid, and the rules, stay."""

    holder_pids: dict[str, int] = field(default_factory=dict)

    def exec_prefix(self, node: str | None) -> list[str]:
        if node is None:
            raise NetnsError("the Docker backend has no hub namespace: services run in holders")
        return ["nsenter", f"--net=/proc/{self.holder_pids[node]}/ns/net"]

    async def create(self, nodes: list[str] | tuple[str, ...]) -> None:
        missing = sorted(set(nodes) - set(self.holder_pids) | set(nodes) - set(self.addresses))
        if missing:
            raise NetnsError(f"no holder pid or address for node(s) {missing}")
        for node in nodes:
            # The namespace must answer now: a holder that died leaves no /proc entry.
            await _run([*self.exec_prefix(node), "iptables", "-w", "5", "-S", "OUTPUT"])

    async def destroy(self) -> None:
        return None  # the holders' namespaces go with their containers


# iptables rule per toxic kind (Toxiproxy's names, as the nemesis passes them).
_DROP = ("-j", "DROP")
_RESET = ("-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset")


class NetnsLink:
    """``src → dst`` as rules in ``src``'s namespace; the interface of ``chaos.links.Link``."""

    def __init__(self, net: NetnsNetwork, src: str, dst: str):
        self.net = net
        self.src = src
        self.dst = dst
        self.cut_now = False
        self.toxics: dict[str, dict[str, Any]] = {}
        self._rules: dict[str, tuple[str, ...]] = {}  # kind -> iptables match+target

    def __repr__(self) -> str:
        return f"NetnsLink({self.src}→{self.dst}, cut={self.cut_now}, toxics={sorted(self.toxics)})"

    def _match(self, rule: tuple[str, ...]) -> list[str]:
        return ["-d", f"{self.net.addresses[self.dst]}/32", *rule]

    async def _add_rule(self, key: str, rule: tuple[str, ...]) -> None:
        if key in self._rules:
            return
        await self.net.iptables(self.src, "-A", "OUTPUT", *self._match(rule))
        self._rules[key] = rule

    async def _drop_rule(self, key: str) -> None:
        rule = self._rules.pop(key, None)
        if rule is not None:
            await self.net.iptables(self.src, "-D", "OUTPUT", *self._match(rule))

    async def cut(self) -> None:
        self.cut_now = True
        await self._add_rule("cut", _DROP)

    async def restore(self) -> None:
        self.cut_now = False
        await self._drop_rule("cut")

    async def add_toxic(
        self, kind: str, attributes: dict[str, Any], *, toxic_type: str = ""
    ) -> None:
        if kind == "blackhole":
            await self._add_rule(kind, _DROP)
        elif kind == "reset_peer":
            await self._add_rule(kind, _RESET)
        elif kind == "bandwidth":
            await self.net.set_bandwidth(self.src, self.dst, float(attributes["rate"]))
        elif kind == "latency":
            raise UnsupportedFault(
                netns_unsupported("latency")
                or "latency in a namespace (netem per destination) is not implemented yet"
            )
        else:
            raise UnsupportedFault(f"{kind} has no iptables/tc form in a network namespace")
        self.toxics[kind] = attributes

    async def remove_toxic(self, kind: str) -> None:
        if self.toxics.pop(kind, None) is None:
            return
        if kind == "bandwidth":
            await self.net.set_bandwidth(self.src, self.dst, None)
        else:
            await self._drop_rule(kind)

    async def heal(self) -> None:
        for kind in list(self.toxics):
            await self.remove_toxic(kind)
        if self.cut_now:
            await self.restore()

    def forget(self) -> None:
        """The rules were flushed wholesale (``NetnsNetwork.reset``)."""
        self.cut_now = False
        self.toxics.clear()
        self._rules.clear()
