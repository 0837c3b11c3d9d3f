"""Benchmarks that drive clusters through the harness: the recovery matrix (fault
type × cluster size × backend, repeated trials), the steady-state overhead of fault
tolerance against a plain gloo all-reduce, load under chaos with Locust, the
harness's own start-up/fault latency/capacity (``harness``), a reference cluster's
start-up to steady state (``startup``), state transfer (``rejoin``) and a restarted
node's rejoin time (``rejoin_time``).  Measurements come from run histories
(``swarmshake.reports.recovery``), so every backend is measured the same way.

The node's own benches (no harness) live in ``reference_node/bench/``, the kernels'
in ``kernels/bench.py``.  Output goes under ``runs/`` (ignored by git), never into
the packages.
"""
