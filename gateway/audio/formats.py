"""Response formats of the speech endpoint and the sample rate each one is encoded at; and encodings by codec, sample
rate and bit rate, for APIs that name those themselves (ElevenLabs' ``mp3_44100_128``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CONTENT_TYPES",
    "SPEECH_SAMPLE_RATES",
    "AudioFormat",
    "Codec",
    "Encoding",
    "output_sample_rate",
    "sample_rates",
]


class AudioFormat(StrEnum):
    """A ``response_format`` value of OpenAI's ``CreateSpeechRequest``, and this gateway's G.711 extensions."""

    MP3 = "mp3"
    OPUS = "opus"
    AAC = "aac"
    FLAC = "flac"
    WAV = "wav"
    PCM = "pcm"
    PCMU = "pcmu"
    """G.711 μ-law, 8 kHz, one byte a sample, no header: named as OpenAI Realtime's ``audio/pcmu``."""
    PCMA = "pcma"
    """G.711 A-law, as :attr:`PCMU`: OpenAI Realtime's ``audio/pcma``."""


CONTENT_TYPES: Mapping[AudioFormat, str] = MappingProxyType(
    {
        AudioFormat.MP3: "audio/mpeg",
        AudioFormat.OPUS: "audio/ogg",
        AudioFormat.AAC: "audio/aac",
        AudioFormat.FLAC: "audio/flac",
        AudioFormat.WAV: "audio/wav",
        AudioFormat.PCM: "audio/pcm",
        AudioFormat.PCMU: "audio/pcmu",  # RFC 4856's names (as audio/PCMU, audio/PCMA); media types ignore case
        AudioFormat.PCMA: "audio/pcma",
    }
)
"""The ``Content-Type`` of a response in each format."""

_SPEECH_RATE = 24000
# Opus only runs at 8/12/16/24/48 kHz and Ogg-Opus players assume 48 kHz, so it gets its native rate.
_OPUS_RATE = 48000
_G711_RATE = 8000

SPEECH_SAMPLE_RATES = frozenset({8000, 16000, 22050, 24000, 44100, 48000})
"""The rates a speech request may ask for (``sample_rate``, this gateway's extension), where its format allows."""
_FORMAT_RATES: Mapping[AudioFormat, frozenset[int]] = MappingProxyType(
    {
        # Ogg Opus always decodes at 48 kHz, whatever rate it was encoded from: another would be a false promise.
        AudioFormat.OPUS: frozenset({_OPUS_RATE}),
        AudioFormat.PCMU: frozenset({_G711_RATE}),
        AudioFormat.PCMA: frozenset({_G711_RATE}),
    }
)


def output_sample_rate(fmt: AudioFormat, requested: int | None = None) -> int:
    """Return the sample rate, in Hz, that audio in ``fmt`` is encoded at.

    Args:
        fmt: The response format.
        requested: The rate the request asked for (one of :func:`sample_rates`), or ``None`` for the format's own.

    Returns:
        ``requested`` when given; else 48000 for Opus, 8000 for G.711, 24000 (OpenAI's rate, and the only rate of
        OpenAI's ``pcm``) for every other format.
    """
    if requested is not None:
        return requested
    if fmt in _FORMAT_RATES:
        return _OPUS_RATE if fmt == AudioFormat.OPUS else _G711_RATE
    return _SPEECH_RATE


def sample_rates(fmt: AudioFormat) -> frozenset[int]:
    """The rates of :data:`SPEECH_SAMPLE_RATES` that ``fmt`` can be encoded at."""
    return _FORMAT_RATES.get(fmt, SPEECH_SAMPLE_RATES)


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
