"""How a request's text is read: which markup each API honours, and the one function that reads it."""

from __future__ import annotations

from enum import StrEnum

from gateway.text.breaks import read_breaks
from gateway.text.errors import MarkupError
from gateway.text.script import Script
from gateway.text.ssml import is_ssml, parse_ssml

__all__ = ["Markup", "read_script"]

_WRAPPER = "<speak>"


class Markup(StrEnum):
    """The markup a request's text may carry."""

    PLAIN = "plain"
    """None: the text as written (an engine node's segment, already read by its front)."""
    SSML = "ssml"
    """SSML when the text's first non-blank characters are ``<speak``, else plain (``POST /v1/audio/speech``, the
    realtime sessions)."""
    BREAKS = "breaks"
    """ElevenLabs' break tags, the rest as written (ElevenLabs' routes)."""
    ELEVENLABS_SSML = "elevenlabs_ssml"
    """ElevenLabs with ``enable_ssml_parsing``: the whole SSML subset, the ``<speak>`` root optional."""


def read_script(text: str, markup: Markup) -> Script:
    """The script ``text`` says under ``markup``. Plain text costs one prefix check.

    Raises:
        MarkupError: the markup cannot be read (where and why).
    """
    if markup is Markup.SSML:
        return parse_ssml(text) if is_ssml(text) else Script.plain(text)
    if markup is Markup.BREAKS:
        return read_breaks(text).checked("the text")
    if markup is Markup.ELEVENLABS_SSML:
        if is_ssml(text):
            return parse_ssml(text)
        try:
            return parse_ssml(f"{_WRAPPER}{text}</speak>")
        except MarkupError as exc:  # say where in the caller's text, not in the wrapped one
            column = exc.column - len(_WRAPPER) if exc.line == 1 else exc.column
            raise MarkupError(exc.reason, exc.line, max(column, 1)) from None
    return Script.plain(text)
