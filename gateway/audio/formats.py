"""Response formats of the speech endpoint and the sample rate each one is encoded at."""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CONTENT_TYPES", "AudioFormat", "output_sample_rate"]


class AudioFormat(StrEnum):
    """A ``response_format`` value of OpenAI's ``CreateSpeechRequest``."""

    MP3 = "mp3"
    OPUS = "opus"
    AAC = "aac"
    FLAC = "flac"
    WAV = "wav"
    PCM = "pcm"


CONTENT_TYPES: Mapping[AudioFormat, str] = MappingProxyType(
    {
        AudioFormat.MP3: "audio/mpeg",
        AudioFormat.OPUS: "audio/ogg",
        AudioFormat.AAC: "audio/aac",
        AudioFormat.FLAC: "audio/flac",
        AudioFormat.WAV: "audio/wav",
        AudioFormat.PCM: "audio/pcm",
    }
)
"""The ``Content-Type`` of a response in each format."""

_SPEECH_RATE = 24000
# Opus only runs at 8/12/16/24/48 kHz and Ogg-Opus players assume 48 kHz, so it gets its native rate.
_OPUS_RATE = 48000


def output_sample_rate(fmt: AudioFormat) -> int:
    """Return the sample rate, in Hz, that audio in ``fmt`` is encoded at.

    Args:
        fmt: The response format.

    Returns:
        48000 for Opus, 24000 (OpenAI's rate, and the only rate of ``pcm``) for every other format.
    """
    return _OPUS_RATE if fmt == AudioFormat.OPUS else _SPEECH_RATE
