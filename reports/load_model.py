"""Load under chaos: per-request records in, per-fault-window figures out (``load.json``).

The load generator (``swarmshake.chaos.bench.load``, Locust in its own process) appends
one record per ``/infer`` request to ``RUN_DIR/load/requests.jsonl``:
``{"t_mono": <host monotonic s at send>, "node": "n1", "latency_ms": 3.2, "ok": true,
"status": 200, "error": ""}``.  ``t_mono`` is the same host clock the run's events use,
so each request falls into the fault window it was sent in.

``load.json`` schema (``LoadResults``)::

    {"users": 8, "duration_s": 30.0, "targets": ["http://127.0.0.1:8101", ...],
     "requests": 1234, "errors": 12,
     "windows": [{"label": "steady" | "<op> <targets>", "start_s": 0.0, "end_s": 5.0,
                  "requests": 100, "errors": 0, "availability": 1.0,
                  "latency_ms": {"p50": 3.1, "p95": 7.9, "p99": 12.0, "max": 20.3},
                  "errors_by_kind": {"503": 3, "ConnectionRefusedError": 9}}]}

Times are seconds since the run's first event; ``duration_s`` is the first request
to the last.  ``availability`` is successful requests over requests sent in the
window (``null`` when none were sent).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from swarmshake.reference_node.protocol.history import History
from swarmshake.reports.series import fault_windows, run_origin

MAX_REQUEST_RECORDS = 2_000_000  # bounded users × bounded duration stay far below this


class RequestRecord(msgspec.Struct, frozen=True):
    t_mono: float
    node: str
    latency_ms: float
    ok: bool
    status: int = 0
    error: str = ""


class LatencySummary(msgspec.Struct, frozen=True):
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None


class LoadWindow(msgspec.Struct, frozen=True):
    label: str
    start_s: float
    end_s: float
    requests: int
    errors: int
    availability: float | None
    latency_ms: LatencySummary
    errors_by_kind: dict[str, int] = {}


class LoadResults(msgspec.Struct, frozen=True):
    users: int
    duration_s: float
    targets: list[str]
    requests: int
    errors: int
    windows: list[LoadWindow]


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile of already sorted values (``None`` for no values)."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), round(fraction * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def summarise_window(
    label: str, start_s: float, end_s: float, records: Iterable[RequestRecord]
) -> LoadWindow:
    chosen = list(records)
    latencies = sorted(r.latency_ms for r in chosen if r.ok)
    errors = [r for r in chosen if not r.ok]
    kinds = Counter(r.error or str(r.status) for r in errors)
    return LoadWindow(
        label=label,
        start_s=start_s,
        end_s=end_s,
        requests=len(chosen),
        errors=len(errors),
        availability=(len(chosen) - len(errors)) / len(chosen) if chosen else None,
        latency_ms=LatencySummary(
            p50=percentile(latencies, 0.50),
            p95=percentile(latencies, 0.95),
            p99=percentile(latencies, 0.99),
            max=latencies[-1] if latencies else None,
        ),
        errors_by_kind=dict(sorted(kinds.items())),
    )


def read_request_records(path: Path) -> list[RequestRecord]:
    decoder = msgspec.json.Decoder(RequestRecord)
    records: list[RequestRecord] = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if number > MAX_REQUEST_RECORDS:
                raise ValueError(f"{path}: more than {MAX_REQUEST_RECORDS} request records")
            try:
                records.append(decoder.decode(line))
            except msgspec.DecodeError as error:
                if not line.endswith(b"\n"):
                    break  # a torn last line from a killed load process
                raise ValueError(f"{path}:{number}: bad request record: {error}") from None
    return records


def read_load_results(path: Path) -> LoadResults | None:
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=LoadResults)
    except msgspec.DecodeError as error:
        raise ValueError(f"{path}: not a load.json ({error}); rerun the load test") from None


def window_load(
    records: list[RequestRecord],
    run_dir: Path,
    *,
    users: int,
    duration_s: float,
    targets: list[str],
) -> LoadResults:
    """Cut requests by the run's fault windows: one ``steady`` window for requests sent
    outside every fault, one per fault window (a request in overlapping faults counts
    in each).  Without events, everything is ``steady``, measured from the first request."""
    history = History.load(run_dir) if (run_dir / "events").is_dir() else None
    if history is not None and history.events:
        origin = run_origin(history)
        windows = fault_windows(history)
    else:
        origin = min((r.t_mono for r in records), default=time.monotonic())
        windows = []
    relative = [(r.t_mono - origin, r) for r in records]
    inside = [False] * len(relative)
    summaries = []
    for window in windows:
        # A fault never healed lasts until the load stops, not until the last event.
        end = window.end if window.healed else float("inf")
        chosen = []
        for index, (t, record) in enumerate(relative):
            if window.start <= t < end:
                chosen.append(record)
                inside[index] = True
        last_t = max((t for t, _ in relative), default=window.start)
        shown_end = window.end if window.healed else max(window.end, last_t)
        summaries.append(summarise_window(window.label, window.start, shown_end, chosen))
    steady = [record for (t, record), hit in zip(relative, inside, strict=True) if not hit]
    last = max((t for t, _ in relative), default=0.0)
    first = min((t for t, _ in relative), default=0.0)
    summaries.insert(0, summarise_window("steady", first, last, steady))
    return LoadResults(
        users=users,
        duration_s=duration_s,
        targets=targets,
        requests=len(records),
        errors=sum(1 for r in records if not r.ok),
        windows=summaries,
    )


def rewindow(run_dir: Path, previous: LoadResults) -> LoadResults:
    """``load.json`` recomputed from ``load/requests.jsonl`` with today's windowing (what
    ``swarmshake report`` does, so a regenerated report agrees with its load table);
    the previous results when the raw records are gone."""
    records_path = run_dir / "load" / "requests.jsonl"
    if not records_path.is_file():
        return previous
    records = read_request_records(records_path)
    return window_load(
        records,
        run_dir,
        users=previous.users,
        duration_s=previous.duration_s,
        targets=previous.targets,
    )
