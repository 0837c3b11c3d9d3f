"""Sans-IO protocol cores: pure, deterministic state machines.

Each core takes typed events plus ``now`` and returns typed actions; no asyncio,
sockets, wall clock or unseeded randomness lives here, and nothing outside the
standard library and msgspec is imported.  The asyncio runtime and the
deterministic simulator (``swarmshake.chaos.sim``) drive the same classes.
"""
