"""S1 agreement, S2 durability and S3 no split brain (DESIGN definitions).

- S1: every ``commit`` (and every ``rejoin_done``, which claims to hold a committed
  state) of step *s* carries the same ``param_fp``.
- S2: a committed step is never lost while fewer than a majority of the configured
  voters are down: (a) no later commit of the same step with another value; (b) at
  every crash, and when a value is chosen while nodes are down, some node that is not
  down still holds the step (it committed or rejoined at a step ≥ it, or accepted its
  value holding the bytes) unless a majority is down.  A crash loses a process's
  memory, not its acceptor records: a node that is up and once accepted the value
  with its bytes keeps them on disk with the record, so when only such nodes are left
  the value is not judged lost unless the cluster then commits past the step without
  it; if the run ends first, S2 is ``unknown`` (the return was not seen), never
  ``valid``.
- S3: a value commits only after a majority of the *configured* voters (not of a
  detector view) logged ``accept`` for it at one ballot.
"""

from __future__ import annotations

from collections import defaultdict

from swarmshake.reference_node.protocol.history import (
    Accept,
    Commit,
    ConfigChange,
    History,
    RejoinDone,
    Start,
)
from swarmshake.verify.checkers.model import EventRef, Findings, PropertyResult
from swarmshake.verify.checkers.timeline import Timeline


class Membership:
    """The configured voters by step: the initial set, then committed config changes."""

    def __init__(self, history: History):
        initial: list[str] | None = None
        for event in history.of_kind(Start):
            voters = event.config.get("voters") if isinstance(event.config, dict) else None
            if isinstance(voters, list) and voters:
                initial = sorted(str(v) for v in voters)
                break
        self.initial = initial if initial is not None else history.nodes()
        changes = sorted(
            ((event.step, sorted(event.voters)) for event in history.of_kind(ConfigChange)),
            key=lambda item: item[0],
        )
        self.changes = changes
        # Each committed configuration from the first moment a node logged it: the
        # voters whose majority the liveness checks count at a time (L2's premise).
        first_logged: dict[int, tuple[float, list[str]]] = {}
        members_logged: dict[int, tuple[float, frozenset[str]]] = {}
        for event in history.of_kind(ConfigChange):
            if event.step not in first_logged:
                first_logged[event.step] = (event.t_mono, sorted(event.voters))
                members_logged[event.step] = (
                    event.t_mono,
                    frozenset(event.voters + event.learners),
                )
        self.by_time = sorted(first_logged.values(), key=lambda item: item[0])
        self.members_by_time = sorted(members_logged.values(), key=lambda item: item[0])

    def voters_at_time(self, t: float) -> list[str]:
        """The voters of the newest configuration some node had logged by ``t``."""
        voters = self.initial
        for logged_at, change_voters in self.by_time:
            if logged_at > t:
                break
            voters = change_voters
        return voters

    def members_at_time(self, t: float) -> frozenset[str]:
        """Voters and learners of the newest configuration some node had logged by ``t``."""
        members = frozenset(self.initial)
        for logged_at, change_members in self.members_by_time:
            if logged_at > t:
                break
            members = change_members
        return members

    def voters_at(self, step: int) -> list[str]:
        voters = self.initial
        for change_step, change_voters in self.changes:
            if change_step < step:  # a change committed at s governs the steps after s
                voters = change_voters
            else:
                break
        return voters


# Events after which a node holds a step's parameters.  A tuple, not ``Commit |
# RejoinDone``: that builds a union object per call, once per event of a history.
_HOLDS_STATE = (Commit, RejoinDone)


def majority(count: int) -> int:
    return count // 2 + 1


def check_s1(history: History, timeline: Timeline) -> PropertyResult:
    findings = Findings("S1")
    first_by_step: dict[int, tuple[int, str]] = {}
    reported: set[int] = set()
    for index, event in history.indexed(*_HOLDS_STATE):
        if event.step < 0:
            continue
        findings.checked += 1
        fingerprint = event.param_fp
        if event.step not in first_by_step:
            first_by_step[event.step] = (index, fingerprint)
            continue
        first_index, first_fp = first_by_step[event.step]
        if fingerprint != first_fp and event.step not in reported:
            reported.add(event.step)
            first = history.events[first_index]
            findings.invalid(
                f"step {event.step}: {first.node} holds param_fp {first_fp[:12]} but "
                f"{event.node} holds {fingerprint[:12]}",
                EventRef.of(first_index, first, f"param_fp {first_fp}"),
                EventRef.of(index, event, f"param_fp {fingerprint}"),
            )
    return findings.result(f"{len(first_by_step)} committed steps, one fingerprint each")


def check_s3(history: History, membership: Membership) -> PropertyResult:
    findings = Findings("S3")
    # (step, value) -> ballot -> [(index, node)] of accepts, in history order
    accepts: dict[tuple[int, str], dict[tuple[int, ...], list[tuple[int, str]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    judged: set[tuple[int, str]] = set()
    for index, event in history.indexed(Accept, Commit):
        if isinstance(event, Accept):
            accepts[(event.step, event.value_fp)][tuple(event.ballot)].append((index, event.node))
            continue
        if (event.step, event.value_fp) in judged:
            continue
        key = (event.step, event.value_fp)
        judged.add(key)
        findings.checked += 1
        voters = set(membership.voters_at(event.step))
        needed = majority(len(voters))
        best: list[tuple[int, str]] = []
        for ballot_accepts in accepts.get(key, {}).values():
            distinct = {node: i for i, node in ballot_accepts if node in voters}
            if len(distinct) > len(best):
                best = [(i, node) for node, i in distinct.items()]
        if len(best) < needed:
            refs = [EventRef.of(index, event, f"value_fp {event.value_fp}")]
            refs += [EventRef.of(i, history.events[i], "accept") for i, _ in best]
            findings.invalid(
                f"step {event.step} committed by {event.node} with {len(best)} accepts of "
                f"{len(voters)} configured voters at one ballot; a majority is {needed}",
                *refs,
            )
    return findings.result(f"{len(judged)} committed values, each accepted by a majority")


def check_s2(history: History, timeline: Timeline, membership: Membership) -> PropertyResult:
    findings = Findings("S2")
    committed_value: dict[int, tuple[int, str]] = {}  # step -> (index, value_fp)
    reported_overwrite: set[int] = set()
    held_step: dict[str, int] = {}  # node -> highest step its current process holds
    byte_accepts: dict[int, set[str]] = defaultdict(set)  # step -> nodes holding its bytes
    # (step, value_fp) -> nodes whose acceptor record of that value carries its bytes:
    # on disk, so a crash does not remove them (the node's restart reads them back).
    byte_records: dict[tuple[int, str], set[str]] = defaultdict(set)
    # A value is committed once a majority accepted it at one ballot (Paxos's "chosen"),
    # whether or not anyone logged ``commit`` yet: durability is owed from then on.
    votes: dict[tuple[int, str, tuple[int, ...]], set[str]] = defaultdict(set)
    top_step = -1
    top_index = -1
    down: set[str] = set()
    crashes_at: dict[int, list[str]] = defaultdict(list)
    for name, _, index in timeline.crashes:
        crashes_at[index].append(name)
    lost_reported = False
    # The first apparent loss: (step, chosen index, moment index, what happened then,
    # voters down, voters).
    suspect: tuple[int, int, int, str, int, int] | None = None
    # The first moment after which only acceptor records on disk held the top step:
    # (step, chosen index, moment index, what happened then, nodes whose disk holds it).
    on_disk_only: tuple[int, int, int, str, list[str]] | None = None
    # In history order: the events this check reads, and the positions of crashes.
    relevant = dict(history.indexed(Start, Accept, Commit, RejoinDone))
    in_history = range(len(history.events))
    for index in sorted(relevant.keys() | {i for i in crashes_at if i in in_history}):
        event = relevant.get(index)
        chosen_now = False
        if event is None:
            pass  # a crash's position only
        elif isinstance(event, Start):
            down.discard(event.node)
            held_step[event.node] = -1
        elif isinstance(event, Accept):
            if event.holds_bytes:
                byte_accepts[event.step].add(event.node)
                byte_records[(event.step, event.value_fp)].add(event.node)
            voters = membership.voters_at(event.step)
            if event.node in voters:
                key = (event.step, event.value_fp, tuple(event.ballot))
                votes[key].add(event.node)
                if len(votes[key]) >= majority(len(voters)) and event.step > top_step:
                    top_step, top_index = event.step, index
                    chosen_now = True
        elif isinstance(event, _HOLDS_STATE) and event.step >= 0:
            held_step[event.node] = max(held_step.get(event.node, -1), event.step)
            if isinstance(event, Commit):
                findings.checked += 1
                first = committed_value.setdefault(event.step, (index, event.value_fp))
                if first[1] != event.value_fp and event.step not in reported_overwrite:
                    reported_overwrite.add(event.step)
                    findings.invalid(
                        f"step {event.step} committed twice with different values: "
                        f"{first[1][:12]} then {event.value_fp[:12]} (the first was lost)",
                        EventRef.of(first[0], history.events[first[0]], "first commit"),
                        EventRef.of(index, event, "overwriting commit"),
                    )
                if event.step > top_step:
                    top_step, top_index = event.step, index
        # The moments a value can be left without a holder: a crash, and a value chosen
        # after every node holding its bytes is already down (a vote cast without the
        # bytes completes a majority after the one holder crashed).
        moments = [(name, f"{name} crashed") for name in crashes_at.get(index, ())]
        if chosen_now and down:
            moments.append(("", f"it was chosen while {', '.join(sorted(down))} down"))
        for crashed, cause in moments:
            if crashed:
                down.add(crashed)
                held_step[crashed] = -1
                for holders_of_step in byte_accepts.values():
                    holders_of_step.discard(crashed)  # bytes live in memory: a crash loses them
            if top_step < 0 or lost_reported:
                continue
            voters = membership.voters_at(top_step)
            holders = [
                node
                for node in voters
                if node not in down
                and (held_step.get(node, -1) >= top_step or node in byte_accepts.get(top_step, ()))
            ]
            down_voters = sum(node in down for node in voters)
            if not holders and down_voters < majority(len(voters)):
                chosen_fp = history.events[top_index].value_fp  # type: ignore[attr-defined]
                on_disk = sorted(
                    node
                    for node in byte_records.get((top_step, chosen_fp), ())
                    if node in voters and node not in down
                )
                if not on_disk:
                    lost_reported = True
                    suspect = (top_step, top_index, index, cause, down_voters, len(voters))
                elif on_disk_only is None:
                    on_disk_only = (top_step, top_index, index, cause, on_disk)
    if suspect is not None:
        step, chosen_index, moment_index, cause, down_voters, voter_count = suspect
        chosen = history.events[chosen_index]
        # Held by no live process's memory is not yet lost: a restarted acceptor that
        # persisted its accept with the bytes brings the value back (explore: the
        # surviving pair committed the very value after the crash).  It was lost if it
        # never committed again; a different value committed later is reported above.
        recommitted = any(
            isinstance(event, Commit) and event.step == step and event.value_fp == chosen.value_fp
            for event in history.events[moment_index + 1 :]
        )
        if not recommitted:
            findings.invalid(
                f"committed step {step} is held by no node that is up after {cause}, "
                f"with only {down_voters} of {voter_count} voters down",
                EventRef.of(chosen_index, chosen, "committed here"),
                EventRef.of(moment_index, history.events[moment_index], cause),
            )
    if on_disk_only is not None:
        _judge_held_on_disk(history, findings, on_disk_only)
    return findings.result(f"{len(committed_value)} committed steps, none lost")


def _judge_held_on_disk(
    history: History, findings: Findings, case: tuple[int, int, int, str, list[str]]
) -> None:
    """A committed value that, after a crash, only acceptor records on disk held: lost
    if the cluster committed past its step without committing it again; not decided
    if the run ended before any node committed the step or a later one again."""
    step, chosen_index, moment_index, cause, on_disk = case
    chosen = history.events[chosen_index]
    fp = chosen.value_fp  # type: ignore[attr-defined]
    later = [
        (i, event)
        for i, event in enumerate(history.events[moment_index + 1 :], moment_index + 1)
        if isinstance(event, Commit) and event.step >= step
    ]
    if any(event.step == step and event.value_fp == fp for _, event in later):
        return  # back: a restarted acceptor's record brought it (a new value: (a) above)
    refs = (
        EventRef.of(chosen_index, chosen, "committed here"),
        EventRef.of(moment_index, history.events[moment_index], cause),
    )
    past = next(((i, e) for i, e in later if e.step > step), None)
    if past is not None:
        findings.invalid(
            f"committed step {step} was held after {cause} only by the acceptor "
            f"records of {', '.join(on_disk)}, and {past[1].node} committed step "
            f"{past[1].step} without step {step} being committed again (its value was lost)",
            *refs,
            EventRef.of(past[0], past[1], "committed past it"),
        )
        return
    findings.unknown(
        f"committed step {step} was held after {cause} only by the acceptor records "
        f"of {', '.join(on_disk)} (on disk, with its bytes), and the run ended before any "
        f"node committed step {step} or a later one again: its return was not seen",
        *refs,
    )
