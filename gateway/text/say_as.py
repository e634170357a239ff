"""``<say-as interpret-as>``: a span of text written as the words it is read as (English), before any engine reads it.

Expanded here, not in each engine, so that every engine says the same: ``characters``/``spell-out`` (letter by
letter, digits as words), ``cardinal``, ``ordinal``, ``digits``, ``date`` (``format`` ``mdy``, ``dmy``, ``ymd``, ``md``,
``dm``, ``ym``, ``my``, ``y``; ``mdy`` when absent), ``time`` (``10:30``, ``2:05pm``, ``14:00``) and ``telephone``
(digit by digit, a pause at each separator). The numbers are read by the text normalizer's English rules
(``engines/chattts/normalize/en.py``). A value that does not read as its type, and any other ``interpret-as``, is left
as written.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from engines.chattts.normalize import en

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["INTERPRETATIONS", "say_as"]

_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
    "December",
)  # fmt: skip
_INTEGER = re.compile(r"[+-]?\d{1,15}")
_ORDINAL = re.compile(r"(\d{1,15})(?:st|nd|rd|th)?", re.IGNORECASE)
_TIME = re.compile(r"(\d{1,2})(?::(\d{2}))?(?::\d{2})?\s*([ap])\.?\s*m?\.?", re.IGNORECASE)
_TIME_24 = re.compile(r"(\d{1,2}):(\d{2})(?::\d{2})?")
_DATE_FIELDS = re.compile(r"\d{1,4}")


def _characters(text: str, _: str) -> str | None:
    spoken = [en.digits(ch) if ch.isdigit() else ch.upper() for ch in text if ch.isalnum()]
    return " ".join(spoken) or None


def _cardinal(text: str, _: str) -> str | None:
    number = text.replace(",", "").strip()
    return en.cardinal(int(number)) if _INTEGER.fullmatch(number) else None


def _ordinal(text: str, _: str) -> str | None:
    match = _ORDINAL.fullmatch(text.replace(",", "").strip())
    return en.ordinal(int(match[1])) if match else None


def _digits(text: str, _: str) -> str | None:
    return en.digits(text) or None


def _telephone(text: str, _: str) -> str | None:
    groups = [en.digits(group) for group in re.findall(r"\d+", text)]
    spoken = ", ".join(groups)
    return ("plus " + spoken if text.strip().startswith("+") else spoken) or None


def _time(text: str, _: str) -> str | None:
    text = text.strip()
    if match := _TIME.fullmatch(text):
        hour, minute, meridiem = int(match[1]), int(match[2] or 0), match[3].lower() + "m"
        return en.time(hour, minute, meridiem) if 1 <= hour <= 12 and minute < 60 else None
    if match := _TIME_24.fullmatch(text):
        hour, minute = int(match[1]), int(match[2])
        return en.time(hour, minute) if hour < 24 and minute < 60 else None
    return None


def _date(text: str, format_: str) -> str | None:
    order = (format_ or "mdy").lower()
    fields = _DATE_FIELDS.findall(text)
    if not set(order) <= set("dmy") or len(fields) != len(order) or len(order) > 3:
        return None
    values = dict(zip(order, (int(field) for field in fields), strict=True))
    month, day, year = values.get("m"), values.get("d"), values.get("y")
    if (month is not None and not 1 <= month <= 12) or (day is not None and not 1 <= day <= 31):
        return None
    words = [_MONTHS[month - 1]] if month is not None else []
    if day is not None:
        words.append(en.ordinal(day) if month is not None else f"the {en.ordinal(day)}")
    if year is not None:
        words.append(en.year(year))
    return " ".join(words)


INTERPRETATIONS: dict[str, Callable[[str, str], str | None]] = {
    "characters": _characters,
    "spell-out": _characters,
    "verbatim": _characters,
    "cardinal": _cardinal,
    "number": _cardinal,
    "ordinal": _ordinal,
    "digits": _digits,
    "number_digit": _digits,
    "date": _date,
    "time": _time,
    "telephone": _telephone,
}
"""The ``interpret-as`` values read here, and how."""


def say_as(text: str, interpret_as: str, format_: str = "") -> str:
    """``text`` as the words ``interpret_as`` (and its ``format``) reads it; as written when it cannot be read so."""
    interpret = INTERPRETATIONS.get(interpret_as.strip().lower())
    spoken = interpret(text, format_) if interpret is not None else None
    return text if spoken is None else spoken
