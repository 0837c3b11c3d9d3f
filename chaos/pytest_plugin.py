"""The swarmshake pytest plugin: chaos tests written as plain pytest tests.

Registered through the ``pytest11`` entry point, so installing swarmshake is
enough.  Adds ``--swarmshake-backend`` (local or docker) and the ``chaos`` mark;
the ``cluster`` and ``nemesis`` fixtures come from the harness.
"""

from __future__ import annotations

import pytest

BACKENDS = ("local", "docker")


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
        "markers", "chaos: a chaos test; gets the cluster and nemesis fixtures of swarmshake"
    )
