"""The run reports: what each file says about a run with known detection/recovery."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from lxml import etree

from swarmshake.chaos.commands.report import main as report_main
from swarmshake.reference_node.protocol.history import (
    HARNESS,
    Commit,
    DeclareDead,
    Fault,
    History,
    RejoinDone,
    RunMark,
    Start,
    read_events,
    write_history,
)
from swarmshake.reports import RunDirError, write_run_reports
from swarmshake.reports.recovery import measure_run
from swarmshake.reports.rundir import read_verdict
from swarmshake.reports.series import fault_windows, loop_stalls, node_lanes

XSD = Path(__file__).with_name("junit-10.xsd")


def test_measurements_match_the_planned_timing(crash_run: Path) -> None:
    measurement = measure_run(History.load(crash_run))
    crash, pause = measurement.faults
    assert (crash.op, crash.victims) == ("crash", ("n3",))
    assert crash.detection_s == pytest.approx(0.25)
    assert crash.recovery_s == pytest.approx(0.4)
    assert crash.rejoin_s == pytest.approx(0.8)  # start → rejoin_done
    assert crash.rejoin_from_ready_s == pytest.approx(0.55)  # ready came 0.25 s after start
    assert pause.detection_s == pytest.approx(0.25)
    assert pause.rejoin_s is None  # a paused node does not restart
    assert measurement.false_positives == 0
    assert 0.0 < crash.throughput_kept < 1.0


def test_false_positive_is_counted(broken_run: Path) -> None:
    assert measure_run(History.load(broken_run)).false_positives == 1


def test_lanes_show_down_then_rejoining(crash_run: Path) -> None:
    lanes = node_lanes(History.load(crash_run))
    n3 = [(round(s.start, 2), round(s.end, 2), s.state) for s in lanes["n3"]]
    assert (4.0, 7.05, "down") in n3
    assert (7.05, 7.85, "rejoining") in n3
    assert any(s.state == "paused" and round(s.start, 2) == 9.0 for s in lanes["n2"])
    assert all(s.state == "alive" for s in lanes["n1"])
    windows = fault_windows(History.load(crash_run))
    assert [(w.op, w.start, w.end, w.healed) for w in windows] == [
        ("crash", 4.0, 7.0, True),
        ("pause", 9.0, 9.6, True),
    ]


def test_loop_stalls_are_marked_on_their_lane_with_a_tooltip(crash_run: Path) -> None:
    stalls = loop_stalls(History.load(crash_run))
    assert [(s.node, round(s.start, 3), round(s.end, 3), s.stalled_ms) for s in stalls] == [
        ("n2", 1.82, 2.0, 180.0),
        ("n1", 5.44, 5.5, 60.0),
    ]
    write_run_reports(crash_run)
    page = (crash_run / "report.html").read_text()
    titles = re.findall(r'<g id="(loop-stall-[^"]+)">\s*<title>([^<]*)</title>', page)
    assert titles == [
        ("loop-stall-n2-0", "n2: control loop stalled 180 ms at 1.82 s"),
        ("loop-stall-n1-0", "n1: control loop stalled 60 ms at 5.44 s"),
    ]
    assert re.search(r"<td>n2</td><td>loop_stall</td>", page)  # listed among the events


def test_a_run_without_stalls_draws_no_stall_mark(tmp_path: Path, histories) -> None:
    run = histories.write_run(tmp_path / "calm", histories.Plan())
    write_run_reports(run)
    page = (run / "report.html").read_text()
    assert "loop-stall-" not in page and "stall-count" not in page


def test_writes_every_report_file(crash_run: Path) -> None:
    write_run_reports(crash_run)
    for name in ("verdict.json", "report.html", "junit.xml", "summary.md"):
        assert (crash_run / name).stat().st_size > 0, name
    verdict = json.loads((crash_run / "verdict.json").read_text())
    assert verdict["status"] == "valid"
    summary = (crash_run / "summary.md").read_text()
    assert "**valid**" in summary
    for name in ("S1", "S2", "S3", "S4", "L1", "L2", "L3"):
        assert f"| {name} " in summary
    assert "| crash n3 | 4.00 | 250 | 400 | 800 |" in summary
    assert "swarmshake run" in summary and "--seed 7" in summary
    assert "Control-loop stalls: **2** (worst 180 ms on n2)" in summary


def test_junit_is_valid_against_the_ci_schema(crash_run: Path, broken_run: Path) -> None:
    schema = etree.XMLSchema(etree.parse(str(XSD)))
    for run in (crash_run, broken_run):
        write_run_reports(run)
        document = etree.parse(str(run / "junit.xml"))
        assert schema.validate(document), schema.error_log
    suite = etree.parse(str(broken_run / "junit.xml")).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 8  # seven properties and the scenario
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["S1 agreement", "S4 detector accuracy", "scenario broken"]
    assert suite.get("failures") == "3" and suite.get("errors") == "0"


def test_schema_rejects_what_ci_would_reject(crash_run: Path) -> None:
    """The XSD check can fail: a testsuite without its required counts is refused."""
    write_run_reports(crash_run)
    schema = etree.XMLSchema(etree.parse(str(XSD)))
    document = etree.parse(str(crash_run / "junit.xml"))
    del document.getroot().find("testsuite").attrib["failures"]
    assert not schema.validate(document)


def test_html_evidence_links_resolve_and_nothing_is_fetched(broken_run: Path) -> None:
    write_run_reports(broken_run)
    page = (broken_run / "report.html").read_text()
    assert "default-src 'none'" in page
    links = set(re.findall(r'href="#(ev-\d+)"', page))
    assert links, "an invalid verdict must cite events"
    anchors = set(re.findall(r'id="(ev-\d+)"', page))
    assert links <= anchors
    # Only SVG/XLink namespace names may mention http; nothing is loaded from anywhere.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert not re.search(r'\s(src|srcset|data)=["\'](?!#)', page)


def test_shrunk_schedule_and_baseline_shown(tmp_path: Path, histories) -> None:
    plan = histories.Plan(faults=[histories.PlannedFault("crash", "n2", 3.0)])
    run = histories.write_run(tmp_path / "explore-1", plan)
    histories.write_run(run / "baseline", histories.Plan(loss_offset=-0.1))
    (run / "shrunk.yaml").write_text("faults:\n  - op: {op: crash, nodes: [n2]}\n    at_s: 3.0\n")
    write_run_reports(run)
    page = (run / "report.html").read_text()
    assert 'id="shrunk-schedule"' in page and "op: crash" in page
    assert 'id="loss-baseline"' in page and 'id="loss-run"' in page


def test_bad_run_dirs_are_named(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="no events folder"):
        write_run_reports(tmp_path)
    events = tmp_path / "events"
    events.mkdir()
    (events / "n1.jsonl").write_text('{"kind": "nope"}\n{"kind": "start"}\n')
    with pytest.raises(RunDirError, match=r"n1\.jsonl:1"):
        write_run_reports(tmp_path)


def test_partition_victims_come_from_its_groups() -> None:
    from swarmshake.reference_node.protocol.history import HARNESS, Fault
    from swarmshake.reports.recovery import victims_of

    nodes = ["n1", "n2", "n3", "n4", "n5"]

    def fault(target, **params):
        return Fault(
            t_wall=0,
            t_mono=0,
            node=HARNESS,
            op="partition",
            target=target,
            params=params,
            phase="inject",
        )

    assert victims_of(fault(["n2"]), nodes) == ["n2"]  # isolate: the target is cut off
    grouped = fault(nodes, groups=[["n1", "n2"], ["n3"]])  # n4, n5 form the third group
    assert victims_of(grouped, nodes) == ["n3", "n4", "n5"]
    assert victims_of(fault(nodes), nodes) == []  # sides unknown: no victim
    # What the harness records for `isolate n2` on a real backend: every node, the cuts.
    cut_off_n2 = [[a, b] for a in nodes for b in nodes if a != b and "n2" in (a, b)]
    assert victims_of(fault(nodes, grouping="isolate", cuts=cut_off_n2), nodes) == ["n2"]
    halves = [[a, b] for a in ("n1", "n2") for b in ("n3", "n4", "n5")]
    assert victims_of(fault(nodes, cuts=halves), nodes) == ["n1", "n2"]  # one-way cuts split too
    bridge = [["n1", "n4"], ["n4", "n1"], ["n2", "n5"]]  # n3 reaches everyone: one side
    assert victims_of(fault(nodes, cuts=bridge), nodes) == []
    link = Fault(
        t_wall=0, t_mono=0, node=HARNESS, op="blackhole", target=["*", "n3"], phase="inject"
    )
    assert victims_of(link, nodes) == ["n3"]

    def link_fault(op, **params):
        # The real harness names every node the links touch and records src/dst.
        return Fault(t_wall=0, t_mono=0, node=HARNESS, op=op, target=nodes, params=params,
                     phase="inject")  # fmt: skip

    assert victims_of(link_fault("blackhole", src=["n3"], dst=["*"]), nodes) == ["n3"]
    assert victims_of(link_fault("latency", src=["*"], dst=["n4"], delay_ms=250.0), nodes) == ["n4"]
    assert victims_of(link_fault("slicer", src=["n1", "n2"], dst=["n5"]), nodes) == ["n5"]
    assert victims_of(link_fault("latency", src=["*"], dst=["*"]), nodes) == []


def _spans(lane: list, state: str) -> list[tuple[float, float]]:
    return [(round(s.start, 2), round(s.end, 2)) for s in lane if s.state == state]


def test_demo_lanes_clear_a_node_s_own_declaration_and_start_clean(demo_run: Path, histories):
    """report.html of the demo drew n4 "declared dead" from 27 s to the end: its own
    "declared dead by n3" was taken for a peer's verdict and its restart kept it.  Now:
    isolated n1 held n4 dead from its verdict until n1's own restart, n3 and n2 from
    their relays until n4's restart, and n4's new incarnation starts clean."""
    lanes = node_lanes(History.load(demo_run))
    cut_declared = round(histories.DEMO_ISOLATE_S[0] + 0.45, 2)
    assert _spans(lanes["n4"], "declared dead") == [(cut_declared, histories.DEMO_N4_RESTART_S)]
    assert histories.DEMO_N1_RESTART_S > min(histories.DEMO_RELAY_S.values())  # no gap
    assert lanes["n4"][-1].state == "alive"
    assert lanes["n4"][-1].end == pytest.approx(histories.DEMO_END_S)
    # n1 was declared dead by the other side of its cut until its own restart.
    assert _spans(lanes["n1"], "declared dead") == [(cut_declared, histories.DEMO_N1_RESTART_S)]
    assert lanes["n1"][-1].state == "alive"


def test_demo_false_positives_come_from_the_s4_judgement(demo_run: Path) -> None:
    write_run_reports(demo_run)
    verdict = json.loads((demo_run / "verdict.json").read_text())
    assert verdict["results"]["S4"]["status"] == "invalid"
    summary = (demo_run / "summary.md").read_text()
    assert "False positives: **2**" in summary  # n3's and n2's relays
    assert re.search(r'id="false-positives">2<', (demo_run / "report.html").read_text())
    assert measure_run(History.load(demo_run)).false_positives == 2


def test_demo_schedule_without_the_relays_has_no_false_positive(tmp_path: Path, histories):
    run = histories.write_demo_run(tmp_path / "run-fixed", old_protocol=False)
    write_run_reports(run)
    assert "False positives: **0**" in (run / "summary.md").read_text()
    assert json.loads((run / "verdict.json").read_text())["status"] == "valid"


def test_lanes_skip_verdicts_on_a_dead_process_and_draw_those_on_the_new_one() -> None:
    def at(cls, t: float, node: str, **fields):  # noqa: ANN001, ANN202 - a tiny builder
        return cls(t_wall=t, t_mono=t, node=node, **fields)

    history = History.from_events(
        [
            at(Start, 0.0, "n1"),
            at(Start, 0.0, "n2"),
            at(Fault, 1.0, "harness", op="crash", target=["n2"], phase="inject"),
            at(DeclareDead, 1.2, "n1", peer="n2", peer_incarnation=0),
            at(Start, 2.0, "n2", incarnation=1),
            at(RejoinDone, 2.2, "n2", incarnation=1, source="n1", param_fp="f"),
            # stale gossip about the process that died: not a verdict on the new one
            at(DeclareDead, 2.5, "n1", peer="n2", peer_incarnation=0),
            at(DeclareDead, 3.0, "n1", peer="n2", peer_incarnation=1),
            at(Commit, 4.0, "n1", step=1, value_fp="a", contributors=["n1"], param_fp="f"),
        ]
    )
    n2 = node_lanes(history)["n2"]
    assert [(s.start, s.end, s.state) for s in n2] == [
        (0.0, 1.0, "alive"),
        (1.0, 2.0, "down"),
        (2.0, 2.2, "rejoining"),
        (2.2, 3.0, "alive"),
        (3.0, 4.0, "declared dead"),
    ]


def test_the_summary_says_which_scenario_entries_never_fired(tmp_path: Path, histories) -> None:
    """CI, stop 31: a control run whose hold never fired (its crash came first) was
    judged valid, and nothing a reader sees said the run had not done what its
    scenario says; the runner had logged it as an incident only."""
    run = histories.write_run(tmp_path / "calm", histories.Plan())
    write_run_reports(run)
    assert "Harness incidents" not in (run / "summary.md").read_text()
    assert "— **valid**" in (run / "summary.md").read_text()
    harness = run / "events" / "harness.jsonl"
    events = list(read_events(harness).events)
    origin = History.load(run).events[0].t_mono  # report times count from the first event
    never = RunMark(
        t_wall=0.0, t_mono=origin + 12.5, node=HARNESS, incarnation=0, epoch=0, step=-1,
        lamport=99, mark="incident", data={"kind": "faults_never_fired", "entries": [0]},
    )  # fmt: skip
    write_history(harness, sorted([*events, never], key=lambda e: e.t_mono))
    write_run_reports(run)
    summary = (run / "summary.md").read_text()
    assert "Harness incidents: **1**" in summary
    assert "- faults_never_fired at 12.5 s: entries [0]; scenario entries that never fired" in (
        summary
    )
    page = (run / "report.html").read_text()
    assert "Harness incidents: 1" in page
    assert "<code>faults_never_fired</code> at 12.5 s: entries [0]; scenario entries" in page
    # The checkers' verdict of the history stands; the run is unknown everywhere a
    # reader or CI looks: the headline, the page's badge, JUnit and the exit code.
    assert read_verdict(run / "verdict.json").status == "valid"
    assert "— **unknown**" in summary
    assert 'id="overall-status">unknown<' in page
    junit = (run / "junit.xml").read_text()
    assert (
        'name="verdict" value="unknown"' in junit and "scenario entries never applied: [0]" in junit
    )
    assert report_main([str(run)]) == 2


def test_a_paused_nodes_own_stall_is_not_called_overload(tmp_path: Path, histories) -> None:
    """The GPU suite pauses n2 for 8 s, and n2's control loop reports an 8 s stall when
    it wakes: the summary called the machine overloaded and the run's timings suspect
    for it.  The pause's own stall is listed as the fault; only the others warn."""
    plan = histories.Plan(
        faults=[histories.PlannedFault("pause", "n2", 9.0, 9.6)],
        loop_stalls=[("n2", 9.62, 610.0)],
    )
    run = histories.write_run(tmp_path / "paused", plan)
    write_run_reports(run)
    summary = (run / "summary.md").read_text()
    assert "overloaded" not in summary
    assert "Control-loop stalls of a paused node during its own pause fault: 1" in summary
    plan.loop_stalls.append(("n1", 5.5, 300.0))  # a stall outside any pause: overload
    run = histories.write_run(tmp_path / "loaded", plan)
    write_run_reports(run)
    summary = (run / "summary.md").read_text()
    assert "Control-loop stalls: **1** (worst 300 ms on n1)" in summary
