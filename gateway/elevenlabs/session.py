"""One ElevenLabs text-to-speech WebSocket session: text in, per context, and each context's audio out.

:class:`ElevenLabsStreamSession` serves ``multi-stream-input``; :class:`SingleContextSession`, ``stream-input``: the
same session with one implicit context (below).

Messages, field for field as the ``elevenlabs`` SDK (2.78) types them (``SendMessageMulti``,
``ReceiveMessageMulti``) and Pipecat's ``ElevenLabsTTSService`` sends and reads them:

- in: ``{"text": " ", "context_id", "voice_settings"?, "pronunciation_dictionary_locators"?}`` opens a context (its
  locators: the tenant's own dictionaries its text is spoken with; absent, the tenant's default dictionaries; a
  sixth open at once ends the socket, ``max_active_conversations`` then 1008, as ElevenLabs' server ends it);
  ``{"text", "context_id"}`` appends text, spoken sentence by sentence as it completes (:class:`SentenceBuffer`),
  except a message with markup in it (a ``<break time="1s"/>``; SSML with ``enable_ssml_parsing``), spoken as one
  piece of its own after what came before; ``{"context_id", "flush": true}`` speaks what is buffered;
  ``{"context_id", "close_context": true}`` closes it; ``{"text": ""}`` keeps the socket alive, and the context it
  names (a context that hears nothing for the inactivity timeout is closed as ``close_context`` closes it, as on
  ElevenLabs); ``{"close_socket": true}`` flushes every context and closes it, then the socket.
- out: ``{"audio", "isFinal": null, "contextId", "alignment", "normalizedAlignment"}`` per piece of audio (alignment
  ``{chars, charStartTimesMs, charDurationsMs}`` counted from the end of the context's previous alignment, which is
  where this message's audio starts: Pipecat adds each message's last end to its clock; a piece's last alignment ends
  with a space, as ElevenLabs' does, :class:`StreamInputPiece`), then
  ``{"isFinal": true, "contextId"}`` once a closed context's audio has ended.

Closing a context drops its text that no flush covered and stops the audio of that text at once (the engine's job is
cancelled with it): Pipecat's barge-in. What a flush covered is still spoken, then ``isFinal`` follows, as ElevenLabs
documents ("if it has already been set to flush it will continue flushing"): Pipecat ends every turn with a flush and
a ``close_context`` at once, and expects the turn's audio to the end.

With ``auto_mode`` (the URL's), each message's text is spoken as it arrives, without waiting for its sentence to end
(ElevenLabs: "disabling chunk schedule and buffers", for clients that send whole sentences or phrases); a flush still
decides what ``close_context`` spares.

``stream-input`` (``SendMessage``, ``ReceiveMessage`` in the SDK) is one context that needs no opening: every message
speaks to it, whatever ``context_id`` it carries; ``{"text": ""}`` ends the input (what was sent is spoken, ``isFinal``
follows, then the server closes the socket with 1000, which the SDK's ``convert_realtime`` waits for); messages out
carry no ``contextId``.

Every piece of text goes through the one speech pipeline (:meth:`SpeechService.speak`, as 24 kHz PCM, ``IN_SESSION``),
encoded at the edge into ``output_format``. Each context speaks its pieces in order, one at a time; contexts speak
side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from litestar.exceptions import WebSocketDisconnect

from gateway.audio import open_encoding
from gateway.elevenlabs.socket_wire import (
    StreamInputPiece,
    audio_message,
    dictionary_locators,
    error_message,
    invalid,
    parse_message,
    socket_error,
    too_many_contexts,
    unexpected,
    voice_settings_of,
)
from gateway.elevenlabs.wire import SocketSpeechOptions, TextToSpeechRequest, VoiceSettings, text_markup
from gateway.http.errors import OpenAIError
from gateway.sessions.ending import EndedByServer
from gateway.sessions.lanes import PIPELINE_RATE, HeardClock, Lane, Tally, failure, play, stop
from gateway.sessions.segmenter import SentenceBuffer
from gateway.sessions.serving import POLICY_VIOLATION, SessionRefusedError
from gateway.sessions.session_errors import SessionDrainedError, SessionIdleError, SlowClientError
from gateway.speech.alignment import CharacterCursor
from gateway.speech.errors import SpeechError

if TYPE_CHECKING:
    from collections import deque

    from gateway.audio import AudioEncoder, Encoding
    from gateway.elevenlabs.socket_wire import PieceRenderer
    from gateway.schemas import SpeechRequest
    from gateway.sessions.dialect import Opened
    from gateway.speech.alignment import WordTime

__all__ = [
    "DEFAULT_CONTEXT_ID",
    "MAX_CONTEXTS",
    "MAX_OPEN_TAG_CHARS",
    "ElevenLabsStreamSession",
    "SessionContext",
    "SingleContextSession",
]


MAX_CONTEXTS = 5
"""Contexts a socket may have open at once, as on ElevenLabs; opening another ends the socket, as there."""
DEFAULT_CONTEXT_ID = "default"
"""The context of a message that names none."""
_MARKUP = re.compile(r"<[A-Za-z/!?]")
"""A tag in a message: the message is then spoken as one piece, read as its markup (break tags; SSML when asked)."""
_OPEN_TAG = re.compile(r"<[A-Za-z/!?][^>]*$")
"""A tag the text ends in before its ``>``: a language model's tokens split a tag anywhere."""
MAX_OPEN_TAG_CHARS = 256
"""How long a tag is held open waiting for its ``>``; longer, its ``<`` is text."""


@dataclass(eq=False)
class _Context:
    """One context: its text not yet spoken, and its lane (the pieces waiting, the task that speaks them)."""

    id: str
    buffer: SentenceBuffer
    voice_settings: VoiceSettings | None = None
    dictionaries: list[tuple[str, str | None]] | None = None
    """The pronunciation dictionaries its first message named; ``None``: the tenant's defaults."""
    lane: Lane[str] = field(default_factory=Lane)
    flushed: int = 0
    """Of ``pieces``, the first this many are covered by a flush (spoken even once the context closes)."""
    current_flushed: bool = False
    """Whether the piece being spoken is covered by a flush."""
    speaking: bool = False
    encoder: AudioEncoder | None = None
    open_tag: str = ""
    """The text from a tag's ``<`` on, held until a message closes the tag."""
    idle: asyncio.TimerHandle | None = None
    """Its inactivity clock: once it runs out, the server closes the context."""

    @property
    def pieces(self) -> deque[str]:
        """The pieces waiting to be spoken, in order."""
        return self.lane.queued

    @property
    def closing(self) -> bool:
        """Closed by the client: what a flush covered is still spoken, then ``isFinal``."""
        return self.lane.closed


SessionContext = _Context
"""A context, as a dialect on this session sees it."""


class ElevenLabsStreamSession(EndedByServer):
    """Serves one accepted, authenticated ``multi-stream-input`` WebSocket until either side closes it."""

    def __init__(
        self,
        opened: Opened,
        *,
        voice_id: str,
        model_id: str | None,
        encoding: Encoding,
        ssml: bool = False,
        auto_mode: bool = False,
        options: SocketSpeechOptions | None = None,
        first: dict[str, Any] | None = None,
    ) -> None:
        """``first``: the client's first message, when it was read already (for the credentials it carried)."""
        super().__init__()
        self.id = opened.session_id
        self._first = first
        self._options = options or SocketSpeechOptions()
        """The URL's ``seed``, ``language_code`` and ``apply_text_normalization``: every piece of every context."""
        self._markup = text_markup(ssml)
        """Break tags in every piece; the SSML subset too with ``enable_ssml_parsing``."""
        self._channel = opened.channel(self._busy)
        self._speaker = opened.speaker
        self._voice_id = voice_id
        self._model_id = model_id
        self._encoding = encoding
        self._limits = opened.settings
        self._auto_mode = auto_mode
        self._contexts: dict[str, _Context] = {}
        self._expiring: set[asyncio.Task[None]] = set()
        """Contexts being closed for their inactivity."""
        self.contexts_opened = 0
        self._tally = Tally("pieces")

    def speech_request(self, text: str, voice_settings: VoiceSettings | None = None) -> TextToSpeechRequest:
        return self.piece_request(text, self._model_id, voice_settings)

    def piece_request(
        self, text: str, model_id: str | None, voice_settings: VoiceSettings | None
    ) -> TextToSpeechRequest:
        """A piece as the REST body would say it, with the URL's options."""
        return TextToSpeechRequest(
            text=text,
            model_id=model_id,
            voice_settings=voice_settings,
            seed=self._options.seed,
            language_code=self._options.language_code,
            apply_text_normalization=self._options.apply_text_normalization,
        )

    async def check(self) -> None:
        """Check, before the handshake is accepted, that the model and voice can be served.

        Raises:
            SpeechError: a model the tenant may not use, an unknown model or voice.
        """
        await self._speaker.check(self.speech_request("-").speech_request(self._voice_id))

    async def run(self) -> None:
        """Serve the session; returns when the client closed it (or asked to, with ``close_socket``).

        Raises:
            SlowClientError, SessionIdleError, SessionRevokedError, SessionDrainedError, WebSocketDisconnect.
        """
        receiver = asyncio.create_task(self._receive(self._first), name=f"elevenlabs-receiver-{self.id}")
        try:
            await self._until_ended(receiver)
        finally:
            for context in self._contexts.values():
                if context.idle is not None:
                    context.idle.cancel()
            lanes = (task for c in self._contexts.values() for task in c.lane.tasks)
            await stop(receiver, *self._expiring, *lanes)

    def log_fields(self) -> dict[str, Any]:
        return {"voice_id": self._voice_id, "contexts": self.contexts_opened, **self._tally.fields()}

    # ----------------------------------------------------------------- ended by the server
    def _busy(self) -> bool:
        """A context is speaking or has text to speak: a client listening to a long text is not idle."""
        return any(c.speaking or c.pieces for c in self._contexts.values())

    # ----------------------------------------------------------------- client messages
    async def _receive(self, first: dict[str, Any] | None) -> None:
        if first is not None and await self._take(first):
            return
        while True:
            try:
                message = await self._channel.receive()
            except SessionIdleError:
                for context in list(self._contexts.values()):  # the socket closes: every context ends with it
                    await self._final(context)
                raise
            if message["type"] == "websocket.disconnect":
                return
            try:
                parsed = parse_message(message)
            except OpenAIError as error:
                await self._send(error_message(error))
                continue
            if await self._take(parsed):
                return

    async def _take(self, message: dict[str, Any]) -> bool:
        """Handle one message (a bad one is answered, and the session goes on); whether it closed the socket."""
        try:
            if self._ends_socket(message):
                await self._close_socket()
                return True
            await self._handle(message)
        except (OpenAIError, SpeechError) as error:
            await self._send(error_message(socket_error(error)))
        return False

    # The dialect: what the single-context session changes.
    def _ends_socket(self, message: dict[str, Any]) -> bool:
        return message.get("close_socket") is True

    def _context_id(self, message: dict[str, Any]) -> str:
        """The context a message is for: its ``context_id``, or the default one.

        Raises:
            OpenAIError: not a context id (400).
        """
        context_id = message.get("context_id", DEFAULT_CONTEXT_ID)
        if not isinstance(context_id, str) or not context_id or len(context_id) > 256:
            raise invalid("context_id must be a string of 1 to 256 characters.")
        return context_id

    def _tag(self, context_id: str) -> dict[str, Any]:
        """What names the context in a message out."""
        return {"contextId": context_id}

    async def _handle(self, message: dict[str, Any]) -> None:
        context_id = self._context_id(message)
        text = message.get("text")
        if text is not None and not isinstance(text, str):
            raise invalid("text must be a string.")
        if (named := self._contexts.get(context_id)) is not None:
            self._touch(named)  # any message for a context, a keep-alive too, restarts its inactivity clock
        if message.get("close_context") is True:
            if named is not None:
                await self._close(named)
            return
        flush = message.get("flush") is True
        if text == "" and not flush:
            return  # keep-alive: its arrival reset the inactivity clock
        if self._draining:
            raise OpenAIError(503, "The server is shutting down: reconnect to go on.", code="server_shutting_down")
        context = self._contexts.get(context_id)
        if context is None:
            if text is None:
                raise invalid(f"Context {context_id} is not open: open it with a text message first.")
            context = self._open(context_id)
            context.dictionaries = dictionary_locators(message.get("pronunciation_dictionary_locators"))
        if message.get("voice_settings") is not None:
            context.voice_settings = voice_settings_of(message["voice_settings"])
        self._add(context, text or "", flush=flush)

    def _add(self, context: _Context, text: str, *, flush: bool) -> None:
        """Append ``text`` (its completed sentences wait to be spoken), then, on ``flush`` (or in ``auto_mode``), all
        that is held."""
        pieces: list[str] = []
        text = self._close_tags(context, text, flush=flush)
        if text:
            if context.buffer.pending_chars + len(context.open_tag) + len(text) > self._limits.max_pending_chars:
                raise OpenAIError(
                    400,
                    f"Context {context.id} holds over {self._limits.max_pending_chars} characters not yet spoken: "
                    "flush it, or wait for its audio.",
                    code="max_pending_chars_exceeded",
                )
            # A message with markup is a piece of its own (after what came before): no tag is cut between two.
            markup = _MARKUP.search(text) is not None
            pieces = [*context.buffer.flush(), text.strip()] if markup else context.buffer.append(text)
        if flush or (self._auto_mode and text):
            pieces += context.buffer.flush()
        context.lane.put(*pieces)
        if flush:
            context.flushed = len(context.pieces)
            context.current_flushed = context.current_flushed or context.speaking

    @staticmethod
    def _close_tags(context: _Context, text: str, *, flush: bool) -> str:
        """``text`` after the tag the context held open, less a tag it leaves open (held until a message closes it,
        :data:`MAX_OPEN_TAG_CHARS` at most): a tag split across messages is read whole, never spoken as text."""
        text, context.open_tag = context.open_tag + text, ""
        opened = _OPEN_TAG.search(text)
        if opened is None or flush or len(text) - opened.start() > MAX_OPEN_TAG_CHARS:
            return text
        context.open_tag = text[opened.start() :]
        return text[: opened.start()]

    def _flush(self, context: _Context) -> None:
        """Speak all that ``context`` holds, as a flush does."""
        self._add(context, "", flush=True)

    def _open(self, context_id: str) -> _Context:
        """A new context.

        Raises:
            SessionRefusedError: over :data:`MAX_CONTEXTS`: ElevenLabs' server sends ``max_active_conversations`` and
                closes the socket with 1008, and so does the session.
        """
        if len(self._contexts) >= MAX_CONTEXTS:
            raise SessionRefusedError(too_many_contexts(MAX_CONTEXTS), POLICY_VIOLATION)
        context = _Context(context_id, SentenceBuffer(self._limits.max_segment_chars))
        context.lane.start(
            self._speak_context(context), name=f"elevenlabs-{self.id}-{context_id}", ended=self._lane_ended
        )
        self._contexts[context_id] = context
        self.contexts_opened += 1
        self._touch(context)
        return context

    def _touch(self, context: _Context) -> None:
        """Restart the context's inactivity clock (``inactivity_timeout``, the socket's idle timeout): once it runs
        out, the server closes the context as the client's ``close_context`` would, as ElevenLabs does."""
        if context.idle is not None:
            context.idle.cancel()
        loop = asyncio.get_running_loop()
        context.idle = loop.call_later(self._limits.idle_timeout_s, self._expire, context)

    def _expire(self, context: _Context) -> None:
        """The context's inactivity clock ran out: close it, unless it is speaking (then it is not idle)."""
        if self._contexts.get(context.id) is not context or context.closing:
            return
        if context.speaking or context.pieces:
            self._touch(context)
            return
        task = asyncio.create_task(self._close(context), name=f"elevenlabs-{self.id}-{context.id}-idle")
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _close(self, context: _Context) -> None:
        """The client's ``close_context``."""
        await self._close_context(context.id)

    async def _close_context(self, context_id: str) -> None:
        """Drop the context's text that no flush covered (stopping its audio at once); what a flush covered is still
        spoken; ``isFinal`` follows its last audio."""
        context = self._contexts.get(context_id)
        if context is None or context.closing:
            return
        context.buffer.clear()
        context.open_tag = ""
        while len(context.pieces) > context.flushed:
            context.pieces.pop()
        context.lane.close()
        # Barge-in on a piece no flush covered: nothing after it is either; the engine's job is cancelled with it.
        if context.speaking and not context.current_flushed and await context.lane.stop():
            await self._final(context)

    async def _close_socket(self) -> None:
        """ElevenLabs' ``close_socket``, which "flushes all contexts": every context speaks what it holds, then is
        closed (``isFinal`` after its audio); then the socket."""
        for context in list(self._contexts.values()):
            if not context.closing:
                self._flush(context)
            await self._close_context(context.id)
        tasks = [c.lane.task for c in self._contexts.values() if c.lane.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        with contextlib.suppress(WebSocketDisconnect, OSError):
            await self._channel.socket.close(1000)

    # ----------------------------------------------------------------- speaking
    async def _speak_context(self, context: _Context) -> None:
        """Speak the context's pieces in order, one at a time, until it is closed and has nothing left."""
        while (text := await context.lane.next()) is not None:
            context.current_flushed = context.flushed > 0
            context.flushed = max(0, context.flushed - 1)
            context.speaking = True
            try:
                await self._speak(context, text)
            except (SlowClientError, WebSocketDisconnect, asyncio.CancelledError):
                raise
            except Exception as exc:  # reported to the client; the context goes on
                await self._send(error_message(socket_error(failure(exc, "elevenlabs context", unexpected))))
            finally:
                context.speaking = False
                context.current_flushed = False
        await self._final(context)

    async def _speak(self, context: _Context, text: str) -> None:
        request = self._piece_request(context, text)
        if context.encoder is None:
            context.encoder = open_encoding(self._encoding, PIPELINE_RATE)
        encoder = context.encoder
        render = self._piece_renderer(context)
        words: list[WordTime] = []
        clock = HeardClock()
        try:
            speaking = self._speaker.speak(
                request,
                record_id=f"{self.id}/{context.id}",
                markup=self._markup,
                dictionaries=context.dictionaries,
            )
            async with await speaking as reply:
                cursor = CharacterCursor(reply.alignment.text)  # the text spoken: markup read, not said
                async for chunk, data in play(reply, clock, encoder):
                    words.extend(chunk.words)
                    run = cursor.advance(words) if chunk.words else None
                    for message in render.audio(data, run, clock.seconds):
                        await self._send(message)
                run = cursor.advance(words, audio_s=clock.seconds)
                tail = encoder.drain()
                for message in render.end(tail, run, clock.seconds, encoder.drained_s):
                    await self._send(message)
        finally:
            self._tally.add(clock.seconds)

    # Extension points of a dialect on this session (``dialogue_socket.py``): a piece's request, its messages out, and
    # a context's last ones.
    def _piece_request(self, context: _Context, text: str) -> SpeechRequest:
        """The request that speaks one piece of ``context``'s text."""
        return self.speech_request(text, context.voice_settings).speech_request(self._voice_id)

    def _piece_renderer(self, context: _Context) -> PieceRenderer:
        """What renders one piece's audio and alignment as messages out."""
        return StreamInputPiece(self._tag(context.id))

    def _final_messages(self, context: _Context, tail: bytes) -> list[str]:
        """A closed context's last messages: the audio its encoder held, then ``isFinal``."""
        tag = self._tag(context.id)
        audio = [audio_message(tag, tail, None)] if tail else []
        return [*audio, json.dumps({"isFinal": True, **tag})]

    async def _final(self, context: _Context) -> None:
        """The context's last audio (what its encoder holds), then ``isFinal``; it is closed (once: its inactivity and
        the socket's may end it at the same time)."""
        if self._contexts.get(context.id) is not context:
            return
        del self._contexts[context.id]
        if context.idle is not None:
            context.idle.cancel()
        tail = context.encoder.finish() if context.encoder is not None else b""
        for message in self._final_messages(context, tail):
            await self._send(message)
        if self._draining and not self._busy():
            self._end(SessionDrainedError())

    # ----------------------------------------------------------------- plumbing
    async def _send(self, text: str) -> None:
        await self._channel.send(text)


class SingleContextSession(ElevenLabsStreamSession):
    """Serves one ``stream-input`` WebSocket: the multi-context session with one context, which every message speaks
    to; ``{"text": ""}`` (without ``flush``) ends the input."""

    def _ends_socket(self, message: dict[str, Any]) -> bool:
        end_of_input = message.get("text") == "" and message.get("flush") is not True
        return end_of_input or super()._ends_socket(message)

    def _context_id(self, message: dict[str, Any]) -> str:
        return DEFAULT_CONTEXT_ID

    def _tag(self, context_id: str) -> dict[str, Any]:
        return {}

    def _touch(self, context: _Context) -> None:
        """No clock of its own: the socket's inactivity timeout is its one context's."""
