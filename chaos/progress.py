"""The live run display: nodes, their step, current faults, violations so far — on stderr.

Rich's ``Live`` redraws a small table a few times a second.  It is off under
``--json`` (stdout must hold exactly one JSON document and stderr should stay
quiet for machines), under CI (``CI`` set: logs are files, not terminals) and when
stderr is not a terminal; then only one-line milestones are printed, unless quiet.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from swarmshake.chaos.backends.events import EventTail

REFRESH_PER_S = 4  # a human reads a few updates a second; more costs CPU on 2 cores


def live_allowed(json_mode: bool) -> bool:
    return not json_mode and not os.environ.get("CI") and sys.stderr.isatty()


class Progress:
    def __init__(self, *, live: bool, quiet: bool = False, title: str = ""):
        self.console = Console(stderr=True, highlight=False)
        self.live_enabled = live
        self.quiet = quiet
        self.title = title
        self.phase = "starting"
        self.started = time.monotonic()
        self.violations: list[str] = []
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self.live_enabled:
            self._live = Live(
                console=self.console, refresh_per_second=REFRESH_PER_S, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def milestone(self, message: str) -> None:
        self.phase = message
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        line = f"[swarmshake {elapsed:6.1f}s] {message}"
        if self._live is not None:
            self._live.console.print(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def update(self, events: EventTail, faults: dict[str, Any] | None = None) -> None:
        if self._live is None:
            return
        table = Table(title=f"{self.title} — {self.phase}", expand=False)
        for column in ("node", "step", "commits", "inc", "declared dead", "events"):
            table.add_column(column, justify="right" if column != "node" else "left")
        for name, summary in events.summaries.items():
            table.add_row(
                name, str(summary.last_commit_step), str(summary.commits), str(summary.incarnation),
                str(summary.declared_dead_by_others), str(summary.events),
            )  # fmt: skip
        active = ", ".join(
            f"{op}→{','.join(t[:4])}" for op, t in (faults or events.active_faults).items()
        )
        violations = list(self.violations)
        if events.divergent_steps:
            violations.append(
                f"S1? steps {events.divergent_steps[:5]} committed with different fingerprints"
            )
        table.caption = (
            f"faults: {active or 'none'}   violations so far: {', '.join(violations) or 'none'}"
        )
        self._live.update(table)
