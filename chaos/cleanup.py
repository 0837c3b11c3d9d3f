"""Nothing a run starts outlives it: a registry of what each run started, and a reaper.

Every process the harness starts (zygote, nodes, Toxiproxy, Mosquitto) is recorded
with its pid *and* its kernel start time in ``<state>/active/<run-id>.json``, and
every container, network and volume carries the labels ``swarmshake.project`` and
``swarmshake.run=<run-id>``.  A run that ends normally removes all of it and its
record.  A harness killed with SIGKILL leaves the record behind: the next run (or
``swarmshake down --all``) finds records whose harness is dead, kills what they
list and removes the labelled Docker objects.  Pid + start time identifies a
process uniquely, so a recycled pid is never killed by mistake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LABEL = "swarmshake.project"  # chaos/docker_image.LABEL: kept equal (a test checks)
RUN_LABEL = "swarmshake.run"
KILL_WAIT_S = 3.0  # SIGKILL takes effect within milliseconds; D-state processes excepted
DOCKER_TIMEOUT_S = 30  # per Docker API call during cleanup


def state_dir() -> Path:
    base = os.environ.get("SWARMSHAKE_STATE_DIR")
    if base:
        return Path(base)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "swarmshake"


def active_dir() -> Path:
    path = state_dir() / "active"
    path.mkdir(parents=True, exist_ok=True)
    return path


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Field 2 (comm) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def process_state(pid: int) -> str | None:
    """``R``, ``S``, ``T`` (stopped), ``Z`` (zombie) … or None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


@dataclass
class Registry:
    """The record of one run's processes, mounts and Docker label."""

    run_id: str
    path: Path

    @classmethod
    def create(cls, run_id: str, run_dir: Path) -> Registry:
        registry = cls(run_id, active_dir() / f"{run_id}.json")
        registry._write(
            {
                "run_id": run_id,
                "run_dir": str(run_dir),
                "harness": _identity(os.getpid()),
                "processes": {},
                "mounts": [],
                "docker": False,
            }
        )
        return registry

    def _read(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"run_id": self.run_id, "processes": {}, "mounts": []}

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)

    def add_process(self, role: str, pid: int, *, group: bool = False) -> None:
        data = self._read()
        identity = _identity(pid)
        if identity is not None:
            data["processes"][role] = {**identity, "group": group}
            self._write(data)

    def remove_process(self, role: str) -> None:
        data = self._read()
        if data["processes"].pop(role, None) is not None:
            self._write(data)

    def add_mount(self, path: Path) -> None:
        data = self._read()
        data.setdefault("mounts", []).append(str(path))
        self._write(data)

    def remove_mount(self, path: Path) -> None:
        data = self._read()
        data["mounts"] = [m for m in data.get("mounts", []) if m != str(path)]
        self._write(data)

    def add_netns(self, name: str) -> None:
        data = self._read()
        data.setdefault("netns", []).append(name)
        self._write(data)

    def remove_netns(self, name: str) -> None:
        data = self._read()
        data["netns"] = [n for n in data.get("netns", []) if n != name]
        self._write(data)

    def uses_docker(self) -> None:
        data = self._read()
        data["docker"] = True
        self._write(data)

    def close(self) -> None:
        """The run ended and removed everything itself."""
        self.path.unlink(missing_ok=True)


def _identity(pid: int) -> dict[str, int] | None:
    started = process_start_time(pid)
    return None if started is None else {"pid": pid, "start_time": started}


def _same_process(entry: dict[str, Any]) -> bool:
    return process_start_time(int(entry["pid"])) == entry.get("start_time")


def _kill(entry: dict[str, Any]) -> bool:
    pid = int(entry["pid"])
    if not _same_process(entry):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if entry.get("group"):
            os.killpg(pid, signal.SIGKILL)  # SIGKILL also ends a SIGSTOPped (paused) group
        else:
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and process_state(pid) not in (None, "Z"):
        time.sleep(0.01)
    return True


def unmount(path: str) -> None:
    subprocess.run(["umount", "-l", path], capture_output=True, timeout=10, check=False)


def reap_record(record_path: Path) -> dict[str, int]:
    """Kill and remove everything one record lists; returns what was removed."""
    try:
        data = json.loads(record_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        record_path.unlink(missing_ok=True)
        return {}
    removed = {"processes": 0, "mounts": 0, "containers": 0, "networks": 0, "netns": 0}
    for mount in data.get("mounts", []):
        unmount(mount)
        removed["mounts"] += 1
    for entry in data.get("processes", {}).values():
        removed["processes"] += int(_kill(entry))
    if data.get("netns"):
        # After the processes: a namespace whose processes live on outlives its name.
        from swarmshake.chaos.netns import remove_namespaces

        removed["netns"] += remove_namespaces(list(data["netns"]))
    if data.get("docker"):
        counts = remove_docker_objects(run_id=data.get("run_id"))
        removed["containers"] += counts["containers"]
        removed["networks"] += counts["networks"]
    record_path.unlink(missing_ok=True)
    return removed


def harness_alive(record_path: Path) -> bool:
    try:
        data = json.loads(record_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    harness = data.get("harness")
    return bool(harness) and _same_process(harness)


def reap_stale() -> dict[str, int]:
    """Remove leftovers of runs whose harness died (called at the start of every run)."""
    totals: dict[str, int] = {}
    for record in sorted(active_dir().glob("*.json")):
        if harness_alive(record):
            continue
        for key, value in reap_record(record).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def reap_all(*, docker: bool = True) -> dict[str, int]:
    """``swarmshake down --all``: every run's processes, and every labelled Docker object."""
    totals: dict[str, int] = {}
    for record in sorted(active_dir().glob("*.json")):
        for key, value in reap_record(record).items():
            totals[key] = totals.get(key, 0) + value
    if docker:
        for key, value in remove_docker_objects(run_id=None).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def _joins_netns(container: Any) -> bool:
    mode = (container.attrs.get("HostConfig") or {}).get("NetworkMode", "")
    return str(mode).startswith("container:")


def remove_docker_objects(run_id: str | None) -> dict[str, int]:
    """Remove containers, networks and volumes labelled for ``run_id`` (None: any run).

    Images are kept: they are the build cache, content-addressed, not run state.
    """
    counts = {"containers": 0, "networks": 0, "volumes": 0}
    try:
        import docker
        import docker.errors

        client = docker.from_env(timeout=DOCKER_TIMEOUT_S)
        client.ping()
    except Exception:  # noqa: BLE001 - no Docker here means nothing of ours runs in it
        return counts
    label = f"{RUN_LABEL}={run_id}" if run_id else RUN_LABEL
    try:
        containers = client.containers.list(all=True, filters={"label": label})
        # Containers living in another's network namespace go before their holder.
        containers.sort(key=lambda c: not _joins_netns(c))
        for container in containers:
            with contextlib.suppress(docker.errors.NotFound):
                # v=True: with it go the container's anonymous volumes (an image
                # built before the deps layer dropped its VOLUMEs still makes them).
                container.remove(force=True, v=True)
                counts["containers"] += 1
        for network in client.networks.list(filters={"label": label}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                network.remove()
                counts["networks"] += 1
        for volume in client.volumes.list(filters={"label": label}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                volume.remove(force=True)
                counts["volumes"] += 1
    finally:
        client.close()
    return counts
