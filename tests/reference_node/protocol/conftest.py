"""Shared helpers of the protocol-core tests.

``protocol_harness.py`` (small drivers of the cores, written independently of the
simulator) is imported by the test modules; pytest runs with
``--import-mode=importlib``, which does not put test folders on ``sys.path``, so this
conftest does, for this folder only.
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
