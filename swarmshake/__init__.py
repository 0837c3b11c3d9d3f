"""swarmshake: a chaos-testing and verification harness bundled with a reference
peer-to-peer ML training node.

The parts live in fixed top-level folders (see DESIGN.md) and are installed under
this namespace: ``swarmshake.reference_node``, ``swarmshake.chaos``,
``swarmshake.verify``, ``swarmshake.kernels``, ``swarmshake.reports`` and
``swarmshake.specs``.  This package itself holds only the entry points.
"""

__version__ = "0.1.0"
