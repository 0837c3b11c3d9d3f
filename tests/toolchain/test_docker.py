"""Docker: the node image runs, and containers on a project network talk through Toxiproxy.

Needs dockerd and the node image (`make test` builds both).  When Docker cannot be
used on this machine, `make image` records why and these tests skip with that reason.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from swarmshake.chaos.docker_image import LABEL, base_tag, node_tag
from swarmshake.chaos.toxiproxy.server import toxiproxy_binary

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]

ECHO_SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9000)); s.listen(8)
while True:
    c, _ = s.accept()
    while data := c.recv(65536):
        c.sendall(data)
    c.close()
"""

PINGER = """
import socket, statistics, sys, time
for attempt in range(100):
    try:
        c = socket.create_connection(("toxiproxy", 9100), timeout=5); break
    except OSError:
        time.sleep(0.1)
samples = []
for _ in range(10):
    start = time.perf_counter(); c.sendall(b"ping\\n")
    assert c.recv(100) == b"ping\\n"
    samples.append((time.perf_counter() - start) * 1000)
print(statistics.median(samples))
"""


@pytest.fixture(scope="module")
def docker_client():
    status = ROOT / ".cache" / "docker-unavailable"
    if status.exists():
        pytest.skip(f"Docker unavailable on this machine: {status.read_text().strip()}")
    import docker

    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as error:
        pytest.skip(f"Docker unavailable on this machine: dockerd does not answer ({error})")
    return client


@pytest.fixture(scope="module")
def node_image(docker_client):
    import docker.errors

    # SWARMSHAKE_NODE_IMAGE pins an image explicitly (a tree being edited while tests run).
    tag = os.environ.get("SWARMSHAKE_NODE_IMAGE") or node_tag()
    try:
        docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        pytest.fail(f"node image {tag} not built for this code: run `make image`")
    return tag


def test_node_image_imports_torch_and_the_node(docker_client, node_image):
    output = docker_client.containers.run(
        node_image,
        entrypoint=[
            "python",
            "-c",
            "import torch, swarmshake.reference_node; print(torch.__version__)",
        ],
        remove=True,
        labels={LABEL: "1"},
    )
    assert output.decode().strip().startswith("2.")


def test_two_containers_talk_through_a_toxiproxy_container(docker_client, node_image):
    run_id = secrets.token_hex(4)
    labels = {LABEL: "1", "swarmshake.run": run_id}
    network = docker_client.networks.create(f"swarmshake-test-{run_id}", labels=labels)
    containers = []
    try:

        def start(name: str, image: str, command: list[str], **kwargs):
            container = docker_client.containers.run(
                image, entrypoint=command, name=f"swarmshake-test-{run_id}-{name}",
                network=network.name, labels=labels, detach=True, **kwargs,
            )  # fmt: skip
            network.reload()
            containers.append(container)
            # Containers reach each other by name through the network's DNS alias.
            network.disconnect(container)
            network.connect(container, aliases=[name])
            return container

        start("echo", node_image, ["python", "-c", ECHO_SERVER])
        toxi = start(
            "toxiproxy", base_tag(), ["/toxiproxy-server", "-host", "0.0.0.0", "-port", "8474"],
            volumes={str(toxiproxy_binary()): {"bind": "/toxiproxy-server", "mode": "ro"}},
        )  # fmt: skip
        toxi.reload()
        api = f"http://{toxi.attrs['NetworkSettings']['Networks'][network.name]['IPAddress']}:8474"

        import httpx

        for _ in range(100):
            try:
                httpx.get(f"{api}/version", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        httpx.post(
            f"{api}/proxies",
            json={"name": "echo", "listen": "0.0.0.0:9100", "upstream": "echo:9000"},
            timeout=5,
        ).raise_for_status()

        def ping_ms() -> float:
            out = docker_client.containers.run(
                node_image, entrypoint=["python", "-c", PINGER], network=network.name,
                labels=labels, remove=True,
            )  # fmt: skip
            return float(out.decode().strip())

        baseline_ms = ping_ms()
        httpx.post(f"{api}/proxies/echo/toxics", json={"name": "lag", "type": "latency",
                   "attributes": {"latency": 100}}, timeout=5).raise_for_status()  # fmt: skip
        delayed_ms = ping_ms()
        assert 80 <= delayed_ms - baseline_ms <= 120, (baseline_ms, delayed_ms)
    finally:
        for container in containers:
            container.remove(force=True)
        network.remove()
    leftovers = docker_client.containers.list(
        all=True, filters={"label": f"swarmshake.run={run_id}"}
    )
    assert leftovers == []
