"""ElevenLabs' ``output_format`` names (``codec_rate[_kbps]``), each the encoding it names and its content type.

The speech pipeline always speaks 24 kHz PCM for these routes (so that its cache is shared with every other API);
the edge encodes that into the format asked for with :func:`gateway.audio.open_encoding`.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

from gateway.audio import Codec, Encoding

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CONTENT_TYPES", "DEFAULT_OUTPUT_FORMAT", "OutputFormat", "encoding_of"]


class OutputFormat(StrEnum):
    """Every ``output_format`` of ElevenLabs' text-to-speech routes (the ``elevenlabs`` SDK's list)."""

    MP3_22050_32 = "mp3_22050_32"
    MP3_24000_48 = "mp3_24000_48"
    MP3_44100_32 = "mp3_44100_32"
    MP3_44100_64 = "mp3_44100_64"
    MP3_44100_96 = "mp3_44100_96"
    MP3_44100_128 = "mp3_44100_128"
    MP3_44100_192 = "mp3_44100_192"
    PCM_8000 = "pcm_8000"
    PCM_16000 = "pcm_16000"
    PCM_22050 = "pcm_22050"
    PCM_24000 = "pcm_24000"
    PCM_32000 = "pcm_32000"
    PCM_44100 = "pcm_44100"
    PCM_48000 = "pcm_48000"
    WAV_8000 = "wav_8000"
    WAV_16000 = "wav_16000"
    WAV_22050 = "wav_22050"
    WAV_24000 = "wav_24000"
    WAV_32000 = "wav_32000"
    WAV_44100 = "wav_44100"
    WAV_48000 = "wav_48000"
    ULAW_8000 = "ulaw_8000"
    ALAW_8000 = "alaw_8000"
    OPUS_48000_32 = "opus_48000_32"
    OPUS_48000_64 = "opus_48000_64"
    OPUS_48000_96 = "opus_48000_96"
    OPUS_48000_128 = "opus_48000_128"
    OPUS_48000_192 = "opus_48000_192"


DEFAULT_OUTPUT_FORMAT = OutputFormat.MP3_44100_128
"""ElevenLabs' default."""

CONTENT_TYPES: Mapping[Codec, str] = MappingProxyType(
    {
        Codec.MP3: "audio/mpeg",
        Codec.OPUS: "audio/ogg",
        Codec.PCM: "audio/pcm",
        Codec.WAV: "audio/wav",
        Codec.MULAW: "audio/basic",
        Codec.ALAW: "audio/x-alaw-basic",
    }
)
"""The ``Content-Type`` of a response in each codec."""


def encoding_of(output_format: OutputFormat) -> Encoding:
    """The encoding ``output_format`` names: ``mp3_44100_128`` is MP3 at 44.1 kHz and 128 kbit/s."""
    codec, rate, *kbps = output_format.value.split("_")
    return Encoding(Codec(codec), int(rate), int(kbps[0]) if kbps else None)
