# ruff: noqa: PLC0415 - ChatTTS's voices module imports torch: the server process never loads it
"""ChatTTS's prompts: a request's text as token ids, one prompt per sentence segment, each after its voice's own
beginning and before ``[Ptts]`` (and a sample voice's audio codes, which the token loop appends).

The text is read as ChatTTS's tokenizer can read it: cleaned, numbers and symbols as words (``normalize``), the
control tokens a caller opted into kept as tags, refined by ChatTTS's text model where configured or asked for, and
characters the tokenizer does not know dropped (named in a debug log) rather than spoken as ``[UNK]``.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engines.base import MAX_SPEAKER_CHARS, InvalidSynthesisRequestError
from engines.chattts.normalize import normalize_text
from engines.chattts.text import (
    ControlTokens,
    control_tags,
    prepare_text,
    speed_tag,
    split_control_tokens,
    split_segments,
)
from lifecycle import naming

if TYPE_CHECKING:
    import torch

    from engines.base import CancelToken, SynthesisRequest
    from engines.chattts.options import ChatTTSOptions
    from engines.chattts.voices import SpeakerBank

__all__ = ["SEED_MODULUS", "Prompts", "VoicePrompt"]

logger = naming.logger("chattts")

SEED_MODULUS = 2**63
"""Seeds are taken modulo this: torch's generators take 64-bit signed seeds."""
_LANGUAGES = frozenset({"en", "zh"})
_MIN_SAMPLE_S = 1.0  # shorter holds too few codes (47 a second) to carry a voice
_MAX_TRANSCRIPT_CHARS = 2000  # about a minute of speech: more than the longest sample says


@dataclass(frozen=True, slots=True)
class VoicePrompt:
    """What a voice puts in each of its segments' prompts."""

    prefix: list[int]
    """The tokens every segment's prompt starts with."""
    speaker: torch.Tensor | None
    """The speaker embedding (``None`` for a voice from a sample)."""
    codes: torch.Tensor | None
    """A voice sample's audio codes, the end of every segment's prompt."""

    @property
    def shared_prefix(self) -> int:
        """How many first tokens of every prompt are the voice's own and worth keeping (``CodeRequest``): a sample
        voice's transcript; a named voice's prefix is three tokens, not worth it."""
        return len(self.prefix) if self.codes is not None else 0


class Prompts:
    """Token ids of requests and voice samples' transcripts, read through one loaded ChatTTS."""

    def __init__(self, chat: Any, voices: SpeakerBank, options: ChatTTSOptions) -> None:
        self._chat = chat
        self._voices = voices
        self._options = options

    def segments(
        self, request: SynthesisRequest, seed: int, cancel: CancelToken
    ) -> tuple[VoicePrompt, list[list[int]]]:
        """The request's voice and its segments' prompts (none once ``cancel`` is set); segment ``n`` is refined
        with ``seed + n``.

        Raises:
            InvalidSynthesisRequestError: a language ChatTTS cannot speak, or a voice it does not know.
        """
        _check_language(request.language)
        voice = self._voice(request)
        suffix = self.tag_ids(["[Ptts]"])
        segments: list[list[int]] = []
        instructions = request.instructions
        if request.control_tokens:  # the refinement tags the caller typed prompt the refinement too
            instructions = (instructions or "") + split_control_tokens(request.text).prompt
        spoken = self.spoken(request.text, control_tokens=request.control_tokens, normalize=request.normalize_text)
        for number, text in enumerate(split_segments(spoken, self._options.max_segment_chars)):
            if cancel.is_set():
                break
            ids = self.text_ids(self._refine(text, instructions, seed + number))
            if ids:
                segments.append(voice.prefix + ids + suffix)
        return voice, segments

    def _voice(self, request: SynthesisRequest) -> VoicePrompt:
        """What each segment's prompt starts with, the speaker embedding, and the sample's codes it ends with.

        A voice from a sample is prompted as ChatTTS's ``_infer_code`` prompts ``spk_smp`` with ``txt_smp``:
        ``[Stts][empty_spk]`` + transcript + ``[speed_N]`` + text + ``[Ptts]`` + the sample's codes
        (``Speaker.decorate_code_prompts``, ``Tokenizer.encode``). The transcript is read as the text is (cleaned,
        and normalized when ``normalize`` is on; characters the tokenizer cannot read dropped where ChatTTS would
        write ``[UNK]``), so that its tokens say what the recording says.
        """
        from engines.chattts.voices import SampleVoice

        voice = self._voices.resolve(request.voice, request.speaker)
        typed = split_control_tokens(request.text).speed if request.control_tokens else None
        speed = typed or speed_tag(request.speed)
        if isinstance(voice, SampleVoice):
            transcript = self.text_ids(self.spoken(voice.transcript))
            prefix = self.tag_ids(["[Stts]", "[empty_spk]"]) + transcript + self.tag_ids([speed])
            return VoicePrompt(prefix, None, voice.codes)
        return VoicePrompt(self.tag_ids(["[Stts]", "[spk_emb]", speed]), voice, None)

    def spoken(self, text: str, *, control_tokens: bool = False, normalize: bool = True) -> str:
        """``text`` as the tokenizer reads it. Brackets are dropped, so a control token a caller typed is read as its
        words; with ``control_tokens`` (the caller opted in) the inline ones (``[laugh]``, ``[uv_break]`` …) stay,
        as the tags they are, and the prompt ones (``[oral_N]``, ``[speed_N]`` …) go to the prompts. Without
        ``normalize`` (the request's ``normalize_text``) digits and symbols are not read as words."""
        if not control_tokens:
            return self._readable(text, normalize=normalize)
        pieces = split_control_tokens(text).pieces
        return " ".join(
            piece if ControlTokens.is_token(piece) else self._readable(piece, normalize=normalize) for piece in pieces
        )

    def _readable(self, text: str, *, normalize: bool = True) -> str:
        spoken = prepare_text(text)
        if normalize and self._options.normalize:  # digits, money, dates and symbols as words: the tokenizer reads
            spoken = normalize_text(spoken)  # only words
        return spoken

    def check_sample(self, seconds: float, transcript: str) -> None:
        """Refuse a voice sample too short or too long to make a voice of, or a transcript ChatTTS cannot read.

        Raises:
            InvalidSynthesisRequestError: with ``param`` ``audio_sample`` or ``transcript``.
        """
        longest = self._options.max_sample_s
        if not _MIN_SAMPLE_S <= seconds <= longest:
            raise InvalidSynthesisRequestError(
                f"A ChatTTS voice sample must last {_MIN_SAMPLE_S:g} to {longest:g} s (its audio codes start every "
                f"prompt of the voice and its speaker string must stay within {MAX_SPEAKER_CHARS} characters); this "
                f"one lasts {seconds:.1f} s.",
                param="audio_sample",
            )
        if len(transcript) > _MAX_TRANSCRIPT_CHARS:
            raise InvalidSynthesisRequestError(
                f"The transcript is longer than {_MAX_TRANSCRIPT_CHARS} characters.", param="transcript"
            )
        if not self.text_ids(self.spoken(transcript)):
            raise InvalidSynthesisRequestError(
                "The transcript has no words ChatTTS can read: give the exact words of the sample.", param="transcript"
            )

    def named_voice_prompt(self, text: str, speed: str = "[speed_5]") -> list[int]:
        """A named voice's prompt of ``text`` as it stands (a speaker embedding goes with it), for a token loop
        driven by hand."""
        return self.tag_ids(["[Stts]", "[spk_emb]", speed]) + self.text_ids(text) + self.tag_ids(["[Ptts]"])

    def tag_ids(self, tags: list[str]) -> list[int]:
        ids: list[int] = self._chat.tokenizer._tokenizer.convert_tokens_to_ids(tags)
        return ids

    def text_ids(self, text: str) -> list[int]:
        tokenizer = self._chat.tokenizer._tokenizer
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids: list[int] = encoded["input_ids"]
        unknown = tokenizer.unk_token_id
        # Characters the tokenizer does not know are dropped rather than spoken as [UNK]; never silently.
        if unknown in ids and logger.isEnabledFor(logging.DEBUG):
            offsets = zip(ids, encoded["offset_mapping"], strict=True)
            spans = [text[start:end] for i, (start, end) in offsets if i == unknown]
            dropped = _unknown_characters(tokenizer, spans)
            logger.debug("dropped %d character(s) the tokenizer cannot read: %s", dropped.total(), dict(dropped))
        return [i for i in ids if i != unknown]

    def _refine(self, text: str, instructions: str | None, seed: int) -> str:
        """ChatTTS's text refinement (adds ``[uv_break]``-style tags), when configured or asked for by tags."""
        tags = control_tags(instructions)
        options = self._options
        if not (options.refine_text or tags):
            return text
        chat = self._chat
        params = chat.RefineTextParams(
            prompt=tags, max_new_token=options.refine_max_new_token, show_tqdm=False, manual_seed=seed % SEED_MODULUS
        )
        with warnings.catch_warnings():
            # ChatTTS's own GPT.generate passes past_key_values, deprecated in transformers 5 (pinned below 5.40).
            warnings.filterwarnings("ignore", message="`past_key_values` is deprecated", category=FutureWarning)
            refined = chat._refine_text([text], chat.device, params)
        ids = [i[i.less(chat.tokenizer.break_0_ids)] for i in refined.ids]
        result: str = chat.tokenizer.decode(ids)[0]
        refined.destroy()
        return result


def _check_language(language: str | None) -> None:
    """Refuse a language ChatTTS was not trained on: it speaks English and Mandarin, and tells them apart itself.

    Raises:
        InvalidSynthesisRequestError: any other language (``param`` ``language_code``).
    """
    if language is not None and language.lower().replace("_", "-").split("-")[0] not in _LANGUAGES:
        raise InvalidSynthesisRequestError(
            f"ChatTTS cannot speak the language '{language}': it speaks English (en) and Chinese (zh).",
            param="language_code",
        )


def _unknown_characters(tokenizer: Any, spans: list[str]) -> Counter[str]:
    """The characters of the ``[UNK]`` spans that the tokenizer cannot read on their own.

    A WordPiece ``[UNK]`` covers a whole word (``café`` for one ``é``): report the characters, not the word, so that
    the log names what is missing without repeating the input.
    """
    found: Counter[str] = Counter()
    for span in spans:
        unknown = [c for c in span if tokenizer.encode(c, add_special_tokens=False) in ([], [tokenizer.unk_token_id])]
        found.update(unknown or ["<word>"])
    return found
