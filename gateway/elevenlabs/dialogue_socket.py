"""ElevenLabs' Text-to-Dialogue WebSockets, ``/v1/text-to-dialogue/multi-stream-input`` (Pipecat's
``ElevenLabsDialogueTTSService``, LiveKit's ``elevenlabs.TTS`` with an ``eleven_v3``/``eleven_v4`` model) and the
single-context ``…/stream-input``: a dialect on the text-to-speech socket's session (``session.py``), whose contexts,
sentence buffers, speaking, cancellation and alignment it reuses; only the messages in and out differ.

Messages, field for field as the ``elevenlabs`` SDK (2.78) types them (``TextToDialogueWebsocketClientMessageMulti``,
``…AudioChunkMulti``, ``…FinalMulti``, ``…FinalAudioForTurnMulti``):

- in: ``{"context_id", "voices": [...], "voice_settings"?, "pronunciation_dictionary_locators"?}`` opens a context
  with the voices it may speak in (1 to 10; a context is registered once); ``{"context_id", "inputs": [{"text",
  "voice_id", "new_turn"?}], "flush"?}`` appends lines, each in one of its voices: a line in another voice than the one
  before, or with ``new_turn``, first speaks what is held (a piece is one voice's); ``{"context_id", "flush": true}``
  speaks what is held; ``{"context_id", "close_context": true}`` speaks what is held, then ``is_final``;
  ``{"context_id", "keep_alive": true}`` resets the context's idle clock; ``{"close_socket": true}`` closes every
  context as ``close_context`` does, then the socket. A context that hears nothing for ``inactivity_timeout`` seconds
  (20 by default) is closed by the server, as ElevenLabs does (LiveKit sends keep-alives every 10 s for that).
- out: ``{"audio", "is_final": false, "context_id", "alignment", "normalized_alignment"}`` (alignment in snake case,
  ``{chars, char_start_times_ms, char_durations_ms}``), ``{"is_final_audio_for_turn": true, "context_id"}`` after each
  piece, ``{"is_final": true, "context_id"}`` once a closed context's audio has ended; an error is ``{"message",
  "error", "code", "context_id"}``.

Alignment restarts at zero in every message, and the two clients keep their clocks differently: LiveKit advances its
by each message's audio (bytes), Pipecat by each alignment's end. So an alignment spans exactly the audio of its
message: it holds the characters that start in that audio, the last one's end cut to the audio's end; a piece's last
alignment ends with a space that lasts to the end of its audio, as ElevenLabs' text-to-speech sockets end every
generation's (Pipecat completes a word at the space after it); audio no character known covers is owed, and the next
alignment is counted from where it began (Pipecat's clock stays exact; LiveKit's is late by that audio for one message,
never cumulatively).

``stream-input`` is the same with one context, which its first message opens with ``voices``; messages carry no
``context_id``; ``close_socket`` (or the end of the input) speaks what is held, ``is_final`` follows, and the server
closes the socket with 1000.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket

from gateway.elevenlabs.session import DEFAULT_CONTEXT_ID, ElevenLabsStreamSession
from gateway.elevenlabs.socket_wire import (
    NO_CHARACTERS,
    dictionary_locators,
    error_message,
    followed_by_space,
    invalid,
    socket_error,
    voice_settings_of,
)
from gateway.elevenlabs.timestamps import PendingCharacters
from gateway.elevenlabs.websocket import serve_session
from gateway.elevenlabs.wire import DEFAULT_DIALOGUE_MODEL_ID, MAX_DIALOGUE_VOICES, TextToSpeechRequest, VoiceSettings
from gateway.http.errors import OpenAIError
from gateway.speech.errors import SpeechError

if TYPE_CHECKING:
    from gateway.elevenlabs.session import SessionContext
    from gateway.elevenlabs.socket_wire import PieceRenderer
    from gateway.schemas import SpeechRequest
    from gateway.speech.alignment import CharacterTimes

__all__ = [
    "DIALOGUE_MULTI_STREAM_PATH",
    "DIALOGUE_STREAM_INPUT_PATH",
    "DialogueSession",
    "SingleDialogueSession",
    "dialogue_multi_stream_input",
    "dialogue_stream_input",
]

DIALOGUE_MULTI_STREAM_PATH = "/v1/text-to-dialogue/multi-stream-input"
DIALOGUE_STREAM_INPUT_PATH = "/v1/text-to-dialogue/stream-input"


@websocket(DIALOGUE_MULTI_STREAM_PATH, name="elevenlabs_dialogue_multi_stream_input")
async def dialogue_multi_stream_input(socket: WebSocket[Any, Any, Any]) -> None:
    """ElevenLabs' multi-context Text-to-Dialogue WebSocket: the messages are in ``docs/elevenlabs.md``."""
    await serve_session(socket, "", DialogueSession, DIALOGUE_MULTI_STREAM_PATH)


@websocket(DIALOGUE_STREAM_INPUT_PATH, name="elevenlabs_dialogue_stream_input")
async def dialogue_stream_input(socket: WebSocket[Any, Any, Any]) -> None:
    """ElevenLabs' single-context Text-to-Dialogue WebSocket: the messages are in ``docs/elevenlabs.md``."""
    await serve_session(socket, "", SingleDialogueSession, DIALOGUE_STREAM_INPUT_PATH)


class _Line(str):
    """A piece of a context's text, with the voice that says it."""

    voice_id: str

    def __new__(cls, text: str, voice_id: str) -> _Line:
        line = super().__new__(cls, text)
        line.voice_id = voice_id
        return line


@dataclass
class _Cast:
    """What a dialogue context adds to a session's: its voices, the one speaking now and its clock."""

    voices: list[str]
    current: str
    owed_s: float = 0.0
    """Audio sent since the end of the last alignment: the next one is counted from where it began."""


class DialogueSession(ElevenLabsStreamSession):
    """Serves one accepted, authenticated Text-to-Dialogue ``multi-stream-input`` WebSocket."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._casts: dict[str, _Cast] = {}

    def speech_request(self, text: str, voice_settings: VoiceSettings | None = None) -> TextToSpeechRequest:
        return self.piece_request(text, self._model_id or DEFAULT_DIALOGUE_MODEL_ID, voice_settings)

    async def check(self) -> None:
        """Check, before the handshake is accepted, that the model can be served (its voices come per context).

        Raises:
            SpeechError: a model the tenant may not use, or an unknown model (an engine that does not list its voices
                yet: the first voice registered finds out).
        """
        request = self.speech_request("-")
        voice = self._speaker.model_voice(request.model_id or DEFAULT_DIALOGUE_MODEL_ID)  # 404: unknown
        if voice is not None:  # any of its voices: the model is what is checked here
            await self._speaker.check(request.speech_request(voice))

    # ----------------------------------------------------------------- messages in
    async def _handle(self, message: dict[str, Any]) -> None:
        """Handle one message; an error names the context it was for, which LiveKit fails with it."""
        try:
            await self._handle_dialogue(message)
        except (OpenAIError, SpeechError) as error:
            await self._send(self._error(socket_error(error), message))

    def _error(self, error: OpenAIError, message: dict[str, Any]) -> str:
        context_id = message.get("context_id")
        if not isinstance(context_id, str) or not self._tag(context_id):
            return error_message(error)
        return json.dumps({**json.loads(error_message(error)), "context_id": context_id})

    async def _handle_dialogue(self, message: dict[str, Any]) -> None:
        context_id = self._context_id(message)
        if message.get("voices") is not None:
            await self._register(context_id, message)
        context = self._contexts.get(context_id)
        cast = self._casts.get(context_id)
        if context is None or cast is None:
            raise invalid(
                f"Context {context_id} is not open: open it with its `voices` first.", "context_not_registered"
            )
        self._touch(context)
        if message.get("close_context") is True:
            await self._close(context)
            return
        inputs = _inputs(message.get("inputs"))
        flush = message.get("flush") is True
        if not inputs and not flush:
            return  # a keep-alive, or a registration alone
        if context.closing:
            raise invalid(f"Context {context_id} is closing: open another one.", "context_closing")
        if self._draining:
            raise OpenAIError(503, "The server is shutting down: reconnect to go on.", code="server_shutting_down")
        for text, voice_id, new_turn in inputs:
            self._line(context, cast, text, voice_id, new_turn=new_turn)
        if flush:
            self._flush(context)

    async def _register(self, context_id: str, message: dict[str, Any]) -> None:
        """Open a context with the voices it may speak in (each checked as a request would be).

        Raises:
            OpenAIError: registered already, no voices or too many, a voice or setting that cannot be served.
        """
        if context_id in self._contexts:
            raise invalid(f"Context {context_id} is open already: its voices are registered once.", "context_exists")
        voices = message["voices"]
        if (
            not isinstance(voices, list)
            or not 1 <= len(voices) <= MAX_DIALOGUE_VOICES
            or not all(isinstance(v, str) and 0 < len(v) <= 256 for v in voices)
        ):
            raise invalid(f"voices must be a list of 1 to {MAX_DIALOGUE_VOICES} voice ids.", "invalid_voices")
        settings = None if message.get("voice_settings") is None else voice_settings_of(message["voice_settings"])
        dictionaries = dictionary_locators(message.get("pronunciation_dictionary_locators"))
        for voice_id in dict.fromkeys(voices):
            await self._speaker.check(self.speech_request("-", settings).speech_request(voice_id))
        context = self._open(context_id)
        context.voice_settings, context.dictionaries = settings, dictionaries
        self._casts[context_id] = _Cast(voices=list(voices), current=voices[0])

    def _line(self, context: SessionContext, cast: _Cast, text: str, voice_id: str, *, new_turn: bool) -> None:
        """Append a line: a new voice, or a new turn, first speaks what the context holds (a piece has one voice).

        Raises:
            OpenAIError: a voice the context did not register (400).
        """
        if voice_id not in cast.voices:
            raise invalid(f"Voice {voice_id} is not one of context {context.id}'s voices.", "voice_not_registered")
        if voice_id != cast.current or new_turn:
            self._append(context, cast, "", flush=True)
            cast.current = voice_id
        self._append(context, cast, text, flush=False)

    def _append(self, context: SessionContext, cast: _Cast, text: str, *, flush: bool) -> None:
        """The session's append; the pieces it made are in the context's current voice."""
        held = len(context.pieces)
        self._add(context, text, flush=flush)
        for index in range(held, len(context.pieces)):
            context.pieces[index] = _Line(context.pieces[index], cast.current)

    async def _close(self, context: SessionContext) -> None:
        """ElevenLabs' ``close_context`` on a dialogue: what the context holds is spoken, then ``is_final``."""
        if not context.closing:
            self._flush(context)
        await self._close_context(context.id)

    def _flush(self, context: SessionContext) -> None:
        if (cast := self._casts.get(context.id)) is not None:
            self._append(context, cast, "", flush=True)

    # ----------------------------------------------------------------- speaking and messages out
    def _tag(self, context_id: str) -> dict[str, Any]:
        return {"context_id": context_id}

    def _piece_request(self, context: SessionContext, text: str) -> SpeechRequest:
        voice_id = text.voice_id if isinstance(text, _Line) else self._casts[context.id].voices[0]
        return self.speech_request(text, context.voice_settings).speech_request(voice_id)

    def _piece_renderer(self, context: SessionContext) -> PieceRenderer:
        return _DialoguePiece(self._tag(context.id), self._casts[context.id])

    def _final_messages(self, context: SessionContext, tail: bytes) -> list[str]:
        tag = self._tag(context.id)
        self._casts.pop(context.id, None)
        audio = [_audio_message(tag, tail, None)] if tail else []
        return [*audio, json.dumps({"is_final": True, **tag})]


class SingleDialogueSession(DialogueSession):
    """Serves one Text-to-Dialogue ``stream-input`` WebSocket: one context, which its first message opens."""

    def _context_id(self, message: dict[str, Any]) -> str:
        return DEFAULT_CONTEXT_ID

    def _tag(self, context_id: str) -> dict[str, Any]:
        return {}


class _DialoguePiece:
    """One piece's messages: each alignment spans its message's audio (the module's docstring says why), and the
    piece's last one ends with a space lasting to the end of its audio, as on the text-to-speech sockets."""

    def __init__(self, tag: dict[str, Any], cast: _Cast) -> None:
        self._tag = tag
        self._cast = cast
        self._pending = PendingCharacters()
        self._heard_s = 0.0

    def audio(self, data: bytes, run: CharacterTimes | None, heard_s: float) -> list[str]:
        if run is not None:
            self._pending.add(run)
        return self._message(data, self._pending.until(heard_s), heard_s, last=False)

    def end(self, tail: bytes, run: CharacterTimes | None, heard_s: float, drained_s: float) -> list[str]:
        if run is not None:
            self._pending.add(run)
        messages = self._message(tail, self._pending.until(), heard_s + drained_s, last=True)
        return [*messages, json.dumps({"is_final_audio_for_turn": True, **self._tag})]

    def _message(self, data: bytes, characters: CharacterTimes | None, heard_s: float, *, last: bool) -> list[str]:
        """The message of the audio up to ``heard_s`` with ``characters`` (those that start in it); the piece's
        ``last`` ends with the space (Pipecat completes a word only at a space: without it, the last word of a turn
        took the time of the word before it)."""
        began_s, self._heard_s = self._heard_s, heard_s
        base_s = began_s - self._cast.owed_s  # where the clients' clocks stand: the alignment is counted from there
        alignment, end_s = (None, base_s) if characters is None else _alignment(characters, base_s, heard_s)
        if last:
            alignment, end_s = _spaced_to(alignment or NO_CHARACTERS, base_s, end_s, heard_s)
        self._cast.owed_s = max(0.0, heard_s - end_s)
        if not data and alignment is None:
            return []
        return [_audio_message(self._tag, data, alignment)]


def _alignment(characters: CharacterTimes, base_s: float, end_s: float) -> tuple[dict[str, Any], float]:
    """``{chars, charStartTimesMs, charDurationsMs}`` counted from ``base_s``, the last character ending at ``end_s``
    at the latest; and where it ends as sent. Whole milliseconds rounded down: a client's clock adds each alignment's
    end, so an end rounded up would run it ahead of the audio, message after message; the remainder is counted in the
    next alignment's start instead."""
    starts = [max(0, _whole_ms(start - base_s)) for start in characters.starts]
    ends = [*characters.ends[:-1], max(min(characters.ends[-1], end_s), characters.starts[-1])]
    ends_ms = [max(start, _whole_ms(end - base_s)) for start, end in zip(starts, ends, strict=True)]
    durations = [end - start for start, end in zip(starts, ends_ms, strict=True)]
    alignment = {"chars": characters.characters, "charStartTimesMs": starts, "charDurationsMs": durations}
    return alignment, base_s + ends_ms[-1] / 1000


def _spaced_to(alignment: dict[str, Any], base_s: float, end_s: float, heard_s: float) -> tuple[dict[str, Any], float]:
    """``alignment`` (counted from ``base_s``, ending at ``end_s``) followed by a space that lasts until ``heard_s``,
    in whole milliseconds as :func:`_alignment` counts them; and where it ends as sent."""
    start_ms, heard_ms = _whole_ms(end_s - base_s), _whole_ms(heard_s - base_s)
    spaced = followed_by_space(alignment, start_ms / 1000, max(0, heard_ms - start_ms) / 1000)
    return spaced, base_s + max(start_ms, heard_ms) / 1000


def _whole_ms(seconds: float) -> int:
    return math.floor(seconds * 1000)


def _audio_message(tag: dict[str, Any], audio: bytes, alignment: dict[str, Any] | None) -> str:
    """``AudioChunkMulti``: the audio and its alignment, in the dialogue's snake case."""
    snake = None if alignment is None else {_SNAKE_CASE[key]: value for key, value in alignment.items()}
    return json.dumps(
        {
            "audio": base64.b64encode(audio).decode(),
            "is_final": False,
            **tag,
            "alignment": snake,
            "normalized_alignment": snake,
        }
    )


_SNAKE_CASE = {"chars": "chars", "charStartTimesMs": "char_start_times_ms", "charDurationsMs": "char_durations_ms"}
"""The text-to-speech sockets' alignment keys, as the dialogue's name them."""


def _inputs(value: object) -> list[tuple[str, str, bool]]:
    """A message's ``inputs``: ``(text, voice_id, new_turn)`` each.

    Raises:
        OpenAIError: not a list of ``{"text", "voice_id", "new_turn"?}`` (400).
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid("inputs must be a list of {text, voice_id} lines.")
    lines = []
    for line in value:
        text = line.get("text") if isinstance(line, dict) else None
        voice_id = line.get("voice_id") if isinstance(line, dict) else None
        if not isinstance(text, str) or not isinstance(voice_id, str):
            raise invalid("Each of inputs is {text, voice_id, new_turn?}, text and voice_id strings.")
        lines.append((text, voice_id, line.get("new_turn") is True))
    return lines
