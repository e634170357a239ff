"""Response formats of the speech endpoint and the sample rate each one is encoded at; and encodings by codec, sample
rate and bit rate, for APIs that name those themselves (ElevenLabs' ``mp3_44100_128``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CONTENT_TYPES", "AudioFormat", "Codec", "Encoding", "output_sample_rate"]


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


class Codec(StrEnum):
    """A codec an :class:`Encoding` produces, at whatever sample rate it names."""

    MP3 = "mp3"
    """MPEG-1/2/2.5 Layer III frames (LAME), at 8 to 48 kHz."""
    OPUS = "opus"
    """Opus in Ogg pages, at 8, 12, 16, 24 or 48 kHz."""
    PCM = "pcm"
    """Raw signed 16-bit little-endian mono samples, no header."""
    WAV = "wav"
    """The same samples after a streamed WAV header."""
    MULAW = "ulaw"
    """G.711 μ-law, one byte a sample, 8 kHz only."""
    ALAW = "alaw"
    """G.711 A-law, one byte a sample, 8 kHz only."""


@dataclass(frozen=True, slots=True)
class Encoding:
    """What a stream is encoded as: a codec, its sample rate and, for a lossy codec, its bit rate."""

    codec: Codec
    sample_rate: int
    """Hz."""
    kbps: int | None = None
    """Target bit rate in kbit/s (MP3: constant; Opus: the encoder's target); ``None`` for the codec's default here
    (MP3 64, Opus 32). Ignored by the uncompressed codecs."""
