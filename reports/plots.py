"""The report's figures as inline SVG strings (matplotlib's SVG backend, Agg-free).

Text stays text (``svg.fonttype = none``) so the page is searchable and small, ids are
salted with a constant so the same run gives the same bytes, and every drawn element
a test or a reader looks for carries an id (``set_gid``): ``lane-<node>-<state>``,
``fault-window-<i>``, ``loop-stall-<node>-<i>``, ``loss-run``, ``loss-baseline``,
``commit-rate``, ``dist-<name>``.  Marks a reader hovers over (loop stalls, a lane's
spans of one state) carry an SVG ``<title>``, which browsers show as a tooltip.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape

import matplotlib

matplotlib.use("svg")  # no display, no Agg rasteriser: we only ever emit SVG

import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.patches import Patch  # noqa: E402

from swarmshake.reports.series import (  # noqa: E402
    LANE_STATES,
    FaultWindow,
    LossPoint,
    Segment,
    Stall,
)

STATE_COLOURS = {
    "alive": "#43a047",
    "suspected": "#fbc02d",
    "declared dead": "#e53935",
    "rejoining": "#1e88e5",
    "paused": "#8e24aa",
    "down": "#424242",
}
FAULT_SHADE = "#ff7043"
STALL_COLOUR = "#b71c1c"  # darker than "declared dead", and taller than a lane: seen on any state
MAX_STALL_MARKS = 1000  # an overloaded machine logs many; each mark costs ~300 bytes of page
MIN_MARK_WIDTH = 0.002  # of the time axis: a 40 ms stall in a minute-long run still shows
MAX_LANES = 64  # beyond this a lane is thinner than a line of text; the table holds the rest
MAX_SPANS_IN_TITLE = 12  # a tooltip is read at a glance; the events table holds every change
WIDTH_IN = 10.0

RC_PARAMS = {
    "svg.fonttype": "none",
    "svg.hashsalt": "swarmshake",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def to_svg(figure: plt.Figure, titles: Mapping[str, str] | None = None) -> str:
    """The figure as inline SVG; ``titles`` maps an element id to its tooltip text."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    # Inline SVG in HTML needs neither the XML declaration nor the DOCTYPE.
    text = re.sub(r"^<\?xml[^>]*>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    # The RDF metadata block only names vocabularies (dc, cc, rdf URLs): noise in a page.
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    if titles:
        # matplotlib writes no <title>; a group's first child <title> is its tooltip.
        text = re.sub(
            r'(<g id="([^"]+)">)',
            lambda m: (
                m.group(1)
                + (
                    f"\n   <title>{escape(titles[m.group(2)])}</title>"
                    if m.group(2) in titles
                    else ""
                )
            ),
            text,
        )
    return text


def _shade_faults(axis: plt.Axes, windows: Sequence[FaultWindow], *, label: bool) -> None:
    for number, window in enumerate(windows):
        end = window.end if window.end > window.start else window.start + 0.05
        span = axis.axvspan(window.start, end, color=FAULT_SHADE, alpha=0.15, lw=0)
        span.set_gid(f"fault-window-{number}")
        if label:
            axis.annotate(
                window.label,
                (window.start, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, 2 + 9 * (number % 3)),
                textcoords="offset points",
                fontsize=7,
                color="#bf360c",
            )


def timeline_svg(
    lanes: dict[str, list[Segment]],
    windows: Sequence[FaultWindow],
    duration_s: float,
    stalls: Sequence[Stall] = (),
) -> str:
    """One horizontal lane per node, coloured by state, fault windows shaded, each
    control-loop stall a thin red tick across its node's lane (tooltip: how long)."""
    with plt.rc_context(RC_PARAMS):
        names = sorted(lanes)[:MAX_LANES]
        height = 1.2 + 0.32 * len(names)
        figure, axis = plt.subplots(figsize=(WIDTH_IN, height))
        lane_titles: dict[str, str] = {}
        for row, name in enumerate(reversed(names)):
            segments = lanes[name]
            for state in LANE_STATES:
                spans = [(s.start, s.end - s.start) for s in segments if s.state == state]
                if spans:
                    bars = axis.broken_barh(spans, (row - 0.35, 0.7), color=STATE_COLOURS[state])
                    gid = f"lane-{name}-{state.replace(' ', '-')}"
                    bars.set_gid(gid)
                    lane_titles[gid] = lane_title(name, state, spans)
        _shade_faults(axis, windows, label=True)
        titles = _mark_stalls(axis, names, stalls, duration_s)
        axis.set_yticks(range(len(names)), list(reversed(names)))
        axis.set_xlim(0, max(duration_s, 1e-3))
        axis.set_ylim(-0.6, len(names) - 0.4)
        axis.set_xlabel("time since run start (s)")
        handles = [Patch(color=STATE_COLOURS[s], label=s) for s in LANE_STATES]
        handles.append(Patch(color=FAULT_SHADE, alpha=0.3, label="fault window"))
        if titles:
            handles.append(Patch(color=STALL_COLOUR, label="loop stall"))
        axis.legend(
            handles=handles,
            ncol=len(handles),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.45 if len(names) < 4 else -0.2),
            frameon=False,
            fontsize=8,
        )
        axis.set_gid("timeline")
        return to_svg(figure, {**lane_titles, **titles})


def lane_title(node: str, state: str, spans: Sequence[tuple[float, float]]) -> str:
    """A lane state's tooltip: when the node was in it, ``n4 declared dead: 26.32–27.35 s``."""
    shown = [f"{start:.2f}–{start + width:.2f}" for start, width in spans[:MAX_SPANS_IN_TITLE]]
    more = len(spans) - len(shown)
    return f"{node} {state}: {', '.join(shown)} s" + (f" and {more} more" if more > 0 else "")


def _mark_stalls(
    axis: plt.Axes, names: Sequence[str], stalls: Sequence[Stall], duration_s: float
) -> dict[str, str]:
    """Draw the stalls of the lanes shown (the longest first when capped); returns the
    tooltip of each mark by its id."""
    rows = {name: row for row, name in enumerate(reversed(names))}
    shown = [s for s in stalls if s.node in rows]
    if len(shown) > MAX_STALL_MARKS:
        shown = sorted(shown, key=lambda s: -s.stalled_ms)[:MAX_STALL_MARKS]
    min_width = MIN_MARK_WIDTH * max(duration_s, 1e-3)
    titles: dict[str, str] = {}
    counts: dict[str, int] = {}
    for stall in sorted(shown, key=lambda s: s.start):
        number = counts.get(stall.node, 0)
        counts[stall.node] = number + 1
        row = rows[stall.node]
        width = max(stall.end - stall.start, min_width)
        mark = axis.broken_barh([(stall.start, width)], (row - 0.5, 1.0), color=STALL_COLOUR, lw=0)
        gid = f"loop-stall-{stall.node}-{number}"
        mark.set_gid(gid)
        titles[gid] = stall.description
    return titles


def loss_svg(
    run: Sequence[LossPoint],
    baseline: Sequence[LossPoint] | None,
    fault_steps: Sequence[tuple[int, str]],
) -> str:
    """Loss per step against the fault-free baseline, a marker at each fault's step."""
    with plt.rc_context(RC_PARAMS):
        figure, axis = plt.subplots(figsize=(WIDTH_IN, 3.0))
        if baseline:
            (line,) = axis.plot(
                [p.step for p in baseline],
                [p.loss for p in baseline],
                color="#9e9e9e",
                lw=1.5,
                ls="--",
                label="fault-free baseline",
            )
            line.set_gid("loss-baseline")
        (line,) = axis.plot(
            [p.step for p in run], [p.loss for p in run], color="#1565c0", lw=1.5, label="this run"
        )
        line.set_gid("loss-run")
        for number, (step, label) in enumerate(fault_steps):
            marker = axis.axvline(step, color=FAULT_SHADE, lw=1, ls=":")
            marker.set_gid(f"fault-marker-{number}")
            axis.annotate(
                label,
                (step, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -10 - 9 * (number % 3)),
                textcoords="offset points",
                fontsize=7,
                color="#bf360c",
            )
        axis.set_xlabel("step")
        axis.set_ylabel("mean training loss")
        if not run and not baseline:
            axis.text(
                0.5, 0.5, "no train_step events in this run: no loss to draw",
                ha="center", va="center", transform=axis.transAxes, color="#616161",
            )  # fmt: skip
        else:
            axis.legend(frameon=False, loc="upper right")
        return to_svg(figure)


def commit_rate_svg(bin_s: float, rates: Sequence[float], windows: Sequence[FaultWindow]) -> str:
    with plt.rc_context(RC_PARAMS):
        figure, axis = plt.subplots(figsize=(WIDTH_IN, 2.4))
        edges = [i * bin_s for i in range(len(rates) + 1)]
        bars = axis.stairs(rates, edges, fill=True, color="#00897b")
        bars.set_gid("commit-rate")
        _shade_faults(axis, windows, label=False)
        axis.set_xlabel("time since run start (s)")
        axis.set_ylabel("steps committed / s")
        axis.set_xlim(0, max(len(rates) * bin_s, 1e-3))
        return to_svg(figure)


def distributions_svg(samples_ms: dict[str, Sequence[float]]) -> str:
    """One strip + box per measure (detection, recovery, rejoin …), in milliseconds."""
    names = [name for name, values in samples_ms.items() if values]
    with plt.rc_context(RC_PARAMS):
        figure, axis = plt.subplots(figsize=(WIDTH_IN, 0.6 + 0.55 * max(len(names), 1)))
        for row, name in enumerate(names):
            values = list(samples_ms[name])
            box = axis.boxplot(
                [values],
                positions=[row],
                orientation="horizontal",
                widths=0.5,
                showfliers=False,
                patch_artist=True,
                boxprops={"facecolor": "#e3f2fd", "edgecolor": "#1e88e5"},
            )
            for artist in box["boxes"]:
                artist.set_gid(f"dist-{name}")
            points = axis.scatter(
                values, [row] * len(values), s=14, color="#0d47a1", alpha=0.7, zorder=3
            )
            points.set_gid(f"dist-points-{name}")
        axis.set_yticks(range(len(names)), names)
        axis.set_xlabel("milliseconds")
        if not names:
            axis.text(0.5, 0.5, "no samples", ha="center", va="center", transform=axis.transAxes)
            axis.set_yticks([])
        return to_svg(figure)
