"""Maps the fixed top-level folders onto the ``swarmshake.<part>`` namespace.

DESIGN.md: the folders keep their short names on disk, but nothing is installed
under a generic top-level name (``kernels``, ``chaos`` and ``verify`` exist on
PyPI).  pyproject.toml cannot compute the package list, and listing every
sub-package by hand breaks each time a folder is added, so it is derived here.
"""

from setuptools import find_packages, setup

PARTS = ("reference_node", "chaos", "specs", "verify", "kernels", "reports")

package_dir = {"swarmshake": "swarmshake"}
packages = ["swarmshake"]
for part in PARTS:
    package_dir[f"swarmshake.{part}"] = part
    packages.append(f"swarmshake.{part}")
    packages.extend(f"swarmshake.{part}.{sub}" for sub in find_packages(part))

setup(packages=packages, package_dir=package_dir)
