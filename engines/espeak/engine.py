"""An engine without model weights: espeak-ng, through ctypes, on the library the ``espeakng-loader`` wheel ships.

Formant synthesis sounds robotic but is intelligible, starts in about a millisecond and runs hundreds of times
faster than real time on one CPU core, which makes it the fallback when no model can be loaded and a realistic
engine for end-to-end tests.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Final

from engines.base import EngineInfo, EngineUnavailableError, InvalidSynthesisRequestError, VoiceInfo
from engines.espeak.library import EspeakError, EspeakLibrary, SpeechParameters, open_espeak
from engines.espeak.options import EspeakOptions
from engines.espeak.stream import ThreadedSynthesis
from engines.espeak.voices import ESPEAK_VOICES, EspeakVoice
from engines.timing import WordStarts

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping

    import numpy as np
    import numpy.typing as npt

    from engines.base import CancelToken, SynthesisRequest

__all__ = ["EspeakEngine", "check_speaker"]

_QUEUED_AUDIO_MS: Final = 10_000
"""How far espeak may run ahead of a slow consumer before it pauses."""
_ESPEAK_LANGUAGES: Final = {"zh": "cmn"}
"""ISO 639-1 codes whose espeak-ng voice has another name (Mandarin is ``cmn``)."""
_NO_CUSTOM_VOICES: Final = (
    "espeak-ng takes no custom voices: a formant synthesizer has no speaker to embed or to draw from a seed; speak "
    "with one of its built-in voices"
)
_RATE_NORMAL_WPM: Final = 175
_RATE_MIN_WPM: Final = 80
"""espeak renders anything slower at 80 words per minute."""
_RATE_MAX_WPM: Final = 4 * _RATE_NORMAL_WPM
"""Faster than 450 wpm, espeak speeds its output up with its built-in Sonic time-stretch, accurately to beyond this."""


class EspeakEngine:
    """espeak-ng speaking English with one distinct accent, variant and pitch per OpenAI voice.

    A formant synthesizer has no use for ``instructions`` (style prompts) or ``seed`` (it does not sample), so both
    are ignored; a ``speaker`` (custom voice) is refused. A ``language`` other than English speaks the text with
    espeak-ng's voice of that language in the voice's variant and pitch (about a hundred languages; one it lacks is
    refused); ``normalize_text`` cannot be honoured: espeak-ng reads digits and abbreviations as words by itself.
    Text is spoken as plain text, so SSML-looking tags are read out rather than interpreted; NUL characters are
    dropped. ``speed`` maps to espeak's words-per-minute rate (1.0 = 175 wpm) within :attr:`EngineInfo.speed_range`.

    espeak-ng keeps process-wide state, so it is initialised once per process and runs one synthesis at a time; the
    synthesis runs in a helper thread so that chunks are yielded while espeak is still speaking.

    Args:
        options: ``chunk_ms`` (int, default 100): the longest chunk yielded, in milliseconds. It also sets espeak's
            output buffer, which the first engine loaded in a process fixes for the rest of it.

    Raises:
        ValueError: An unknown option or an invalid value.
    """

    def __init__(self, options: EspeakOptions | Mapping[str, object] | None = None) -> None:
        self._chunk_ms = EspeakOptions.model_validate(options or {}).chunk_ms
        self._library: EspeakLibrary | None = None
        self._voices = {voice.id: voice for voice in ESPEAK_VOICES}

    def load(self) -> EngineInfo:
        """Open espeak-ng and check that every voice's accent and variant is in its data.

        Raises:
            EngineUnavailableError: The library or its data is missing or unusable.
        """
        try:
            library = open_espeak(self._chunk_ms)
        except EspeakError as exc:
            raise EngineUnavailableError(f"espeak-ng unavailable: {exc}") from exc
        missing = [voice.espeak_name for voice in ESPEAK_VOICES if not library.has_voice(voice.espeak_name)]
        if missing:
            raise EngineUnavailableError(f"espeak-ng data at {library.data_path} lacks voices {missing}")
        self._library = library
        return self._info(library)

    def synthesize(
        self, request: SynthesisRequest, cancel: CancelToken
    ) -> Generator[npt.NDArray[np.int16], None, None]:
        """Yield int16 chunks of at most ``chunk_ms`` as espeak speaks them; closing the generator stops espeak.

        Raises:
            InvalidSynthesisRequestError: An unknown voice, or a custom ``speaker``.
            RuntimeError: Called before :meth:`load`, or while another synthesis in this process is running.
        """
        items = self.synthesize_marked(request, cancel)
        try:
            for item in items:
                if not isinstance(item, WordStarts):
                    yield item
        finally:
            items.close()

    def synthesize_marked(
        self, request: SynthesisRequest, cancel: CancelToken
    ) -> Generator[npt.NDArray[np.int16] | WordStarts, None, None]:
        """:meth:`synthesize`, with espeak's word events: a :class:`~engines.timing.WordStarts` before the chunks of
        each buffer in which words start (espeak reports the sample where each word's sound begins)."""
        library = self._library
        if library is None:
            raise RuntimeError("EspeakEngine.synthesize() called before load()")
        parameters = self._parameters(request)
        speak = functools.partial(library.speak, request.text, parameters)
        chunk_samples = library.sample_rate * self._chunk_ms // 1000
        stream = ThreadedSynthesis(speak, chunk_samples, max_queued=math.ceil(_QUEUED_AUDIO_MS / self._chunk_ms))
        return stream.chunks(cancel)

    def _parameters(self, request: SynthesisRequest) -> SpeechParameters:
        voice = self._voices.get(request.voice)
        if voice is None:
            raise InvalidSynthesisRequestError(
                f"unknown voice {request.voice!r}; espeak offers {', '.join(self._voices)}", param="voice"
            )
        if request.speaker is not None:
            raise InvalidSynthesisRequestError(_NO_CUSTOM_VOICES, param="voice")
        return SpeechParameters(self._espeak_name(voice, request.language), _rate_wpm(request.speed), voice.pitch)

    def _espeak_name(self, voice: EspeakVoice, language: str | None) -> str:
        """The espeak voice that speaks ``voice`` in ``language``: its own accent for its own language (``en``), else
        espeak's voice of that language with the same variant (``de+klatt4``).

        Raises:
            InvalidSynthesisRequestError: a language espeak-ng has no voice for (``param`` ``language_code``).
        """
        if language is None:
            return voice.espeak_name
        code = language.lower().replace("_", "-")
        if code == voice.language.split("-")[0]:  # English in an English accent: keep the accent
            return voice.espeak_name
        name = f"{_ESPEAK_LANGUAGES.get(code, code)}+{voice.variant}"
        assert self._library is not None
        if not self._library.has_voice(name):
            raise InvalidSynthesisRequestError(
                f"espeak-ng cannot speak the language '{language}' (no voice of that language in its data).",
                param="language_code",
            )
        return name

    def _info(self, library: EspeakLibrary) -> EngineInfo:
        return EngineInfo(
            name="espeak",
            sample_rate=library.sample_rate,
            voices=tuple(_voice_info(voice) for voice in ESPEAK_VOICES),
            speed_range=(_RATE_MIN_WPM / _RATE_NORMAL_WPM, _RATE_MAX_WPM / _RATE_NORMAL_WPM),
            details={"library": f"espeak-ng {library.version}", "data": str(library.data_path)},
            timestamps="exact",
        )


def _rate_wpm(speed: float) -> int:
    return min(max(round(_RATE_NORMAL_WPM * speed), _RATE_MIN_WPM), _RATE_MAX_WPM)


def _voice_info(voice: EspeakVoice) -> VoiceInfo:
    labels = (("gender", voice.gender), ("accent", voice.accent), ("language", "en"))
    return VoiceInfo(voice.id, f"{voice.description}; espeak-ng {voice.espeak_name}, pitch {voice.pitch}", labels)


def check_speaker(options: EspeakOptions, speaker: str) -> None:
    """What the server asks when a custom voice is made for espeak-ng (``engines/registry.py``): it never can be.

    Raises:
        InvalidSynthesisRequestError: always, naming ``model``.
    """
    del options, speaker  # no speaker of any kind: the engine refuses every one when it speaks
    raise InvalidSynthesisRequestError(_NO_CUSTOM_VOICES, param="model")
