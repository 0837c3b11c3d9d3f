"""Network faults without proxies: a namespace per node, iptables rules, leftovers reaped."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from swarmshake.chaos import cleanup
from swarmshake.chaos.backends.base import UnsupportedFault
from swarmshake.chaos.netns import NetnsLink, NetnsNetwork, kernel_qdiscs, list_namespaces

PORT = 7911
CONNECT = (
    "import socket,sys\n"
    "s=socket.socket(); s.settimeout(1.5)\n"
    "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); s.sendall(b'x'); print('ok')\n"
    "except socket.timeout: print('timeout')\n"
    "except OSError as e: print(type(e).__name__)\n"
)
SERVE = (
    "import socket\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"s.bind(('0.0.0.0', {PORT})); s.listen(16)\n"
    "while True:\n    c,_=s.accept(); c.close()\n"
)


def require_netns() -> None:
    why = kernel_qdiscs().get("netns")
    if why:
        pytest.fail(f"network namespaces unavailable ({why}): the harness needs root here")


def dial(net: NetnsNetwork, src: str, dst: str) -> str:
    done = subprocess.run(
        [*net.exec_prefix(src), sys.executable, "-c", CONNECT, net.addresses[dst], str(PORT)],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    return done.stdout.strip() or done.stderr.strip()


@pytest.fixture
def network(tmp_path):
    require_netns()
    registry = cleanup.Registry.create(f"test-netns-{tmp_path.name}", tmp_path)
    net = NetnsNetwork(f"test-netns-{tmp_path.name}", registry=registry)
    asyncio.run(net.create(["n1", "n2", "n3"]))
    server = subprocess.Popen([*net.exec_prefix("n2"), sys.executable, "-c", SERVE])
    try:
        for _ in range(100):  # the listener binds within milliseconds; bounded wait
            if dial(net, "n1", "n2") == "ok":
                break
        yield net, registry
    finally:
        server.kill()
        server.wait(timeout=10)
        asyncio.run(net.destroy())
        registry.close()


def test_nodes_reach_each_other_and_the_host_keeps_its_interfaces(network):
    net, _ = network
    assert dial(net, "n1", "n2") == "ok" and dial(net, "n3", "n2") == "ok"
    host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert (
        "v-n1" not in host_links
        and "10.213"
        not in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    )


def test_cut_one_direction_then_restore(network):
    net, _ = network
    link = NetnsLink(net, "n1", "n2")
    asyncio.run(link.cut())
    assert dial(net, "n1", "n2") == "timeout"
    assert dial(net, "n3", "n2") == "ok"  # only n1 → n2 is cut
    asyncio.run(link.restore())
    assert dial(net, "n1", "n2") == "ok"


def test_reset_peer_refuses_and_reset_heals_everything(network):
    net, _ = network
    asyncio.run(NetnsLink(net, "n1", "n2").add_toxic("reset_peer", {"timeout": 0}))
    assert dial(net, "n1", "n2") == "ConnectionRefusedError"  # a TCP reset answers the SYN
    asyncio.run(NetnsLink(net, "n3", "n2").add_toxic("blackhole", {"timeout": 0}))
    assert dial(net, "n3", "n2") == "timeout"
    asyncio.run(net.reset())
    assert dial(net, "n1", "n2") == "ok" and dial(net, "n3", "n2") == "ok"


def test_latency_says_unsupported_on_this_kernel_when_netem_is_missing(network):
    net, _ = network
    link = NetnsLink(net, "n1", "n2")
    if kernel_qdiscs().get("netem"):
        with pytest.raises(UnsupportedFault, match="unsupported on this kernel"):
            asyncio.run(link.add_toxic("latency", {"latency": 50, "jitter": 0}))
    else:
        with pytest.raises(UnsupportedFault, match="not implemented"):
            asyncio.run(link.add_toxic("latency", {"latency": 50, "jitter": 0}))


def test_a_killed_runs_namespaces_are_removed_by_the_reaper(tmp_path):
    require_netns()
    run_id = f"test-leftover-{tmp_path.name}"
    registry = cleanup.Registry.create(run_id, tmp_path)
    net = NetnsNetwork(run_id, registry=registry)
    asyncio.run(net.create(["n1"]))
    names = [net.hub, net.ns("n1")]
    assert set(names) <= set(list_namespaces())
    removed = cleanup.reap_record(registry.path)  # what the next run does for a dead harness
    assert removed["netns"] == 2
    assert not set(names) & set(list_namespaces())
