"""The swarmshake pytest plugin: chaos tests written as plain pytest tests, judged.

Registered through the ``pytest11`` entry point, so installing swarmshake is
enough.  Adds ``--swarmshake-backend`` (local or docker), the ``chaos`` mark and two
fixtures::

    @pytest.mark.chaos(nodes=3)
    def test_minority_stalls(cluster, nemesis):
        cluster.wait_until_steady()
        nemesis.inject(Partition(grouping="isolate", nodes=["n1"]))
        ...
        nemesis.heal_all()

``cluster`` is a running :class:`~swarmshake.chaos.pytest_cluster.ChaosCluster`
(blocking methods, no event loop needed in the test); ``nemesis`` injects and heals
fault ops on it.  After the test's body the plugin judges the run, as ``swarmshake
run`` judges a scenario: every fault healed, ``quiesce_s`` of quiet, the cluster
down, the history checked against S1–S4 and L1–L3 (``verdict.json``) and the
reports written (``report.html``).  An ``invalid`` property fails the test with the
property, its evidence and the report's path; an ``unknown`` one fails it too,
unless the mark allows it.  ``cluster.verdict()`` checks the history so far, for a
test that asserts on it before the end.

The mark's keywords: ``nodes`` (default 4), ``seed``, ``training`` / ``detector`` /
``step`` (node config sections), ``bugs`` (known-bug switches, as ``--bug``),
``node_program`` (a module or script speaking the node's config, for tests of the
harness itself), and for the judging ``bounds`` (a dict of
:class:`~swarmshake.verify.checkers.Bounds` fields: D, R, J, …), ``allow_unknown``
(property names whose ``unknown`` passes, e.g. ``("S4",)``), ``quiesce_s`` (default
3) and ``verify`` (False: no judging, for stand-in programs that write no history).
Each test gets its own run directory under pytest's tmp_path, kept for
inspection; the cluster is always brought down.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

BACKENDS = ("local", "docker")
MARK_KEYWORDS = (
    "nodes",
    "seed",
    "training",
    "detector",
    "step",
    "bugs",
    "node_program",
    "system",
    "system_options",
    "bounds",
    "allow_unknown",
    "quiesce_s",
    "verify",
)


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
        "chaos(nodes=4, seed=0, training={}, detector={}, step={}, bugs=[], node_program=..., "
        "system='reference', system_options={}, bounds={}, allow_unknown=(), quiesce_s=3, verify=True): a chaos test; gets the "
        "cluster and nemesis fixtures of swarmshake, and fails unless its run is valid",
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
    from swarmshake.chaos.pytest_cluster import ChaosCluster, ChaosMarkError, Judging

    options = _mark_options(request)
    try:
        judging = Judging.from_mark(options)
    except ChaosMarkError as error:
        raise pytest.UsageError(f"@pytest.mark.chaos: {error}") from None
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
        system=_system(options),
    )
    session = ChaosCluster(request.config.getoption("--swarmshake-backend"), spec, judging)
    request.node.user_properties.append(("swarmshake_run_dir", str(spec.run_dir)))
    with session:
        yield session


def _system(options: dict[str, Any]) -> Any:
    """The mark's ``system`` (a name or pkg.module:Class) with its ``system_options``."""
    from swarmshake.chaos.systems import SystemConfigError, load_system

    try:
        return load_system(
            str(options.get("system", "reference")), options.get("system_options") or {}
        )
    except SystemConfigError as error:
        raise pytest.UsageError(f"@pytest.mark.chaos: {error}") from None


@pytest.fixture
def nemesis(cluster: Any) -> Iterator[Any]:
    """Injects and heals fault ops on ``cluster``; everything is healed after the test."""
    yield cluster
    cluster.heal_all()  # a no-op once the plugin has judged the run (the cluster is down)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Judge a chaos test's run after its body, in the call phase, so a violated
    property is the test's failure (not an error of a fixture's teardown)."""
    session = getattr(item, "funcargs", {}).get("cluster")
    judge = getattr(session, "finish", None)
    if judge is None:  # not a swarmshake cluster (a test's own fixture of that name)
        return (yield)
    try:
        result = yield
    except BaseException:
        # The test failed on its own: still bring the cluster down and write the
        # verdict and the reports for inspection; the test's own failure stands.
        with contextlib.suppress(Exception):  # the test's own failure is the one to report
            judge()
        raise
    verdict = judge()
    if verdict is not None:
        item.user_properties.append(("swarmshake_verdict", verdict.status))
        failure = session.judging.failure(verdict, session.run_dir)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
    return result
