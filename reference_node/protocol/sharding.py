"""Sharded robust aggregation: who aggregates which coordinates of a step (issue 15).

All-to-all, every contributor sends its whole gradient to every peer: ``(n-1)*G``
out and in a node per step.  Coordinate-wise median, trimmed mean and mean are
separable by coordinate, so the coordinates are cut into one shard per owner; each
contributor sends shard ``i`` of its gradient to owner ``i`` only, owner ``i``
aggregates shard ``i`` over the value's contributors with the same kernels, and
sends the aggregated shard to every node, which joins the shards into the whole
aggregate: about ``2*G*(n-1)/n`` a node per step, like a ring all-reduce.  The
committed value is unchanged: the fingerprint of the whole aggregate and its
contributors, and an acceptor accepts only once it holds the whole aggregate.

Krum and multi-Krum stay on all-to-all (``uses_sharding``): their pairwise
distances are sums over shards, which would need a second exchange of partial
distances before any owner can select; not built.

Every decision here is a pure function of what all nodes agree on (the step's
sorted members, the model size) plus the caller's detector view; the worker only
moves bytes:

- ``shard_bounds(numel, owner_count)``: the coordinate range of each shard, a pure
  function of the two numbers.  Boundaries fall on multiples of ``SHARD_ALIGN``
  (the int8 wire's block of values per scale) so an int8 payload is cut along its
  blocks and each shard is a valid int8 payload of its own.
- ``shard_owners(members)``: the step's owners, one per shard: the members, sorted.
- ``owner_plan(owners, alive, node)``: who aggregates each shard now.  A shard whose
  owner is dead in the view goes to the next owner after it (in sorted order,
  wrapping) that is alive: a dead or stalled owner is replaced, never waited for.
- ``reassigned(before, after)``: the shards whose owner changed, which every
  contributor sends again (contributors keep their gradient until the step commits).

Views differ between nodes for a moment; then two owners may each hold part of a
shard's inputs.  That costs time, never bits: an aggregated shard is a pure function
of (shard range, contributor set, their gradients), whoever computes it, and the
view change that ends the disagreement re-plans every node the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from swarmshake.reference_node.protocol.errors import LocalProtocolError

AggregationPath = Literal["sharded", "all_to_all"]
AGGREGATION_PATHS: tuple[str, ...] = ("sharded", "all_to_all")
# Rules whose result at a coordinate depends on other coordinates (Krum's pairwise
# distances over the whole vector): they stay on all-to-all.
WHOLE_VECTOR_RULES = frozenset({"krum", "multi_krum"})
# Shard boundaries are multiples of this many values: training.wire.WIRE_BLOCK, so
# an int8 payload (one scale per block) splits into int8 payloads of its own
# (tests/reference_node/protocol/test_sharding.py checks the two stay equal).
SHARD_ALIGN = 256
# A step with more owners than this is a configuration beyond the bulk layer's
# assembly limit (bulk.MAX_ASSEMBLIES holds two steps of every peer's blobs).
MAX_OWNERS = 60


def uses_sharding(path: str, rule: str) -> bool:
    """Whether a step's contributions travel sharded: the configured path, except
    for the whole-vector rules (Krum), which stay all-to-all."""
    if path not in AGGREGATION_PATHS:
        raise LocalProtocolError(f"aggregation path must be one of {AGGREGATION_PATHS}: {path!r}")
    return path == "sharded" and rule not in WHOLE_VECTOR_RULES


def shard_bounds(
    numel: int, owner_count: int, align: int = SHARD_ALIGN
) -> tuple[tuple[int, int], ...]:
    """``owner_count`` half-open ranges ``[start, end)`` covering ``0..numel`` in
    order; each starts on a multiple of ``align``; the blocks of ``align`` values are
    spread as evenly as whole blocks allow (the first ``blocks % owner_count`` shards
    take one block more).  A model smaller than ``owner_count`` blocks leaves the
    last shards empty."""
    if not isinstance(numel, int) or numel < 0:
        raise LocalProtocolError(f"numel must be an int >= 0, got {numel!r}")
    if not isinstance(owner_count, int) or not 1 <= owner_count <= MAX_OWNERS:
        raise LocalProtocolError(f"owner_count must be in 1..{MAX_OWNERS}, got {owner_count!r}")
    if not isinstance(align, int) or align < 1:
        raise LocalProtocolError(f"align must be an int >= 1, got {align!r}")
    blocks = (numel + align - 1) // align
    per, extra = divmod(blocks, owner_count)
    bounds = []
    start_block = 0
    for index in range(owner_count):
        end_block = start_block + per + (1 if index < extra else 0)
        bounds.append((min(numel, start_block * align), min(numel, end_block * align)))
        start_block = end_block
    return tuple(bounds)


def shard_owners(members: Iterable[str]) -> tuple[str, ...]:
    """The step's owners, shard ``i`` to ``owners[i]``: the members, sorted."""
    owners = tuple(sorted(set(members)))
    if not 1 <= len(owners) <= MAX_OWNERS:
        raise LocalProtocolError(f"a step needs 1..{MAX_OWNERS} owners, got {len(owners)}")
    return owners


def owner_plan(owners: tuple[str, ...], alive: Iterable[str], node: str) -> tuple[str, ...]:
    """Who aggregates each shard now, in this node's view: ``owners[i]`` if alive,
    else the first alive owner after it in order (wrapping).  ``node`` counts as
    alive (a node never holds itself dead); with no owner alive (``node`` is not an
    owner and its view is empty) every shard stays with its own owner."""
    live = set(alive) | {node}
    count = len(owners)
    plan = []
    for index in range(count):
        chosen = owners[index]
        for offset in range(count):
            candidate = owners[(index + offset) % count]
            if candidate in live:
                chosen = candidate
                break
        plan.append(chosen)
    return tuple(plan)


def reassigned(before: tuple[str, ...], after: tuple[str, ...]) -> tuple[int, ...]:
    """The shards whose owner changed between two plans of the same step."""
    if len(before) != len(after):
        raise LocalProtocolError(
            f"plans of one step have one owner per shard: {len(before)} != {len(after)}"
        )
    return tuple(i for i, (old, new) in enumerate(zip(before, after, strict=True)) if old != new)


# --- bulk keys: which shard a blob carries --------------------------------------------------


def shard_key(index: int, count: int, finite: bool = True) -> str:
    """A contribution shard's blob key: ``"i/n"``, or ``"i/n!"`` when the sender's
    whole gradient holds a non-finite value somewhere (the plain mean drops such a
    contribution from every shard, as all-to-all drops it from the whole vector)."""
    return f"{index}/{count}" + ("" if finite else "!")


def aggregate_shard_key(index: int, count: int, contributors: Iterable[str]) -> str:
    """An aggregated shard's blob key: ``"i/n/a,b,c"`` (node names hold no ``/`` or
    ``,``: messages.NODE_NAME_PATTERN)."""
    return f"{index}/{count}/{','.join(sorted(contributors))}"


def parse_shard_key(key: str) -> tuple[int, int, tuple[str, ...] | None, bool]:
    """``(index, count, contributors, finite)`` of a key (contributors None for a
    contribution shard, finite False for one marked ``!``); ``ValueError`` for a key
    no node writes."""
    finite = not key.endswith("!")
    if not finite:
        key = key[:-1]
    parts = key.split("/")
    if len(parts) not in (2, 3) or (not finite and len(parts) != 2):
        raise ValueError(f"shard key {key[:80]!r}: expected i/n or i/n/contributors")
    if not all(part.isdigit() and len(part) <= 3 for part in parts[:2]):
        raise ValueError(f"shard key {key[:80]!r}: index and count must be small integers")
    index, count = int(parts[0]), int(parts[1])
    if not 1 <= count <= MAX_OWNERS or not 0 <= index < count:
        raise ValueError(f"shard key {key[:80]!r}: shard {index} of {count} is out of range")
    if len(parts) == 2:
        return index, count, None, finite
    contributors = tuple(parts[2].split(","))
    if (
        not parts[2]
        or len(contributors) > MAX_OWNERS
        or list(contributors) != sorted(set(contributors))
    ):
        raise ValueError(f"shard key {key[:80]!r}: contributors must be sorted distinct names")
    return index, count, contributors, True
