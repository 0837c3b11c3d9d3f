"""``swarmshake up | down [--all] | status``: a long-lived cluster for exploring by hand.

``up`` starts a detached harness process (``serve``) that brings a cluster up and
keeps it until ``down``; its addresses (Toxiproxy API, broker, each node's ports and
log) are written to ``<state>/cluster.json`` and printed.  Faults can then be
injected with any Toxiproxy client or by signalling the listed pids.  ``down``
stops it; ``down --all`` also removes everything any swarmshake run ever left
behind (processes from run records, labelled Docker containers and networks).
``main(argv)`` gets the command name as ``argv[0]`` (the router passes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarmshake.chaos import cleanup
from swarmshake.chaos.backends import BACKEND_NAMES, make_backend
from swarmshake.chaos.backends.base import NODE_MODULE, ClusterSpec
from swarmshake.chaos.commands._args import ArgumentParser, UsageError
from swarmshake.chaos.scenario import MODEL_SIZES

UP_TIMEOUT_S = 180.0  # a cold zygote (torch import) plus 64 nodes on a loaded machine
DOWN_TIMEOUT_S = 60.0  # the daemon's own down() has per-step deadlines well inside this


def state_file() -> Path:
    return cleanup.state_dir() / "cluster.json"


def _read_state() -> dict[str, Any] | None:
    try:
        return json.loads(state_file().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _daemon_alive(state: dict[str, Any]) -> bool:
    daemon = state.get("daemon") or {}
    return bool(daemon) and cleanup.process_start_time(int(daemon["pid"])) == daemon.get(
        "start_time"
    )


def up(args: Any) -> int:
    state = _read_state()
    if state and _daemon_alive(state):
        raise UsageError(
            f"a cluster is already up ({state.get('run_dir')}); fix: `swarmshake down` first"
        )
    state_file().unlink(missing_ok=True)
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-cluster"
    run_dir = (args.out / run_id).resolve()
    run_dir.mkdir(parents=True)
    log = open(run_dir / "daemon.log", "ab")  # noqa: SIM115 - handed to the child
    command = [
        sys.executable, "-m", "swarmshake.chaos.commands.cluster", "serve",
        "--backend", args.backend, "--nodes", str(args.nodes), "--model", args.model,
        "--run-dir", str(run_dir), "--run-id", run_id, "--node-program", args.node_program,
    ]  # fmt: skip
    daemon = subprocess.Popen(
        command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
    )
    log.close()
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        state = _read_state()
        if (
            state
            and state.get("daemon", {}).get("pid") == daemon.pid
            and state.get("status") == "up"
        ):
            break
        if daemon.poll() is not None:
            print((run_dir / "daemon.log").read_text()[-3000:], file=sys.stderr)
            print(
                f"swarmshake up: the cluster did not start (exit {daemon.returncode})",
                file=sys.stderr,
            )
            return 2
        time.sleep(0.1)
    else:
        daemon.terminate()
        print(
            f"swarmshake up: not up within {UP_TIMEOUT_S}s; log: {run_dir / 'daemon.log'}",
            file=sys.stderr,
        )
        return 2
    _print_state(state, args.json)
    return 0


def _print_state(state: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(state))
        return
    cluster = state.get("cluster", {})
    print(
        f"cluster {state.get('run_id')} ({cluster.get('backend')}): {state.get('status')}",
        file=sys.stderr,
    )
    print(f"  run dir   {state.get('run_dir')}", file=sys.stderr)
    print(
        f"  toxiproxy {cluster.get('toxiproxy')}   broker {cluster.get('broker')}", file=sys.stderr
    )
    if state.get("mqtt_credentials"):
        # The broker takes no anonymous client; nodes take only commands the harness
        # signed (chaos/backends/mqtt_commands.py signs them with the run's key).
        print(f"  mqtt login {state['mqtt_credentials']} (harness user, 0600)", file=sys.stderr)
    for name, node in (cluster.get("nodes") or {}).items():
        running = "running" if node.get("running") else "down"
        print(f"  {name:4s} pid {node.get('pid')} {running} control :{node.get('control_port')} "
              f"bulk :{node.get('bulk_port')} http :{node.get('http_port')}", file=sys.stderr)  # fmt: skip


def status(args: Any) -> int:
    state = _read_state()
    if not state:
        print("no cluster is up (swarmshake up starts one)", file=sys.stderr)
        if args.json:
            print(json.dumps({"status": "down"}))
        return 0
    if not _daemon_alive(state):
        state["status"] = "dead (its harness is gone; `swarmshake down` cleans up)"
    else:
        # Node liveness changes under the user's own faults: refresh it from the kernel.
        for node in (state.get("cluster", {}).get("nodes") or {}).values():
            pid = node.get("pid")
            node["running"] = bool(pid) and cleanup.process_state(int(pid)) not in (None, "Z")
    _print_state(state, args.json)
    return 0


def down(args: Any) -> int:
    state = _read_state()
    removed: dict[str, int] = {}
    if state and _daemon_alive(state):
        pid = int(state["daemon"]["pid"])
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_TIMEOUT_S
        while time.monotonic() < deadline and cleanup.process_state(pid) not in (None, "Z"):
            time.sleep(0.05)
        if cleanup.process_state(pid) not in (None, "Z"):
            os.kill(pid, signal.SIGKILL)
    if state:
        record = cleanup.active_dir() / f"{state.get('run_id')}.json"
        if record.exists():
            removed = cleanup.reap_record(record)
        state_file().unlink(missing_ok=True)
    if args.all:
        for key, value in cleanup.reap_all().items():
            removed[key] = removed.get(key, 0) + value
    summary = ", ".join(f"{v} {k}" for k, v in removed.items() if v) or "nothing left over"
    print(f"swarmshake down: {'cluster stopped; ' if state else ''}{summary}", file=sys.stderr)
    if args.json:
        print(json.dumps({"stopped": bool(state), "removed": removed}))
    return 0


async def serve(args: Any) -> int:
    """The daemon: bring the cluster up, publish its state, wait for SIGTERM, bring it down."""
    cleanup.reap_stale()
    spec = ClusterSpec(
        run_id=args.run_id,
        run_dir=Path(args.run_dir),
        nodes=tuple(f"n{i}" for i in range(1, args.nodes + 1)),
        node_config={"training": {"hidden": MODEL_SIZES[args.model]}},
        node_program=args.node_program,
    )
    registry = cleanup.Registry.create(spec.run_id, spec.run_dir)
    backend = make_backend(args.backend, spec, registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    daemon = {"pid": os.getpid(), "start_time": cleanup.process_start_time(os.getpid())}
    try:
        await backend.up()
        credentials = spec.run_dir / "harness" / "mqtt-credentials.json"
        state = {"run_id": spec.run_id, "run_dir": str(spec.run_dir), "status": "up",
                 "daemon": daemon, "cluster": backend.describe(),
                 "mqtt_credentials": str(credentials) if credentials.exists() else None}  # fmt: skip
        tmp = state_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, state_file())
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await backend.down()
        registry.close()
    return 0


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("status", [])
    parser = ArgumentParser(prog=f"swarmshake {command}", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    if command in ("up", "serve"):
        parser.add_argument("--backend", choices=BACKEND_NAMES, default="local")
        parser.add_argument("--nodes", type=int, default=4)
        parser.add_argument("--model", choices=sorted(MODEL_SIZES), default="tiny")
        parser.add_argument("--out", type=Path, default=Path("runs"))
        parser.add_argument("--node-program", default=NODE_MODULE)
    if command == "serve":
        parser.add_argument("--run-dir", required=True)
        parser.add_argument("--run-id", required=True)
    if command == "down":
        parser.add_argument(
            "--all", action="store_true", help="remove everything swarmshake ever started"
        )
    args = parser.parse_args(rest)
    if command in ("up", "serve") and not 1 <= args.nodes <= 64:
        raise UsageError(f"--nodes {args.nodes}: choose 1..64")
    if command == "up":
        return up(args)
    if command == "serve":
        return asyncio.run(serve(args))
    if command == "down":
        return down(args)
    if command == "status":
        return status(args)
    raise UsageError(f"unknown cluster command {command!r}; use up, down or status")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
