"""The in-process test layer: the real app (``create_app``) under Litestar's test client, with each engine run in a
thread of the test process behind the same :class:`~engines.backend.EngineBackend` interface as the worker pools.

Handlers, the error table, the middlewares and the speech service run exactly as in production; only the process
boundary of the engines is gone, so a test takes milliseconds instead of starting a server.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import CancelFlag, EngineUnavailableError, InvalidSynthesisRequestError, cannot_clone_error
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.registry import check_speaker, create_engine
from engines.samples import speaker_from_sample
from engines.settings import RemoteEngineSettings
from engines.status import PoolStatus
from engines.timing import MarkedSynthesis
from gateway.app import create_app
from gateway.settings import Settings
from gateway.uploads import DecoderProcesses, UploadSettings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

    from engines.base import Engine, EngineInfo, SynthesisRequest
    from engines.breaker import BreakerSettings
    from engines.scheduling import TenantShare
    from engines.settings import AnyEngineSettings
    from engines.timing import WordMark

__all__ = ["ThreadBackend", "in_process_app", "shared_decoders"]

_END = object()


class _ThreadStream:
    """PCM from an engine generator running in a thread, handed to the event loop chunk by chunk, with its word marks
    after their audio (as a worker sends them)."""

    def __init__(self, info: EngineInfo) -> None:
        self.info = info
        self.sample_rate = info.sample_rate
        self.marks: list[WordMark] = []
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def __aiter__(self) -> _ThreadStream:
        return self

    async def __anext__(self) -> bytes:
        while True:
            item = await self.queue.get()
            if item is _END:
                raise StopAsyncIteration
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, tuple):
                self.marks.extend(item)
                continue
            return bytes(item)


class ThreadBackend:
    """One real engine (synthetic, espeak, ChatTTS) loaded in the test process; each stream runs in a thread.

    ``capacity`` streams run at once; beyond it a request gets :class:`EngineOverloadedError` at once (a pool with no
    wait queue), which is what the overload paths of the gateway need to see.
    """

    def __init__(self, name: str, settings: AnyEngineSettings, capacity: int = 4) -> None:
        self.name = name
        self.settings = settings
        self.capacity = capacity
        self._engine: Engine | None = None
        self._info: EngineInfo | None = None
        self._reason: str | None = None
        self._active = 0
        self.served = 0

    @property
    def info(self) -> EngineInfo | None:
        return self._info

    @property
    def breaker_settings(self) -> BreakerSettings | None:
        return None if isinstance(self.settings, RemoteEngineSettings) else self.settings.breaker

    async def start(self) -> None:
        engine = create_engine(self.settings.kind, self.settings.options)
        try:
            self._info = await asyncio.to_thread(engine.load)
        except EngineUnavailableError as exc:
            self._reason = str(exc)
            return
        self._engine = engine

    async def stop(self) -> None:
        self._engine = None

    def status(self) -> PoolStatus:
        ready = self._engine is not None
        return PoolStatus(
            engine=self.name,
            kind=self.settings.kind,
            state="ready" if ready else "unavailable",
            reason=self._reason,
            workers=1,
            ready_workers=int(ready),
            busy_workers=int(self._active > 0),
            active_jobs=self._active,
            queued=0,
            restarts=0,
            pids=(),
            batch_sizes={},
            info=self._info,
        )

    @asynccontextmanager
    async def open_stream(  # no wait queue here (busy: a 503 at once), so no tenant share to apply
        self,
        request: SynthesisRequest,
        *,
        tenant: str = "",
        share: TenantShare | None = None,
        continuing: bool = False,
    ) -> AsyncIterator[_ThreadStream]:
        if self._engine is None or self._info is None:
            raise EngineNotReadyError(self.name, self._reason or "not loaded")
        if self._active >= self.capacity and not continuing:  # a stream under way may go over: it must not break off
            raise EngineOverloadedError(self.name, 1)
        stream, cancel = _ThreadStream(self._info), CancelFlag()
        loop = asyncio.get_running_loop()
        self._active += 1
        thread = threading.Thread(target=_run, args=(self._engine, request, cancel, stream, loop), daemon=True)
        thread.start()
        try:
            yield stream
        finally:
            cancel.set()
            await asyncio.to_thread(thread.join)
            self._active -= 1
            self.served += 1

    async def check_speaker(self, speaker: str) -> None:
        """As a pool checks it: from the settings, whether the engine has loaded or not."""
        check_speaker(self.settings.kind, self.settings.options, speaker)

    async def speaker_from_sample(self, pcm: bytes, sample_rate: int, transcript: str) -> str:
        """The engine's own method in a thread (no slot taken, as in a worker pool)."""
        if self._engine is None or self._info is None:
            raise EngineNotReadyError(self.name, self._reason or "not loaded")
        if not self._info.clones_voices:  # the same answer as a pool's, naming this engine
            raise cannot_clone_error(self.name)
        try:
            return await asyncio.to_thread(speaker_from_sample, self._engine, self._info, pcm, sample_rate, transcript)
        except InvalidSynthesisRequestError:
            raise
        except Exception as exc:  # as a worker reports a failed encoding
            raise SynthesisFailedError(f"{type(exc).__name__}: {exc}") from exc


def _run(
    engine: Engine,
    request: SynthesisRequest,
    cancel: CancelFlag,
    stream: _ThreadStream,
    loop: asyncio.AbstractEventLoop,
) -> None:
    sample_rate = stream.sample_rate

    def hand_over(item: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the test is over
            loop.call_soon_threadsafe(stream.queue.put_nowait, item)

    synthesis = MarkedSynthesis(engine, request, cancel, sample_rate)
    chunks = synthesis.chunks()
    try:
        for chunk, marks in chunks:
            if cancel.is_set():
                break
            if chunk.size:
                hand_over(np.asarray(chunk, dtype="<i2").tobytes())
            if marks:
                hand_over(marks)
        if not cancel.is_set():
            hand_over(synthesis.finish())
    except InvalidSynthesisRequestError as exc:
        hand_over(exc)
    except Exception as exc:  # as a worker reports a failed job
        hand_over(SynthesisFailedError(f"{type(exc).__name__}: {exc}"))
    finally:
        chunks.close()
    hand_over(_END)


@functools.cache
def shared_decoders() -> DecoderProcesses:
    """Upload decoder processes for every in-process app of this test process, started once (each app would start
    its own otherwise: processes for every test, most of which upload nothing), stopped when the process exits."""
    decoders = DecoderProcesses(UploadSettings())
    decoders.start()
    atexit.register(decoders.stop)
    return decoders


def in_process_app(config: dict[str, Any] | None = None, **backend_options: Any) -> Litestar:
    """The real app for ``config`` (a settings mapping, as YAML would give it), its engines in threads; uploads are
    decoded in real decoder processes, shared by the apps of the test process (:func:`shared_decoders`)."""
    settings = Settings(**(config or {}))

    def factory(name: str, engine: AnyEngineSettings) -> ThreadBackend:
        return ThreadBackend(name, engine, **backend_options)

    return create_app(settings, pool_factory=factory, decoders=shared_decoders())
