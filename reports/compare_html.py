"""``compare.html``: a comparison of two runs (or two benchmarks) as one self-contained
page — the headline, a before → after chart of every compared time (regressions in
red), the table, verdict and load changes.  Same rules as ``report.html``: inline SVG,
autoescaped values, a Content-Security-Policy that forbids every fetch."""

from __future__ import annotations

from typing import Any

import jinja2

from swarmshake.reports import plots
from swarmshake.reports.compare import change_text, headline

MAX_CHART_ROWS = 60  # a taller chart stops being read; the table below holds every row
BEFORE_COLOUR, AFTER_COLOUR, SLOWER_COLOUR = "#9e9e9e", "#1e88e5", "#c62828"

_environment = jinja2.Environment(
    loader=jinja2.PackageLoader("swarmshake.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def changes_svg(changes: list[dict[str, Any]]) -> str:
    """One row per compared time: a grey dot before, a dot after joined by a line, red
    where it regressed (regressions first)."""
    import matplotlib.pyplot as plt

    rows = sorted(
        (c for c in changes if c["before_ms"] is not None or c["after_ms"] is not None),
        key=lambda c: not c["regressed"],
    )[:MAX_CHART_ROWS]
    with plt.rc_context(plots.RC_PARAMS):
        figure, axis = plt.subplots(figsize=(plots.WIDTH_IN, 0.8 + 0.28 * max(len(rows), 1)))
        for row, change in enumerate(reversed(rows)):
            before, after = change["before_ms"], change["after_ms"]
            colour = SLOWER_COLOUR if change["regressed"] else AFTER_COLOUR
            if before is not None and after is not None:
                axis.plot([before, after], [row, row], color=colour, lw=1.5, alpha=0.6)
            if before is not None:
                axis.plot([before], [row], "o", color=BEFORE_COLOUR, ms=5)
            if after is not None:
                (dot,) = axis.plot([after], [row], "o", color=colour, ms=6)
                dot.set_gid(f"change-{len(rows) - 1 - row}")
        axis.set_yticks(range(len(rows)), [c["what"] for c in reversed(rows)])
        axis.set_xlabel("milliseconds (grey: before, blue: after, red: regressed)")
        axis.set_xlim(left=0)
        axis.grid(axis="x", color="#eeeeee")
        if not rows:
            axis.text(0.5, 0.5, "nothing to compare", ha="center", va="center",
                      transform=axis.transAxes)  # fmt: skip
        return plots.to_svg(figure)


def render_comparison_html(comparison: dict[str, Any]) -> str:
    changes = sorted(comparison["changes"], key=lambda c: not c["regressed"])
    return _environment.get_template("compare.html.j2").render(
        comparison=comparison,
        headline=headline(comparison),
        changes=changes,
        change_text=change_text,
        chart_svg=changes_svg(changes),
        ms=lambda v: "—" if v is None else f"{v:.0f}",
        pct=lambda v: "—" if v is None else f"{v * 100:.1f}%",
    )
