"""``junit.xml``: what CI systems (Jenkins, GitHub/GitLab test reporters) read.

Shape (valid against the Jenkins xunit plugin's ``junit-10.xsd``, which the tests
check with lxml)::

    <testsuites name="swarmshake" tests= failures= errors= time=>
      <testsuite name="<scenario>" tests= failures= errors= skipped="0" time= timestamp=>
        <properties><property name="seed" value=".."/> ...</properties>
        <testcase classname="swarmshake.<scenario>" name="S1 agreement" time="0">
          <failure type="invalid" message="..">evidence lines</failure>   (invalid)
          <error type="unknown" message="..">..</error>                   (unknown)
        </testcase>   ... one per property ...
        <testcase classname="swarmshake.<scenario>" name="scenario <name>"/>  (the run as a whole)
      </testsuite>
    </testsuites>

``invalid`` is a failure (the system broke a property); ``unknown`` is an error (the
run could not decide), so a CI shows them apart, as the exit codes do (1 vs 2).
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from swarmshake.reports.html import PROPERTY_NAMES, reproduce_command
from swarmshake.reports.rundir import RunDir, untested_entries
from swarmshake.reports.series import run_duration_s

MAX_EVIDENCE_LINES = 20  # the verdict keeps at most this many refs per property anyway


def _time(seconds: float) -> str:
    return f"{max(seconds, 0.0):.3f}"


def _outcome(case: ET.Element, status: str, message: str, body: str) -> None:
    if status == "invalid":
        element = ET.SubElement(case, "failure", type="invalid", message=message)
    elif status == "unknown":
        element = ET.SubElement(case, "error", type="unknown", message=message)
    else:
        return
    element.text = body


def testsuite(run: RunDir) -> ET.Element:
    duration = run_duration_s(run.history)
    classname = f"swarmshake.{run.name}"
    suite = ET.Element("testsuite", name=run.name)
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("run_dir", str(run.path)),
        ("seed", "" if run.seed is None else str(run.seed)),
        ("verdict", run.status),
        ("events", str(run.verdict.events)),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    failures = errors = 0
    for name, result in run.verdict.results.items():
        label = f"{name} {PROPERTY_NAMES.get(name, '')}".strip()
        case = ET.SubElement(suite, "testcase", classname=classname, name=label, time="0")
        evidence = "\n".join(
            f"{ref.node} event #{ref.index} t_mono={ref.t_mono:.3f} {ref.kind} step={ref.step} {ref.note}"
            for ref in result.evidence[:MAX_EVIDENCE_LINES]
        )
        _outcome(case, result.status, result.message, evidence)
        failures += result.status == "invalid"
        errors += result.status == "unknown"
    whole = ET.SubElement(
        suite, "testcase", classname=classname, name=f"scenario {run.name}", time=_time(duration)
    )
    violated = [n for n, r in run.verdict.results.items() if r.status == "invalid"]
    undecided = [n for n, r in run.verdict.results.items() if r.status == "unknown"]
    status = run.status
    untested = untested_entries(run.history)
    _outcome(
        whole,
        status,
        f"violated: {', '.join(violated)}"
        if violated
        else f"undecided: {', '.join(undecided)}"
        if undecided
        else f"scenario entries never applied: {untested}",
        f"report: {run.path / 'report.html'}",
    )
    failures += status == "invalid"
    errors += status == "unknown"
    out = ET.SubElement(suite, "system-out")
    out.text = f"reproduce: {reproduce_command(run)}"
    suite.set("tests", str(len(run.verdict.results) + 1))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    suite.set("time", _time(duration))
    suite.set("timestamp", _timestamp(run))
    return suite


def _timestamp(run: RunDir) -> str:
    """ISO 8601 wall time of the run's first event (what Ant/Surefire write)."""
    events = run.history.events
    if not events:
        return ""
    moment = dt.datetime.fromtimestamp(events[0].t_wall, tz=dt.UTC)
    return moment.replace(tzinfo=None, microsecond=0).isoformat()


def junit_xml(runs: Sequence[RunDir]) -> bytes:
    root = ET.Element("testsuites", name="swarmshake")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    duration = 0.0
    for run in runs:
        suite = testsuite(run)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        duration += float(suite.get("time", "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _time(duration))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(run: RunDir) -> None:
    (run.path / "junit.xml").write_bytes(junit_xml([run]))
