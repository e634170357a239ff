"""Warm worker starts: workers forked from a template process that has already imported their engine's modules.

A ChatTTS worker imports torch, transformers and ChatTTS (about 3,600 modules) before it loads weights; a replacement
for a crashed or hung worker paid that again while its engine served nothing. A :class:`WorkerTemplate` (one per
engine kind, shared by every pool of that kind in the process) imports them once in a process of its own
(``engines/template_process.py``, which says why forking it is safe, CUDA included) and forks each worker from it, so
a worker pays only its weights' load. The server process itself still never imports torch.

The template is supervised: the pools' watchdogs call :meth:`WorkerTemplate.check`, which starts a new template as
soon as the old one has died (so that the next replacement is warm again), and a fork that finds the template gone
starts one and tries again. Should a template not serve (it could not start, or CUDA was initialised while
importing), the pool starts the worker the cold way, as a fresh interpreter (``engines/pool/``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from engines.template_process import EXIT_CODE, ForkRequest, TemplateReady, TemplateStart
from lifecycle import naming

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "TEMPLATES",
    "ForkedWorker",
    "TemplateUnavailableError",
    "WorkerProcess",
    "WorkerTemplate",
    "WorkerTemplates",
]

logger = naming.logger("pool")

_MAX_PACKET = 1 << 20


class WorkerProcess(Protocol):
    """What a pool needs of a worker's process (``multiprocessing``'s processes have it too)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def kill(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def close(self) -> None: ...


class TemplateUnavailableError(Exception):
    """The template could not fork a worker (it did not start, or it refuses to serve)."""


class ForkedWorker:
    """A worker forked by a template: not the server's child, so it is watched and signalled through a pidfd, and its
    exit code arrives on a status pipe that the template writes when it reaps the worker."""

    def __init__(self, pid: int, pidfd: int, status_read: int) -> None:
        self._pid = pid
        self._pidfd = pidfd
        self._status_read = status_read
        self._exitcode: int | None = None

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def exitcode(self) -> int | None:
        """The exit code once the template has reaped the worker (None while it runs, or if the template died)."""
        if self._exitcode is None and self._status_read >= 0 and _readable(self._status_read, 0):
            data = os.read(self._status_read, EXIT_CODE.size)
            if len(data) == EXIT_CODE.size:
                (self._exitcode,) = EXIT_CODE.unpack(data)
            self._close_status()
        return self._exitcode

    def is_alive(self) -> bool:
        return self._pidfd >= 0 and not _readable(self._pidfd, 0)  # a pidfd reads as ready once its process ended

    def kill(self) -> None:
        if self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):  # already gone
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the worker to end, and for its exit code (which the template writes a moment later)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._pidfd >= 0 and _readable(self._pidfd, timeout):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._status_read >= 0 and _readable(self._status_read, remaining):
                _ = self.exitcode

    def close(self) -> None:
        """Release the descriptors (the process itself is left alone)."""
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        self._close_status()

    def _close_status(self) -> None:
        if self._status_read >= 0:
            os.close(self._status_read)
            self._status_read = -1

    def __del__(self) -> None:
        self.close()


def _readable(fd: int, timeout: float | None) -> bool:
    readable, _, _ = select.select([fd], [], [], timeout)
    return bool(readable)


class WorkerTemplate:
    """The template process of one engine kind, started on first use and started again when it dies.

    Its methods block (a fork waits for the template's imports the first time): pools call them in a thread.
    """

    def __init__(self, kind: str, *, ready_timeout_s: float = 300.0) -> None:
        self.kind = kind
        self.starts = 0
        """Template processes started so far (more than one: one died and was replaced)."""
        self._ready_timeout_s = ready_timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._ready: TemplateReady | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def check(self) -> None:
        """Start a new template if this one has died, now, before a worker needs it; does nothing while a fork is
        under way (the fork starts one itself) or before the first start."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._process is not None and self._process.poll() is not None:
                logger.warning(
                    "the %s worker template (pid %s) ended with code %s; starting a new one",
                    self.kind,
                    self._process.pid,
                    self._process.returncode,
                )
                self._discard()
                self._start()
        finally:
            self._lock.release()

    def fork(self, options: BaseModel, pipe: socket.socket, logging_config: dict[str, Any] | None) -> ForkedWorker:
        """Fork a worker running ``options`` on ``pipe`` (its end of the pipe to the server; the caller closes its
        copy), waiting for the template to be ready; a template found dead is started again once.

        Raises:
            TemplateUnavailableError: no template could fork it.
        """
        request = pickle.dumps(ForkRequest(self.kind, options, logging_config))
        with self._lock:
            for attempt in range(2):
                try:
                    return self._fork(request, pipe)
                except (OSError, EOFError, pickle.UnpicklingError) as exc:
                    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                    again = "" if attempt else "; starting it again"
                    logger.warning("the %s worker template failed (%s)%s", self.kind, reason, again)
                    self._discard()
        raise TemplateUnavailableError(f"the {self.kind} worker template could not fork a worker")

    def stop(self) -> None:
        """End the template (closing its socket ends it); the workers it forked are not touched."""
        with self._lock:
            self._discard()

    def _fork(self, request: bytes, pipe: socket.socket) -> ForkedWorker:
        control = self._running()
        status_read, status_write = os.pipe()
        try:
            socket.send_fds(control, [request], [pipe.fileno(), status_write])
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        data, fds, _, _ = socket.recv_fds(control, _MAX_PACKET, 1)
        if len(data) != EXIT_CODE.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            os.close(status_read)
            raise EOFError("the template closed its socket")
        (pid,) = EXIT_CODE.unpack(data)
        return ForkedWorker(pid, fds[0], status_read)

    def _running(self) -> socket.socket:
        """The template's socket once it has imported its modules."""
        if self._process is None:
            self._start()
        assert self._control is not None
        if self._ready is None:
            self._control.settimeout(self._ready_timeout_s)
            try:
                answer = self._control.recv(_MAX_PACKET)
            finally:
                self._control.settimeout(None)
            if not answer:
                raise EOFError("the template ended while importing")
            self._ready = pickle.loads(answer)  # noqa: S301 - our own template process
            assert self._ready is not None
            if self._ready.failed:
                logger.warning("the %s worker template could not import %s", self.kind, ", ".join(self._ready.failed))
        if self._ready.error is not None:
            raise TemplateUnavailableError(f"the {self.kind} worker template refuses to serve: {self._ready.error}")
        return self._control

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "engines.template_process", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        ours.sendall(pickle.dumps(TemplateStart(self.kind, [entry for entry in sys.path if entry])))
        self._control = ours
        self._ready = None
        self.starts += 1
        logger.info("started the %s worker template, pid %s", self.kind, self._process.pid)

    def _discard(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process is not None:
            try:
                self._process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        self._ready = None


class WorkerTemplates:
    """The templates of a process, one per engine kind, each started when a pool of that kind first needs it."""

    def __init__(self, *, ready_timeout_s: float = 300.0) -> None:
        """``ready_timeout_s``: the longest a template may take to import its modules before it counts as failed."""
        self._templates: dict[str, WorkerTemplate] = {}
        self._ready_timeout_s = ready_timeout_s
        self._lock = threading.Lock()

    def of(self, kind: str) -> WorkerTemplate:
        with self._lock:
            template = self._templates.get(kind)
            if template is None:
                template = self._templates[kind] = WorkerTemplate(kind, ready_timeout_s=self._ready_timeout_s)
            return template

    def stop(self) -> None:
        with self._lock:
            templates = list(self._templates.values())
            self._templates.clear()
        for template in templates:
            template.stop()


TEMPLATES = WorkerTemplates()
"""This process's templates: shared by its pools (a gateway has one app; the tests start many apps in one process,
and each reuses the templates the first started), ended at exit."""
atexit.register(TEMPLATES.stop)
