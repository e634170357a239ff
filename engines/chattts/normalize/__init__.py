"""Text normalization for ChatTTS: numbers, money, dates, times, units, addresses and symbols as spoken words.

ChatTTS's tokenizer reads words, not written forms: ``$19.99`` or ``2025年3月14日`` must reach it as
``nineteen dollars and ninety-nine cents`` and ``二零二五年三月十四日``. :func:`normalize_text` does that in pure
Python (English, Chinese and mixed text); :func:`unreadable_characters` lists what is left that ChatTTS was not
trained to read.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import cache

from engines.chattts.normalize.grammars import NAME as GRAMMARS
from engines.chattts.normalize.grammars import GrammarNormalizer, load_grammars
from engines.chattts.normalize.rules import apply_rules

__all__ = [
    "BUILTIN",
    "GRAMMARS",
    "OFF",
    "active_normalizer",
    "normalize_builtin",
    "normalize_text",
    "unreadable_characters",
]

BUILTIN = "builtin"
"""The ``text_normalizer`` detail of an engine that normalizes with this package."""
OFF = "off"
"""The ``text_normalizer`` detail of an engine with ``normalize: false``."""

# ChatTTS's own normalizer (ChatTTS/norm.py ``character_simplifier``) turns these pauses into commas before speaking.
_PAUSES = str.maketrans(dict.fromkeys(":;()<>[]{}", ",") | dict.fromkeys("：；（）【】《》「」『』", "，"))  # noqa: RUF001

# The characters ChatTTS's own normalizer keeps (ChatTTS/norm.py ``reject_pattern``), plus the sentence
# punctuation our tokenizer reads.
_READABLE = re.compile(r"[\u4e00-\u9fffA-Za-z，。、,.?!？！'\- ]")  # noqa: RUF001


def normalize_text(text: str) -> str:
    """``text`` with numbers, money, dates, times, units, abbreviations, addresses and symbols written as words.

    English, Chinese and mixed text: each number is read in the language of the words around it. With the
    ``normalize`` extra installed, NeMo and WeTextProcessing go first; the built-in rules then read what they left.
    """
    grammars = _grammars()
    return normalize_builtin(text if grammars is None else grammars(unicodedata.normalize("NFKC", text)))


def normalize_builtin(text: str) -> str:
    """:func:`normalize_text` with the built-in rules only, whatever is installed."""
    text = apply_rules(unicodedata.normalize("NFKC", text)).translate(_PAUSES)
    text = re.sub(r"\s*,(?:\s*,)*\s*", ", ", text)  # "(see table 2): good" → ", see table two, good"
    text = re.sub(r"\s*，(?:\s*[,，])*\s*", "，", text)  # noqa: RUF001
    text = re.sub(r"(?<=[\u3400-\u9fff]), ?|, ?(?=[\u3400-\u9fff])", "，", text)  # noqa: RUF001 - a Chinese pause
    return text.strip(" ,")


def active_normalizer() -> str:
    """The name of the normalizer :func:`normalize_text` uses here: the ``text_normalizer`` detail of the engine.

    Loads the optional grammars when they are installed (NeMo compiles its grammar on first use): call it when the
    engine loads, not on the first request.
    """
    return BUILTIN if _grammars() is None else GRAMMARS


@cache
def _grammars() -> GrammarNormalizer | None:
    return load_grammars()


def unreadable_characters(text: str) -> Counter[str]:
    """The characters of ``text`` that ChatTTS was not trained to read, with their counts."""
    return Counter(char for char in text if not _READABLE.match(char))
