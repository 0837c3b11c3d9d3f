"""Training: the model, deterministic synthetic data sharded by (seed, step,
node id), the optimizer step, robust aggregation (through ``swarmshake.kernels``)
and Byzantine gradient behaviours.  Runs in the node's worker process.
"""
