"""This gateway's own dialect of ``/v1/audio/speech/stream`` (``docs/realtime.md``): how the session of text streamed
in (``gateway/sessions/text_stream.py``) talks to its client in this gateway's protocol (``protocol.py``)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from gateway.http.socket_errors import socket_error, unexpected
from gateway.native.protocol import (
    audio_delta,
    audio_done,
    audio_words,
    error_event,
    parse_client_event,
    session_event,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.audio.formats import AudioFormat
    from gateway.schemas import SpeechUsage
    from gateway.sessions.segmenter import Granularity
    from gateway.sessions.stream_dialect import Frame
    from gateway.sessions.stream_events import ClientEvent, SegmentStatus, SessionConfig, SessionUpdate
    from gateway.speech.alignment import WordTime

__all__ = ["NativeDialect"]


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

    def error(self, failure: BaseException, *, event_id: str | None = None, segment_id: str | None = None) -> str:
        error = socket_error(failure)  # the OpenAI family's table
        return error_event(error, event_id=event_id, segment_id=segment_id)

    def unexpected(self, failure: BaseException) -> bool:
        return unexpected(failure)
