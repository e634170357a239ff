"""Word and character timestamps of a reply: when each part of its text is heard in the audio it delivers.

The speech pipeline turns the engine's word marks (``engines/timing.py``: characters of the text, samples of the
engine's audio) into :class:`WordTime` in **output time**: seconds from the start of the reply's audio, after the
encoder's time-stretch (``speed``), with each segment's offset added when a long text is spoken in segments, so that
a segment's words start exactly where its audio does. The characters follow from the words
(:func:`character_times`): a word's time is shared equally among its characters, and the spaces and punctuation
between two words share the gap between them (before the first word: from 0; after the last: to the end of the
audio). Joined, the characters are the text; their times never go back; every end lies within the audio.

The shapes each API wants are renderings of these: the SSE extension event (``speech.audio.timestamps``), the realtime
``audio.words`` events, and ElevenLabs' ``alignment`` (``{characters, character_start_times_seconds,
character_end_times_seconds}``, or per message ``{chars, charStartTimesMs, charDurationsMs}``) from
:class:`CharacterTimes`.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engines.timing import word_spans

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from engines.timing import TimestampsKind, WordMark
    from gateway.text.lexicon import Respelled

__all__ = [
    "Alignment",
    "CharacterCursor",
    "CharacterTimes",
    "OnCallerText",
    "SpeechChunk",
    "WordTime",
    "character_times",
    "pack_words",
    "unpack_words",
    "word_times",
]

_WORD = struct.Struct("<IIdd")


@dataclass(frozen=True, slots=True)
class WordTime:
    """One word of a reply's text: characters ``[char_start, char_end)``, heard from ``start_s`` to ``end_s`` seconds
    after the start of the reply's audio."""

    char_start: int
    char_end: int
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class SpeechChunk:
    """A piece of a reply as it is delivered: encoded audio (empty when only words became known) and the words that
    became known with it. A word comes with, or after, the audio in which it starts."""

    audio: bytes
    words: tuple[WordTime, ...] = ()
    until_s: float = 0.0
    """The audio seconds of the reply up to this piece's end (its production's clock once the piece was made): what a
    listener who stops after it has heard, and is charged for."""


@dataclass(frozen=True, slots=True)
class CharacterTimes:
    """Times of a run of characters of the text, from offset ``first`` on: ElevenLabs' ``alignment`` for that run."""

    first: int
    characters: list[str]
    starts: list[float]
    ends: list[float]

    def rest_api(self) -> dict[str, Any]:
        """``{characters, character_start_times_seconds, character_end_times_seconds}``."""
        return {
            "characters": self.characters,
            "character_start_times_seconds": [round(t, 3) for t in self.starts],
            "character_end_times_seconds": [round(t, 3) for t in self.ends],
        }

    def stream_input(self, since_s: float = 0.0) -> dict[str, Any]:
        """``{chars, charStartTimesMs, charDurationsMs}``, the times counted from ``since_s`` (ElevenLabs' WebSocket
        restarts them at zero in every message: the audio's time at the message's start)."""
        return {
            "chars": self.characters,
            "charStartTimesMs": [max(0, round((t - since_s) * 1000)) for t in self.starts],
            "charDurationsMs": [round((end - start) * 1000) for start, end in zip(self.starts, self.ends, strict=True)],
        }


def word_times(marks: Iterable[WordMark], sample_rate: int, tempo: float, *, char_offset: int = 0,
               offset_s: float = 0.0) -> tuple[WordTime, ...]:  # fmt: skip
    """Word marks in output time: samples at ``sample_rate`` stretched by ``tempo``, after ``offset_s``; characters
    moved by ``char_offset`` (a segment's place in the whole text)."""
    scale = 1.0 / (sample_rate * tempo)
    return tuple(
        WordTime(
            m.char_start + char_offset,
            m.char_end + char_offset,
            offset_s + m.sample_start * scale,
            offset_s + m.sample_end * scale,
        )
        for m in marks
    )


def character_times(
    text: str, words: Sequence[WordTime], audio_s: float | None, start: int, stop: int
) -> CharacterTimes:
    """Times of ``text[start:stop]`` given its ``words`` (in order) and the audio's duration (``None`` while unknown:
    then ``stop`` must not pass the end of the last word)."""
    starts_at = [word.char_start for word in words]
    chars, begins, ends = [], [], []
    for index in range(start, stop):
        position = bisect.bisect_right(starts_at, index) - 1  # the last word starting at or before ``index``
        word = words[position] if position >= 0 else None
        if word is not None and index < word.char_end:
            span, first, t0, t1 = word.char_end - word.char_start, word.char_start, word.start_s, word.end_s
        else:
            following = words[position + 1] if position + 1 < len(words) else None
            first = word.char_end if word is not None else 0
            span = (following.char_start if following is not None else len(text)) - first
            t0 = word.end_s if word is not None else 0.0
            t1 = following.start_s if following is not None else (audio_s if audio_s is not None else t0)
        t1 = max(t0, t1)
        chars.append(text[index])
        begins.append(t0 + (t1 - t0) * (index - first) / span)
        ends.append(t0 + (t1 - t0) * (index - first + 1) / span)
    return CharacterTimes(start, chars, begins, ends)


@dataclass
class Alignment:
    """The words of a reply's text with their times, as they become known; complete once :attr:`audio_s` is set
    (the reply's audio has ended: a cache hit's at once)."""

    text: str
    kind: TimestampsKind = "estimated"
    """``"exact"`` when the engine placed its words, ``"estimated"`` otherwise (``EngineInfo.timestamps``)."""
    words: list[WordTime] = field(default_factory=list)
    audio_s: float | None = None
    """The duration of the reply's audio, once it has ended."""

    def characters(self) -> CharacterTimes:
        """Every character's times: the whole text when complete, else up to the end of the last known word."""
        stop = len(self.text) if self.audio_s is not None else (self.words[-1].char_end if self.words else 0)
        return character_times(self.text, self.words, self.audio_s, 0, stop)


class CharacterCursor:
    """Hands out a text's characters with their times, run after run, as the words become known."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._next = 0

    def advance(self, words: Sequence[WordTime], audio_s: float | None = None) -> CharacterTimes | None:
        """The characters not handed out yet up to the end of the last known word, or to the end of the text once
        ``audio_s`` is known; ``None`` when there are none."""
        stop = len(self._text) if audio_s is not None else (words[-1].char_end if words else 0)
        if stop <= self._next:
            return None
        run = character_times(self._text, words, audio_s, self._next, stop)
        self._next = stop
        return run


class OnCallerText:
    """The words of a respelled text (``gateway/text/lexicon.py``) moved onto the caller's text, as they come: what
    a word of an alias was heard at becomes the time of the grapheme it replaced, so that timestamps name the
    caller's characters, never the alias's.

    The spoken words that fall in one grapheme become one stretch of time, shared among the caller's words there by
    their characters ("New York" said as "NYC"; "WWW" said as "World Wide Web"). A word is held back until the next
    one shows it is complete, and :meth:`finish` hands out the last.
    """

    def __init__(self, respelled: Respelled, text: str) -> None:
        self._respelled = respelled
        self._spans = word_spans(text)
        self._starts = [start for start, _ in self._spans]
        self._pending: WordTime | None = None
        self._handed = 0  # the end of the last word handed out: words never go back

    def words(self, spoken: Iterable[WordTime]) -> tuple[WordTime, ...]:
        """The caller's words complete with these spoken words."""
        moved: list[WordTime] = []
        for word in spoken:
            start, end = self._respelled.original_span(word.char_start, word.char_end)
            pending = self._pending
            if pending is not None and start < pending.char_end:  # the same grapheme: one stretch of time
                self._pending = WordTime(
                    pending.char_start, max(end, pending.char_end), pending.start_s, max(word.end_s, pending.end_s)
                )
                continue
            if pending is not None:
                moved += self._onto_words(pending)
            self._pending = WordTime(start, end, word.start_s, word.end_s)
        return tuple(moved)

    def finish(self) -> tuple[WordTime, ...]:
        """The last word, once the audio has ended."""
        pending, self._pending = self._pending, None
        return tuple(self._onto_words(pending)) if pending is not None else ()

    def _onto_words(self, stretch: WordTime) -> list[WordTime]:
        index = max(0, bisect.bisect_right(self._starts, stretch.char_start) - 1)
        inside: list[tuple[int, int]] = []
        for start, end in self._spans[index:]:
            if start >= stretch.char_end:
                break
            if end > stretch.char_start and start >= self._handed:
                inside.append((start, end))
        if not inside:
            return []
        first, last = inside[0][0], inside[-1][1]
        per_char = (stretch.end_s - stretch.start_s) / max(1, last - first)
        self._handed = last
        return [
            WordTime(
                start, end, stretch.start_s + (start - first) * per_char, stretch.start_s + (end - first) * per_char
            )
            for start, end in inside
        ]


def pack_words(words: Sequence[WordTime]) -> bytes:
    """Words as they are kept in the audio cache: their count, then each one's characters and times."""
    return struct.pack("<I", len(words)) + b"".join(
        _WORD.pack(w.char_start, w.char_end, w.start_s, w.end_s) for w in words
    )


def unpack_words(data: memoryview) -> tuple[list[WordTime], int]:
    """The words :func:`pack_words` wrote at the start of ``data``, and the bytes they took.

    Raises:
        struct.error: ``data`` is too short.
    """
    (count,) = struct.unpack_from("<I", data)
    words = [WordTime(*_WORD.unpack_from(data, 4 + index * _WORD.size)) for index in range(count)]
    return words, 4 + count * _WORD.size
