"""Cutting text that arrives in fragments into segments worth synthesizing: sentences, as soon as they end.

Where a segment may end is the HTTP speech path's rule too (``gateway/speech/segments.py``); this adds the waiting:
a sentence is handed out once the text after it shows that it ended.
"""

from __future__ import annotations

from typing import Literal

from gateway.schemas import MAX_INPUT_CHARS
from gateway.speech.segments import clause_ends, long_cut, sentence_ends, speakable, split_text

__all__ = ["Granularity", "SentenceBuffer"]

Granularity = Literal["none", "sentence", "clause"]
"""Where appended text is cut: only when flushed (``none``), at sentence ends, or at clause breaks too."""


class SentenceBuffer:
    """Holds appended text and hands out each sentence once it is complete.

    A sentence longer than ``max_chars`` is cut at its last clause break (or else word break) within the limit,
    so that a long unpunctuated stream of text still starts speaking. ``granularity`` may change between segments:
    ``clause`` also cuts at every clause break (sooner speech); ``none`` cuts nothing until a flush, which hands out
    the whole text as one segment (as one request of the HTTP endpoint, so at most ``MAX_INPUT_CHARS`` long).
    """

    def __init__(self, max_chars: int, granularity: Granularity = "sentence") -> None:
        self._max_chars = max_chars
        self._text = ""
        self.granularity: Granularity = granularity

    @property
    def pending_chars(self) -> int:
        return len(self._text)

    def append(self, text: str) -> list[str]:
        """Add a fragment; returns the segments it completed, in order."""
        self._text += text
        segments: list[str] = []
        while self.granularity != "none" and (cut := self._next_cut()) is not None:
            segments.append(self._take(cut))
        return [s for s in segments if speakable(s)]

    def flush(self) -> list[str]:
        """Everything held, as segments (the last may be a partial sentence)."""
        if self.granularity == "none":
            text, self._text = self._text.strip(), ""
            return [s for s in split_text(text, MAX_INPUT_CHARS) if speakable(s)]
        segments = self.append("")
        while self._text:
            cut = long_cut(self._text, self._max_chars) if len(self._text) > self._max_chars else len(self._text)
            segments.append(self._take(cut))
        return [s for s in segments if speakable(s)]

    def clear(self) -> None:
        self._text = ""

    def _next_cut(self) -> int | None:
        ends = [next(sentence_ends(self._text, self._max_chars), None)]
        if self.granularity == "clause":
            ends.append(next(clause_ends(self._text, self._max_chars), None))
        first = min((end for end in ends if end is not None), default=None)
        if first is not None:
            return first
        return long_cut(self._text, self._max_chars) if len(self._text) > self._max_chars else None

    def _take(self, cut: int) -> str:
        segment, self._text = self._text[:cut], self._text[cut:]
        return segment.strip()
