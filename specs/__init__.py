"""TLA+ modules and TLC configurations of the node's protocols (a data folder,
installed as a package so ``swarmshake.verify.tla`` finds the files from a wheel
as well as from a checkout).  ``README.md`` maps each property to its module.
"""
