"""The pytest plugin judges every chaos test: a test written as its docstring shows
passes only when the run's history is valid (or its ``unknown`` is allowed).

The real-cluster tests run a test file in a pytest subprocess (pytester), as a user
would, on three reference nodes with a small model and a few seconds of faults."""

from __future__ import annotations

import json
import textwrap

import msgspec
import pytest

from swarmshake.chaos.pytest_cluster import ChaosMarkError, Judging
from swarmshake.verify.checkers import PROPERTIES, Bounds, EventRef, PropertyResult, Verdict

pytest_plugins = ("pytester",)

HEADER = """
import time

import pytest

from swarmshake.chaos import faults as F
"""

SUBPROCESS_TIMEOUT_S = 300  # a 3-node cluster starts in seconds; a hang must not stall CI


def _verdict(**statuses: str) -> Verdict:
    results = {
        name: PropertyResult(
            property=name,
            status=statuses.get(name, "valid"),
            message=f"{name} says {statuses.get(name, 'valid')}",
            evidence=[EventRef(node="n1", index=7, t_mono=1.5, kind="commit", step=3, note="fp")],
        )
        for name in PROPERTIES
    }
    status = "invalid" if "invalid" in statuses.values() else "valid"
    if status == "valid" and "unknown" in statuses.values():
        status = "unknown"
    return Verdict(status=status, results=results, bounds=Bounds())


def test_failure_names_the_property_its_evidence_and_the_report(tmp_path):
    (tmp_path / "report.html").write_text("<html></html>")
    judging = Judging.from_mark({"allow_unknown": ("L3",)})
    assert judging.failure(_verdict(), tmp_path) is None
    assert judging.failure(_verdict(L3="unknown"), tmp_path) is None
    message = judging.failure(_verdict(S3="invalid", L3="unknown"), tmp_path)
    assert message is not None and message.startswith("swarmshake: the run violated S3")
    assert "S3 invalid: S3 says invalid" in message
    assert "evidence: n1 #7 t=1.500 commit step 3 fp" in message
    assert f"report: {tmp_path / 'report.html'}" in message
    unknown = judging.failure(_verdict(S4="unknown"), tmp_path)
    assert unknown is not None and "could not decide S4" in unknown
    assert "allow_unknown=('S4',)" in unknown


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"allow_unknown": ("S9",)}, "choose from S1"),
        ({"allow_unknown": [3]}, "property names"),
        ({"bounds": {"detection_ms": 3}}, "fields: detection_s"),
        ({"bounds": {"detection_s": -1.0}}, "must be positive"),
        ({"quiesce_s": "3"}, "quiesce_s='3'"),
        ({"verify": "no"}, "True or False"),
    ],
)
def test_bad_mark_keywords_are_refused_with_the_fix(options, complaint):
    with pytest.raises(ChaosMarkError, match=complaint):
        Judging.from_mark(options)


def test_a_single_name_is_one_allowed_property():
    # ("S4") is a string, a comma away from a tuple: read it as the one property.
    assert Judging.from_mark({"allow_unknown": ("S4")}).allow_unknown == {"S4"}


def test_a_bad_mark_fails_before_any_cluster_starts(pytester):
    pytester.makepyfile(
        HEADER
        + """
@pytest.mark.chaos(nodes=3, allow_unknown=("S9",))
def test_typo(cluster):
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*allow_unknown=('S9',)*choose from S1, S2*"])
    assert not list(pytester.path.rglob("events"))


def _run(pytester, body: str) -> pytest.RunResult:
    pytester.makepyfile(HEADER + textwrap.dedent(body))
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rA", timeout=SUBPROCESS_TIMEOUT_S
    )


def _verdicts(pytester) -> list[dict]:
    return [json.loads(path.read_text()) for path in pytester.path.rglob("verdict.json")]


@pytest.mark.slow
def test_a_valid_run_passes_and_leaves_its_verdict_and_report(pytester):
    result = _run(
        pytester,
        """
        @pytest.mark.chaos(nodes=3)
        def test_isolated_node_comes_back(cluster, nemesis):
            cluster.wait_until_steady()
            nemesis.inject(F.Partition(grouping="isolate", nodes=["n1"]))
            time.sleep(2.0)
            nemesis.heal_all()
        """,
    )
    result.assert_outcomes(passed=1)
    (verdict,) = _verdicts(pytester)
    assert verdict["status"] == "valid", verdict
    assert verdict["events"] > 0
    (run_dir,) = [p.parent for p in pytester.path.rglob("verdict.json")]
    assert (run_dir / "report.html").is_file()
    assert msgspec.json.decode((run_dir / "bounds.json").read_bytes(), type=Bounds) == Bounds()


@pytest.mark.slow
def test_a_violated_property_fails_the_test_with_the_property_and_evidence(pytester):
    # no-quorum: the isolated n1 commits alone on its own view (S3).
    result = _run(
        pytester,
        """
        @pytest.mark.chaos(nodes=3, bugs=["no-quorum"])
        def test_isolated_node_stalls(cluster, nemesis):
            cluster.wait_until_steady()
            nemesis.inject(F.Partition(grouping="isolate", nodes=["n1"]))
            time.sleep(3.0)
            nemesis.heal_all()
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*swarmshake: the run violated *S3*",
            "*S3 invalid:*",
            "*evidence: n* commit step *",
            "*report: *report.html",
        ]
    )
    (verdict,) = _verdicts(pytester)
    assert verdict["results"]["S3"]["status"] == "invalid"


# Latency above the declared envelope (75 ms) on every link, and a crash: whether the
# survivors detected it within D cannot be judged outside the envelope (L1 unknown).
# 80 ms, not more: one heartbeat gap grows by the delay (50 + 80 ms), and it must stay
# under the detector's 160 ms suspicion floor, or a false suspicion adds an S4 unknown.
UNDECIDABLE_BODY = """
@pytest.mark.chaos(nodes=3, bounds={{"detection_s": 0.05}}{allow})
def test_crash_under_latency(cluster, nemesis):
    cluster.wait_until_steady()
    nemesis.inject(F.Latency(delay_ms=80))
    time.sleep(0.5)
    nemesis.inject(F.Crash(nodes=["n3"], permanent=True))
    time.sleep(1.5)
    nemesis.heal_all()
"""


@pytest.mark.slow
def test_an_undecided_property_fails_the_test_unless_the_mark_allows_it(pytester):
    result = _run(pytester, UNDECIDABLE_BODY.format(allow=""))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*swarmshake: the checkers could not decide L1 (allow it with *allow_unknown=('L1',)*"]
    )
    (verdict,) = _verdicts(pytester)
    assert verdict["status"] == "unknown" and verdict["results"]["L1"]["status"] == "unknown"


@pytest.mark.slow
def test_an_allowed_unknown_passes(pytester):
    result = _run(pytester, UNDECIDABLE_BODY.format(allow=', allow_unknown=("L1",)'))
    result.assert_outcomes(passed=1)
    (verdict,) = _verdicts(pytester)
    assert verdict["status"] == "unknown"
    assert [n for n, r in verdict["results"].items() if r["status"] != "valid"] == ["L1"]


@pytest.mark.slow
def test_a_test_can_assert_on_the_verdict_before_teardown(pytester):
    result = _run(
        pytester,
        """
        @pytest.mark.chaos(nodes=3, bugs=["no-quorum"], allow_unknown=("S4",))
        def test_checks_mid_run(cluster, nemesis):
            cluster.wait_until_steady()
            assert cluster.verdict().results["S3"].status == "valid"
            nemesis.inject(F.Partition(grouping="isolate", nodes=["n1"]))
            time.sleep(3.0)
            verdict = cluster.verdict()
            assert not (cluster.run_dir / "verdict.json").exists()  # the final one comes later
            assert verdict.results["S3"].status == "invalid", verdict.results["S3"].message
            print("MID-RUN", verdict.results["S3"].message)
        """,
    )
    # The test's own assertions held mid-run; the plugin then fails it on S3.
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*swarmshake: the run violated *S3*", "*MID-RUN *"])
