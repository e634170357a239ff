"""SSML, read safely into a :class:`~gateway.text.script.Script`: the subset callers moving from Azure, Google and
Polly send (``docs/ssml.md``).

``speak`` (the root), ``p`` and ``s`` (their text), ``break`` (``time`` or ``strength``: an exact silence),
``sub`` (its ``alias`` is said), ``say-as`` (``say_as.py``), ``prosody rate`` (the span's speed), ``voice name``
(another voice for the span), ``emphasis``, ``phoneme`` and ``lang`` (their text), ``mark`` (nothing); any other
element is dropped with its text kept, except metadata (``meta``, ``metadata``, ``lexicon``, ``desc``), which says
nothing.

Untrusted input: parsed by defusedxml (no DTD, hence no entity expansion nor external reference), within caps on
its size, nesting and elements, enforced as the parser goes (a 10,000-deep document stops at the 65th level). Every
refusal is a :class:`~gateway.text.errors.MarkupError` naming the line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from gateway.text.errors import MarkupError
from gateway.text.say_as import say_as
from gateway.text.script import MAX_PARTS, Part, Script, Silence, Speech, speakable

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MAX_BREAK_S", "MAX_DEPTH", "MAX_ELEMENTS", "MAX_SSML_CHARS", "is_ssml", "parse_ssml"]

MAX_SSML_CHARS = 131_072
"""The longest SSML document read (the APIs take 4,096 characters: this bounds any other caller)."""
MAX_DEPTH = 64
"""The deepest nesting of elements."""
MAX_ELEMENTS = 2_048
"""The most elements in a document."""
MAX_BREAK_S = 10.0
"""The longest break: a longer ``time`` is cut to it (as Azure cuts at 5 s and Google at 10 s)."""

_SPEAK = re.compile(r"\s*(?:<speak[\s>/]|<\?xml[\s?]|<!DOCTYPE\s)")
_DURATION = re.compile(r"\s*(\d{1,7}(?:\.\d{1,6})?)\s*(ms|s)\s*", re.IGNORECASE)
_PERCENT = re.compile(r"\s*([+-]?\d{1,4}(?:\.\d{1,6})?)\s*%\s*")
_NUMBER = re.compile(r"\s*(\d{1,3}(?:\.\d{1,6})?)\s*")
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+(?=[,.;:!?])")
_STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 1.0, "x-strong": 1.5}
_RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
_RATE_RANGE = (0.25, 4.0)
_SILENT = frozenset({"meta", "metadata", "lexicon", "desc", "mark"})
"""Elements whose content says nothing."""
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def is_ssml(text: str) -> bool:
    """Whether ``text`` is SSML: its first non-blank characters are ``<speak`` (or an XML declaration or DTD, which
    are refused when read); plain text with ``<`` elsewhere is plain text."""
    return text.lstrip()[:1] == "<" and _SPEAK.match(text) is not None


def parse_ssml(document: str) -> Script:
    """The script ``document`` says.

    Raises:
        MarkupError: not well-formed, a DTD or entity, over a cap, a value that cannot be read, or nothing to say.
    """
    if len(document) > MAX_SSML_CHARS:
        raise MarkupError(f"SSML longer than {MAX_SSML_CHARS} characters", 1, 1)
    reader = _ScriptReader()
    parser = DefusedXMLParser(target=reader, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    expat = parser.parser  # the pure-Python XMLParser's pyexpat parser
    reader.where = lambda: (expat.CurrentLineNumber, expat.CurrentColumnNumber + 1)
    try:
        parser.feed(document)
        parser.close()
    except ParseError as exc:
        line, column = exc.position
        raise MarkupError(_expat_reason(exc), line, column + 1) from None
    except DefusedXmlException:
        raise MarkupError("DTDs and entities are not allowed", *reader.where()) from None
    return reader.script()


def _expat_reason(exc: ParseError) -> str:
    """expat's message without its own ``line L, column C`` (ours says where)."""
    return str(exc).split(":", 1)[0]


@dataclass
class _Frame:
    """An open element and what it changed: the voice and rate before it, and how it treats its content."""

    voice: str | None
    rate: float
    capture: tuple[str, str] | None = None
    """``say-as``: its ``interpret-as`` and ``format``; its text is collected and expanded at its end."""
    silent: bool = False
    """Its content says nothing."""
    inert: bool = False
    """Inside a silent element or a ``say-as``: it changes nothing."""


@dataclass
class _ScriptReader:
    """The parser's target: turns the elements, as they are parsed, into the script's parts."""

    where: Callable[[], tuple[int, int]] = lambda: (1, 1)
    parts: list[Part] = field(default_factory=list)
    voice: str | None = None
    rate: float = 1.0
    frames: list[_Frame] = field(default_factory=list)
    elements: int = 0
    text: list[str] = field(default_factory=list)
    """The text of the span being read (the current voice and rate)."""
    captured: list[str] = field(default_factory=list)
    silent: int = 0
    """How many open elements say nothing of their content."""
    capturing: int = 0
    """How many open ``say-as`` collect their text (nested ones only add theirs to the outermost)."""

    # ------------------------------------------------------------------ the parser's target
    def start(self, tag: str, attrs: dict[str, str]) -> None:
        name = tag.rpartition("}")[2]
        self._count(name)
        frame = _Frame(self.voice, self.rate)
        self.frames.append(frame)
        if self.silent or self.capturing:
            frame.inert = True
            return
        self._open(name, attrs, frame)

    def data(self, data: str) -> None:
        if self.silent:
            return
        (self.captured if self.capturing else self.text).append(data)

    def end(self, tag: str) -> None:
        frame = self.frames.pop()
        if frame.inert:
            return
        if frame.silent:
            self.silent -= 1
            return
        if frame.capture is not None:
            self.capturing -= 1
            interpret_as, format_ = frame.capture
            written = "".join(self.captured)
            self.captured.clear()
            self.text.append(f" {say_as(_SPACES.sub(' ', written).strip(), interpret_as, format_)} ")
        elif tag.rpartition("}")[2] in {"p", "s"}:
            self.text.append(" ")
        if (frame.voice, frame.rate) != (self.voice, self.rate):
            self._flush()
            self.voice, self.rate = frame.voice, frame.rate

    def close(self) -> None:
        self._flush()

    # ------------------------------------------------------------------ elements
    def _count(self, name: str) -> None:
        self.elements += 1
        if not self.frames and name != "speak":
            raise self._refusal(f"the root element must be <speak>, not <{name}>")
        if len(self.frames) >= MAX_DEPTH:
            raise self._refusal(f"elements nested deeper than {MAX_DEPTH}")
        if self.elements > MAX_ELEMENTS:
            raise self._refusal(f"more than {MAX_ELEMENTS} elements")

    def _open(self, name: str, attrs: dict[str, str], frame: _Frame) -> None:
        if name in _SILENT:
            frame.silent = True
            self.silent += 1
        elif name == "break":
            self._flush()
            self._add(Silence(self._break_seconds(attrs)))
            frame.silent = True  # a break's content (there should be none) says nothing
            self.silent += 1
        elif name == "sub":
            self.text.append(f" {attrs.get('alias', '')} ")
            frame.silent = True
            self.silent += 1
        elif name == "say-as":
            frame.capture = (attrs.get("interpret-as", ""), attrs.get("format", ""))
            self.capturing += 1
        elif name == "prosody" and "rate" in attrs:
            self._flush()
            self.rate = min(max(self.rate * self._rate(attrs["rate"]), _RATE_RANGE[0]), _RATE_RANGE[1])
        elif name == "voice" and attrs.get("name", "").strip():
            self._flush()
            self.voice = attrs["name"].strip()
        elif name in {"p", "s"}:
            self.text.append(" ")

    def _break_seconds(self, attrs: dict[str, str]) -> float:
        if "time" in attrs:
            match = _DURATION.fullmatch(attrs["time"])
            if match is None:
                raise self._refusal(f'break time "{attrs["time"][:32]}" is not a duration such as "500ms" or "1.5s"')
            value = float(match[1]) / (1000 if match[2].lower() == "ms" else 1)
            return min(value, MAX_BREAK_S)
        strength = attrs.get("strength", "medium").strip().lower()
        if strength not in _STRENGTHS:
            raise self._refusal(f'break strength "{strength[:32]}" is not one of {", ".join(_STRENGTHS)}')
        return _STRENGTHS[strength]

    def _rate(self, value: str) -> float:
        keyword = value.strip().lower()
        if keyword in _RATES:
            return _RATES[keyword]
        if match := _PERCENT.fullmatch(value):
            number = float(match[1])
            # "+20%"/"-10%" change the rate by that much (Azure, Polly); "150%" is the rate itself (Google).
            return 1 + number / 100 if match[1][0] in "+-" else number / 100
        if match := _NUMBER.fullmatch(value):
            return float(match[1])
        raise self._refusal(f'prosody rate "{value[:32]}" is not x-slow … x-fast, a percentage or a number')

    # ------------------------------------------------------------------ parts
    def _flush(self) -> None:
        text = _SPACE_BEFORE_PUNCTUATION.sub("", _SPACES.sub(" ", "".join(self.text))).strip()
        self.text.clear()
        if not speakable(text):
            return
        last = self.parts[-1] if self.parts else None
        if isinstance(last, Speech) and (last.voice, last.rate) == (self.voice, self.rate):
            self.parts[-1] = Speech(f"{last.text} {text}", self.voice, self.rate)
        else:
            self._add(Speech(text, self.voice, self.rate))

    def _add(self, part: Part) -> None:
        last = self.parts[-1] if self.parts else None
        if isinstance(part, Silence) and isinstance(last, Silence):
            self.parts[-1] = Silence(min(last.seconds + part.seconds, MAX_BREAK_S))
            return
        if len(self.parts) >= MAX_PARTS:
            raise self._refusal(f"more than {MAX_PARTS} spans and breaks")
        self.parts.append(part)

    def script(self) -> Script:
        parts = tuple(p for p in self.parts if not (isinstance(p, Silence) and p.seconds <= 0))
        return Script(parts).checked("the SSML")  # breaks alone are that much silence

    def _refusal(self, reason: str) -> MarkupError:
        return MarkupError(reason, *self.where())
