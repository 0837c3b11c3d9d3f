"""Mutation testing (scripts/mutation.py): the fast tests of the protocol cores and
the checkers, plus a short sim exploration, must catch bugs nobody listed.

The sampled run (marked slow, about 10 minutes on two busy cores) draws a fixed set of
mutants (seed 1) and fails when fewer are killed than the kill rate measured when
this test was written; the full run (every mutant, hours) is ``make test-long``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mutation.py"

# Measured 2026-11-26 on this sample (seed 1, 30 of 3,728 mutants): 25/30 killed
# before tests/verify/test_checkers_mutants.py, 28/30 after; the threshold sits between,
# so the sample fails if the checker tests that killed three survivors are lost.  The
# sample is drawn from the current code, so edits to the mutated files redraw it:
# then re-measure (`make mutation`) and move the threshold with a reason.  Redrawn
# by the session's CI check (code before the detector fix 1aed035): 25/30 (0.833),
# survivors in checkers/neutral.py:122, progress.py:32 and :152, timeline.py:175 and
# :324; the threshold sits just below that measurement.
SAMPLE_SIZE = 30
SAMPLE_MIN_SCORE = 0.80
# The first full run of the checkers (session 13, 1,389 mutants of verify/checkers/ in
# eight shards on a 16-core machine, code 8e8ed8f) killed 78.8 %, and that session's
# edge tests most of the killable rest (BENCHMARKS.md); the protocol cores have had
# half a census (session 14: 1,300 of commit's, detector's and rejoin's 2,600 mutants,
# all killed) and one-in-eight samples.  The threshold stays the sample's "before"
# score until a full run of every file is made.
FULL_MIN_SCORE = 0.80


def _load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ss_mutation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_mutants_are_deterministic_and_change_the_code() -> None:
    mutation = _load_script()
    rel_path = "reference_node/protocol/commit.py"
    first = mutation.list_mutants(rel_path)
    assert first == mutation.list_mutants(rel_path)
    assert len(first) > 100
    source = (ROOT / rel_path).read_text()
    original = ast.dump(ast.parse(source))
    for mutant in first[:: max(1, len(first) // 25)]:
        mutated = mutation.mutated_source(source, mutant)
        compile(mutated, rel_path, "exec")
        assert ast.dump(ast.parse(mutated)) != original, mutant


def test_bad_arguments_exit_64() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "no/such/file.py", "--list"], capture_output=True
    )
    assert result.returncode == 64


def test_a_per_file_draw_takes_that_many_from_each_file_and_keeps_the_others_draws() -> None:
    files = ["reference_node/protocol/rejoin.py", "verify/checkers/safety.py"]

    def listed(*names: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, str(SCRIPT), *names, "--per-file", "3", "--list"],
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout.splitlines()

    both = listed(*files)
    assert [line.split(":")[0] for line in both] == [files[0]] * 3 + [files[1]] * 3
    assert listed(files[1]) == both[3:]  # adding a file does not redraw another's


def test_the_shards_of_a_full_run_are_disjoint_and_add_up_to_it() -> None:
    def listed(*extra: str) -> list[str]:
        command = [sys.executable, str(SCRIPT), "verify/checkers/model.py", "--all", "--list"]
        result = subprocess.run([*command, *extra], capture_output=True, text=True, check=True)
        return result.stdout.splitlines()

    whole = listed()
    shards = [listed("--shard", f"{k}/3") for k in (1, 2, 3)]
    assert sorted(line for shard in shards for line in shard) == sorted(whole)
    assert all(abs(len(shard) - len(whole) / 3) < 1 for shard in shards)
    for bad in ("0/3", "4/3", "1/0", "a/b", "2"):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--all", "--list", "--shard", bad], capture_output=True
        )
        assert result.returncode == 64, bad


def test_bad_job_counts_exit_64() -> None:
    for jobs in ("0", "100000"):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--jobs", jobs, "--list"], capture_output=True
        )
        assert result.returncode == 64, jobs


def _run(args: list[str], out: Path, timeout_s: int) -> dict:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    summary = json.loads(out.read_text())
    print(result.stdout)
    return summary


# In test-long, not make test: 7-9 minutes on this 2-core machine would take make
# test past its 45-minute budget with set-up, and the sample is redrawn by every edit
# of a mutated file (the detector changed after the 0.85 was measured).
@pytest.mark.long
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_sampled_mutants_are_killed(tmp_path: Path) -> None:
    summary = _run(["--sample", str(SAMPLE_SIZE), "--seed", "1"], tmp_path / "m.json", 1400)
    survivors = [f"{s['file']}:{s['line']} {s['description']}" for s in summary["survivors"]]
    assert summary["score"] >= SAMPLE_MIN_SCORE, survivors


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.timeout(8 * 3600)
def test_every_mutant(tmp_path: Path) -> None:
    summary = _run(["--all"], tmp_path / "m.json", 8 * 3600 - 60)
    survivors = [f"{s['file']}:{s['line']} {s['description']}" for s in summary["survivors"]]
    assert summary["score"] >= FULL_MIN_SCORE, survivors


def test_survivors_of_an_earlier_run_are_found_after_edits_elsewhere(tmp_path, monkeypatch):
    """``--survivors-of RUN.json --at REV``: the survivors of a run made at REV are
    re-run on today's code, found by line text and mutation (indexes and line numbers
    move when the file is edited); a survivor whose line was edited is gone."""
    mutation = _load_script()
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    code = "def f(a, b):\n    if a < b:\n        return a + 1\n    return b\n"
    (repo / "pkg" / "m.py").write_text(code)
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "then"], check=True)
    monkeypatch.setattr(mutation, "REPO", repo)
    then = mutation.list_mutants("pkg/m.py")
    compare = next(m for m in then if m.description == "Lt -> LtE")
    constant = next(m for m in then if m.line == 3 and m.kind == "constant")
    results = [
        {"file": "pkg/m.py", "index": compare.index, "outcome": "survived"},
        {"file": "pkg/m.py", "index": constant.index, "outcome": "survived"},
        {"file": "pkg/m.py", "index": 0, "outcome": "killed"},
    ]
    edited = "def g():\n    return 0\n\n\n" + code.replace("a + 1", "a + 2")
    (repo / "pkg" / "m.py").write_text(edited)
    found, gone = mutation.survivors_now(results, "HEAD")
    assert [(m.line, m.description) for m in found] == [(6, "Lt -> LtE")]
    assert gone == 1
    assert mutation.list_mutants("pkg/m.py")[found[0].index] == found[0]


def _collected(args: list[str]) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    return sorted(line for line in result.stdout.splitlines() if "::" in line)


def test_a_protocol_mutant_runs_its_own_tests_first_and_every_protocol_test_once() -> None:
    mutation = _load_script()
    commands = mutation.kill_commands("reference_node/protocol/rejoin.py", sys.executable)
    pytest_args = [
        command[command.index("pytest") + 1 :] for command in commands if "pytest" in command
    ]
    own, rest = pytest_args
    assert own[-1].endswith("test_rejoin.py")
    assert "explore" in commands[-1]
    # The same tests as the whole folder, each once: the verdict cannot change.
    everything = _collected([arg for arg in rest if not arg.startswith("--ignore=")])
    own_ids, rest_ids = _collected(own), _collected(rest)
    assert own_ids and rest_ids
    assert not set(own_ids) & set(rest_ids)
    assert sorted(own_ids + rest_ids) == everything
