"""Cutting text that arrives in fragments into segments worth synthesizing: sentences, as soon as they end."""

from __future__ import annotations

import re

__all__ = ["SentenceBuffer"]

# A sentence ends at . ! ? or … (with any closing quotes or brackets) followed by whitespace: only then is it
# known not to be "3.5" or "example.com". CJK full stops end a sentence without a space after them.
_CLOSERS = r"[\"'\u201d\u2019)\]\u300d\u300f]*"  # closing quotes and brackets, Western and CJK
_SENTENCE_END = re.compile(rf"(?:[.!?\u2026]+{_CLOSERS}\s+)|(?:[\u3002\uff01\uff1f]+{_CLOSERS}\s*)|\n+")
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "approx"},
)
_CLAUSE_BREAK = re.compile(r"[,;:\u2014\u2013]\s+")  # also em and en dashes


class SentenceBuffer:
    """Holds appended text and hands out each sentence once it is complete.

    A sentence longer than ``max_chars`` is cut at its last clause break (or else word break) within the limit,
    so that a long unpunctuated stream of text still starts speaking.
    """

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._text = ""

    @property
    def pending_chars(self) -> int:
        return len(self._text)

    def append(self, text: str) -> list[str]:
        """Add a fragment; returns the segments it completed, in order."""
        self._text += text
        segments: list[str] = []
        while (cut := self._next_cut()) is not None:
            segments.append(self._take(cut))
        return [s for s in segments if _speakable(s)]

    def flush(self) -> list[str]:
        """Everything held, as segments (the last may be a partial sentence)."""
        segments = self.append("")
        while self._text:
            cut = self._long_cut() if len(self._text) > self._max_chars else len(self._text)
            segments.append(self._take(cut or len(self._text)))
        return [s for s in segments if _speakable(s)]

    def clear(self) -> None:
        self._text = ""

    def _next_cut(self) -> int | None:
        for match in _SENTENCE_END.finditer(self._text):
            if match.end() > self._max_chars:
                break
            if not _ends_abbreviation(self._text[: match.start() + 1]):
                return match.end()
        return self._long_cut() if len(self._text) > self._max_chars else None

    def _long_cut(self) -> int | None:
        window = self._text[: self._max_chars]
        clauses = [m.end() for m in _CLAUSE_BREAK.finditer(window)]
        if clauses:
            return clauses[-1]
        space = window.rfind(" ")
        return space + 1 if space > 0 else self._max_chars

    def _take(self, cut: int) -> str:
        segment, self._text = self._text[:cut], self._text[cut:]
        return segment.strip()


def _ends_abbreviation(text: str) -> bool:
    """Whether ``text`` (ending at a full stop) ends with an abbreviation or an initial rather than a sentence."""
    if not text.endswith("."):
        return False
    word = text[:-1].rsplit(None, 1)[-1].lower() if text[:-1].strip() else ""
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def _speakable(segment: str) -> bool:
    return any(ch.isalnum() for ch in segment)
