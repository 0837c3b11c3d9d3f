"""Verification: run histories, the invariant checkers (S1–S4, L1–L3) that hold
simulated and real runs to the same properties, convergence against a
fault-free baseline, deterministic replay, and the TLC runner with trace
validation.  A checker that raises reports ``unknown``, never ``valid``.
"""
