"""Training: the model, deterministic synthetic data sharded by (seed, step,
node id), the optimizer step, robust aggregation (through ``swarmshake.kernels``)
and Byzantine gradient behaviours.  Runs in the node's worker process.
``step.py`` states the math of one step that every replica and the replay follow
(``Replica`` is the worker's API); ``config.py`` the one config struct;
``local_cluster.py`` runs several nodes in one process (baselines, tests);
``environment.py`` the determinism settings and the facts replay depends on;
``device.py`` the training device (``cpu`` by default, ``cuda``/``cuda:N``).
Its hot paths are timed by ``reference_node/bench/training.py``.
"""
