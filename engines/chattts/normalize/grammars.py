"""Optional grammar normalizers: NeMo text processing (English) and WeTextProcessing (Chinese), as ChatTTS's own
examples use them. Installed with the ``normalize`` extra; used when both import, else the built-in rules.

Both install from PyPI and pull in pynini (650 MB); NeMo compiles its English grammar once into ``cache_dir`` and
loads it from there afterwards; WeTextProcessing ships compiled grammars. Per sentence they cost far more than the
built-in rules: BENCHMARKS.md, "Text normalization" (``bench/normalize.py``).
"""

from __future__ import annotations

import importlib
import logging
import re
from pathlib import Path
from typing import Any

from lifecycle import naming

__all__ = ["NAME", "GrammarNormalizer", "load_grammars"]

NAME = "nemo+wetext"
"""The ``text_normalizer`` detail of an engine that normalizes with these grammars."""

_CJK = re.compile(r"[\u3400-\u9fff]")
# Split after a sentence's end, keeping the separator: "$19.99" is one sentence, "好。你好" two.
_SENTENCES = re.compile(r"((?<=[.!?;])\s+|(?<=[。！？；])\s*)")  # noqa: RUF001
logger = naming.logger("chattts")
_DEFAULT_CACHE = Path("~/.cache/tts-gateway/nemo").expanduser()


class GrammarNormalizer:
    """Each sentence goes to WeTextProcessing when it holds Chinese characters, else to NeMo."""

    def __init__(self, english: Any, chinese: Any) -> None:
        self._english = english
        self._chinese = chinese

    def __call__(self, text: str) -> str:
        parts = _SENTENCES.split(text)  # sentence, separator, sentence, ...
        return "".join(self._sentence(part) if index % 2 == 0 and part else part for index, part in enumerate(parts))

    def _sentence(self, sentence: str) -> str:
        if _CJK.search(sentence):
            return str(self._chinese.normalize(sentence))
        return str(self._english.normalize(sentence, punct_post_process=True))


def load_grammars(cache_dir: Path = _DEFAULT_CACHE) -> GrammarNormalizer | None:
    """Both grammars, or ``None`` when either package is not installed (the usual case: they are optional)."""
    try:
        nemo = importlib.import_module("nemo_text_processing.text_normalization.normalize")
        wetext = importlib.import_module("tn.chinese.normalizer")
    except ImportError:
        return None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        english = nemo.Normalizer(input_case="cased", lang="en", cache_dir=str(cache_dir))
        chinese = wetext.Normalizer()
    except Exception:
        logger.warning(
            "NeMo/WeTextProcessing are installed but failed to load; using the built-in rules", exc_info=True
        )
        return None
    # NeMo logs every sentence it cannot post-process at INFO (and sets its level on import).
    logging.getLogger("NeMo-text-processing").setLevel(logging.WARNING)
    return GrammarNormalizer(english, chinese)
