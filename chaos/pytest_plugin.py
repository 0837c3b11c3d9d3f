"""The swarmshake pytest plugin: chaos tests written as plain pytest tests.

Registered through the ``pytest11`` entry point, so installing swarmshake is
enough.  Adds ``--swarmshake-backend`` (local or docker), the ``chaos`` mark and two
fixtures::

    @pytest.mark.chaos(nodes=4)
    def test_minority_stalls(cluster, nemesis):
        cluster.wait_until_steady()
        nemesis.inject(Partition(grouping="isolate", nodes=["n1"]))
        ...

``cluster`` is a running :class:`~swarmshake.chaos.backends.session.ClusterSession`
(blocking methods, no event loop needed in the test); ``nemesis`` injects and heals
fault ops on it.  The mark's keywords configure the cluster: ``nodes`` (default 4),
``seed``, ``training`` / ``detector`` / ``step`` (node config sections), ``bugs`` and
``node_program`` (a module or script speaking the node's config, for tests of the
harness itself).  Each test gets its own run directory under pytest's tmp_path, kept
for inspection; the cluster is always brought down.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

BACKENDS = ("local", "docker")
MARK_KEYWORDS = ("nodes", "seed", "training", "detector", "step", "bugs", "node_program")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("swarmshake", "swarmshake chaos testing")
    group.addoption(
        "--swarmshake-backend",
        choices=BACKENDS,
        default="local",
        help="cluster backend for @pytest.mark.chaos tests (default: local)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "chaos(nodes=4, seed=0, training={}, detector={}, step={}, bugs=[], node_program=...): "
        "a chaos test; gets the cluster and nemesis fixtures of swarmshake",
    )


def _mark_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker("chaos")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    unknown = sorted(set(options) - set(MARK_KEYWORDS))
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.chaos: unknown keyword(s) {unknown}; known: {MARK_KEYWORDS}"
        )
    return options


@pytest.fixture
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A running cluster on the backend chosen with ``--swarmshake-backend``."""
    from swarmshake.chaos.backends.base import NODE_MODULE, ClusterSpec
    from swarmshake.chaos.backends.session import ClusterSession

    options = _mark_options(request)
    nodes = int(options.get("nodes", 4))
    run_id = f"pytest-{secrets.token_hex(4)}"
    seed = int(options.get("seed", 0))
    training = {"hidden": [64, 64], "seed": seed, **options.get("training", {})}
    node_config: dict[str, dict[str, Any]] = {"training": training}
    for section in ("detector", "step"):
        if options.get(section):
            node_config[section] = dict(options[section])
    spec = ClusterSpec(
        run_id=run_id,
        run_dir=tmp_path_factory.mktemp("swarmshake-run") / run_id,
        nodes=tuple(f"n{i}" for i in range(1, nodes + 1)),
        seed=seed,
        node_config=node_config,
        bugs=tuple(options.get("bugs", ())),
        node_program=str(options.get("node_program", NODE_MODULE)),
    )
    session = ClusterSession(request.config.getoption("--swarmshake-backend"), spec)
    with session:
        yield session


@pytest.fixture
def nemesis(cluster: Any) -> Iterator[Any]:
    """Injects and heals fault ops on ``cluster``; everything is healed after the test."""
    yield cluster
    cluster.heal_all()
