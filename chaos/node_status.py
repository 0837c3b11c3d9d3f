"""Save every node's own status page when a run aborts.

A run that aborts (a cluster that never reached steady state, a fault that could not
be applied) leaves a history that shows what each node sent and logged, not why none
of them acted on it: session 25 kept a sharded start where all four nodes contributed
step 0 and nobody proposed for 120 s, and its history could not say whether the
leaders never built, built and waited, or never heard of each other's gradients.  So
before the cluster goes down the harness asks each running node for the status page
its system declares (``System.status_endpoint``; the reference node's ``/status``:
its step, the leader's rank and plan, what arrived, what is being built, the worker's
drops) and writes it to ``logs/<node>.status.json`` in the run directory.

Bounded: one GET per node, all at once, each with ``STATUS_TIMEOUT_S``; a node that
does not answer (stopped, paused, its loop stuck) gets a line saying so instead.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarmshake.chaos.backends.base import Backend

# A healthy node answers /status in milliseconds; a node whose loop is stuck never
# does, and the abort must not wait on it long (the cluster still has to go down).
STATUS_TIMEOUT_S = 2.0
# A status page is a few KB; more is not a status page (and not worth a run dir's disk).
STATUS_MAX_BYTES = 1 << 20
# Where each page goes, relative to the run directory.
STATUS_FILE = "logs/{node}.status.json"


def _save(url: str, target: Path) -> str | None:
    """Write the page at ``url`` (a JSON object) to ``target``; None once written, else
    a one-line reason there is no file."""
    try:
        with urllib.request.urlopen(url, timeout=STATUS_TIMEOUT_S) as response:  # noqa: S310
            body = response.read(STATUS_MAX_BYTES + 1)
    except (OSError, urllib.error.URLError) as error:
        return f"not read: {error}"
    if len(body) > STATUS_MAX_BYTES:
        return f"not kept: the page is over {STATUS_MAX_BYTES} bytes"
    try:
        page = json.loads(body)
    except ValueError as error:
        return f"not JSON: {error}"
    if not isinstance(page, dict):
        return f"not a JSON object: {type(page).__name__}"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(page, indent=1, sort_keys=True, default=str) + "\n")
    return None


async def save_statuses(backend: Backend, run_dir: Path) -> dict[str, str]:
    """Write ``logs/<node>.status.json`` under ``run_dir`` for every node that answers;
    returns, per node, that path (relative to ``run_dir``) or why there is no file
    (empty if the system serves no page)."""
    endpoint = backend.system.status_endpoint
    if endpoint is None:
        return {}
    port_name, path = endpoint
    urls: dict[str, str] = {}
    outcome: dict[str, str] = {}
    for name in backend.spec.nodes:
        where = backend.node_endpoint(name, port_name)
        if where is None:
            outcome[name] = f"the {backend.name} backend names no address for its {port_name} port"
        elif not backend.node(name).is_running():
            outcome[name] = "not running"
        else:
            urls[name] = f"http://{where[0]}:{where[1]}{path}"
    files = {name: STATUS_FILE.format(node=name) for name in urls}
    failures = await asyncio.gather(
        *(asyncio.to_thread(_save, url, run_dir / files[name]) for name, url in urls.items())
    )
    for name, failure in zip(urls, failures, strict=True):
        outcome[name] = failure or files[name]
    return outcome
