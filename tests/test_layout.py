"""The fixed layout (DESIGN.md): each folder is installed as ``swarmshake.<part>``."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("reference_node", "chaos", "specs", "verify", "kernels", "reports")


@pytest.mark.parametrize("part", PARTS)
def test_each_part_is_a_documented_package_under_the_namespace(part):
    module = importlib.import_module(f"swarmshake.{part}")
    assert Path(module.__file__).parent == ROOT / part
    assert module.__doc__ and len(module.__doc__.split()) >= 15, f"{part} needs a docstring"


def test_ruff_bans_the_bare_part_names(tmp_path):
    offender = ROOT / "tests" / "_bare_import_probe.py"
    offender.write_text("import chaos.sim\nfrom kernels import median\nimport swarmshake.verify\n")
    try:
        result = subprocess.run(
            [str(Path(sys.executable).parent / "ruff"), "check", "--select", "TID251",
             "--output-format", "concise", str(offender)],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        offender.unlink()
    banned = [line for line in result.stdout.splitlines() if "TID251" in line]
    assert len(banned) == 2, result.stdout
    assert "`chaos` is banned" in result.stdout and "`kernels` is banned" in result.stdout


@pytest.mark.slow
def test_the_wheel_maps_every_folder_into_the_namespace(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("swarmshake-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "swarmshake/chaos/cli.py" in names
    assert "swarmshake/reference_node/protocol/history.py" in names
    assert any(n.startswith("swarmshake/specs/") and n.endswith(".tla") for n in names)
    assert not any(n.split("/")[0] in PARTS for n in names), "a bare top-level package leaked"


def test_python_dash_m_and_the_console_script_agree():
    for command in (
        [sys.executable, "-m", "swarmshake", "--help"],
        [str(Path(sys.executable).parent / "swarmshake"), "--help"],
    ):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0 and "swarmshake COMMAND" in result.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "swarmshake", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 64 and "unknown command" in bad.stderr
