"""Starting the worker process: exec a fresh interpreter, or fork this one.

Exec (``worker_entry``) is the stand-alone path (Docker, the CLI): the control
process never imports torch, the worker imports it at low priority.  Fork is the
path under the harness's zygote (``chaos/backends/zygote.py``), whose children hold
torch already imported: a fork shares those pages and skips seconds of import CPU
per node, which is what lets eight nodes reach steady state in a few seconds.

The fork happens in ``__main__`` *before* the control process starts its event
loop and threads (forking a threaded process or a running asyncio loop is unsafe:
the child would inherit held locks and the parent's epoll set).  Either way the
control process gets a ``WorkerProcess`` and its end of a socketpair.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from typing import Protocol


class WorkerProcess(Protocol):
    pid: int

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def kill(self) -> None: ...


class ForkedWorker:
    """A worker forked by ``fork_worker``; the control process reaps it."""

    def __init__(self, pid: int, control_socket: socket.socket):
        self.pid = pid
        self.control_socket = control_socket
        self._returncode: int | None = None

    @property
    def returncode(self) -> int | None:
        if self._returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self._returncode = -1  # reaped elsewhere: its status is lost
                return self._returncode
            if pid:
                self._returncode = os.waitstatus_to_exitcode(status)
        return self._returncode

    async def wait(self) -> int:
        """Until the worker exits (callers bound this with a timeout)."""
        if (code := self.returncode) is not None:
            return code
        # A pidfd turns readable when the process exits (Linux >= 5.3); a fork has no
        # asyncio child watcher to tell us.
        pidfd = os.pidfd_open(self.pid)
        exited = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(pidfd, exited.set)
        try:
            await exited.wait()
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        code = self.returncode
        return -1 if code is None else code

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def fork_preferred(start: str) -> bool:
    """Whether ``[worker] start`` means fork in this process (see config.WorkerSection)."""
    if start == "auto":
        return "torch" in sys.modules  # a pre-imported parent (the zygote) made us
    return start == "fork"


def fork_worker(nice: int) -> ForkedWorker:
    """Fork the worker now (no event loop may be running in this process yet)."""
    control_socket, worker_socket = socket.socketpair()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or the child would write the parent's buffered lines again
    control_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker: never returns into the control process's code
        code = 1
        try:
            control_socket.close()
            from swarmshake.reference_node.runtime.worker_entry import become_worker

            code = become_worker(worker_socket.detach(), nice, control_pid)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 0
        except BaseException:  # noqa: BLE001 - must end in os._exit, whatever happened
            import traceback

            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001, S110 - exiting; a closed stream is fine
                    pass
            os._exit(code)
    worker_socket.close()
    return ForkedWorker(pid, control_socket)


async def exec_worker(nice: int) -> tuple[asyncio.subprocess.Process, socket.socket]:
    """Start the worker as a fresh interpreter (``worker_entry``)."""
    control_socket, worker_socket = socket.socketpair()
    worker_fd = worker_socket.fileno()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "swarmshake.reference_node.runtime.worker_entry",
        str(worker_fd),
        str(nice),
        pass_fds=(worker_fd,),
    )
    worker_socket.close()
    return process, control_socket
