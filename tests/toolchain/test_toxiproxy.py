"""Toxiproxy, built by `make setup`, does what the fault catalog relies on."""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import time

import pytest

from swarmshake.chaos.toxiproxy import Toxic, ToxiproxyClient, ToxiproxyHungError

PINGS = 15


async def round_trip_ms(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
    start = time.perf_counter()
    writer.write(b"ping\n")
    await writer.drain()
    async with asyncio.timeout(5):
        assert await reader.readline() == b"ping\n"
    return (time.perf_counter() - start) * 1000


async def median_rtt_ms(port: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        samples = [await round_trip_ms(reader, writer) for _ in range(PINGS)]
    finally:
        writer.close()
    return statistics.median(samples)


async def test_latency_toxic_adds_its_latency_to_a_round_trip(toxiproxy, echo_server):
    proxy = await toxiproxy.create_proxy("echo", "127.0.0.1:0", f"127.0.0.1:{echo_server.port}")
    baseline_ms = await median_rtt_ms(proxy.listen_port)
    await toxiproxy.add_toxic(
        "echo", Toxic(name="lag", type="latency", attributes={"latency": 100, "jitter": 0})
    )
    delayed_ms = await median_rtt_ms(proxy.listen_port)
    added_ms = delayed_ms - baseline_ms
    assert 80 <= added_ms <= 120, f"latency toxic added {added_ms:.1f} ms, expected 100 ± 20"

    await toxiproxy.remove_toxic("echo", "lag")
    assert await median_rtt_ms(proxy.listen_port) < baseline_ms + 20


async def test_disabling_a_proxy_cuts_the_connection_and_refuses_new_ones(toxiproxy, echo_server):
    proxy = await toxiproxy.create_proxy("echo", "127.0.0.1:0", f"127.0.0.1:{echo_server.port}")
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.listen_port)
    await round_trip_ms(reader, writer)

    await toxiproxy.set_enabled("echo", False)
    async with asyncio.timeout(5):
        cut = await reader.read(100)
    assert cut == b"", "an open connection survived disabling the proxy"
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", proxy.listen_port)

    await toxiproxy.set_enabled("echo", True)
    assert await median_rtt_ms(proxy.listen_port) < 100


async def test_reset_peer_resets_connections(toxiproxy, echo_server):
    """With reset_peer on, a connection through the proxy is answered with a TCP RST
    (ECONNRESET), not an orderly close: what a crashed peer's kernel sends."""
    proxy = await toxiproxy.create_proxy("echo", "127.0.0.1:0", f"127.0.0.1:{echo_server.port}")
    await toxiproxy.add_toxic(
        "echo", Toxic(name="rst", type="reset_peer", stream="upstream", attributes={"timeout": 0})
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.listen_port)
    writer.write(b"ping\n")
    with pytest.raises(ConnectionResetError):
        async with asyncio.timeout(5):
            await writer.drain()
            data = await reader.read(100)
            raise AssertionError(f"connection was not reset, read {data!r}")
    writer.close()

    await toxiproxy.remove_toxic("echo", "rst")
    assert await median_rtt_ms(proxy.listen_port) < 100


async def test_two_servers_driven_concurrently_by_independent_clients(tmp_path, echo_server):
    from swarmshake.chaos.toxiproxy import ToxiproxyServer

    async with (
        ToxiproxyServer(log_path=tmp_path / "a.log") as first,
        ToxiproxyServer(log_path=tmp_path / "b.log") as second,
    ):
        upstream = f"127.0.0.1:{echo_server.port}"
        await asyncio.gather(
            *(first.create_proxy(f"p{i}", "127.0.0.1:0", upstream) for i in range(10)),
            *(second.create_proxy(f"q{i}", "127.0.0.1:0", upstream) for i in range(10)),
        )
        assert sorted(await first.client.proxies()) == sorted(f"p{i}" for i in range(10))
        assert sorted(await second.client.proxies()) == sorted(f"q{i}" for i in range(10))


async def test_a_hung_server_is_restarted_with_its_proxies_and_toxics(tmp_path, echo_server):
    from swarmshake.chaos.toxiproxy import ToxiproxyServer

    incidents: list[tuple[str, dict]] = []
    async with ToxiproxyServer(
        log_path=tmp_path / "t.log",
        call_timeout_s=0.5,
        on_incident=lambda kind, data: incidents.append((kind, data)),
    ) as server:
        proxy = await server.create_proxy("echo", "127.0.0.1:0", f"127.0.0.1:{echo_server.port}")
        # SIGSTOP makes the API hang exactly like the known bug: accepted, never answered.
        os.kill(server.pid, signal.SIGSTOP)
        hung_client = ToxiproxyClient(server.url, call_timeout_s=0.3)
        with pytest.raises(ToxiproxyHungError):
            await hung_client.proxies()
        await hung_client.aclose()

        await server.add_toxic(
            "echo", Toxic(name="lag", type="latency", attributes={"latency": 50, "jitter": 0})
        )
        assert [kind for kind, _ in incidents] == ["toxiproxy_restart"]
        recreated = await server.client.get_proxy("echo")
        assert recreated.listen == proxy.listen
        assert [t.name for t in recreated.toxics] == ["lag"]
        assert await median_rtt_ms(proxy.listen_port) >= 45


def test_toxiproxy_python_still_works_against_our_server(tmp_path):
    """The PyPI client (sync, class-level host/port) against the server we build."""
    import subprocess

    from toxiproxy import Toxiproxy
    from toxiproxy.api import APIConsumer

    from swarmshake.chaos.toxiproxy.server import free_port, toxiproxy_binary

    port = free_port()
    server = subprocess.Popen(
        [str(toxiproxy_binary()), "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        APIConsumer.host, APIConsumer.port = "127.0.0.1", port
        client = Toxiproxy()
        for _ in range(100):
            if client.running():
                break
            time.sleep(0.05)
        assert b"2.12.0" in client.version()
        proxy = client.create(upstream="127.0.0.1:9", name="legacy", listen="127.0.0.1:0")
        proxy.add_toxic(type="latency", attributes={"latency": 10})
        assert [t.name for t in proxy.toxics().values()] == ["latency_downstream"]
        proxy.disable()
        assert client.get_proxy("legacy").enabled is False
        client.destroy(proxy)
        assert client.proxies() == {}
    finally:
        server.terminate()
        server.wait(5)
