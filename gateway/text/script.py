"""A script: what a request says, as spans of speech (each with its own voice and rate) and exact silences.

Plain text is a script of one span, the text as given; SSML (``ssml.py``), ElevenLabs' break tags (``breaks.py``) and
a dialogue's turns are scripts of many. The speech service speaks each span as an engine job of its own (one
segment of the request's stream, ``gateway/speech/segments.py``) and each silence as PCM zeros.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeAlias

from gateway.text.errors import MarkupError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["IDENTITY", "MAX_PARTS", "Part", "Pronounce", "Script", "Silence", "Speech", "speakable"]

MAX_PARTS = 256
"""The most spans and silences one script may have: each span is an engine job of its own."""


@dataclass(frozen=True, slots=True)
class Speech:
    """A span of text spoken in one voice at one rate."""

    text: str
    """What is said, as the engine gets it (``say-as`` and ``sub`` already expanded), trimmed and not empty."""
    voice: str | None = None
    """Another voice than the request's (``<voice name>``, a dialogue's turn): a built-in voice, or one of the
    tenant's custom voices by name or id; ``None``: the request's."""
    rate: float = 1.0
    """The span's speed as a factor of the request's (``<prosody rate>``)."""


@dataclass(frozen=True, slots=True)
class Silence:
    """An exact pause the gateway inserts (``<break>``): PCM zeros, never an engine's job."""

    seconds: float


Part: TypeAlias = Speech | Silence

Pronounce: TypeAlias = "Callable[[str], str]"
"""How a span of text is said for the tenant: ``text -> text`` (its pronunciation dictionaries' aliases)."""


def _as_written(text: str) -> str:
    return text


IDENTITY: Pronounce = _as_written
"""Every span as written: the hook of a tenant without pronunciation dictionaries (a script keeps itself)."""


def speakable(text: str) -> bool:
    """Whether ``text`` has anything to say: a letter or a digit."""
    return any(ch.isalnum() for ch in text)


@dataclass(frozen=True, slots=True)
class Script:
    """What a request says, in order. Its :attr:`text` is what its timestamps refer to: the spans' texts joined by a
    space (for plain text, the text as given)."""

    parts: tuple[Part, ...]

    @classmethod
    def plain(cls, text: str) -> Script:
        """``text`` as it is, in the request's voice: one span."""
        return cls((Speech(text),))

    @property
    def simple(self) -> bool:
        """One span in the request's voice at its rate: spoken exactly as plain text would be."""
        if len(self.parts) != 1:
            return False
        part = self.parts[0]
        return isinstance(part, Speech) and part.voice is None and part.rate == 1.0

    @property
    def empty(self) -> bool:
        """Nothing to say and no silence to keep (breaks of no time at most): what no request may ask for. A script of
        silences alone is not empty: it is that much silence."""
        return not any(isinstance(part, Speech) or part.seconds > 0 for part in self.parts)

    def checked(self, what: str) -> Script:
        """The script, unless it is :attr:`empty`.

        Raises:
            MarkupError: it is (``what``: what the caller sent, "the SSML", "the text").
        """
        if self.empty:
            raise MarkupError(f"{what} has no text to speak, nor a break that lasts", 1, 1)
        return self

    @property
    def text(self) -> str:
        return " ".join(part.text for part in self.parts if isinstance(part, Speech))

    def spans(self) -> Iterator[tuple[int, Part]]:
        """Each part with where its text starts in :attr:`text` (a silence: where the next span starts)."""
        offset = 0
        for part in self.parts:
            yield offset, part
            if isinstance(part, Speech):
                offset += len(part.text) + 1

    def voices(self) -> set[str]:
        """The other voices its spans ask for."""
        return {part.voice for part in self.parts if isinstance(part, Speech) and part.voice is not None}

    def pronounced(self, pronounce: Pronounce) -> Script:
        """Every span's text as ``pronounce`` says it (unchanged when it is :data:`IDENTITY`, or has no span: silences
        alone); a span left with nothing to say is dropped.

        Raises:
            MarkupError: no span is left with anything to say.
        """
        if pronounce is IDENTITY or not any(isinstance(part, Speech) for part in self.parts):
            return self
        parts = (replace(p, text=pronounce(p.text).strip()) if isinstance(p, Speech) else p for p in self.parts)
        kept = tuple(p for p in parts if not isinstance(p, Speech) or p.text)
        if not any(isinstance(part, Speech) for part in kept):
            raise MarkupError("nothing is left to say once the pronunciations apply", 1, 1)
        return Script(kept)

    def cache_text(self) -> str:
        """What stands for the script in the audio cache's key: the text of a simple script (``<speak>Hi</speak>``
        is a hit for ``Hi``), else every part with its voice, rate and silence, in order."""
        if self.simple:
            return self.text
        return json.dumps(
            [[p.text, p.voice, p.rate] if isinstance(p, Speech) else round(p.seconds, 4) for p in self.parts],
            ensure_ascii=False,
            separators=(",", ":"),
        )
