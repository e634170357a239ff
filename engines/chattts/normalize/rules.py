"""The built-in normalizer: ordered regular-expression rules that rewrite written forms as spoken words.

Each rule reads its match in the language of its context (:func:`is_chinese_context`), so mixed text such as
``我买了3个apple`` or ``Meet me at 3点`` gets each number in the language around it. Rules run in order: the
specific ones (addresses, phone numbers, dates, money) before the generic ones (plain numbers, symbols).
NeMo and WeTextProcessing do this with compiled grammars; this is the dependency-free subset ChatTTS needs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from engines.chattts.normalize import en, zh

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["RULES", "apply_rules", "is_chinese_context"]

Rule = tuple["re.Pattern[str]", "Callable[[re.Match[str]], str]"]

_PAD = "\x00"
_CONTEXT = 40  # characters searched for a letter on each side: keeps long digit-only input linear
_CJK = re.compile(r"[\u3400-\u9fff]")
_LETTER = re.compile(r"[^\W\d_]")
_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # fmt: skip
_MONTH_NAMES = "|".join(_MONTHS)
_UNIT_NAMES = "|".join(re.escape(u) for u in sorted(en.UNITS, key=len, reverse=True))
_DOMAINS = "com|org|net|io|dev|edu|gov|cn|uk|de|ai"  # bare domains recognised without http:// or www.
_SCALE_WORDS = {"k": "thousand", "m": "million", "mn": "million", "bn": "billion", "b": "billion"}
_YEAR_CUES = re.compile(r"\b(?:in|since|by|from|until|till|of|year|circa|around|before|after|between|to|and)\s+$", re.I)
_DATE_CUES = re.compile(r"\b(?:on|by|until|till|due|before|after|from|since)\s+$", re.I)
_URL_WORDS = {".": "dot", "/": "slash", "-": "dash", "_": "underscore", ":": "colon", "?": "question mark",
              "=": "equals", "&": "and", "#": "hash", "@": "at", "~": "tilde", "%": "percent", "+": "plus"}  # fmt: skip


def is_chinese_context(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is read in Chinese: it touches a Chinese character (``3点``, ``于2025``), or the
    nearest letter before it (else after it) is one."""
    if _CJK.match(text[end : end + 1]) or _CJK.match(text[start - 1 : start] if start else ""):
        return True
    for index in range(start - 1, max(start - _CONTEXT, 0) - 1, -1):
        if _LETTER.match(text[index]):
            return bool(_CJK.match(text[index]))
    for char in text[end : end + _CONTEXT]:
        if _LETTER.match(char):
            return bool(_CJK.match(char))
    return False


def _zh(match: re.Match[str]) -> bool:
    return is_chinese_context(match.string, match.start(), match.end())


def _words(spoken: str) -> str:
    """English words inserted into text, marked so that :func:`apply_rules` parts them from a neighbouring word
    (``Q&A`` → ``Q and A``) but adds no space next to a Chinese character or punctuation."""
    return f"{_PAD}{spoken}{_PAD}"


# ----------------------------------------------------------------- addresses
def _spell_address(text: str) -> str:
    """``john.doe@example.com`` → ``john dot doe at example dot com``; digits one by one."""
    words: list[str] = []
    for token in re.findall(r"[A-Za-z]+|\d|[^\sA-Za-z\d]", text):
        if token.isdigit():
            words.append(en.digits(token))
        elif token in _URL_WORDS:
            words.append(_URL_WORDS[token])
        elif token.isalpha():
            words.append(" ".join(token) if token.lower() == "www" else token)
    return " ".join(words)


def _url(match: re.Match[str]) -> str:
    address = re.sub(r"^[a-z]+://", "", match.group(0), flags=re.I).rstrip("/")
    return _words(_spell_address(address))


def _email(match: re.Match[str]) -> str:
    return _words(_spell_address(match.group(0)))


# ----------------------------------------------------------------- abbreviations
def _abbreviation(match: re.Match[str]) -> str:
    word = match.group(0)
    spoken = en.ABBREVIATIONS[word]
    rest = match.string[match.end() :]
    if word.endswith(".") and (not rest.strip() or (re.match(r"\s+[A-Z]", rest) and word in ("etc.",))):
        spoken += "."  # the abbreviation's period also ended the sentence
    return spoken


def _saint_or_street(match: re.Match[str]) -> str:
    return "Saint" if re.match(r"\s+[A-Z]", match.string[match.end() :]) else "Street" + _sentence_end(match)


def _doctor_or_drive(match: re.Match[str]) -> str:
    before = match.string[: match.start()]
    named_road = re.search(r"[A-Z][a-z]+\s+$", before) and not re.match(r"\s+[A-Z]", match.string[match.end() :])
    return "Drive" + _sentence_end(match) if named_road else "Doctor"


# ----------------------------------------------------------------- phone numbers, dates and times
def _phone(match: re.Match[str]) -> str:
    groups = re.findall(r"\+?\d+", match.group(0))
    if _zh(match):
        spoken = (("加" if g.startswith("+") else "") + zh.digits(g, one="幺") for g in groups)
        return "，".join(spoken)  # noqa: RUF001
    return _words(", ".join(("plus " if g.startswith("+") else "") + en.digits(g) for g in groups))


def _date(year: str | None, month: int, day: int, chinese: bool) -> str:
    if chinese:
        return (f"{zh.digits(year)}年" if year else "") + f"{zh.cardinal(month)}月{zh.cardinal(day)}日"
    spoken = f"{_MONTHS[month - 1]} {en.ordinal(day)}"
    return _words(spoken + (f", {en.year(int(year))}" if year else ""))


def _iso_date(match: re.Match[str]) -> str:
    year, month, day = match.group(1), int(match.group(2)), int(match.group(3))
    return _date(year, month, day, _zh(match))


def _slash_date(match: re.Match[str]) -> str:
    month, day, year = int(match.group(1)), int(match.group(2)), match.group(3)
    if year and len(year) == 2:
        year = "20" + year
    return _date(year, month, day, _zh(match))


def _month_name_date(match: re.Match[str]) -> str:
    month = _MONTHS.index(match.group(1).capitalize()) + 1
    return _date(match.group(3), month, int(match.group(2)), chinese=False)


def _day_month_date(match: re.Match[str]) -> str:
    spoken = f"the {en.ordinal(int(match.group(1)))} of {match.group(2)}"
    return _words(spoken + (f", {en.year(int(match.group(3)))}" if match.group(3) else ""))


def _chinese_year(match: re.Match[str]) -> str:
    return zh.digits(match.group(1)) + "年"


def _clock(match: re.Match[str]) -> str:
    hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    meridiem = (match.group(4) or "").replace(".", "").lower()
    if _zh(match) and not meridiem:
        return zh.time(hour, minute, second)
    spoken = en.time(hour, minute, meridiem)
    return _words(spoken + (f" and {en.cardinal(second)} seconds" if second else "")) + _sentence_end(match)


def _hour_meridiem(match: re.Match[str]) -> str:
    return _words(en.time(int(match.group(1)), 0, match.group(2).lower() + "m")) + _sentence_end(match)


def _sentence_end(match: re.Match[str]) -> str:
    """The period of ``p.m.`` that also ends the sentence, kept so that the sentence still ends."""
    rest = match.string[match.end() :]
    return "." if match.group(0).endswith(".") and (not rest.strip() or re.match(r"\s+[A-Z]", rest)) else ""


# ----------------------------------------------------------------- money, percentages, units
def _money(match: re.Match[str]) -> str:
    sign, symbol, amount, scale = match.group(1), match.group(2), match.group(3), (match.group(4) or "")
    if _zh(match) or scale in ("万", "亿"):
        return ("负" if sign else "") + zh.money(amount, symbol, scale)
    scale = _SCALE_WORDS.get(scale.lower(), scale.lower())
    return _words(("minus " if sign else "") + en.money(amount, symbol, scale))


def _percent(match: re.Match[str]) -> str:
    number = match.group(1)
    if _zh(match):
        return ("负" if number.startswith("-") else "") + "百分之" + zh.decimal(number.lstrip("-"))
    return _words(f"{en.decimal(number)} percent")


def _unit(match: re.Match[str]) -> str:
    number, unit = match.group(1), match.group(2)
    if _zh(match):
        return zh.with_unit(number, unit)
    return _words(en.with_unit(number, unit))


# ----------------------------------------------------------------- ordinals, years, ranges, fractions
def _ordinal(match: re.Match[str]) -> str:
    return _words(en.ordinal(int(match.group(1).replace(",", ""))))


def _decade(match: re.Match[str]) -> str:
    spoken = en.year(int(match.group(1)))
    return _words(spoken[:-1] + "ies" if spoken.endswith("y") else spoken + "s")


def _is_year(number: str) -> bool:
    return len(number) == 4 and 1000 <= int(number) <= 2099


def _range(match: re.Match[str]) -> str:
    first, second = match.group(1), match.group(2)
    if _zh(match):
        if _is_year(first) and _is_year(second) and match.string[match.end() : match.end() + 1] == "年":
            return f"{zh.digits(first)}年到{zh.digits(second)}"
        return f"{first}到{second}"
    if _is_year(first) and _is_year(second):
        return _words(f"{en.year(int(first))} to {en.year(int(second))}")
    return f"{first} to {second}"


def _year(match: re.Match[str]) -> str:
    cue = _YEAR_CUES.search(match.string[: match.start()])
    if cue is None or _zh(match):
        return match.group(0)  # a plain number: the number rule reads it
    return _words(en.year(int(match.group(1))))


def _fraction_or_date(match: re.Match[str]) -> str:
    """``3/14`` is a date (no one says three fourteenths); ``1/2`` a fraction unless a date word precedes it."""
    numerator, denominator = int(match.group(1)), int(match.group(2))
    cue = _DATE_CUES.search(match.string[: match.start()])
    if 1 <= numerator <= 12 and 1 <= denominator <= 31 and (denominator > 10 or cue):
        return _date(None, numerator, denominator, _zh(match))
    if _zh(match):
        return f"{zh.cardinal(denominator)}分之{zh.cardinal(numerator)}"
    return _words(en.fraction(numerator, denominator))


def _two_before_measure_word(match: re.Match[str]) -> str:
    return "两"


# ----------------------------------------------------------------- numbers and symbols
def _number(match: re.Match[str]) -> str:
    number = match.group(0)
    if _zh(match):
        return zh.decimal(number)
    return _words(en.decimal(number))


def _hash_number(match: re.Match[str]) -> str:
    number = match.group(1)
    if _zh(match):
        return zh.digits(number) + "号"
    spoken = en.cardinal(int(number)) if len(number) <= 3 else en.digits(number)
    return _words(f"number {spoken}")


def _symbol(english: str, chinese: str) -> Callable[[re.Match[str]], str]:
    def speak(match: re.Match[str]) -> str:
        return chinese if _zh(match) else _words(english)

    return speak


def _rule(pattern: str, replace: Callable[[re.Match[str]], str], flags: int = 0) -> Rule:
    # ASCII: to Python every Chinese character is a word character, which would hide the digits in 于2025年.
    return re.compile(pattern, flags | re.ASCII), _or_as_written(replace)


def _or_as_written(replace: Callable[[re.Match[str]], str]) -> Callable[[re.Match[str]], str]:
    """``replace``, leaving a match as written where it cannot read it: its patterns match more than its reading
    takes ("82.8-2" is a score to the score rule, whose int() then fails on "82.8"), and one exception would fail the
    whole text, every time it is sent; the later rules still read what it leaves (the numbers, one by one)."""

    def guarded(match: re.Match[str]) -> str:
        try:
            return replace(match)
        except (ValueError, IndexError, KeyError, ArithmeticError):
            return match.group(0)

    return guarded


RULES: tuple[Rule, ...] = (
    _rule(r"\b(?:https?://|www\.)[^\s,;'\"<>，。、]+(?<![.!?])", _url, re.I),  # noqa: RUF001
    _rule(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b", _email),
    _rule(r"(?<![\w.-])(?:[\w-]+\.)+(?:" + _DOMAINS + r")(?:/[^\s,;'\"，。、]*)?(?<![.!?])\b", _url),  # noqa: RUF001
    _rule(r"(?<![\w.])(?:" + "|".join(re.escape(a) for a in en.ABBREVIATIONS) + r")(?!\w)", _abbreviation),
    _rule(r"\bSt\.", _saint_or_street),
    _rule(r"\bDr\.", _doctor_or_drive),
    _rule(r"(?<![\w+])(?:\+\d{1,3}[ -]?)?\(?\d{3}\)?[ -.]\d{3}[ -.]\d{4}\b", _phone),
    _rule(r"(?<![\w+])\+\d{1,3}(?:[ -]\d{2,5}){2,4}\b", _phone),
    _rule(r"(?<!\d)1[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)", _phone),
    _rule(r"(?<!\d)(?<!\d[ -])\d{3}-\d{4}\b(?![ -]\d)", _phone),
    _rule(r"(?<![\d-])0\d{2,3}-\d{7,8}(?![\d-])", _phone),
    _rule(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", _iso_date),
    _rule(r"\b(1[0-2]|0?[1-9])/(3[01]|[12]\d|0?[1-9])/(\d{4}|\d{2})\b", _slash_date),
    _rule(rf"\b({_MONTH_NAMES})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?", _month_name_date),
    _rule(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH_NAMES})\b(?:,?\s+(\d{{4}})\b)?", _day_month_date),
    _rule(r"(?<![\w.-])(\d+(?:\.\d+)?)\s?[-–~～]\s?(\d+(?:\.\d+)?)(?![\w.]*\d)", _range),  # noqa: RUF001
    _rule(r"(\d{2,4})\s*年", _chinese_year),
    _rule(r"\b([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?(?:\s*([ap]\.?m\.?)(?![a-z]))?", _clock, re.I),
    _rule(r"\b(1[0-2]|0?[1-9])\s*([ap])\.?m\b\.?", _hour_meridiem, re.I),
    _rule(r"\b(1\d{2}0|20\d0)s\b", _decade),
    _rule(r"(-)?([$€£¥])\s?(" + _NUM + r")(?:\s?(万|亿|[kKmMbB]n?\b|million\b|billion\b|thousand\b))?", _money),
    _rule(r"(?<![\d,.])(-?" + _NUM + r")\s?%", _percent),
    _rule(r"(?<![\w.])(-?" + _NUM + r")\s?(" + _UNIT_NAMES + r")(?![\w/])", _unit, re.I),
    _rule(r"\b(\d+(?:,\d{3})*)(?:st|nd|rd|th)\b", _ordinal, re.I),
    _rule(r"(?<![\w.,])(1\d{3}|20\d{2})(?![\w.,%]*\d)", _year),
    _rule(r"\b24/7\b", _symbol("twenty-four seven", "全天候")),
    _rule(r"(?<![\w./])(\d{1,2})/(\d{1,2})(?![\w/])", _fraction_or_date),
    _rule(r"(?<![\d.,])2(?![\d.,])(?=[" + "".join(sorted(zh.MEASURE_WORDS)) + "])", _two_before_measure_word),
    _rule(r"#\s?(\d+)", _hash_number),
    _rule(r"(?<![\w.])-?\d+(?:,\d{3})+(?:\.\d+)?|(?<![\w.])-?\d*\.\d+|(?<![\w.,])-(?=\d)\d+|\d+", _number),
    _rule(r"\s*&\s*", _symbol("and", "和")),
    _rule(r"\s*\+\s*", _symbol("plus", "加")),
    _rule(r"\s*=\s*", _symbol("equals", "等于")),
    _rule(r"\s*%\s*", _symbol("percent", "百分比")),
    _rule(r"\s*[×]\s*", _symbol("times", "乘")),  # noqa: RUF001
    _rule(r"\s*@\s*", _symbol("at", "艾特")),
    _rule(r"\s*#\s*", _symbol("number", "号")),
    _rule(r"\s*°\s*", _symbol("degrees", "度")),
)


def apply_rules(text: str) -> str:
    """Run every rule over ``text`` in order, then turn the marks around English words into spaces where needed."""
    text = text.replace(_PAD, " ")
    for pattern, replace in RULES:
        text = pattern.sub(replace, text)
    text = re.sub(f"(?<=[A-Za-z0-9'-]){_PAD}+(?=[A-Za-z0-9])", " ", text).replace(_PAD, "")
    text = re.sub(r"\s+", " ", text)
    return re.sub(r" (?=[,.!?;:，。！？；：、])", "", text).strip()  # noqa: RUF001
