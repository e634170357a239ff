"""How a session of text streamed in (``gateway/sessions/text_stream.py``) talks to its client: the contract of its
wire dialects, one session engine and several ways of talking to it.

A dialect translates and nothing more: it parses a client's messages into the session's events and renders what
the session does (it opened, its settings changed, a segment started, audio, a segment ended, a flush was served, an
error) into its own frames. Everything else (segmenting, the speech pipeline, limits, idle timeout, slow readers,
revocation, shutdown) is the session's, the same for every dialect. This gateway's own protocol
(``gateway/native/dialect.py``) and vLLM-Omni's (``gateway/vllm_omni/dialect.py``) fill it in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.audio.formats import AudioFormat
    from gateway.schemas import SpeechUsage
    from gateway.sessions.segmenter import Granularity
    from gateway.sessions.stream_events import ClientEvent, SegmentStatus, SessionConfig, SessionUpdate
    from gateway.speech.alignment import WordTime

__all__ = ["Dialect", "Frame", "Spoken"]

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
        """Encoded audio of a segment (``None``: the trailer of the session's one stream). A ``SessionError`` it
        raises fails the segment with that error (vLLM-Omni's sentence held past its bound); the session goes on."""
        ...

    def segment_done(self, segment_id: str, text: str, status: SegmentStatus, usage: SpeechUsage) -> list[Frame]: ...

    def words(self, segment_id: str, text: str, words: Sequence[WordTime]) -> list[Frame]:
        """Words of the segment's ``text`` (the speech request's input) and when they are heard, from the segment's
        first audio; asked only of a session whose ``word_timestamps`` is on."""
        ...

    def utterance_done(self) -> list[Frame]:
        """Every segment of an ``input.flush`` (or ``input.done``) has been served."""
        ...

    def error(self, failure: BaseException, *, event_id: str | None = None, segment_id: str | None = None) -> str:
        """``failure`` (a speech domain error, a :class:`~gateway.sessions.session_errors.SessionError`...) as the
        dialect's error event, from its own table: of the client event ``event_id``, or of the segment
        ``segment_id``."""
        ...

    def unexpected(self, failure: BaseException) -> bool:
        """Whether the dialect's table has no words for ``failure`` but an internal error's (a bug, then logged)."""
        ...


class Spoken(Protocol):
    """The dialect of one socket, chosen by its first message (the route's ``SpokenDialect``): the session asks it
    for the dialect in force, and lets a first message that came late still choose."""

    current: Dialect
    chosen: bool

    def choose(self, first_message: str | None) -> Dialect: ...
