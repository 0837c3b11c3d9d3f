"""A chaos test written as a plain pytest test (the README's "Chaos tests in pytest").

The swarmshake plugin (installed with swarmshake) starts three reference nodes for
the test, ``nemesis`` cuts n1 off and heals it, and after the body the plugin judges
the run's history against S1-S4 and L1-L3: the test fails when a property is
violated (or undecided), naming the property, its evidence and the report.

Run it:  pytest docs/examples/test_chaos_partition.py
(tests/chaos/test_readme.py runs it, and checks the README shows this file.)
"""

import time

import pytest

from swarmshake.chaos import faults as F


@pytest.mark.chaos(nodes=3)
def test_isolated_node_comes_back(cluster, nemesis):
    cluster.wait_until_steady()
    nemesis.inject(F.Partition(grouping="isolate", nodes=["n1"]))
    time.sleep(2.0)
    nemesis.heal_all()
