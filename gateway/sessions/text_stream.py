"""One realtime session: text arrives in fragments, speech leaves segment by segment as one audio stream.

Two tasks share a session: the receiver reads client events and cuts the text into segments; the speaker
synthesizes the queued segments in order, through one encoder, so that the audio of every segment continues the
same stream. ``response.cancel`` stops the segment in progress (its worker job is cancelled) and drops the rest.

What goes over the wire is the session's dialect's (``gateway/sessions/stream_dialect.py``): this gateway's protocol, or
vLLM-Omni's, chosen by the client's first message. The session tells it what happened, and takes from it the few
rules that differ: vLLM-Omni's segments are files of their own (an encoder each, not one a session), its
``session.close`` drops the text not flushed, and its refused first ``session.config`` ends the session.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.audio import open_encoder
from gateway.sessions.ending import EndedByServer
from gateway.sessions.lanes import PIPELINE_RATE, ErrorTable, Lane, Tally, failure, play, stop
from gateway.sessions.segmenter import SentenceBuffer
from gateway.sessions.session_errors import SessionDrainedError, SessionError
from gateway.sessions.stream_events import (
    InputAppend,
    InputFlush,
    ProtocolError,
    ResponseCancel,
    SessionClose,
    SessionConfig,
    SessionUpdate,
)
from gateway.speech.delivery import AudioClock, speech_usage
from gateway.speech.errors import SpeechError
from gateway.text import Markup, is_ssml

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from litestar.types import ReceiveMessage

    from gateway.audio import AudioEncoder
    from gateway.schemas import SpeechUsage
    from gateway.sessions.dialect import Opened
    from gateway.sessions.stream_dialect import Dialect, Frame, Spoken
    from gateway.sessions.stream_events import ClientEvent, SegmentStatus

__all__ = ["RealtimeSession"]


# Changing it would change the audio stream itself (its container and rate) mid-way, in a dialect whose session is one
# stream. Every segment reaches the session as 24 kHz PCM with its own speed applied, so model, voice and speed may
# change between segments.
_LOCKED_FIELDS = ("response_format",)


_SHUTTING_DOWN = (
    "The server is shutting down: no more text is accepted; the segment being spoken finishes, then "
    "the session closes (1012). Reconnect to go on."
)


@dataclass
class _Segment:
    id: str
    text: str
    clock: AudioClock = field(default_factory=AudioClock)
    """The audio seconds of this segment delivered so far."""
    status: SegmentStatus = "completed"
    characters: int | None = None
    """What the segment was charged (what it made the engine say), once the speech pipeline planned it; ``None``: it
    was refused or cancelled before, and charged nothing."""

    @property
    def audio_seconds(self) -> float:
        return self.clock.seconds

    def usage(self) -> SpeechUsage:
        return speech_usage(self.characters or 0, self.audio_seconds)


class RealtimeSession(EndedByServer):
    """Serves one accepted, authenticated WebSocket until either side closes it."""

    def __init__(
        self,
        opened: Opened,
        *,
        spoken: Spoken,
        first: SessionUpdate | None = None,
        opening: ReceiveMessage | None = None,
    ) -> None:
        """``first``: the first message, when it was read already for the credentials it carried; ``opening``: the
        first message, when it was read already to choose the dialect."""
        super().__init__()  # ``run`` raises what the server ends the session with (revocation, shutdown)
        self.id = opened.session_id
        self._first = first
        self._opening = opening
        settings = opened.settings
        self._spoken = spoken
        """The dialect, chosen by the client's first message: where the session reads and writes the wire."""
        self._max_json_depth = opened.max_json_depth
        """``server.max_json_depth``: deeper messages get an error event, as deeper HTTP bodies get a 400."""
        self._channel = opened.channel(self._busy)
        """The socket: sends within ``send_timeout_s``; idle when no client event came and nothing was queued or
        spoken for ``idle_timeout_s`` (from the last event or the last segment's end); every client message paid for
        in ``budget``."""
        self._speaker = opened.speaker
        self._settings = settings
        self._config = SessionConfig()
        self._buffer = SentenceBuffer(settings.max_segment_chars)
        self._lane: Lane[_Segment] = Lane()
        """The session's one lane: its segments, and the markers of the flushes served, in order."""
        self._encoder: AudioEncoder | None = None
        self._streaming = False
        """Set by the first segment: the fields in ``_LOCKED_FIELDS`` are fixed from then on."""
        self._segment_ids = itertools.count(1)
        self._closing = False
        self._segment_in_hand = False
        """From taking a segment off the queue until its ``audio.done`` is sent: the session is not idle."""
        self._queued_chars = 0
        """Characters of the segments waiting to be spoken: they count against ``max_pending_chars`` too."""
        self._background: set[asyncio.Task[None]] = set()
        self._tally = Tally("segments")
        """Segments that produced audio (completed or cut short), for the session's log line."""

    async def check(self) -> None:
        """Nothing to check before the session opens: its settings come in its messages."""

    async def run(self) -> None:
        """Serve the session; returns when the client closed it or went away.

        Raises:
            SlowClientError: the client stopped taking audio.
            SessionIdleError: the session sat idle for ``realtime.idle_timeout_s``.
            SessionRevokedError: its key was revoked or its tenant deleted.
            SessionDrainedError: the server drained it for a shutdown.
            WebSocketDisconnect: the client went away while the session was sending.
        """
        await self._send_all(self._dialect.session_created(self.id, self._config))
        if self._first is not None:
            await self._update(self._first)
        if self._opening is not None:
            await self._on_message(self._opening)
        speaker = self._lane.start(self._speak_queued(), name=f"realtime-speaker-{self.id}")
        receiver = asyncio.create_task(self._receive(), name=f"realtime-receiver-{self.id}")
        try:
            # The receiver ends when the client leaves; the lane when a session.close has been served (or the
            # session drained); the server ends it when its credentials are revoked.
            await self._until_ended(receiver, speaker)
        finally:
            await stop(*self._lane.tasks, receiver, *self._background)

    def log_fields(self) -> dict[str, Any]:
        return self._tally.fields()

    @property
    def _dialect(self) -> Dialect:
        return self._spoken.current

    # ----------------------------------------------------------------- ended by the server
    def begin_drain(self) -> None:
        """Shutdown: refuse new text, drop what is queued, finish the segment in progress, then end (a queued end
        of session, after it)."""
        if self._draining:
            return
        self._draining = self._closing = True
        self._drop_pending()
        self._lane.close()
        shutting_down = SessionError(503, _SHUTTING_DOWN, code="server_shutting_down")
        notice = asyncio.create_task(self._send(self._dialect.error(shutting_down)))
        self._background.add(notice)
        notice.add_done_callback(_forget_quietly(self._background))

    # ----------------------------------------------------------------- client events
    async def _receive(self) -> None:
        while (message := await self._channel.receive())["type"] != "websocket.disconnect":
            await self._on_message(message)

    async def _on_message(self, message: ReceiveMessage) -> None:
        text = message.get("text")
        if not self._spoken.chosen:  # it came after the route's wait for it: it still chooses
            self._spoken.choose(text if isinstance(text, str) else None)
        try:
            if not isinstance(text, str):
                raise ProtocolError(
                    "Binary frames are not part of this protocol; send JSON text.", code="invalid_event"
                )
            event = self._dialect.parse(text, max_depth=self._max_json_depth)
            if self._draining:
                raise ProtocolError(_SHUTTING_DOWN, code="server_shutting_down", event_id=event.event_id)
            if self._closing:
                raise ProtocolError("The session is closing.", code="session_closing", event_id=event.event_id)
            await self._handle(event)
        except ProtocolError as exc:
            await self._refuse(exc, exc.event_id)

    async def _refuse(self, error: Exception, event_id: str | None) -> None:
        """Say why a client event was refused; the session goes on, unless its dialect ends it then."""
        await self._send(self._dialect.error(error, event_id=event_id))
        if self._dialect.ends_on_error:
            self._close_after_queued()

    def _busy(self) -> bool:
        """A segment is being spoken or waits: a client listening to long speech is not idle."""
        return self._segment_in_hand or bool(self._lane.queued)

    async def _handle(self, event: ClientEvent) -> None:
        if isinstance(event, SessionUpdate):
            await self._update(event)
        elif isinstance(event, InputAppend):
            self._append(event)
        elif isinstance(event, InputFlush):
            self._enqueue(self._buffer.flush())
            self._lane.put(_END_OF_UTTERANCE)
        elif isinstance(event, ResponseCancel):
            self._cancel()
        elif isinstance(event, SessionClose):
            if self._dialect.speaks_held_text_on_close:
                self._enqueue(self._buffer.flush())
            self._buffer.clear()
            self._close_after_queued()

    def _close_after_queued(self) -> None:
        if not self._closing:
            self._closing = True
            self._lane.close()

    async def _update(self, event: SessionUpdate) -> None:
        if event.token is not None:
            raise ProtocolError(
                "Credentials are accepted only in the first message of a session.",
                code="unexpected_token",
                param="token",
                event_id=event.event_id,
            )
        changed = event.changes(self._config) if self._dialect.one_stream else set()
        if self._streaming and (locked := sorted(changed.intersection(_LOCKED_FIELDS))):
            raise ProtocolError(
                f"'{locked[0]}' cannot change once audio has started: it would change the audio "
                "stream itself. Open a new session instead.",
                code="session_locked",
                param=f"session.{locked[0]}",
                event_id=event.event_id,
            )
        config = event.apply(self._config)
        try:
            await self._speaker.check(config.speech_request("-"))
        except SpeechError as refused:  # raised for this check alone: its field is named as the session's setting
            if refused.param is not None:
                refused.param = f"session.{refused.param}"
            await self._refuse(refused, event.event_id)
            return
        self._config = config
        frames = self._dialect.session_updated(self.id, config, event)
        self._buffer.granularity = self._dialect.granularity
        await self._send_all(frames)

    def _append(self, event: InputAppend) -> None:
        # Queued segments count too: a client that appends sentence after sentence and never reads would otherwise
        # grow the queue without bound.
        held = self._buffer.pending_chars + self._queued_chars
        if held + len(event.text) > self._settings.max_pending_chars:
            raise ProtocolError(
                f"The session already holds {held} characters not yet spoken; at most "
                f"{self._settings.max_pending_chars}. Wait for audio.done events before appending more.",
                code="input_buffer_full",
                param="text",
                event_id=event.event_id,
            )
        if is_ssml(event.text):  # SSML is a segment of its own, after what came before: never cut in two
            self._enqueue([*self._buffer.flush(), event.text.strip()])
            return
        self._enqueue(self._buffer.append(event.text))

    def _enqueue(self, texts: list[str]) -> None:
        for text in texts:
            self._queued_chars += len(text)
            self._lane.put(_Segment(f"seg_{next(self._segment_ids)}", text))

    def _cancel(self) -> None:
        """Barge-in: stop the segment in progress, drop the queued ones and the text not yet segmented."""
        self._drop_pending()
        self._lane.cancel()

    def _drop_pending(self) -> None:
        """Drop the text not yet segmented, and mark the queued segments cancelled (reported in order)."""
        self._buffer.clear()
        for segment in self._lane.queued:
            if segment is not _END_OF_UTTERANCE and segment.status != "cancelled":
                segment.status = "cancelled"  # the speaker reports it, in order, without speaking it
                self._queued_chars -= len(segment.text)  # nothing left to speak: it no longer counts

    # ----------------------------------------------------------------- speech
    async def _speak_queued(self) -> None:
        while (segment := await self._lane.next()) is not None:
            if segment is _END_OF_UTTERANCE:
                await self._send_all(self._dialect.utterance_done())
                continue
            if segment.status != "cancelled":  # a cancelled one was discounted when it was cancelled
                self._queued_chars -= len(segment.text)
            self._segment_in_hand = True
            task: asyncio.Task[None] | None = None
            if segment.status != "cancelled":
                try:
                    task = await self._lane.speak(self._speak(segment), name=f"realtime-{segment.id}")
                except asyncio.CancelledError:  # the session ends (client gone): what was spoken still counts
                    self._account(segment)
                    raise
            await self._finish_segment(segment, task)
            self._segment_in_hand = False
            self._channel.active()
        await self._end_stream()

    async def _speak(self, segment: _Segment) -> None:
        """Speak one segment through the speech pipeline (limits, cache, single flight, scheduling, failover, usage)
        as 24 kHz PCM, and encode it into the session's audio stream."""
        self._streaming = True
        await self._send_all(self._dialect.segment_started(segment.id, segment.text, self._config.response_format))
        request = self._config.speech_request(segment.text)
        speaking = self._speaker.speak(request, record_id=f"{self.id}/{segment.id}", markup=Markup.SSML)
        async with await speaking as reply:
            segment.characters = reply.characters
            async for chunk, data in play(reply, segment.clock, self._stream_encoder()):
                if data:
                    await self._send_all(self._dialect.audio(segment.id, data))
                if chunk.words and self._config.word_timestamps:
                    await self._send_all(self._dialect.words(segment.id, reply.alignment.text, chunk.words))

    def _stream_encoder(self) -> AudioEncoder:
        if self._encoder is None:
            self._encoder = open_encoder(self._config.response_format, PIPELINE_RATE)
        return self._encoder

    async def _finish_segment(self, segment: _Segment, task: asyncio.Task[None] | None) -> None:
        """Report how a segment ended, after pushing its last audio out of the encoder."""
        # First: what went out is the tenant's usage even when the segment ended because the client did (too slow
        # to read, gone), which ``_outcome`` raises, and a send below can fail or be cancelled the same way.
        self._account(segment)
        error = _outcome(segment, task, self._dialect.unexpected)
        if tail := self._segment_tail():
            await self._send_all(self._dialect.audio(segment.id, tail))
        if error is not None:
            await self._send(self._dialect.error(error, segment_id=segment.id))
        await self._send_all(self._dialect.segment_done(segment.id, segment.text, segment.status, segment.usage()))

    def _segment_tail(self) -> bytes:
        """The last audio of a segment the encoder holds: drained, where the session is one stream that goes on;
        else finished, the segment's file complete, and the next segment gets an encoder of its own."""
        if self._encoder is None:
            return b""
        if self._dialect.one_stream:
            return self._encoder.drain()
        tail, self._encoder = self._encoder.finish(), None
        return tail

    def _account(self, segment: _Segment) -> None:
        """The session's own tally, for its log line (the tenant's usage is the speech pipeline's)."""
        self._tally.add(segment.audio_seconds)

    async def _end_stream(self) -> None:
        if self._encoder is not None and (tail := self._encoder.finish()):
            await self._send_all(self._dialect.audio(None, tail))
        if self._draining:
            # The shutdown notice goes out before the close, whatever the order the tasks ran in.
            await asyncio.gather(*self._background, return_exceptions=True)
            raise SessionDrainedError  # closed with 1012 by the route
        await self._channel.socket.close(1000, "session closed")

    # ----------------------------------------------------------------- plumbing
    async def _send_all(self, frames: Iterable[Frame]) -> None:
        for frame in frames:
            await self._send(frame)

    async def _send(self, frame: Frame) -> None:
        await self._channel.send(frame)


def _forget_quietly(tasks: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
    """A done-callback: drop the task from ``tasks``; a client gone or too slow just misses the message."""

    def done(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an unread exception would be logged at garbage collection

    return done


_END_OF_UTTERANCE = _Segment("", "")
"""Queued by a flush after its segments: the speaker tells the dialect when it gets there (vLLM-Omni's
``session.done``)."""


def _outcome(segment: _Segment, task: asyncio.Task[None] | None, unexpected: ErrorTable) -> BaseException | None:
    """Set how the segment ended from its task, and return the failure to report, if any (``unexpected``: the
    dialect's table has no words for it).

    Raises:
        SlowClientError, WebSocketDisconnect: the segment failed because the client did; the session ends.
    """
    if task is None or task.cancelled():
        segment.status = "cancelled"
        return None
    exc = task.exception()
    if exc is None:
        return None
    error = failure(exc, f"realtime segment {segment.id}", unexpected)  # raises for a client too slow or gone
    segment.status = "failed"
    return error
