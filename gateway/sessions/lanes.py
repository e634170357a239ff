"""Playing a segment, the same in every dialect: the one call to the speech pipeline (:class:`Speaker`), its audio
through the edge encoder with the heard clock advanced (:func:`play`), a failure as the error the dialect reports
(:func:`failure`), the session's tally for its log line (:class:`Tally`), and the teardown of its tasks (:func:`stop`).

A lane is what speaks one segment after another: one for this gateway's and vLLM-Omni's sessions, one for each OpenAI
response, one for each ElevenLabs context. The dialect keeps its lanes; every segment of every lane is spoken here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from litestar.exceptions import WebSocketDisconnect

from engines.errors import ConsumerTooSlowError
from gateway.audio.formats import AudioFormat, output_sample_rate
from gateway.sessions.session_errors import SlowClientError
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

PIPELINE_RATE = output_sample_rate(AudioFormat.PCM)
"""Every segment reaches a session as 24 kHz PCM, its speed applied; the dialect's encoder makes its format."""
HeardClock = AudioClock
"""A segment's audio seconds delivered so far, as the listener hears them (the speech pipeline's own clock)."""


class Speaker:
    """A session's one way to the speech pipeline: every segment of every dialect is spoken by :meth:`speak`, in the
    session that counted as the tenant's request and holds its stream, so limits, usage, cache, fair scheduling,
    custom voices and failover hold on every socket as on ``POST /v1/audio/speech``."""

    def __init__(self, speech: SpeechService, principal: Principal) -> None:
        self._speech = speech
        self._principal = principal

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
        """Start speaking one segment; the caller owns the reply (``async with``). ``record_id`` names it in a
        truncation's warning (it is not logged otherwise: the session has one line of its own)."""
        return await self._speech.speak(
            self._principal,
            request,
            session_record(record_id),
            admission=Admission.IN_SESSION,  # the session was admitted and counted as the tenant's request
            markup=markup,
            dictionaries=dictionaries,
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


class Lane:
    """Speaks one segment at a time, each in a task of its own, so that :meth:`cancel` (barge-in) stops the segment
    in progress, its engine job with it, and not the lane that waits for it."""

    def __init__(self) -> None:
        self.current: asyncio.Task[None] | None = None
        """The segment being spoken."""

    async def speak(self, segment: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Speak ``segment`` until it ends, fails or is cancelled; the ended task says which.

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
        """Stop the segment in progress, if any."""
        if self.current is not None:
            self.current.cancel()


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
