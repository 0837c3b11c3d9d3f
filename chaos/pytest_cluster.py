"""The cluster a chaos test gets, and how the plugin judges its run.

A chaos test is judged like ``swarmshake run`` judges a scenario: after the test's
body, every fault is healed, the cluster quiesces for ``quiesce_s``, comes down,
and its history is checked against S1–S4 and L1–L3 with the mark's bounds by
``swarmshake verify``'s own function (``verdict.json``), then the run's reports are
written (``report.html``, ``summary.md``, ``junit.xml``) by the function the runner
calls.  ``invalid`` fails the test; so does ``unknown``, unless the mark allows it
for those properties (a checker that cannot decide never passes silently).

Kept out of ``pytest_plugin.py`` so that pytest loading the plugin in every
session (the ``pytest11`` entry point) imports none of the harness.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from swarmshake.chaos.backends.base import ClusterSpec
from swarmshake.chaos.backends.session import ClusterSession
from swarmshake.reference_node.protocol.history import History
from swarmshake.verify.checkers import PROPERTIES, Bounds, Verdict, check_history

QUIESCE_S_DEFAULT = 3.0  # healed links reconnect and every node commits again within ~1 s
QUIESCE_S_MAX = 600.0  # a test's quiesce is seconds; more is a typo
QUIESCE_POLL_S = 0.1
EVIDENCE_SHOWN = 3  # per property in a failure message; verdict.json keeps them all


class ChaosMarkError(ValueError):
    """A ``@pytest.mark.chaos`` keyword with a value the plugin cannot use."""


@dataclass(frozen=True)
class Judging:
    """How a chaos test's run is judged (from the mark's keywords)."""

    verify: bool = True
    bounds: Bounds = field(default_factory=Bounds)
    allow_unknown: frozenset[str] = frozenset()
    quiesce_s: float = QUIESCE_S_DEFAULT

    @classmethod
    def from_mark(cls, options: Mapping[str, Any]) -> Judging:
        bounds_given = options.get("bounds", {})
        if isinstance(bounds_given, Bounds):
            bounds = bounds_given
        else:
            try:
                bounds = msgspec.convert(bounds_given, Bounds)
            except (msgspec.ValidationError, ValueError) as error:
                raise ChaosMarkError(
                    f"bounds={bounds_given!r}: {error}; fields: {', '.join(Bounds.__struct_fields__)}"
                ) from None
        allowed = options.get("allow_unknown", ())
        names = (allowed,) if isinstance(allowed, str) else allowed
        if not isinstance(names, Iterable) or not all(isinstance(n, str) for n in names):
            raise ChaosMarkError(f"allow_unknown={allowed!r}: give property names, e.g. ('S4',)")
        names = frozenset(names)
        if not names <= set(PROPERTIES):
            raise ChaosMarkError(
                f"allow_unknown={allowed!r}: {sorted(names - set(PROPERTIES))} are not "
                f"properties; choose from {', '.join(PROPERTIES)}"
            )
        quiesce_s = options.get("quiesce_s", QUIESCE_S_DEFAULT)
        if (
            not isinstance(quiesce_s, int | float)
            or isinstance(quiesce_s, bool)
            or not 0.0 <= quiesce_s <= QUIESCE_S_MAX
        ):
            raise ChaosMarkError(f"quiesce_s={quiesce_s!r}: seconds in [0, {QUIESCE_S_MAX:g}]")
        verify = options.get("verify", True)
        if not isinstance(verify, bool):
            raise ChaosMarkError(f"verify={verify!r}: True or False")
        return cls(verify=verify, bounds=bounds, allow_unknown=names, quiesce_s=float(quiesce_s))

    def failure(self, verdict: Verdict, run_dir: Path) -> str | None:
        """The failure message for ``verdict``, or None when the test may pass."""
        invalid = verdict.violated()
        unknown = [
            name
            for name, result in verdict.results.items()
            if result.status == "unknown" and name not in self.allow_unknown
        ]
        if not invalid and not unknown:
            return None
        lines = []
        for name in invalid + unknown:
            result = verdict.results[name]
            lines.append(f"{name} {result.status}: {result.message}")
            for ref in result.evidence[:EVIDENCE_SHOWN]:
                step = f" step {ref.step}" if ref.step >= 0 else ""
                note = f" {ref.note}" if ref.note else ""
                lines.append(
                    f"    evidence: {ref.node} #{ref.index} t={ref.t_mono:.3f} {ref.kind}{step}{note}"
                )
            if len(result.evidence) > EVIDENCE_SHOWN:
                lines.append(f"    … {len(result.evidence) - EVIDENCE_SHOWN} more in verdict.json")
        if invalid:
            head = f"swarmshake: the run violated {', '.join(invalid)}"
        else:
            head = (
                f"swarmshake: the checkers could not decide {', '.join(unknown)} "
                f"(allow it with @pytest.mark.chaos(allow_unknown={tuple(unknown)!r}))"
            )
        report = run_dir / "report.html"
        lines.append(f"report: {report if report.is_file() else '(not written)'}")
        lines.append(f"verdict: {run_dir / 'verdict.json'}")
        return "\n".join([head, *lines])


class ChaosCluster(ClusterSession):
    """The ``cluster`` fixture: a :class:`ClusterSession` that records the harness's
    marks the checkers read, and can check its history while it runs."""

    def __init__(self, backend_name: str, spec: ClusterSpec, judging: Judging):
        super().__init__(backend_name, spec)
        self.judging = judging
        self.steady = False
        self.is_down = False
        self.final_verdict: Verdict | None = None
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        # The bounds beside the history, as the runner writes them: a later
        # ``swarmshake verify RUN_DIR`` checks with the same bounds.
        (spec.run_dir / "bounds.json").write_bytes(msgspec.json.encode(judging.bounds))

    def wait_until_steady(self, min_commit_step: int = 2, timeout_s: float = 60.0) -> float:
        taken = super().wait_until_steady(min_commit_step, timeout_s)
        if not self.steady:
            # L2 judges progress from here on: start-up is not a stall.
            self.mark("steady_state")
            self.steady = True
        return taken

    def verdict(self) -> Verdict:
        """The history so far, checked against S1–S4, L1–L3 with the mark's bounds.

        Nothing is written; the nodes keep running (a line being written is a torn
        last line, which the reader skips).  The run is judged again, completely,
        after the test."""
        from swarmshake.verify.history import RunSystem

        return check_history(
            History.load(self.run_dir), self.judging.bounds, RunSystem.of(self.run_dir)
        )

    def heal_all(self) -> None:
        if not self.is_down:
            super().heal_all()

    def down(self) -> None:
        if self.is_down:
            return
        self.is_down = True
        super().down()

    def finish(self) -> Verdict | None:
        """Heal, quiesce, bring the cluster down, then verify and write the reports.

        The verdict is None when the mark turned verification off."""
        try:
            self.heal_all()
            self.mark("quiesce", seconds=self.judging.quiesce_s)
            end = time.monotonic() + self.judging.quiesce_s
            while time.monotonic() < end:  # bounded by quiesce_s
                self.poll()
                time.sleep(QUIESCE_POLL_S)
            self.mark("run_end")
        finally:
            self.down()
        if not self.judging.verify:
            return None
        from swarmshake.chaos.commands.verify import verify_run_dir

        self.final_verdict = verify_run_dir(self.run_dir, self.judging.bounds)
        write_reports(self.run_dir)
        return self.final_verdict


def write_reports(run_dir: Path) -> None:
    """The runner's reports for ``run_dir``; a report that fails is recorded in
    ``report-error.txt`` and never changes the verdict (as in the runner)."""
    try:
        from swarmshake.reports import write_run_reports

        write_run_reports(run_dir)
    except Exception as error:  # noqa: BLE001 - a report failure must not change the verdict
        (run_dir / "report-error.txt").write_text(f"{type(error).__name__}: {error}\n")
