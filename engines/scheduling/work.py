"""What a request costs an engine, before it runs: the seconds of speech its text will become.

The scheduler shares an engine by work, and a character is a poor unit of it: the work per character varies several
times over between scripts and styles (espeak takes about three times as long per character for spaced digits as for
English, six times for CJK), and every engine's work grows with the audio it makes (ChatTTS: one decode step per
21.3 ms of audio). So the cost is
the speech the text should make, from the syllables a reader would say: vowel groups of alphabetic words, one
syllable per CJK character, kana or Hangul block, numbers as they are read out, and the pauses of punctuation. It is
an estimate; the scheduler corrects it by the audio that was actually produced (``TenantScheduler.correct``), so what
a tenant is charged converges on what it used whatever its text looks like.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["SYLLABLES_PER_SECOND", "expected_speech_s"]

SYLLABLES_PER_SECOND = 4.5
"""An unhurried reading pace (English is read at about 4-5 syllables a second, Mandarin at about 4-5 characters)."""

_SENTENCE_PAUSE_S = 0.35
_CLAUSE_PAUSE_S = 0.15
_MIN_SPEECH_S = 0.25
# A number is read out: "1234" as "one thousand two hundred thirty-four", about 1.5 syllables a digit; a lone digit
# ("7") is one or two.
_SYLLABLES_PER_DIGIT = 1.5
_TOKEN = re.compile(r"\d+|[^\W\d_]+|[.!?;\u3002\uff01\uff1f]|[,:\u3001\uff0c\uff1a]", re.UNICODE)
_VOWEL_GROUPS = re.compile(r"[aeiouy\u00e0-\u00ff]+", re.IGNORECASE)
_SENTENCE_MARKS = frozenset(".!?;\u3002\uff01\uff1f")


def expected_speech_s(text: str) -> float:
    """The seconds of speech ``text`` should make, read at :data:`SYLLABLES_PER_SECOND` with pauses at punctuation
    (at least a quarter of a second: every request costs something)."""
    syllables, pauses = 0.0, 0.0
    for token in _TOKEN.findall(text):
        if token.isdigit():
            syllables += max(1.0, _SYLLABLES_PER_DIGIT * len(token))
        elif token in _SENTENCE_MARKS:
            pauses += _SENTENCE_PAUSE_S
        elif len(token) == 1 and not token.isalpha():
            pauses += _CLAUSE_PAUSE_S
        else:
            syllables += _word_syllables(token)
    return max(_MIN_SPEECH_S, syllables / SYLLABLES_PER_SECOND + pauses)


def _word_syllables(word: str) -> float:
    """Syllables of a run of letters: one per character of a syllabic script (CJK, kana, Hangul), vowel groups of
    an alphabetic word (at least one), and a third of a syllable per letter of other scripts (Cyrillic, Arabic...)."""
    syllabic = sum(1 for char in word if _is_syllabic(char))
    rest = len(word) - syllabic
    if not rest:
        return float(syllabic)
    latin = "".join(char for char in word if char.isascii() or "\u00c0" <= char <= "\u024f")
    if len(latin) == rest:
        return syllabic + max(1.0, float(len(_VOWEL_GROUPS.findall(latin))))
    return syllabic + max(1.0, rest / 3)


def _is_syllabic(char: str) -> bool:
    name = unicodedata.name(char, "")
    return name.startswith(("CJK UNIFIED", "CJK COMPATIBILITY IDEOGRAPH", "HIRAGANA", "KATAKANA", "HANGUL SYLLABLE"))
