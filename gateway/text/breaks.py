"""ElevenLabs' ``<break time="1.5s" />`` in plain text: an exact silence there, the rest spoken as written.

ElevenLabs honours the tag in every request's text, up to 3 seconds a break, without ``enable_ssml_parsing``; any other
markup in the text is read as text, and the tag never is: a text of breaks alone is that much silence, as it is in SSML.
The pattern has no nested repetition: it matches in time linear in the text.
"""

from __future__ import annotations

import re

from gateway.text.errors import MarkupError
from gateway.text.script import MAX_PARTS, Part, Script, Silence, Speech, speakable

__all__ = ["MAX_ELEVENLABS_BREAK_S", "read_breaks"]

MAX_ELEVENLABS_BREAK_S = 3.0
"""ElevenLabs' longest break; a longer one is cut to it."""

_BREAK = re.compile(r"""<break\s+time\s*=\s*(["'])\s*(\d{1,7}(?:\.\d{1,6})?)\s*(ms|s)\s*\1\s*/>""", re.IGNORECASE)


def read_breaks(text: str) -> Script:
    """``text`` with its break tags as silences (a text of breaks alone: silences only, :attr:`Script.empty` when they
    last no time); a text without one is one span, as written.

    Raises:
        MarkupError: more breaks than a script may hold.
    """
    if "<break" not in text.lower():
        return Script.plain(text)
    parts: list[Part] = []
    start = 0
    for match in _BREAK.finditer(text):
        _add_text(parts, text[start : match.start()])
        seconds = float(match[2]) / (1000 if match[3].lower() == "ms" else 1)
        parts.append(Silence(min(seconds, MAX_ELEVENLABS_BREAK_S)))
        start = match.end()
        if len(parts) > MAX_PARTS:
            line = text.count("\n", 0, match.start()) + 1
            column = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
            raise MarkupError(f"more than {MAX_PARTS} spans and breaks", line, column)
    _add_text(parts, text[start:])
    return Script(tuple(parts))


def _add_text(parts: list[Part], text: str) -> None:
    text = text.strip()
    if speakable(text):
        parts.append(Speech(text))
