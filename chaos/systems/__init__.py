"""Systems under test, found by name: ``reference``, ``torchelastic``, ``torchft`` or a user's.

``load_system(name, options)`` looks ``name`` up in the entry-point group
``swarmshake.systems`` (a user's package adds a system by declaring one there), or
imports ``pkg.module:Class`` directly.  The built-in systems are also known without
their entry points, so a checkout whose package metadata predates them still runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Mapping
from typing import Any

from swarmshake.chaos.systems.base import (
    Launch,
    NodeContext,
    ServiceSpec,
    System,
    SystemConfigError,
)

ENTRY_POINT_GROUP = "swarmshake.systems"
DEFAULT_SYSTEM = "reference"
BUILTIN = {
    "reference": "swarmshake.chaos.systems.reference:ReferenceSystem",
    "torchelastic": "swarmshake.chaos.systems.torchelastic:TorchElasticSystem",
    "torchft": "swarmshake.chaos.systems.torchft:TorchFTSystem",
}
# ``name`` or ``pkg.module:Class``: what a scenario's ``system:`` may hold.
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}|[A-Za-z_][\w.]{0,199}:[A-Za-z_]\w{0,99}")


def _entry_points() -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found[entry.name] = entry.value
    return found


def known_systems() -> dict[str, str]:
    """Name -> ``module:Class`` of every system this environment knows."""
    return {**BUILTIN, **_entry_points()}


def system_class(name: str) -> type[System]:
    """The class behind ``name``; :class:`SystemConfigError` naming the fix otherwise."""
    if not NAME_PATTERN.fullmatch(name):
        raise SystemConfigError(
            f"system {name!r}: write a registered name ({', '.join(sorted(known_systems()))}) "
            "or pkg.module:Class"
        )
    target = name if ":" in name else known_systems().get(name)
    if target is None:
        raise SystemConfigError(
            f"system {name!r} is unknown; known: {', '.join(sorted(known_systems()))} "
            f"(a package adds one under the entry-point group {ENTRY_POINT_GROUP!r}, or "
            "name it as pkg.module:Class)"
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SystemConfigError(f"system {name!r}: cannot import {module_name}: {error}") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise SystemConfigError(
            f"system {name!r}: {target} is not a subclass of swarmshake.chaos.systems.base.System"
        )
    return cls


def load_system(name: str = DEFAULT_SYSTEM, options: Mapping[str, Any] | None = None) -> System:
    return system_class(name)(options)


__all__ = [
    "BUILTIN",
    "DEFAULT_SYSTEM",
    "ENTRY_POINT_GROUP",
    "Launch",
    "NodeContext",
    "ServiceSpec",
    "System",
    "SystemConfigError",
    "known_systems",
    "load_system",
    "system_class",
]
