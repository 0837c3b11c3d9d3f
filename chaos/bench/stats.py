"""Summaries of repeated trials: min / median / max always, p99 only with enough trials.

A p99 of five trials is the maximum under another name; the issue asks for p99 only
where a cell has at least ``P99_MIN_TRIALS`` trials, so below that it is ``None``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

P99_MIN_TRIALS = 100


def nearest_rank(sorted_values: Sequence[float], fraction: float) -> float:
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize_ms(values_s: Sequence[float], trials: int) -> dict[str, float | int | None]:
    """``{"min", "p50", "p99", "max", "n"}`` in milliseconds of the measured values
    (``n`` of ``trials`` trials measured one; the rest missed or did not apply)."""
    ordered = sorted(v * 1000.0 for v in values_s)
    if not ordered:
        return {"min": None, "p50": None, "p99": None, "max": None, "n": 0}
    return {
        "min": round(ordered[0], 3),
        "p50": round(statistics.median(ordered), 3),
        "p99": round(nearest_rank(ordered, 0.99), 3) if trials >= P99_MIN_TRIALS else None,
        "max": round(ordered[-1], 3),
        "n": len(ordered),
    }
