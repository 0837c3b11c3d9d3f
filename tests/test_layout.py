"""The fixed layout (DESIGN.md): each folder is installed as ``swarmshake.<part>``."""

from __future__ import annotations

import ast
import importlib
import shutil
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


# DESIGN.md's import table, one contract per row (.importlinter).
CONTRACT_SOURCES = {
    "swarmshake.reference_node.protocol",
    "swarmshake.reference_node.runtime",
    "swarmshake.reference_node.training",
    "swarmshake.reference_node",
    "swarmshake.kernels",
    "swarmshake.verify",
    "swarmshake.reports",
    "swarmshake.chaos",
}


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "lint_imports.sh"), str(root)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_import_table_is_a_contract_per_row_and_holds():
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    sources = {
        module.strip()
        for name in config.sections()
        if name.startswith("importlinter:contract:")
        for module in config[name]["source_modules"].split()
    }
    assert CONTRACT_SOURCES <= sources
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_import_contracts_catch_a_node_that_imports_the_harness(tmp_path):
    # A copy of the checkout, so the probes never appear in the shared tree.
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in (*PARTS, "swarmshake"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=skip)
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    (tmp_path / "reference_node" / "runtime" / "_probe.py").write_text(
        "from swarmshake.chaos.backends import session\n"
    )
    (tmp_path / "reference_node" / "protocol" / "_probe.py").write_text("import torch\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())  # rich wraps long lines
    assert "reference_node imports only kernels among the other parts BROKEN" in out
    assert "reference_node/protocol imports nothing outside the stdlib and msgspec BROKEN" in out
    assert "swarmshake.reference_node.runtime._probe -> swarmshake.chaos" in out
    assert "Contracts: 7 kept, 2 broken." in out


def test_protocol_imports_only_the_stdlib_and_msgspec():
    # Exact, with no package list to keep: every import statement, nested ones too.
    allowed = set(sys.stdlib_module_names) | {"msgspec"}
    offenders = []
    for path in sorted((ROOT / "reference_node" / "protocol").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue  # a relative import stays inside protocol (ruff bans parents)
            for name in names:
                inside = name.startswith("swarmshake.reference_node.protocol")
                if not inside and name.split(".")[0] not in allowed:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert offenders == []
