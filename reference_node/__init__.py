"""The system under test: a peer-to-peer data-parallel training node.

``protocol/`` holds the sans-IO cores (failure detector, membership, step commit,
rejoin policy, message types, the known-bug registry and the event-history
schema); ``runtime/`` drives them with asyncio over TCP and MQTT; ``training/``
holds the model, the deterministic data shards and aggregation.  A node runs as
a control process and a niced worker process (DESIGN.md says why).
"""
