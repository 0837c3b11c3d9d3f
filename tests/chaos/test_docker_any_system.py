"""A user's ``proxy`` system gets the reference node's path on every backend (issue 14).

The Docker backend starts what a system declares (``DockerPlan``: its ``link_faults``,
ports, proxied channels, ``needs_broker``), never a path chosen by its name.  The fast
tests check that choice without Docker; the slow ones run ``relay``, a tiny real
program written here (a user's trainer as the docs describe it: it dials the
addresses ``ctx.peers`` gives it and records the neutral history), on the local and
the Docker backends through a scenario with a partition and a crash, judged valid,
the partition seen on the wire (no heartbeat crossed it) and nothing left behind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from swarmshake.chaos.backends.base import ClusterSpec
from swarmshake.chaos.backends.docker import BROKER_PORT, DockerPlan, docker_available
from swarmshake.chaos.backends.local import LocalBackend
from swarmshake.chaos.runner import RunOptions, run_blocking
from swarmshake.chaos.scenario import loads, resolve
from swarmshake.chaos.systems import Launch, SystemConfigError, load_system
from swarmshake.chaos.systems.base import System
from swarmshake.chaos.systems.reference import ReferenceSystem

ROOT = Path(__file__).resolve().parents[2]

# The node program: listens on its port, keeps one connection per peer to the address
# it was configured with (a proxy's listener), sends "<node> <step>" every 50 ms and
# records every line it receives; trains alone as docs/testing-your-system.md's
# example does (same weights for the same step on every node, a checkpoint to resume
# from), so the neutral history has S1, L2 and L3 to judge.
RELAY_NODE = r"""
import asyncio, hashlib, json, os, signal, sys, time
from pathlib import Path

from swarmshake.verify.history import EventWriter, RejoinDone, Start, StepCommitted, Stop

config = json.loads(Path(sys.argv[1]).read_text())
node = config["node"]
state_file = Path(config["state"])
writer = EventWriter(config["events"])
observed = open(config["observed"], "a", buffering=1)
runs_file = Path(config["runs"])
incarnation = int(runs_file.read_text()) + 1 if runs_file.exists() else 0
runs_file.write_text(str(incarnation))


def event(cls, **fields):
    writer.write(cls(t_wall=time.time(), t_mono=time.monotonic(), node=node,
                     incarnation=incarnation, **fields))


def fingerprint(weights):
    return hashlib.blake2s(json.dumps(weights).encode(), digest_size=8).hexdigest()


async def serve(reader, writer_):
    try:
        while line := await reader.readline():
            peer, step = line.decode().split()
            observed.write(json.dumps({"t": time.time(), "peer": peer, "step": int(step)}) + "\n")
    except (OSError, ValueError):
        pass
    finally:
        writer_.close()


async def dial(peer, host, port, progress):
    while True:
        try:
            async with asyncio.timeout(1.0):
                _, out = await asyncio.open_connection(host, port)
            while True:
                out.write(f"{node} {progress[0]}\n".encode())
                async with asyncio.timeout(1.0):
                    await out.drain()
                await asyncio.sleep(0.05)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.1)


async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    event(Start)
    step, weights = 0, [1.0, -2.0, 0.5]
    if state_file.exists():  # resume after a crash
        saved = json.loads(state_file.read_text())
        step, weights = saved["step"], saved["weights"]
        event(RejoinDone, step=step - 1, source="checkpoint", param_fp=fingerprint(weights))
    progress = [step]
    server = await asyncio.start_server(serve, *config["listen"])
    dialers = [asyncio.create_task(dial(peer, host, port, progress))
               for peer, (host, port) in config["peers"].items()]
    while not stop.is_set():
        rate = 0.1 / (1 + step % 7)
        weights = [round(w - rate * w, 12) for w in weights]
        event(StepCommitted, step=step, participants=[node], param_fp=fingerprint(weights))
        tmp = state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step + 1, "weights": weights}))
        os.replace(tmp, state_file)
        step += 1
        progress[0] = step
        try:
            await asyncio.wait_for(stop.wait(), 0.05)
        except TimeoutError:
            pass
    for task in dialers:
        task.cancel()
    server.close()
    event(Stop, step=step, reason="sigterm")


asyncio.run(main())
"""

# The system, as a user's package would define it: proxied links, no broker.
RELAY_SYSTEM = r"""
import json
from pathlib import Path

from swarmshake.chaos.systems import Launch, NodeContext, System

PROGRAM = Path(__file__).with_name("relay_node.py")


class RelaySystem(System):
    name = "relay"
    link_faults = "proxy"  # it dials the addresses it is given: one proxy per link
    ports = ("rpc",)  # peers dial "rpc" through the link's control proxy
    produces = frozenset({"start", "step_committed", "rejoin_done", "stop", "fault"})
    bounds = {"detection_s": 5.0, "recovery_s": 5.0, "rejoin_s": 5.0}

    def config_path(self, ctx: NodeContext) -> Path:
        return ctx.node_dir / "relay.json"

    def configure(self, ctx: NodeContext) -> None:
        ctx.node_dir.mkdir(parents=True, exist_ok=True)
        ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.config_path(ctx).write_text(json.dumps({
            "node": ctx.name,
            "listen": [ctx.address, ctx.ports["rpc"]],
            "peers": {peer: list(ports["rpc"]) for peer, ports in ctx.peers.items()},
            "events": str(ctx.events_path),
            "state": str(ctx.checkpoint_dir / "state.json"),
            "observed": str(ctx.node_dir / "observed.jsonl"),
            "runs": str(ctx.node_dir / "incarnation"),
        }))

    def launch(self, ctx: NodeContext) -> Launch:
        return Launch(
            argv=(ctx.python, str(PROGRAM), str(self.config_path(ctx))),
            mounts=(PROGRAM,),  # beside the suite, not in the node image
        )
"""

SCENARIO = """
name: relay-smoke
system: relay_system:RelaySystem
cluster: {{nodes: 3, backend: {backend}}}
steady_state: {{min_commit_step: 5, timeout_s: 120}}
duration_s: 9
quiesce_s: 4
faults:
  - at_s: 2
    op: {{op: partition, grouping: isolate, nodes: [n3]}}
    heal_after_s: 3
  - at_s: 6
    op: {{op: crash, nodes: [n2]}}
    heal_after_s: 2
bounds: {{detection_s: 5, recovery_s: 5, rejoin_s: 5}}
"""


@pytest.fixture
def relay(tmp_path, monkeypatch) -> Path:
    """The relay's program and system written out, the folder importable."""
    (tmp_path / "relay_node.py").write_text(RELAY_NODE)
    (tmp_path / "relay_system.py").write_text(RELAY_SYSTEM)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


# --- the choice, without Docker ---------------------------------------------------------


def spec(nodes: int = 3, system: System | None = None) -> ClusterSpec:
    names = tuple(f"n{i}" for i in range(1, nodes + 1))
    return ClusterSpec(run_id="plan", run_dir=Path("/tmp/plan-run"), nodes=names, system=system)


def test_the_docker_plan_follows_what_a_system_declares_not_its_name(relay):
    reference = DockerPlan.of(ReferenceSystem())
    assert (reference.toxiproxy, reference.broker, reference.netns) == (True, True, False)
    assert dict(reference.channels) == {"control": "control", "bulk": "bulk"}
    assert dict(reference.ports) == {"control": 7001, "bulk": 7002, "http": 7003}

    class Renamed(ReferenceSystem):
        name = "not-the-reference"

    assert DockerPlan.of(Renamed()) == reference

    plan = DockerPlan.of(load_system("relay_system:RelaySystem"))
    assert (plan.toxiproxy, plan.broker, plan.netns) == (True, False, False)
    assert dict(plan.channels) == {"control": "rpc"} and dict(plan.ports) == {"rpc": 7001}
    proxies = plan.proxies(spec().nodes)
    assert len(proxies) == 6 and ("n1__n2__control", "n2:7001") in proxies  # no broker ones
    assert len(reference.proxies(spec().nodes)) == 3 + 3 * 2 * 2
    assert ("n3__broker", f"broker:{BROKER_PORT}") in reference.proxies(spec().nodes)

    class Brokered(System):  # a user's proxy system that talks to the broker too
        name = "brokered"
        link_faults = "proxy"
        ports = ("a", "b")
        proxied_ports = {"bulk": "b"}
        needs_broker = True

        def launch(self, ctx):
            raise AssertionError("never started")

    brokered = DockerPlan.of(Brokered())
    assert (brokered.toxiproxy, brokered.broker) == (True, True)
    assert ("n1__broker", f"broker:{BROKER_PORT}") in brokered.proxies(spec().nodes)

    for name in ("torchft", "torchelastic"):
        other = DockerPlan.of(load_system(name))
        assert (other.toxiproxy, other.broker, other.netns) == (False, False, True), name
        assert other.proxies(spec().nodes) == []


def test_a_node_is_told_to_dial_its_peers_through_the_proxies(relay):
    addresses = {"n1": "172.30.0.2", "n2": "172.30.0.3", "n3": "172.30.0.4"}
    relay_plan = DockerPlan.of(load_system("relay_system:RelaySystem"))
    listeners = {name: 20000 + i for i, (name, _) in enumerate(relay_plan.proxies(spec().nodes))}
    ctx = relay_plan.context(
        spec(), "n1", 0, addresses=addresses, listeners=listeners, services={}, broker=None
    )
    assert ctx.address == "172.30.0.2" and dict(ctx.ports) == {"rpc": 7001}
    assert ctx.peers["n3"]["rpc"] == ("toxiproxy", listeners["n1__n3__control"])
    assert ctx.broker is None

    reference_plan = DockerPlan.of(ReferenceSystem())
    listeners = {name: 20000 + i for i, (name, _) in enumerate(reference_plan.proxies(spec().nodes))}  # fmt: skip
    ctx = reference_plan.context(
        spec(), "n2", 1, addresses=addresses, listeners=listeners, services={},
        broker=("172.30.0.9", BROKER_PORT),
    )  # fmt: skip
    assert ctx.peers["n1"]["bulk"] == ("toxiproxy", listeners["n2__n1__bulk"])
    assert ctx.peers["n1"]["http"] == ("172.30.0.2", 7003)  # not proxied: dialled directly
    assert ctx.broker == ("toxiproxy", listeners["n2__broker"])

    netns_plan = DockerPlan.of(load_system("torchelastic"))
    ctx = netns_plan.context(
        spec(), "n1", 0, addresses=addresses, listeners={}, services={}, broker=None
    )
    assert all(host == addresses[peer] for peer, ports in ctx.peers.items()
               for host, _ in ports.values())  # fmt: skip


def test_the_local_backend_proxies_the_same_declared_ports(relay):
    backend = LocalBackend(spec(system=load_system("relay_system:RelaySystem")))
    backend.node_ports = {"n1": (21001,), "n2": (21002,), "n3": (21003,)}
    assert sorted(backend._proxied_upstreams()) == sorted(
        (f"{src}__{dst}__control", 21000 + int(dst[1]))
        for src in ("n1", "n2", "n3") for dst in ("n1", "n2", "n3") if src != dst
    )  # fmt: skip


def test_what_a_proxy_system_declares_is_checked_when_it_loads():
    def proxied(**declared) -> type[System]:
        def launch(self, ctx):
            raise AssertionError("never started")

        return type("Bad", (System,), {"name": "bad", "link_faults": "proxy", "launch": launch,
                                       **declared})  # fmt: skip

    with pytest.raises(SystemConfigError, match="needs a port its peers dial"):
        proxied()()
    with pytest.raises(SystemConfigError, match="map a channel"):
        proxied(ports=("rpc",), proxied_ports={"gossip": "rpc"})()
    with pytest.raises(SystemConfigError, match="map a channel"):
        proxied(ports=("rpc",), proxied_ports={"control": "nope"})()
    with pytest.raises(SystemConfigError, match="one channel only"):
        proxied(ports=("rpc",), proxied_ports={"control": "rpc", "bulk": "rpc"})()
    with pytest.raises(SystemConfigError, match="absolute"):
        Launch(argv=("python",), mounts=(Path("relative.py"),))  # type: ignore[arg-type]
    with pytest.raises(SystemConfigError, match="absolute"):
        Launch(argv=("python",), mounts=("/abs/but/a/str.py",))  # type: ignore[arg-type]


def test_the_harness_never_chooses_a_path_by_a_systems_name():
    """What a system gets (the simulator, planted bugs, load, replay, explore's
    triggers, a bench's quiesce) follows what it declares, never its name: a user's
    system declaring the same gets the same.  Only chaos/systems/ names systems."""
    compares_name = re.compile(r"""(?:==|!=|\bin)\s*\(?\s*(?:None,\s*)?["']reference["']""")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "chaos").rglob("*.py"))
        if "systems" not in path.relative_to(ROOT / "chaos").parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if compares_name.search(line)
    ]
    assert not found
    assert compares_name.search('if args.system not in (None, "reference"):')


def test_the_reference_stand_in_program_is_a_mount_of_its_launch(tmp_path):
    program = tmp_path / "stand_in.py"
    program.write_text("")
    system = ReferenceSystem()
    plan = DockerPlan.of(system)
    for node_program, mounts in ((str(program), (program,)), ("swarmshake.reference_node", ())):
        cluster = ClusterSpec(run_id="r", run_dir=tmp_path / "run", nodes=("n1", "n2"),
                              node_program=node_program)  # fmt: skip
        ctx = plan.context(
            cluster, "n1", 0, addresses={"n1": "10.0.0.2", "n2": "10.0.0.3"},
            listeners={n: 20000 + i for i, (n, _) in enumerate(plan.proxies(cluster.nodes))},
            services={}, broker=("10.0.0.9", BROKER_PORT),
        )  # fmt: skip
        launch = system.launch(ctx)
        assert launch.mounts == mounts and launch.argv[0] == "/opt/venv/bin/python"


# --- the relay, run ---------------------------------------------------------------------


def docker_unavailable() -> str:
    status = ROOT / ".cache" / "docker-unavailable"
    return docker_available() or (status.read_text().strip() if status.exists() else "")


def heard(run_dir: Path, receiver: str, sender: str) -> list[float]:
    path = run_dir / "nodes" / receiver / "observed.jsonl"
    times = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the crash
            continue
        if record["peer"] == sender:
            times.append(record["t"])
    return times


def fault_times(run_dir: Path, op: str) -> tuple[float, float]:
    """(inject, heal) wall times of the harness's ``op`` fault."""
    found: dict[str, float] = {}
    for line in (run_dir / "events" / "harness.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "fault" and record.get("op") == op:
            found.setdefault(record["phase"], record["t_wall"])
    return found["inject"], found["heal"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", ["local", pytest.param("docker", marks=pytest.mark.docker)]
)  # fmt: skip
def test_a_users_proxy_system_runs_with_a_partition_and_a_crash(relay, backend, docker_leftovers):
    if backend == "docker" and (reason := docker_unavailable()):
        pytest.skip(f"Docker unavailable on this machine: {reason}")
    scenario = resolve(loads(SCENARIO.format(backend=backend), "relay-smoke.yaml"))
    result = run_blocking(scenario, RunOptions(out=relay / "runs", quiet=True))
    run_dir = result.run_dir
    verdict = result.verdict
    assert verdict is not None, result.message
    statuses = {name: r.status for name, r in verdict.results.items()}
    messages = {name: r.message for name, r in verdict.results.items()}
    for name in ("S1", "L2", "L3"):
        assert statuses[name] == "valid", messages
    assert result.status == "valid" or statuses.get("L1") != "invalid", messages

    # Every peer address a node dials is a proxy's listener, not the peer itself.
    config = json.loads((run_dir / "nodes" / "n1" / "relay.json").read_text())
    own = json.loads((run_dir / "nodes" / "n2" / "relay.json").read_text())["listen"]
    assert config["peers"]["n2"] != own
    if backend == "docker":
        assert {host for host, _ in config["peers"].values()} == {"toxiproxy"}
    # The partition reached the wire: n3 heard its peers before and after, never
    # while it was cut off. Half a second is left out at each end: after the cut, lines
    # already in flight; before the heal, lines over a link already restored (the heal
    # is recorded once every cut link is restored, so the window is a superset; a CI
    # run once saw a line 0.4 ms before the record).
    cut, healed = fault_times(run_dir, "partition")
    for sender, receiver in (("n1", "n3"), ("n3", "n1")):
        times = heard(run_dir, receiver, sender)
        assert any(t < cut for t in times), (sender, receiver, "nothing before the cut")
        while_cut = [t for t in times if cut + 0.5 < t < healed - 0.5]
        assert not while_cut, (sender, receiver, cut, healed, while_cut)
        assert any(t > healed for t in times), (sender, receiver, "nothing after the heal")
    # n2 crashed and came back as a new incarnation, resumed from its checkpoint.
    assert (run_dir / "nodes" / "n2" / "incarnation").read_text() == "1"

    if backend == "docker":
        assert docker_leftovers(run_dir) == ([], [])


@pytest.mark.docker
@pytest.mark.slow
def test_the_docs_example_runs_on_docker_with_its_trainer_mounted(tmp_path, monkeypatch):
    """docs/testing-your-system.md's example, unchanged but for the backend: its
    trainer, a file beside the suite, is a ``mounts`` entry of its launch."""
    if reason := docker_unavailable():
        pytest.skip(f"Docker unavailable on this machine: {reason}")
    doc = (ROOT / "docs" / "testing-your-system.md").read_text()
    blocks = dict(re.findall(r"```(?:python|yaml) (\S+)\n(.*?)```", doc, re.S))
    for name, text in blocks.items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = blocks["my-suite.yaml"].replace("cluster: {nodes: 3}", "cluster: {nodes: 3, backend: docker}")  # fmt: skip
    assert "backend: docker" in suite
    result = run_blocking(
        resolve(loads(suite, "my-suite.yaml")), RunOptions(out=tmp_path / "runs", quiet=True)
    )
    assert result.verdict is not None, result.message
    statuses = {name: r.status for name, r in result.verdict.results.items()}
    assert statuses["S1"] == statuses["L2"] == statuses["L3"] == "valid", statuses
