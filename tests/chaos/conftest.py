"""Fixtures for the harness's own tests: a cluster of stand-in heartbeat nodes.

The stand-in (``heartbeat_node.py``) is a real TCP program reading the node config
the harness writes, so the backends' process, proxy, broker and fault handling are
exercised for real, at a fraction of a training node's cost.  Tests that need the
protocol (commits, partitions stopping commits, bug switches) use the reference
node itself.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swarmshake.chaos.backends.base import ClusterSpec
from swarmshake.chaos.backends.session import ClusterSession
from swarmshake.chaos.toxiproxy import toxiproxy_binary

HEARTBEAT_NODE = str(Path(__file__).with_name("heartbeat_node.py"))


def require_tools() -> None:
    try:
        toxiproxy_binary()
    except FileNotFoundError as error:
        pytest.fail(f"{error} — a broken set-up, not a skip")


def stand_in_spec(tmp: Path, nodes: int = 4, **kwargs) -> ClusterSpec:
    run_id = f"test-{secrets.token_hex(3)}"
    return ClusterSpec(
        run_id=run_id,
        run_dir=tmp / run_id,
        nodes=tuple(f"n{i}" for i in range(1, nodes + 1)),
        node_program=HEARTBEAT_NODE,
        node_config={"training": {"hidden": [16]}},
        **kwargs,
    )


class Observations:
    """Reads what a stand-in node observed (``nodes/<id>/observed.jsonl``)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def of(self, node: str, since: float = 0.0, kind: str | None = None) -> list[dict]:
        path = self.run_dir / "nodes" / node / "observed.jsonl"
        if not path.exists():
            return []
        records = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written right now
            if record["t"] >= since and (kind is None or record["kind"] == kind):
                records.append(record)
        return records

    def heartbeats(
        self, receiver: str, sender: str, since: float, channel: str | None = None
    ) -> list[dict]:
        return [
            r for r in self.of(receiver, since, "hb")
            if r["peer"] == sender and (channel is None or r["channel"] == channel)
        ]  # fmt: skip

    def wait_for(
        self, predicate: Callable[[], object], timeout_s: float = 5.0, what: str = ""
    ) -> object:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        raise AssertionError(f"not observed within {timeout_s}s: {what}")


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Iterator[ClusterSession]:
    """Four heartbeat nodes on the local backend, shared by a module's tests."""
    require_tools()
    spec = stand_in_spec(tmp_path_factory.mktemp("chaos"))
    with ClusterSession("local", spec) as session:
        session.wait_until_steady(min_commit_step=-1, timeout_s=60)
        yield session


@pytest.fixture
def healed(stand_in) -> Iterator[ClusterSession]:
    """The shared cluster with every fault healed before and after the test."""
    stand_in.heal_all()
    yield stand_in
    stand_in.heal_all()


@pytest.fixture
def observed(stand_in) -> Observations:
    return Observations(stand_in.run_dir)


@pytest.fixture
def heartbeat_program() -> str:
    """Path of the stand-in node program (the tools it needs are checked)."""
    require_tools()
    return HEARTBEAT_NODE


@pytest.fixture
def direct_stand_in(tmp_path) -> Iterator[tuple[ClusterSession, Observations]]:
    """Three heartbeat nodes on the local backend with ``links: direct`` (no proxies)."""
    spec = stand_in_spec(tmp_path, nodes=3, direct_links=True)
    with ClusterSession("local", spec) as session:
        session.wait_until_steady(min_commit_step=-1, timeout_s=60)
        yield session, Observations(session.run_dir)


@pytest.fixture
def docker_leftovers() -> Callable[[Path], tuple[list, list]]:
    """The containers and networks a finished Docker run left behind, found by its run
    label (the harness labels everything it creates; both lists empty when it leaked
    nothing)."""

    def leftovers(run_dir: Path) -> tuple[list, list]:
        import docker

        from swarmshake.chaos.cleanup import RUN_LABEL

        run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
        label = {"label": f"{RUN_LABEL}={run_id}"}
        client = docker.from_env(timeout=60)
        try:
            return (
                client.containers.list(all=True, filters=label),
                client.networks.list(filters=label),
            )
        finally:
            client.close()

    return leftovers
