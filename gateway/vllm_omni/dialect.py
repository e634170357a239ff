"""vLLM-Omni's streaming-text TTS WebSocket, as a dialect of the realtime session, so that its clients work unchanged.

Followed field for field: vllm-project/vllm-omni at 0131cb5560450800b800e889fb849ea2c851bd3f,
``vllm_omni/entrypoints/openai/serving_speech_stream.py`` (the handler), ``protocol/audio.py``
(``StreamingSpeechSessionConfig``) and ``docs/serving/speech_api.md`` ("Streaming Text Input (WebSocket)").

Client to server, JSON text frames:

- ``session.config``: the settings (the first message, which selects this dialect; sent again between utterances it
  replaces them all). Unknown fields are ignored, as vLLM-Omni ignores them.
- ``input.text`` ``{"text"}``: text of the current utterance.
- ``input.done``: ends the utterance (a flush): what is held is spoken, then ``session.done``; the socket stays open.
- ``session.close``: closes the socket once what was flushed is spoken; text not flushed is dropped.

Server to client, for each sentence (a segment: by default a whole utterance, ``split_granularity: none``):
``audio.start`` ``{utterance_index, sentence_index, sentence_text, format}`` (and ``sample_rate``, ``channels`` for
``pcm``), the audio in binary frames (raw s16le chunks as they come with ``stream_audio``, else one complete file),
``audio.done`` ``{utterance_index, sentence_index, total_bytes, error}``; after the utterance's sentences,
``session.done`` ``{utterance_index, total_sentences}``. Errors: ``{"type": "error", "message"}``, with
``partial_audio: true, action: "discard"`` when a sentence failed after some of its audio went out. Nothing greets
the client and nothing confirms a ``session.config``; a session whose first ``session.config`` is refused closes.

A sentence not streamed is held until it is complete: at most what ``speech.max_whole_audio_s`` seconds of WAV take,
the bound of every whole response. vLLM-Omni has none (its file is as long as ``max_new_tokens`` lets the model
speak); here a sentence that outgrows it fails as any failed sentence does, its synthesis stopped, and the session goes
on. The file that goes out whole says its length (``gateway/audio/whole.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from gateway.audio import wav_header, whole_file
from gateway.audio.formats import AudioFormat, output_sample_rate
from gateway.http.json_depth import json_depth_exceeds
from gateway.http.socket_errors import socket_error, unexpected
from gateway.schemas import MAX_INPUT_CHARS, MAX_SEED, CustomVoice
from gateway.sessions.segmenter import Granularity
from gateway.sessions.session_errors import SessionError
from gateway.sessions.stream_events import (
    InputAppend,
    InputFlush,
    ProtocolError,
    SessionClose,
    SessionConfig,
    SessionUpdate,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self

    from gateway.schemas import SpeechUsage
    from gateway.sessions.stream_dialect import Frame
    from gateway.sessions.stream_events import ClientEvent, SegmentStatus
    from gateway.speech.alignment import WordTime

__all__ = ["VllmOmniDialect"]

# What vLLM-Omni's Qwen3-TTS options ask for that no engine here can do: refused rather than silently ignored, so a
# client does not take a stock voice for its clone. Voice cloning here is a custom voice: voice {"id": ...}.
_UNSUPPORTED = {
    "ref_audio": "voice cloning from reference audio; create a custom voice and pass voice {'id': ...}",
    "ref_text": "voice cloning from reference audio; create a custom voice and pass voice {'id': ...}",
    "speaker_embedding": "speaker embeddings; create a custom voice and pass voice {'id': ...}",
    "x_vector_only_mode": "voice cloning from reference audio; create a custom voice and pass voice {'id': ...}",
    "word_timestamps": "word timestamps",
}
_PCM_CHANNELS = 1
_WHOLE_RATE = output_sample_rate(AudioFormat.WAV)
"""The rate of the largest file a sentence can be (WAV's 16-bit samples; every other format compresses them)."""


class _SessionConfigWire(BaseModel):
    """vLLM-Omni's ``StreamingSpeechSessionConfig``: its fields and bounds. ``language``, ``max_new_tokens``,
    ``initial_codec_chunk_frames`` and ``non_streaming_mode`` tune Qwen3-TTS: validated, then unused. ``seed`` seeds
    every sentence, as ``seed`` does on ``POST /v1/audio/speech`` (vLLM-Omni bounds it not: any integer, taken modulo
    2**32)."""

    model_config = ConfigDict(extra="ignore")

    model: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    voice: Annotated[str, StringConstraints(min_length=1, max_length=256)] | CustomVoice | None = Field(
        default=None, validation_alias=AliasChoices("voice", "speaker")
    )
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    instructions: Annotated[str | None, Field(max_length=MAX_INPUT_CHARS)] = None
    response_format: AudioFormat = AudioFormat.WAV
    speed: Annotated[float, Field(ge=0.25, le=4.0)] | None = 1.0
    max_new_tokens: Annotated[int, Field(ge=1)] | None = None
    initial_codec_chunk_frames: Annotated[int, Field(ge=0)] | None = None
    non_streaming_mode: bool | None = None
    seed: int | None = None
    stream_audio: bool = False
    split_granularity: Granularity = "none"

    @model_validator(mode="before")
    @classmethod
    def _servable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, what in _UNSUPPORTED.items():
                if data.get(name) not in (None, False):
                    raise ValueError(f"'{name}' is not supported by this server ({what})")
            if data.get("task_type") in ("VoiceDesign", "Base"):
                raise ValueError(f"task_type '{data['task_type']}' is not supported by this server: use CustomVoice")
        return data

    @model_validator(mode="after")
    def _streamable(self) -> Self:
        if self.stream_audio and self.response_format is not AudioFormat.PCM:
            raise ValueError(
                "WebSocket streaming audio (stream_audio=true) requires response_format='pcm'. "
                f"Got response_format='{self.response_format.value}'."
            )
        return self

    def session_config(self) -> SessionConfig:
        """The session's settings; what vLLM-Omni leaves to the served model takes this gateway's defaults."""
        given = {"model": self.model, "voice": self.voice, "speed": self.speed, "instructions": self.instructions}
        given["response_format"] = self.response_format
        given["seed"] = None if self.seed is None else self.seed % (MAX_SEED + 1)
        return SessionConfig.model_validate({name: value for name, value in given.items() if value is not None})


class _Configured(SessionUpdate):
    """A ``session.config`` as the session's update (every setting replaced), with what only this dialect uses."""

    granularity: Granularity = "none"
    stream_audio: bool = False


@dataclass
class _Sentence:
    """The sentence (segment) being spoken, as vLLM-Omni counts and frames it."""

    segment_id: str
    index: int
    streamed: bool
    fmt: AudioFormat
    total_bytes: int = 0
    held: list[bytes] = field(default_factory=list)
    """Its file, when not streamed: sent whole, in one binary frame, once it is complete."""
    held_bytes: int = 0
    outgrown: bool = False
    """Its file outgrew what a sentence may hold: it failed, and the rest of its audio is dropped."""


class VllmOmniDialect:
    """vLLM-Omni's ``/v1/audio/speech/stream`` (see the module's docstring)."""

    FIRST_TYPE: ClassVar[str] = "session.config"
    one_stream = False
    speaks_held_text_on_close = False

    def __init__(self, *, max_whole_audio_s: float) -> None:
        """``max_whole_audio_s``: ``speech.max_whole_audio_s``, the longest audio a sentence not streamed holds."""
        self._max_whole_audio_s = max_whole_audio_s
        self._max_held_bytes = len(wav_header(_WHOLE_RATE)) + int(max_whole_audio_s * _WHOLE_RATE) * 2
        self._configured = False
        self._utterance_open = False
        """From the first non-empty ``input.text`` to ``input.done``: a ``session.config`` then is refused."""
        self._stream_audio = False
        self._granularity: Granularity = "none"
        self._utterance = 0
        self._sentences = 0
        """Sentences of the current utterance begun so far."""
        self._sentence: _Sentence | None = None

    @property
    def granularity(self) -> Granularity:
        return self._granularity

    @property
    def ends_on_error(self) -> bool:
        return not self._configured  # vLLM-Omni closes a connection whose first session.config it refused

    # ----------------------------------------------------------------- client messages
    def parse(self, text: str, *, max_depth: int) -> ClientEvent:
        message = _json_object(text, max_depth)
        kind = message.get("type")
        if kind == self.FIRST_TYPE:
            return self._session_config(message)
        if kind == "input.text":
            return self._input_text(message)
        if kind == "input.done":
            self._utterance_open = False
            return InputFlush(type="input.flush")
        if kind == "session.close":
            return SessionClose(type="session.close")
        raise ProtocolError(f"Unknown message type: {kind}", code="unknown_event", param="type")

    def _session_config(self, message: dict[str, Any]) -> _Configured:
        if self._utterance_open:
            raise ProtocolError(
                "session.config cannot be applied while an utterance is in progress; send input.done first",
                code="utterance_in_progress",
            )
        try:
            wire = _SessionConfigWire.model_validate({k: v for k, v in message.items() if k != "type"})
        except ValidationError as exc:
            first = exc.errors()[0]
            param = ".".join(str(part) for part in first["loc"]) or None
            where = f"'{param}': " if param else ""
            raise ProtocolError(
                f"Invalid session config: {where}{first['msg']}", code="invalid_value", param=param
            ) from None
        return _Configured.replacing(
            wire.session_config(), granularity=wire.split_granularity, stream_audio=wire.stream_audio
        )

    def _input_text(self, message: dict[str, Any]) -> InputAppend:
        text = message.get("text", "")
        if not isinstance(text, str):
            raise ProtocolError("input.text requires a string value", code="invalid_value", param="text")
        if len(text) > MAX_INPUT_CHARS:
            raise ProtocolError(
                f"input.text holds more than {MAX_INPUT_CHARS} characters; send it in smaller pieces",
                code="string_above_max_length",
                param="text",
            )
        if text:
            self._utterance_open = True
        return InputAppend(type="input.append", text=text)

    # ----------------------------------------------------------------- what the session does
    def session_created(self, session_id: str, config: SessionConfig) -> list[Frame]:
        return []  # vLLM-Omni greets with nothing: its client speaks first

    def session_updated(self, session_id: str, config: SessionConfig, event: SessionUpdate) -> list[Frame]:
        if isinstance(event, _Configured):
            self._stream_audio, self._granularity = event.stream_audio, event.granularity
        self._configured = True
        return []  # nor does it confirm a session.config

    def segment_started(self, segment_id: str, text: str, fmt: AudioFormat) -> list[Frame]:
        self._sentence = _Sentence(segment_id, self._sentences, self._stream_audio, fmt)
        self._sentences += 1
        start: dict[str, Any] = {
            "type": "audio.start",
            "utterance_index": self._utterance,
            "sentence_index": self._sentence.index,
            "sentence_text": text,
            "format": fmt.value,
        }
        if fmt is AudioFormat.PCM:  # raw samples say nothing of themselves
            start |= {"sample_rate": output_sample_rate(fmt), "channels": _PCM_CHANNELS}
        return [_dump(start)]

    def audio(self, segment_id: str | None, data: bytes) -> list[Frame]:
        sentence = self._sentence_of(segment_id)
        if sentence is None:
            return []  # no session trailer: every sentence's file is complete at its audio.done
        if not sentence.streamed:
            self._hold(sentence, data)
            return []
        sentence.total_bytes += len(data)
        return [data]

    def _hold(self, sentence: _Sentence, data: bytes) -> None:
        """Hold a piece of the sentence's file until it is complete, within what a whole sentence may hold.

        Raises:
            SessionError: 400 ``audio_too_long``, the piece that outgrew it (dropped with what was held): the sentence
                fails with it (its ``error``, then its ``audio.done``), its synthesis stops, the session goes on.
        """
        if sentence.outgrown:
            return  # the encoder's tail after the failure
        sentence.held.append(data)
        sentence.held_bytes += len(data)
        if sentence.held_bytes > self._max_held_bytes:
            sentence.held.clear()
            sentence.outgrown = True
            raise SessionError(
                400,
                f"The sentence's audio is longer than the {self._max_whole_audio_s:g} s a sentence sent as one file "
                "may hold: set stream_audio to true (with response_format 'pcm') to stream it, or split_granularity to "
                "'sentence' to speak it in shorter pieces.",
                code="audio_too_long",
            )

    def segment_done(self, segment_id: str, text: str, status: SegmentStatus, usage: SpeechUsage) -> list[Frame]:
        sentence = self._sentence_of(segment_id)
        if sentence is None:
            return []  # dropped before it began (shutdown): never one of vLLM-Omni's sentences
        self._sentence = None
        frames: list[Frame] = []
        if not sentence.streamed and status == "completed" and sentence.held:
            # A failed one sends nothing, as vLLM-Omni's does.
            frames.append(whole_file(sentence.fmt, b"".join(sentence.held)))
            sentence.total_bytes = len(frames[0])
        done = {
            "type": "audio.done",
            "utterance_index": self._utterance,
            "sentence_index": sentence.index,
            "total_bytes": sentence.total_bytes,
            "error": status != "completed",
        }
        return [*frames, _dump(done)]

    def words(self, segment_id: str, text: str, words: Sequence[WordTime]) -> list[Frame]:
        return []  # its sessions never ask: ``word_timestamps`` is refused above (vLLM-Omni's shape for them differs)

    def utterance_done(self) -> list[Frame]:
        done = {"type": "session.done", "utterance_index": self._utterance, "total_sentences": self._sentences}
        self._utterance, self._sentences = self._utterance + 1, 0
        return [_dump(done)]

    def error(self, failure: BaseException, *, event_id: str | None = None, segment_id: str | None = None) -> str:
        error = socket_error(failure)  # the OpenAI family's table: vLLM-Omni's error says its message alone
        sentence = self._sentence_of(segment_id)
        if sentence is None:
            return _dump({"type": "error", "message": error.message})
        message = f"Generation failed for utterance {self._utterance}, sentence {sentence.index}: {error.message}"
        partial = {"partial_audio": True, "action": "discard"} if sentence.total_bytes else {}
        return _dump({"type": "error", "message": message, **partial})

    def unexpected(self, failure: BaseException) -> bool:
        return unexpected(failure)

    def _sentence_of(self, segment_id: str | None) -> _Sentence | None:
        if self._sentence is not None and self._sentence.segment_id == segment_id:
            return self._sentence
        return None


def _json_object(text: str, max_depth: int) -> dict[str, Any]:
    if json_depth_exceeds(text, max_depth):
        raise ProtocolError(f"The message is nested deeper than {max_depth} levels.", code="json_too_deep")
    try:
        message = json.loads(text)
    except json.JSONDecodeError:
        raise ProtocolError("Invalid JSON message", code="invalid_json") from None
    if not isinstance(message, dict):
        raise ProtocolError("WebSocket messages must be JSON objects", code="invalid_event")
    return message


def _dump(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)  # as Starlette's send_json, vLLM-Omni's
