"""Injects and heals the typed fault ops of ``chaos/faults.py`` on a real backend.

``Nemesis.inject(op)`` applies one op through the backend's interface (signals,
containers, Toxiproxy links, MQTT commands, mounts) and records a ``fault`` event in
``events/harness.jsonl``; ``Nemesis.heal(op)`` undoes it.  The simulator has its
own interpreter of the same ops; this package is the real-world one.
"""

from swarmshake.chaos.nemesis.inject import FaultNotApplicable, Nemesis

__all__ = ["FaultNotApplicable", "Nemesis"]
