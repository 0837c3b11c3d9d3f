"""The one registry of known protocol bugs that ``--bug NAME`` switches on.

Shared by the protocol cores (which consult ``BugSet``), the simulator, the real
harness and the TLA+ spec mutants.  Every entry names the property it must break:
a checker, the simulator's exploration and TLC are each expected to catch it.  A
bug that no tool catches is a hole in the verification story, and the tests that
iterate over this registry say so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KnownBug:
    name: str
    breaks: str  # the DESIGN property it must violate: S1..S4, L1..L3
    core: str  # which core carries the switch
    description: str


BUGS: dict[str, KnownBug] = {
    bug.name: bug
    for bug in (
        KnownBug(
            name="no-quorum",
            breaks="S3",
            core="commit",
            description=(
                "commit with a majority of the current detector view instead of a "
                "majority of the configured membership, so both sides of a partition commit"
            ),
        ),
        KnownBug(
            name="eager-dead",
            breaks="S4",
            core="detector",
            description="declare a peer dead on the first missed heartbeat, with no suspicion phase",
        ),
        KnownBug(
            name="no-refute",
            breaks="S4",
            core="detector",
            description=(
                "ignore refutations: a suspected node that raises its incarnation is "
                "still confirmed dead"
            ),
        ),
        KnownBug(
            name="stale-rejoin",
            breaks="S1",
            core="rejoin",
            description=(
                "a restarted node rejoins at the current step with its stale local "
                "parameters, without state transfer or fingerprint check"
            ),
        ),
        KnownBug(
            name="ack-before-apply",
            breaks="S2",
            core="commit",
            description=(
                "an acceptor votes for an aggregate before it holds the aggregate's "
                "bytes, so a step can commit that no surviving member can apply"
            ),
        ),
        KnownBug(
            name="forget-vote",
            breaks="S1",
            core="commit",
            description=(
                "accepts are not persisted, so a restarted acceptor can vote for two "
                "different values in one step and two values commit"
            ),
        ),
        KnownBug(
            name="no-vote-floor",
            breaks="S1",
            core="node_core",
            description=(
                "the acceptor prunes old records without writing a durable vote floor, so "
                "a node restored to a state behind its pruned records votes again on steps "
                "it helped decide and a second value commits (the behaviour before 49f9838)"
            ),
        ),
    )
}


class UnknownBugError(ValueError):
    """A ``--bug`` name that is not in the registry."""


@dataclass(frozen=True, slots=True)
class BugSet:
    """The switched-on bugs, passed to every core at construction (default: none)."""

    names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, names: list[str] | tuple[str, ...] | None) -> BugSet:
        chosen = frozenset(names or ())
        unknown = sorted(chosen - BUGS.keys())
        if unknown:
            raise UnknownBugError(
                f"unknown bug switch {', '.join(unknown)}; known: {', '.join(sorted(BUGS))}"
            )
        return cls(chosen)

    def __contains__(self, name: object) -> bool:
        if name not in BUGS:
            raise UnknownBugError(f"bug switch {name!r} is not in the registry")
        return name in self.names


NO_BUGS = BugSet()
