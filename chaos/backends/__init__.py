"""Cluster backends: where the nodes, the broker and Toxiproxy run.

Both backends share one interface (:class:`~swarmshake.chaos.backends.base.Backend`:
``up``, ``down``, ``node(name)``, ``link(a, b)``, ``broker``, ``events``) so the runner,
the nemesis and the pytest fixtures never ask which one they drive.  ``local`` runs
everything as child processes on loopback (the default, no Docker needed); ``docker``
runs nodes and Toxiproxy as containers on a project-created, labelled network.
"""

from __future__ import annotations

from swarmshake.chaos.backends.base import Backend, BackendError, ClusterSpec
from swarmshake.chaos.cleanup import Registry

BACKEND_NAMES = ("local", "docker")


def make_backend(name: str, spec: ClusterSpec, registry: Registry | None = None) -> Backend:
    """The backend called ``name`` for ``spec`` (imports Docker only when asked).

    ``registry`` records what the backend starts, so a killed harness's leftovers
    are found and removed by the next run (``chaos/cleanup.py``)."""
    if name == "local":
        from swarmshake.chaos.backends.local import LocalBackend

        return LocalBackend(spec, registry=registry)
    if name == "docker":
        from swarmshake.chaos.backends.docker import DockerBackend

        return DockerBackend(spec, registry=registry)
    raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")


__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "BackendError",
    "ClusterSpec",
    "make_backend",
    "supported_ops",
]


def supported_ops(name: str) -> frozenset[str]:
    """The fault ops backend ``name`` can inject (checked before a run starts)."""
    if name == "local":
        from swarmshake.chaos.backends.local import LocalBackend

        return LocalBackend.supported_ops
    if name == "docker":
        from swarmshake.chaos.backends.docker import DockerBackend

        return DockerBackend.supported_ops
    if name == "sim":
        from swarmshake.chaos.faults import SIM_SUPPORTED

        return SIM_SUPPORTED
    raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
