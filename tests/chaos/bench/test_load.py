"""Load under chaos with Locust against real node HTTP APIs, one of them crashed mid-run.

Two ``HttpApi`` servers (the node runtime's, serving the reference model) take
Locust's ``/infer`` load; once requests flow one is SIGKILLed and a harness ``fault``
event is logged, then it is started again on the same port and the heal is logged.  The
crash window must show the errors and lower availability; the steady window not.
"""

from __future__ import annotations

import ipaddress
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmshake.chaos.bench import load
from swarmshake.reference_node.protocol.history import HARNESS, EventWriter, Fault, RunMark
from swarmshake.reports import write_run_reports

SERVER = Path(__file__).with_name("infer_server.py")
SERVER_START_TIMEOUT_S = 60  # a cold python + torch import on a loaded 2-core box


def _start_server(port: int) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, str(SERVER), str(port)], stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    line = ""
    while time.monotonic() < deadline and not line.startswith("PORT"):
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            raise RuntimeError("infer server exited before listening")
    if not line.startswith("PORT"):
        process.kill()
        raise RuntimeError("infer server did not listen in time")
    return process, int(line.split()[1])


def _wait_for_records(running: load.LoadProcess, count: int) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while load.records_so_far(running) < count:
        assert time.monotonic() < deadline, "Locust sent too few requests in time"
        assert running.process.poll() is None, running.log.read_text()[-1000:]
        time.sleep(0.2)


def _event(cls, **fields):
    now = time.monotonic()
    return cls(t_wall=time.time(), t_mono=now, node=HARNESS, **fields)


def test_targets_must_stay_on_this_machine(tmp_path: Path) -> None:
    for bad in (
        "http://10.1.2.3:80",
        "https://127.0.0.1:443",
        "http://example.org:80",
        "127.0.0.1:80",
    ):
        with pytest.raises(load.LoadConfigError):
            load.start_load([bad], users=1, duration_s=5, run_dir=tmp_path)
    with pytest.raises(load.LoadConfigError, match="users"):
        load.start_load(["http://127.0.0.1:1"], users=1000, duration_s=5, run_dir=tmp_path)
    assert load.check_target("http://172.18.0.5:8100/") == "http://172.18.0.5:8100"
    # The project's own Docker network may come from another pool: allowed when named.
    project_network = ipaddress.ip_network("192.168.48.0/20")
    assert load.check_target("http://192.168.48.3:7003", [project_network])
    with pytest.raises(load.LoadConfigError, match="Docker network"):
        load.check_target("http://192.168.64.3:7003", [project_network])


@pytest.mark.slow
def test_crash_window_shows_errors_and_lower_availability(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first, first_port = _start_server(0)
    second, second_port = _start_server(0)
    restarted = None
    try:
        with EventWriter(run_dir / "events" / "harness.jsonl") as harness:
            harness.write(_event(RunMark, mark="run_start"))
            running = load.start_load(
                {"n1": f"http://127.0.0.1:{first_port}", "n2": f"http://127.0.0.1:{second_port}"},
                users=4,
                duration_s=120,  # an upper bound: the test stops it once it has seen enough
                run_dir=run_dir,
                rate_per_user=10,
            )
            _wait_for_records(running, 30)  # load really flows before the fault
            harness.write(_event(Fault, op="crash", target=["n2"], phase="inject"))
            second.send_signal(signal.SIGKILL)
            second.wait()
            time.sleep(1.5)
            restarted, _ = _start_server(second_port)
            harness.write(_event(Fault, op="crash", target=["n2"], phase="heal"))
            _wait_for_records(running, load.records_so_far(running) + 30)
            results = load.finish_load(running, run_dir, stop_now=True)
            harness.write(_event(RunMark, mark="run_end"))
    finally:
        for process in (first, second, restarted):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    steady, crash = results.windows
    assert (steady.label, crash.label) == ("steady", "crash n2")
    assert results.requests > 50 and results.requests == steady.requests + crash.requests
    assert crash.errors > 0 and crash.availability < 0.9
    assert any("Connection" in kind or "Refused" in kind for kind in crash.errors_by_kind), (
        crash.errors_by_kind
    )
    assert steady.availability > 0.95
    assert (
        steady.latency_ms.p50 is not None and steady.latency_ms.p50 < steady.latency_ms.max + 1e-9
    )
    saved = json.loads((run_dir / "load.json").read_text())
    assert saved["windows"][1]["label"] == "crash n2"
    write_run_reports(run_dir)
    page = (run_dir / "report.html").read_text()
    assert 'id="load-windows"' in page and "crash n2" in page
    assert "Load under chaos" in (run_dir / "summary.md").read_text()


def test_requests_fall_into_the_window_they_were_sent_in(tmp_path: Path) -> None:
    """Windows come from the run's fault events; an unhealed fault lasts to the end."""
    from swarmshake.reference_node.protocol.history import write_history
    from swarmshake.reports.load_model import RequestRecord

    origin = 100.0
    events = [
        RunMark(t_wall=0.0, t_mono=origin, node=HARNESS, mark="run_start"),
        Fault(
            t_wall=0.0, t_mono=origin + 2.0, node=HARNESS, op="pause", target=["n2"], phase="inject"
        ),
        Fault(
            t_wall=0.0, t_mono=origin + 4.0, node=HARNESS, op="pause", target=["n2"], phase="heal"
        ),
        Fault(
            t_wall=0.0, t_mono=origin + 6.0, node=HARNESS, op="crash", target=["n1"], phase="inject"
        ),
    ]
    write_history(tmp_path / "events" / "harness.jsonl", events)

    def record(t: float, ok: bool, latency_ms: float = 5.0) -> RequestRecord:
        return RequestRecord(t_mono=origin + t, node="n1", latency_ms=latency_ms, ok=ok, status=200 if ok else 0,
                             error="" if ok else "ConnectionRefusedError")  # fmt: skip

    records = [record(t / 10, True, latency_ms=1.0 + t) for t in range(0, 20)]  # 0.0–1.9 s: steady
    records += [record(2.5, False), record(3.0, True, 50.0)]  # in the pause
    records += [record(5.0, True)]  # steady again
    records += [record(7.0, False), record(9.0, False)]  # after the crash, never healed
    results = load.window_load(
        records, tmp_path, users=2, duration_s=10.0, targets=["http://127.0.0.1:1"]
    )
    steady, pause, crash = results.windows
    assert (steady.requests, pause.requests, crash.requests) == (21, 2, 2)
    assert steady.availability == 1.0 and pause.availability == 0.5 and crash.availability == 0.0
    assert pause.latency_ms.p50 == 50.0 and pause.errors_by_kind == {"ConnectionRefusedError": 1}
    assert steady.latency_ms.max == 20.0  # the 1.9 s request: 1 + 19 ms
    assert crash.end_s == 9.0  # unhealed: shown to the last request
    assert results.requests == 25 and results.errors == 3
