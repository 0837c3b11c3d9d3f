"""Deterministic simulator: drives the same protocol cores as the runtime with a
virtual clock and a simulated network, from one seed, and writes histories in
the DESIGN event schema.  Its runs are bit-for-bit reproducible.
"""
