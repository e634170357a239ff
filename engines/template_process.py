"""A template process: imports one engine kind's modules once, then forks a worker for each request from the server.

Run as ``python -m engines.template_process FD`` by :class:`engines.template.WorkerTemplate`, with its end of a
``SOCK_SEQPACKET`` socket pair as file descriptor ``FD``. Every message on that socket is one packet:

- server → template, first: the pickled :class:`TemplateStart` (the engine kind, the server's ``sys.path``); the
  template imports the kind's modules (``engines.registry.PRELOAD``) and answers ``TemplateReady``;
- server → template, then: a pickled :class:`ForkRequest` with two descriptors: the worker's end of its pipe to the
  server and the write end of its status pipe. The template forks; the child runs :func:`engines.worker.run_worker`;
  the template answers the child's pid, with a pidfd of it (so the server can signal and watch a process that is not
  its own child, race-free); when the child ends, the template reaps it and writes its exit code to the status pipe.

The end of the server's socket ends the template (its workers live on until their own pipes close). Only the server
that started it is at the other end, so unpickling what arrives is as safe as the worker pipe (``engines/pipe.py``).

Why fork is safe here: the template never runs an engine, so no CUDA context exists before the fork (importing torch
does not initialise CUDA; :func:`_preload` refuses to serve if something did), and it has no Python threads. The
native threads that numpy's OpenBLAS starts at import are fork-aware (OpenBLAS re-creates its pool in the child).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import selectors
import signal
import socket
import struct
import sys
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lifecycle.signals import leave_stopping_to_the_server

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["EXIT_CODE", "ForkRequest", "TemplateReady", "TemplateStart", "main"]

EXIT_CODE = struct.Struct("!q")
"""What the status pipe carries when a worker ends: its exit code (negative: the signal that ended it)."""
_MAX_PACKET = 1 << 20


@dataclass(frozen=True, slots=True)
class TemplateStart:
    kind: str
    sys_path: list[str]


@dataclass(frozen=True, slots=True)
class TemplateReady:
    """The template's modules are imported (or ``error`` says why it cannot serve)."""

    modules: int
    failed: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ForkRequest:
    """What :func:`engines.worker.run_worker` takes, less its pipe (which travels as a descriptor)."""

    kind: str
    options: BaseModel
    logging_config: dict[str, Any] | None


def main() -> None:
    leave_stopping_to_the_server()  # before anything: the workers forked from here inherit it
    control = socket.socket(fileno=int(sys.argv[1]))
    try:
        _start_and_serve(control)
    except (ConnectionError, EOFError):
        return  # the server closed its socket (a stopped pool, a server gone), unread packets in it or not: we end


def _start_and_serve(control: socket.socket) -> None:
    start: TemplateStart = pickle.loads(control.recv(_MAX_PACKET))  # noqa: S301 - the server (module docstring)
    sys.path[:0] = [entry for entry in start.sys_path if entry not in sys.path]
    ready = _preload(start.kind)
    control.sendall(pickle.dumps(ready))
    if ready.error is None:
        _serve(control)


def _preload(kind: str) -> TemplateReady:
    from engines.registry import PRELOAD  # noqa: PLC0415 - after sys.path is the server's

    failed = []
    for name in PRELOAD.get(kind, ()):
        try:
            importlib.import_module(name)
        except Exception:  # the worker imports it again and reports the error as a load failure
            failed.append(name)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return TemplateReady(len(sys.modules), failed, "CUDA was initialised while importing; forking is unsafe")
    return TemplateReady(len(sys.modules), failed)


def _serve(control: socket.socket) -> None:
    children: dict[int, int] = {}  # pid -> write end of its status pipe
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wakeup pipe
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        selector.register(wake_read, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is control and not _fork_one(control, children, (wake_read, wake_write)):
                    return
                if key.fileobj == wake_read:
                    os.read(wake_read, 4096)
                    _reap(children)


def _fork_one(control: socket.socket, children: dict[int, int], wake: tuple[int, int]) -> bool:
    """Fork a worker for the next request; False once the server has gone."""
    data, fds, _, _ = socket.recv_fds(control, _MAX_PACKET, 2)
    if not data:
        return False
    request: ForkRequest = pickle.loads(data)  # noqa: S301 - the server (module docstring)
    pipe_fd, status_fd = fds
    pid = os.fork()
    if pid == 0:
        _become_worker(request, pipe_fd, [control.fileno(), status_fd, *wake, *children.values()])
    os.close(pipe_fd)
    children[pid] = status_fd
    pidfd = os.pidfd_open(pid)  # before the child can be reaped: only this loop reaps, after this
    try:
        socket.send_fds(control, [EXIT_CODE.pack(pid)], [pidfd])
    finally:
        os.close(pidfd)
    return True


def _become_worker(request: ForkRequest, pipe_fd: int, inherited: list[int]) -> None:
    """The child: drop the template's descriptors and signal set-up, then run the worker; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        _reseed()
        from engines.worker import run_worker  # noqa: PLC0415 - preloaded for most kinds; cheap for the rest

        run_worker(request.kind, request.options, socket.socket(fileno=pipe_fd), request.logging_config)
        code = 0
    except BaseException:  # the worker ends here, never unwinding into the template's loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reseed() -> None:
    """Give each worker its own random state, as a fresh process had (Python's ``random`` reseeds after a fork
    itself; numpy's and torch's global generators do not)."""
    if (numpy := sys.modules.get("numpy")) is not None:
        numpy.random.seed()
    if (torch := sys.modules.get("torch")) is not None:
        torch.seed()


def _reap(children: dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status_fd = children.pop(pid, None)
        if status_fd is not None:
            with contextlib.suppress(OSError):  # the server closed its end: it no longer cares
                os.write(status_fd, EXIT_CODE.pack(os.waitstatus_to_exitcode(status)))
            os.close(status_fd)


if __name__ == "__main__":
    # Run from the module under its own name, so that what it pickles names engines.template_process, not __main__.
    from engines.template_process import main as run_template

    run_template()
