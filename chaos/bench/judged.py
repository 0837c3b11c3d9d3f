"""A benchmark run's history judged before its figures count.

A recovery time or a step rate measured on a history that breaks a safety property is
not a figure of a working system: a trial whose committed values diverged (S1) still
has a "recovery" at its next commit, and a run that split its brain (S3) still has a
rate.  So every trial of ``bench recovery`` and every run of ``bench overhead`` is
judged as ``swarmshake verify`` judges it; one that breaks a property of
``FIGURES_VOID`` is reported as unsafe and left out of the figures.

The other properties are what the figures measure, so a violation of one keeps its
figures and is reported beside them: L1-L3 are the detection, recovery and rejoin
bounds (a trial past *R* is a slow recovery, and leaving it out would make the figures
look better than the system), and S4 is the detector's false positives, which the
bench counts.  ``unknown`` (the checkers could not decide, e.g. the run left the
declared network envelope) keeps its figures too.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from swarmshake.chaos.commands._args import UsageError
from swarmshake.chaos.commands.verify import verify_run_dir
from swarmshake.chaos.runner import verdict_message
from swarmshake.reference_node.protocol.history import History
from swarmshake.reports.rundir import read_verdict

# Agreement, durability, no split brain, exactly once, bounded divergence: what makes
# a trained model right (DESIGN's S1-S3, S5 and D1).
FIGURES_VOID = frozenset({"S1", "S2", "S3", "S5", "D1"})


class TrialVerdict(msgspec.Struct, frozen=True):
    status: str  # valid, invalid or unknown
    violated: tuple[str, ...] = ()
    # The violated properties' findings, else the undecided ones' (one line).
    message: str = ""

    def unsafe(self) -> tuple[str, ...]:
        """The violated properties that void the run's figures (``FIGURES_VOID``)."""
        return tuple(p for p in self.violated if p in FIGURES_VOID)


class UnjudgedRun(RuntimeError):
    """The run directory's history could not be read or checked (the message says why)."""


def judge_run(run_dir: Path, history: History) -> TrialVerdict:
    """The verdict of ``run_dir``: its ``verdict.json`` when the run wrote one (the
    simulator always does; a harness run with verification on), else ``history`` (the
    run's, read by the caller, which measures from it too) checked now with the run's
    own bounds (``bounds.json``) and its system's checkers.  Writes nothing: a run
    directory may be someone's record (a test's recorded history)."""
    path = run_dir / "verdict.json"
    try:
        verdict = (
            read_verdict(path)
            if path.is_file()
            else verify_run_dir(run_dir, history=history, write=False)
        )
    except (UsageError, ValueError, OSError) as error:
        raise UnjudgedRun(f"{run_dir.name}: cannot judge its history: {error}") from None
    message = "" if verdict.status == "valid" else verdict_message(verdict)
    return TrialVerdict(verdict.status, tuple(verdict.violated()), message[:500])
