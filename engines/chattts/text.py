"""Text handling for ChatTTS: clean-up, sentence segments for long input, prompts and control tags."""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

__all__ = ["ControlTokens", "control_tags", "prepare_text", "speed_tag", "split_control_tokens", "split_segments"]

_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；])\s+|(?<=[。！？；])|\n+")  # noqa: RUF001
_SOFT_BREAK = re.compile(r"(?<=[,:，、：])\s*|\s+")  # noqa: RUF001
_CONTROL_TAG = re.compile(r"\[(oral|laugh|break)_(\d)\]")
_TAG_LIMITS = {"oral": 9, "laugh": 2, "break": 7}
# The control tokens a caller may type once opted in: ChatTTS's inline pauses and laughter (kept in the text), its
# refinement prompt tags and its speed tag (moved to the prompts). Never [spk_emb], [Stts] or the other structural tags.
_CALLER_TOKEN = re.compile(r"\[(?:laugh|uv_break|v_break|lbreak|llbreak)\]|\[(?:oral|laugh|break|speed)_\d\]")
_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "–": "-", "—": "-", "…": "..."})  # noqa: RUF001


def prepare_text(text: str) -> str:
    """Normalise input: NFKC, common punctuation, no control characters, and no ``[...]`` so that a client cannot
    inject ChatTTS control tags (``[spk_emb]``, ``[Ptts]``) through the text. Characters the tokenizer does not know
    are dropped later, at tokenisation.
    """
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES)
    text = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in text)
    text = text.replace("[", " ").replace("]", " ")
    return re.sub(r"\s+", " ", text).strip()


def split_segments(text: str, max_chars: int) -> list[str]:
    """Split at sentence ends into segments of at most ``max_chars``: one sentence each, so that the first audio
    leaves after the first sentence's first tokens.

    Sentences longer than ``max_chars`` are split at commas or spaces, and as a last resort every ``max_chars``. A
    piece with nothing to say (punctuation alone: the second "。" of "好的。。") goes with the piece before it, or is
    dropped where that would outgrow ``max_chars``: ChatTTS makes a generation of each segment, babble for one of
    punctuation, so 4,096 "。" once made 4,096 of them (65 minutes of audio).
    """
    pieces: list[str] = []
    for sentence in filter(None, (s.strip() for s in _SENTENCE_END.split(text))):
        for piece in _split_long(sentence, max_chars):
            if _says_something(piece) or not pieces:
                pieces.append(piece)
            elif len(pieces[-1]) + len(piece) <= max_chars:
                pieces[-1] += piece
    if len(pieces) > 1 and not _says_something(pieces[0]):  # punctuation first: it goes with what follows
        first = pieces.pop(0)
        if len(first) + len(pieces[0]) <= max_chars:
            pieces[0] = first + pieces[0]
    return pieces


def _says_something(piece: str) -> bool:
    return any(character.isalnum() for character in piece)


def _split_long(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    parts: list[str] = []
    current = ""
    for piece in filter(None, _SOFT_BREAK.split(sentence)):
        word = piece
        while len(word) > max_chars:  # one unbroken run of characters
            if current:
                parts.append(current)
                current = ""
            parts.append(word[:max_chars])
            word = word[max_chars:]
        if current and len(current) + 1 + len(word) > max_chars:
            parts.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    if current:
        parts.append(current)
    return parts


def speed_tag(speed: float) -> str:
    """ChatTTS's rate prompt for ``speed``: ``[speed_5]`` is normal; each step is about a quarter octave of rate.

    ChatTTS's ``[speed_N]`` is not calibrated against a rate multiplier; this mapping puts 0.5 at ``[speed_1]``,
    1.0 at ``[speed_5]`` and 2.0 at ``[speed_9]``.
    """
    step = round(5 + 4 * math.log2(max(speed, 1e-3)))
    return f"[speed_{min(9, max(0, step))}]"


def control_tags(instructions: str | None) -> str:
    """The ChatTTS text-refinement tags (``[oral_N]``, ``[laugh_N]``, ``[break_N]``) found in ``instructions``.

    Everything else in the instructions is ignored: ChatTTS has no free-form style prompt. The last value of each
    kind wins; values beyond the tag's range are clamped.
    """
    found: dict[str, int] = {}
    for kind, value in _CONTROL_TAG.findall(instructions or ""):
        found[kind] = min(int(value), _TAG_LIMITS[kind])
    return "".join(f"[{kind}_{found[kind]}]" for kind in ("oral", "laugh", "break") if kind in found)


@dataclass(frozen=True, slots=True)
class ControlTokens:
    """A caller's text with the ChatTTS control tokens it typed, once it opted in (``control_tokens``)."""

    pieces: tuple[str, ...]
    """The text in order: plain pieces, and the inline tokens (``[laugh]``, ``[uv_break]``, ``[lbreak]`` …)."""
    prompt: str
    """The refinement tags typed (``[oral_N]``, ``[laugh_N]``, ``[break_N]``), as ``control_tags`` reads them."""
    speed: str | None
    """The last ``[speed_N]`` typed: the rate prompt instead of the request's speed."""

    @staticmethod
    def is_token(piece: str) -> bool:
        return _CALLER_TOKEN.fullmatch(piece) is not None


def split_control_tokens(text: str) -> ControlTokens:
    """``text`` cut at the control tokens a caller may use: the inline ones stay in place, the prompt ones move out."""
    pieces: list[str] = []
    prompt: list[str] = []
    speed: str | None = None
    start = 0
    for match in _CALLER_TOKEN.finditer(text):
        pieces.append(text[start : match.start()])
        token = match[0]
        if token.startswith("[speed_"):
            speed = token
        elif token[-3] == "_":  # [oral_N], [laugh_N], [break_N]
            prompt.append(token)
        else:
            pieces.append(token)
        start = match.end()
    pieces.append(text[start:])
    return ControlTokens(tuple(piece for piece in pieces if piece.strip()), "".join(prompt), speed)
