"""Playing a segment, the same in every dialect: the one call to the speech pipeline (:class:`Speaker`), its audio
through the edge encoder with the heard clock advanced (:func:`play`), a failure as the error the dialect reports
(:func:`failure`), the session's tally for its log line (:class:`Tally`), and the teardown of its tasks (:func:`stop`).

A lane (:class:`Lane`) is what speaks one segment after another: one for this gateway's and vLLM-Omni's sessions, one
for each OpenAI response, one for each ElevenLabs context. The kernel owns its mechanics (its queue, its task, barge-in,
teardown); the dialect opens its lanes and says what each item is. Every segment of every lane is spoken here.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from litestar.exceptions import WebSocketDisconnect

from engines.errors import ConsumerTooSlowError
from gateway.audio.formats import AudioFormat, output_sample_rate
from gateway.sessions.session_errors import SlowClientError
from gateway.sessions.streams import SessionStreams
from gateway.speech.contract import Admission, session_record
from gateway.speech.delivery import AudioClock
from gateway.speech.errors import ResponseTruncatedError
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine, Sequence

    from auth import Principal
    from gateway.audio import AudioEncoder
    from gateway.schemas import SpeechRequest
    from gateway.speech.alignment import SpeechChunk
    from gateway.speech.reply import SpeechReply
    from gateway.speech.service import SpeechService
    from gateway.text import Markup

__all__ = ["PIPELINE_RATE", "ErrorTable", "HeardClock", "Lane", "Speaker", "Tally", "cancel", "failure", "play", "stop"]

logger = naming.logger("realtime")

T = TypeVar("T")

PIPELINE_RATE = output_sample_rate(AudioFormat.PCM)
"""Every segment reaches a session as 24 kHz PCM, its speed applied; the dialect's encoder makes its format."""
HeardClock = AudioClock
"""A segment's audio seconds delivered so far, as the listener hears them (the speech pipeline's own clock)."""


class Speaker:
    """A session's one way to the speech pipeline: every segment of every dialect is spoken by :meth:`speak`, in the
    session that counted as the tenant's request and holds its stream, so limits, usage, cache, fair scheduling,
    custom voices and failover hold on every socket as on ``POST /v1/audio/speech``; and each segment holds one of
    the tenant's streams while it speaks (:class:`~gateway.sessions.streams.SessionStreams`: the session's own, or one
    more), so that lanes speaking side by side count as the streams they are."""

    def __init__(self, speech: SpeechService, principal: Principal) -> None:
        self._speech = speech
        self._principal = principal
        self._streams = SessionStreams(speech.stream_leases(principal.tenant))

    async def check(self, request: SpeechRequest) -> None:
        """Whether ``request`` could be served (model, voice, what the tenant may use).

        Raises:
            SpeechError: it could not (``gateway/speech/errors.py``; the dialect's table says it on its wire).
        """
        await self._speech.check(self._principal, request)

    def model_voice(self, model: str) -> str | None:
        """A voice the model's engine lists (``None``: none yet), to check a model whose voices come later.

        Raises:
            UnknownModelError: an unknown model (the dialect's table says it on its wire).
        """
        return self._speech.model_voice(model)

    async def speak(
        self,
        request: SpeechRequest,
        *,
        record_id: str,
        markup: Markup,
        dictionaries: Sequence[tuple[str, str | None]] | None = None,
    ) -> SpeechReply:
        """Start speaking one segment, once it holds a stream (it may wait its turn); the caller owns the reply
        (``async with``: its release frees the stream). ``record_id`` names it in a truncation's warning (it is not
        logged otherwise: the session has one line of its own)."""
        return await self._speech.speak(
            self._principal,
            request,
            session_record(record_id),
            admission=Admission.IN_SESSION,  # the session was admitted and counted as the tenant's request
            markup=markup,
            dictionaries=dictionaries,
            stream=self._streams.segment(),
        )


async def play(
    reply: SpeechReply, clock: HeardClock, encoder: AudioEncoder | None
) -> AsyncIterator[tuple[SpeechChunk, bytes]]:
    """The reply's pieces as heard: each with its audio through ``encoder`` (as it came, without one; ``b""`` for a
    piece of words only), ``clock`` advanced by its duration first."""
    async for chunk in reply.timed():
        if not chunk.audio:
            yield chunk, b""
            continue
        clock.seconds += len(chunk.audio) / (2 * PIPELINE_RATE)
        yield chunk, chunk.audio if encoder is None else encoder.encode(chunk.audio)


class Lane(Generic[T]):
    """A lane of a session: what it speaks, one item after another, in a task of its own. The kernel owns its
    mechanics (the queue, the lane's task and its end, barge-in, teardown); the dialect says what an item is, how one
    is spoken and how it is rendered.

    A session has one lane (this gateway's and vLLM-Omni's: segments of one text stream), one a response (OpenAI
    Realtime: its lane's task speaks the response, nothing is queued) or N (ElevenLabs: one a context, its pieces
    queued). A lane that speaks each item in a task of its own (:meth:`speak`) can stop the item in progress
    (:meth:`cancel`) and go on; :meth:`stop` stops the whole lane.
    """

    def __init__(self) -> None:
        self.queued: deque[T] = deque()
        """What waits to be spoken, in order: the dialect may drop or mark what waits (a cancel, a context closed)."""
        self.closed = False
        """Whether the lane ends once nothing waits (:meth:`close`)."""
        self.task: asyncio.Task[None] | None = None
        """The lane's own task (:meth:`start`)."""
        self.current: asyncio.Task[None] | None = None
        """The item being spoken, when :meth:`speak` speaks it in a task of its own."""
        self._wake = asyncio.Event()

    def start(
        self, run: Coroutine[Any, Any, None], *, name: str, ended: Callable[[asyncio.Task[None]], None] | None = None
    ) -> asyncio.Task[None]:
        """Run the lane in a task of its own: ``run`` takes its items (:meth:`next`) until it is closed, or is the
        lane's one item; ``ended`` is called with the task once it ended (:meth:`EndedByServer._lane_ended
        <gateway.sessions.ending.EndedByServer._lane_ended>`: one that raised ends the session)."""
        task = self.task = asyncio.create_task(run, name=name)
        if ended is not None:
            task.add_done_callback(ended)
        return task

    @property
    def running(self) -> bool:
        """Whether the lane's task has started and not ended."""
        return self.task is not None and not self.task.done()

    @property
    def tasks(self) -> tuple[asyncio.Task[None] | None, asyncio.Task[None] | None]:
        """The lane's tasks, for the session's teardown (:func:`stop`): the item in progress, then the lane."""
        return self.current, self.task

    def put(self, *items: T) -> None:
        """Queue ``items`` after what waits."""
        self.queued.extend(items)
        self._wake.set()

    def close(self) -> None:
        """End the lane once what waits has been spoken."""
        self.closed = True
        self._wake.set()

    def wake(self) -> None:
        """Let the lane look again at what waits (the dialect changed it)."""
        self._wake.set()

    async def next(self) -> T | None:
        """The next item once one waits; ``None`` once the lane is closed and nothing waits."""
        while not self.queued and not self.closed:
            self._wake.clear()
            await self._wake.wait()
        return self.queued.popleft() if self.queued else None

    async def speak(self, segment: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Speak ``segment`` in a task of its own until it ends, fails or is cancelled (:meth:`cancel`, barge-in:
        the segment in progress stops, its engine job with it, and not the lane); the ended task says which.

        Raises:
            asyncio.CancelledError: the lane itself was cancelled (the session ends); the segment is cancelled too.
        """
        task = self.current = asyncio.create_task(segment, name=name)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self.current = None
        return task

    def cancel(self) -> None:
        """Stop the segment in progress (:meth:`speak`), if any; the lane goes on."""
        if self.current is not None:
            self.current.cancel()

    async def stop(self) -> bool:
        """Barge-in on the whole lane: cancel its task and wait until it stopped; whether it was cancelled
        (``False``: it ended on its own meanwhile, and said so)."""
        return self.task is not None and await cancel(self.task)


async def cancel(task: asyncio.Task[None]) -> bool:
    """Barge-in on a segment's task: cancel it and wait until it stopped; whether it was cancelled (``False``: it
    ended on its own meanwhile, and said so)."""
    task.cancel()
    await asyncio.wait({task})
    return task.cancelled()


ErrorTable = Callable[[BaseException], bool]
"""Whether a dialect's error table has no words of its own for a failure (a bug, answered as an internal error)."""


def failure(exc: BaseException, what: str, unexpected: ErrorTable) -> BaseException:
    """What a segment that failed with ``exc`` reports to its client, for the dialect's table to say: the failure
    itself (a speech domain error, a :class:`~gateway.sessions.session_errors.SessionError`...), the engine's own
    error for a response cut short; one that the table finds ``unexpected`` is logged with its traceback (``what``
    names the segment).

    Raises:
        SlowClientError: the segment's audio backlog overflowed, or a send timed out: the client is not reading.
        WebSocketDisconnect: the client left. Either way the session ends.
    """
    if isinstance(exc, ResponseTruncatedError) and isinstance(exc.__cause__, Exception):
        exc = exc.__cause__  # the engine's own error says what happened
    if isinstance(exc, SlowClientError | WebSocketDisconnect):
        raise exc
    if isinstance(exc, ConsumerTooSlowError):
        raise SlowClientError from exc
    if unexpected(exc):
        logger.error("%s failed", what, exc_info=exc)
    return exc


@dataclass
class Tally:
    """The session's own count for its log line (the tenant's usage is the speech pipeline's): segments heard, if
    only in part, and their seconds."""

    name: str
    """What a segment is called in the log line (``segments``, ``responses``, ``pieces``)."""
    count: int = 0
    audio_seconds: float = 0.0

    def add(self, seconds: float) -> None:
        if seconds > 0:
            self.count += 1
            self.audio_seconds += seconds

    def fields(self) -> dict[str, int | float]:
        return {self.name: self.count, "audio_seconds": round(self.audio_seconds, 3)}


async def stop(*tasks: asyncio.Task[None] | None) -> None:
    """A session's teardown: cancel its tasks, and wait until they have ended (whatever they raised)."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
