"""The node's own benchmarks, run without the harness: crash detection and heartbeat
gaps of real node processes (``detection``, through the runtime's launcher) and the
training hot paths (``training``: step, fingerprint, checkpoint and state-transfer
paths).  Each runs as ``python -m swarmshake.reference_node.bench.<name> --help``
and prints JSON; nothing here is imported by the node itself.  Benches that start a
cluster through the harness live in ``chaos/bench/``.
"""
