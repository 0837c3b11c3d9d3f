"""The whole test suite's policy: ``long`` tests run only when asked for.

They are soaks, deep TLC profiles and the full mutation run (hours: session 10 started
``test_every_mutant`` by running ``pytest tests/verify`` with no marker).  With no
``-m`` expression they are skipped, unless named one by one on the command line
(``pytest tests/verify/test_mutation.py::test_every_mutant``); ``make test-long`` and
any ``-m`` expression that mentions them decide for themselves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_SKIP_LONG = pytest.mark.skip(
    reason="long (hours or many minutes): run with -m long (make test-long), or name it"
)


def _named(config: pytest.Config) -> set[tuple[Path, str]]:
    """(file, test name) for each ``FILE::TEST`` argument; a parametrized test named
    without its parameters names them all."""
    named = set()
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        if sep:
            named.add(((config.invocation_params.dir / path).resolve(), rest.split("::")[-1]))
    return named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.markexpr:
        return
    named = _named(config)
    for item in items:
        if "long" not in item.keywords:
            continue
        name = item.name.split("[", 1)[0]
        if (item.path.resolve(), item.name) in named or (item.path.resolve(), name) in named:
            continue
        item.add_marker(_SKIP_LONG)
