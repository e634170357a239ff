"""The wire dialects of ``/v1/audio/speech/stream``: one session engine, two ways of talking to it.

A dialect translates and nothing more: it parses a client's messages into the session's events and renders what
the session does (it opened, its settings changed, a segment started, audio, a segment ended, a flush was served, an
error) into its own frames. Everything else (segmenting, the speech pipeline, limits, idle timeout, slow readers,
revocation, shutdown) is the session's, the same for every dialect.

The first client message decides: vLLM-Omni's ``session.config`` selects :class:`VllmOmniDialect`; anything else
(or nothing yet) is this gateway's own protocol, :class:`NativeDialect` (``docs/realtime.md``).
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Protocol

from gateway.http.json_depth import json_depth_exceeds
from gateway.realtime.protocol import (
    MAX_MESSAGE_DEPTH,
    audio_delta,
    audio_done,
    audio_words,
    error_event,
    parse_client_event,
    session_event,
)
from gateway.vllm_omni.dialect import VllmOmniDialect

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.audio.formats import AudioFormat
    from gateway.http.errors import OpenAIError
    from gateway.realtime.protocol import ClientEvent, SegmentStatus, SessionConfig, SessionUpdate
    from gateway.realtime.segmenter import Granularity
    from gateway.schemas import SpeechUsage
    from gateway.speech.alignment import WordTime

__all__ = ["Dialect", "Frame", "NativeDialect", "SpokenDialect", "dialect_for"]

Frame = str | bytes
"""One WebSocket message: a text frame (JSON) or a binary frame (audio)."""


class Dialect(Protocol):
    """How one session talks to its client. Per session: a dialect may count what it has rendered."""

    one_stream: bool
    """Every audio chunk continues one stream for the whole session (its format then fixed once audio flowed);
    otherwise each segment's audio is a complete file of its own."""
    speaks_held_text_on_close: bool
    """Whether ``session.close`` speaks the text not yet flushed, or drops it."""

    @property
    def granularity(self) -> Granularity:
        """Where the session cuts appended text into segments."""
        ...

    @property
    def ends_on_error(self) -> bool:
        """Whether a refused client message ends the session (after what is queued)."""
        ...

    def parse(self, text: str, *, max_depth: int) -> ClientEvent:
        """One client text message as the session's event; raises ``ProtocolError`` for one it refuses."""
        ...

    def session_created(self, session_id: str, config: SessionConfig) -> list[Frame]: ...

    def session_updated(self, session_id: str, config: SessionConfig, event: SessionUpdate) -> list[Frame]:
        """``event`` (this dialect's own, as :meth:`parse` made it) now holds; ``config`` is the result."""
        ...

    def segment_started(self, segment_id: str, text: str, fmt: AudioFormat) -> list[Frame]: ...

    def audio(self, segment_id: str | None, data: bytes) -> list[Frame]:
        """Encoded audio of a segment (``None``: the trailer of the session's one stream)."""
        ...

    def segment_done(self, segment_id: str, text: str, status: SegmentStatus, usage: SpeechUsage) -> list[Frame]: ...

    def words(self, segment_id: str, text: str, words: Sequence[WordTime]) -> list[Frame]:
        """Words of the segment's ``text`` (the speech request's input) and when they are heard, from the segment's
        first audio; asked only of a session whose ``word_timestamps`` is on."""
        ...

    def utterance_done(self) -> list[Frame]:
        """Every segment of an ``input.flush`` (or ``input.done``) has been served."""
        ...

    def error(self, error: OpenAIError, *, event_id: str | None = None, segment_id: str | None = None) -> str: ...


class NativeDialect:
    """This gateway's own protocol: JSON events both ways, audio base64 in ``audio.delta``, one stream a session."""

    one_stream = True
    speaks_held_text_on_close = True
    granularity: Granularity = "sentence"
    ends_on_error = False

    def __init__(self) -> None:
        self._seq = itertools.count(1)
        """``audio.delta``'s ``seq``: over the whole session."""

    def parse(self, text: str, *, max_depth: int) -> ClientEvent:
        return parse_client_event(text, max_depth=max_depth)

    def session_created(self, session_id: str, config: SessionConfig) -> list[Frame]:
        return [session_event("session.created", session_id, config)]

    def session_updated(self, session_id: str, config: SessionConfig, event: SessionUpdate) -> list[Frame]:
        return [session_event("session.updated", session_id, config)]

    def segment_started(self, segment_id: str, text: str, fmt: AudioFormat) -> list[Frame]:
        return []

    def audio(self, segment_id: str | None, data: bytes) -> list[Frame]:
        return [audio_delta(segment_id, next(self._seq), data)]

    def segment_done(self, segment_id: str, text: str, status: SegmentStatus, usage: SpeechUsage) -> list[Frame]:
        return [audio_done(segment_id, text, status, usage)]

    def words(self, segment_id: str, text: str, words: Sequence[WordTime]) -> list[Frame]:
        return [audio_words(segment_id, text, words)]

    def utterance_done(self) -> list[Frame]:
        return []

    def error(self, error: OpenAIError, *, event_id: str | None = None, segment_id: str | None = None) -> str:
        return error_event(error, event_id=event_id, segment_id=segment_id)


def dialect_for(first_message: str | None) -> Dialect:
    """The dialect a socket speaks, from its first text message (``None``: none yet, or a binary one)."""
    if first_message is None or json_depth_exceeds(first_message, MAX_MESSAGE_DEPTH):
        return NativeDialect()  # which refuses it as it refuses any such message
    try:
        message = json.loads(first_message)
    except json.JSONDecodeError:
        return NativeDialect()
    if isinstance(message, dict) and message.get("type") == VllmOmniDialect.FIRST_TYPE:
        return VllmOmniDialect()
    return NativeDialect()


class SpokenDialect:
    """The dialect of one socket: the native one until its first message has chosen.

    Held apart from the session because a refusal before the session exists (missing credentials) is already said
    in the dialect of the message that lacked them.
    """

    def __init__(self) -> None:
        self.current: Dialect = NativeDialect()
        self.chosen = False

    def choose(self, first_message: str | None) -> Dialect:
        self.current, self.chosen = dialect_for(first_message), True
        return self.current

    def error_event(self, error: OpenAIError) -> str:
        return self.current.error(error)
