"""report.html in a real browser (Debian's chromium, headless): the timeline and plots
are drawn, the script ran, and the page makes no network request.

Needs the ``chromium`` Debian package (CI setup installs it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from swarmshake.reports import write_run_reports
from swarmshake.reports.plots import STATE_COLOURS

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium")
BROWSER_TIMEOUT_S = 90  # a cold chromium start on a loaded 2-core box takes seconds, not minutes
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="apt-get install -y chromium")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # we run as root in CI containers; the page is our own file
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-background-networking",  # keep the browser's own traffic out of the net log
        "--disable-component-update",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=True
    )


def _requested_urls(net_log: Path) -> tuple[set[str], int]:
    """Every URL the page asked for, from chromium's NetLog (JSON).

    The browser's own traffic (component updates, accounts, spelling dictionaries) is
    logged too, with initiator "not an origin" and a null network partition; a request
    made by a file:// page is partitioned under ``file://``, which is what we keep."""
    text = net_log.read_text()
    if not text.rstrip().endswith("}"):  # chromium may leave the events list unterminated
        text = text.rstrip().rstrip(",") + "]}"
    log = json.loads(text)
    urls: set[str] = set()
    for event in log.get("events", []):
        params = event.get("params") or {}
        url = params.get("url")
        partition = str(params.get("network_isolation_key", ""))
        if isinstance(url, str) and partition.startswith("file://"):
            urls.add(url)
    return urls, len(log.get("events", []))


@needs_chromium
def test_dom_after_scripts_holds_timeline_and_plots(crash_run: Path, histories) -> None:
    histories.write_run(crash_run / "baseline", histories.Plan(loss_offset=-0.05))
    write_run_reports(crash_run)
    result = _chromium(
        crash_run, "--virtual-time-budget=3000", "--dump-dom", (crash_run / "report.html").as_uri()
    )
    dom = result.stdout
    assert 'data-report-ready="' in dom, "the page's script did not run"
    for element_id in (
        "lane-n1-alive",
        "lane-n3-down",
        "lane-n3-rejoining",
        "lane-n2-paused",
        "fault-window-0",
        "fault-window-1",
        "loss-run",
        "loss-baseline",
        "commit-rate",
        "dist-detection",
        "dist-recovery",
        "dist-rejoin",
    ):
        assert f'id="{element_id}"' in dom, element_id
    assert dom.count("<path") > 50  # the figures hold drawn geometry, not empty frames
    # Each loop stall is a mark on its node's lane whose tooltip (an SVG <title>) says how long.
    stall = re.search(r'<g id="loop-stall-n2-0">\s*<title>([^<]*)</title>', dom)
    assert stall and stall.group(1) == "n2: control loop stalled 180 ms at 1.82 s", stall
    assert 'id="loop-stall-n1-0"' in dom and 'id="stall-count">2<' in dom


@needs_chromium
def test_screenshot_shows_every_lane_state_and_no_request_leaves(crash_run: Path) -> None:
    write_run_reports(crash_run)
    shot = crash_run / "shot.png"
    net_log = crash_run / "net.json"
    _chromium(
        crash_run,
        "--window-size=1200,2600",
        f"--screenshot={shot}",
        f"--log-net-log={net_log}",
        "--net-log-capture-mode=Everything",
        (crash_run / "report.html").as_uri(),
    )
    pixels = (imread(shot)[:, :, :3] * 255).round().astype(np.int16)
    assert (pixels < 250).any(axis=2).mean() > 0.05, "the page is (nearly) blank"
    for state in ("alive", "down", "rejoining", "paused"):
        rgb = np.array([int(STATE_COLOURS[state][i : i + 2], 16) for i in (1, 3, 5)])
        # Fault windows shade the bars, so accept the colour within a small distance.
        close = (np.abs(pixels - rgb).sum(axis=2) < 40).sum()
        assert close > 200, f"lane colour of {state!r} not drawn ({close} pixels)"
    urls, logged = _requested_urls(net_log)
    assert logged > 0, "the net log recorded nothing: the check would be blind"
    fetched = {u for u in urls if not u.startswith(("file:", "data:", "about:", "chrome"))}
    assert not fetched, f"report.html requested {fetched}"


@needs_chromium
def test_net_log_check_sees_a_request(tmp_path: Path) -> None:
    """Control: a page that does load something shows up in the same net log check."""
    page = tmp_path / "leaky.html"
    page.write_text('<html><body><img src="http://127.0.0.1:9/pixel.png"></body></html>')
    net_log = tmp_path / "net.json"
    _chromium(tmp_path, "--dump-dom", f"--log-net-log={net_log}", page.as_uri())
    assert "http://127.0.0.1:9/pixel.png" in _requested_urls(net_log)[0]


@needs_chromium
def test_demo_lanes_as_the_browser_draws_them(demo_run: Path, histories) -> None:
    """The demo's report drew n4 "declared dead" from 27 s to the end of the run (its own
    "declared dead by n3" taken for a peer's verdict, kept across its restart).  Each
    lane state's tooltip lists the spans its bars are drawn from."""
    write_run_reports(demo_run)
    result = _chromium(
        demo_run, "--virtual-time-budget=3000", "--dump-dom", (demo_run / "report.html").as_uri()
    )
    dom = result.stdout
    assert 'data-report-ready="' in dom, "the page's script did not run"
    titles = dict(re.findall(r'<g id="(lane-[^"]+)">\s*<title>([^<]*)</title>', dom))
    # Declared dead by isolated n1 from its verdict (20.60 s), by n3 and n2 from their
    # relays, until n4's incarnation 3 starts (27.35 s); then rejoining, then alive.
    assert titles["lane-n4-declared-dead"] == "n4 declared dead: 20.60–27.35 s"
    assert titles["lane-n4-rejoining"].endswith(", 27.35–27.80 s")
    assert titles["lane-n4-alive"].endswith(f"–{histories.DEMO_END_S:.2f} s")
    assert titles["lane-n1-declared-dead"] == "n1 declared dead: 20.60–27.10 s"
    assert titles["lane-n1-alive"].endswith(f"–{histories.DEMO_END_S:.2f} s")
    # n2 and n3: held dead by isolated n1 only, until n1's restart took its verdicts away.
    assert titles["lane-n2-declared-dead"] == "n2 declared dead: 20.60–27.10 s"
    assert titles["lane-n3-declared-dead"] == "n3 declared dead: 20.60–27.10 s"
    # The same judgement gives the verdict and the count a reader sees.
    assert 'id="false-positives">2<' in dom
