"""A pre-imported parent that forks node processes: eight nodes start in milliseconds.

Importing torch costs seconds of CPU per process; eight nodes each importing it on
two cores miss the start-up goal (≤ 5 s to steady state) by far.  The zygote imports
the node's heavy modules once, then forks one child per node on request; a child
inherits the imported modules and only runs the node's ``__main__``.  Why not
``multiprocessing``'s forkserver: it starts *functions* with pickled arguments and
owns the children's lifetime and pipes, while a node must look exactly like
``python -m swarmshake.reference_node --config node.toml`` (argv, its own session so
the harness can signal its whole process group, its stdout/stderr in a log file).

Protocol (JSON lines): the harness writes ``{"id": 1, "argv": [...], "program": ...,
"log": ..., "env": {...}}`` to stdin and reads ``{"id": 1, "pid": 1234}`` (or
``{"id": 1, "error": "..."}``) from stdout; ``{"exited": pid, "status": code}`` lines
report reaped children.  One thread only (forking a threaded process is unsafe):
a ``select`` loop over stdin that reaps children between requests.  On EOF of
stdin (the harness exited, even by SIGKILL) the zygote SIGKILLs every child's
process group and exits, so a killed harness leaves no node behind.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import signal
import sys
import traceback

# Modules a node imports; importing them here is what makes a fork cheap.  A module
# missing from this tree is skipped: the child imports what it needs itself.
DEFAULT_PRELOAD = (
    "torch",
    # What the worker's torch.use_deterministic_algorithms() imports on first call
    # (~900 modules, 1.6 s of CPU per worker otherwise): nodes fork their worker from
    # here (runtime/worker_start.py), so it is paid once.
    "torch._inductor.config",
    "numpy",
    "msgspec",
    "aiomqtt",
    "swarmshake.kernels",
    "swarmshake.reference_node.config",
    "swarmshake.reference_node.runtime",
    "swarmshake.reference_node.runtime.worker",
    "swarmshake.reference_node.training.step",
    "swarmshake.reference_node.training.model",
    "swarmshake.reference_node.training.aggregation",
)
REAP_INTERVAL_S = 0.05  # how soon an exited child is reported
MAX_REQUEST_BYTES = 1 << 20  # a request is an argv and an environment, never this large


def _preload(modules: list[str]) -> list[str]:
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except ImportError:
            continue
    return loaded


def _child(request: dict) -> None:
    """In the forked child: become the node.  Never returns."""
    code = 1
    try:
        os.setsid()  # own process group: the harness signals control + worker together
        # Back to what a fresh `python` has (SIGPIPE stays ignored, as Python sets it,
        # so a write to a cut connection is an EPIPE error, not death).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null_fd)
        os.close(log_fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0 lives as long as the process
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.update(request.get("env", {}))
        if request.get("cwd"):
            os.chdir(request["cwd"])
        program = request["program"]
        sys.argv = [program, *request["argv"]]
        if program.endswith(".py"):
            runpy.run_path(program, run_name="__main__")
        else:
            runpy.run_module(program, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must exit, never return into the zygote
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _reply({"exited": pid, "status": os.waitstatus_to_exitcode(status)})


def _kill_all(children: set[int]) -> None:
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def serve(preload: list[str]) -> int:
    loaded = _preload(preload)
    # torch and friends leave ~340k GC-tracked objects; every forked node inherits
    # them, and a full collection walking them all stalls a node's control loop for
    # ~200 ms, longer than the detector's suspicion floor: its peers declared it
    # dead (measured: loop_stall events coinciding with gen-2 collections).
    # Frozen objects sit in a permanent generation that collections skip.
    gc.freeze()
    _reply({"ready": True, "pid": os.getpid(), "preloaded": loaded})
    children: set[int] = set()
    buffer = b""
    stdin_fd = sys.stdin.fileno()
    try:
        while True:
            readable, _, _ = select.select([stdin_fd], [], [], REAP_INTERVAL_S)
            _reap(children)
            if not readable:
                continue
            chunk = os.read(stdin_fd, 65536)
            if not chunk:
                return 0  # the harness is gone
            buffer += chunk
            if len(buffer) > MAX_REQUEST_BYTES:
                _reply({"error": "request too large"})
                buffer = b""
                continue
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    _handle(json.loads(line), children)
    finally:
        _kill_all(children)


def _handle(request: dict, children: set[int]) -> None:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(request)
    children.add(pid)
    _reply({"id": request.get("id"), "pid": pid})


def main() -> int:
    preload = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else list(DEFAULT_PRELOAD)
    # Ctrl-C reaches the whole foreground process group; the harness decides when
    # nodes stop, so the zygote ignores it and exits on stdin EOF instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return serve(preload)


if __name__ == "__main__":
    raise SystemExit(main())
