"""The chaos harness: cluster backends (local processes, Docker), Toxiproxy
control, the fault catalog, scenarios, the runner, exploration, the deterministic
simulator (``sim/``), the pytest plugin and the command line (``cli.py``, the
composition root that may import every part).
"""
