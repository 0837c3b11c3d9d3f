"""Benchmarks: the recovery matrix (fault type × cluster size × backend, repeated
trials), the steady-state overhead of fault tolerance against a plain gloo
all-reduce, and load under chaos with Locust.  Measurements come from run histories
(``swarmshake.reports.recovery``), so every backend is measured the same way.
"""
