"""Facts about the host that bit-exact replay depends on and that need no torch.

The control process records them in its ``start`` event without importing torch
(importing torch costs seconds of CPU on a shared 2-core machine and starved the
other nodes' heartbeats during restarts).  ``environment.py`` re-exports them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

CPUINFO_PATH = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo_path: Path = CPUINFO_PATH) -> str:
    """The CPU feature flags of the first processor, sorted; "" where not readable."""
    try:
        text = cpuinfo_path.read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86 and ARM spell it differently
            return " ".join(sorted(value.split()))
    return ""


# torch's generated ``version.py`` holds one line ``__version__ = '2.15.0+cu132'``.
_TORCH_VERSION_LINE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def installed_torch_version() -> str:
    """``torch.__version__`` without importing torch; "" if torch is not installed.

    Read from torch's generated ``version.py`` (the local build tag, e.g. ``+cu132``,
    is part of what replay compares and is not in the package metadata); the
    metadata's version is the fallback where that file has another shape.
    """
    spec = importlib.util.find_spec("torch")  # finds the package, does not import it
    if spec is None:
        return ""
    for folder in spec.submodule_search_locations or ():
        try:
            text = (Path(folder) / "version.py").read_text()
        except OSError:
            continue
        if match := _TORCH_VERSION_LINE.search(text):
            return match.group(1)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return ""
