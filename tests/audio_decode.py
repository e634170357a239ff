"""Decode what the gateway sent back, with PyAV (or as raw PCM), so tests check audio rather than byte counts."""

from __future__ import annotations

import io
import typing
from dataclasses import dataclass
from typing import Literal, TypeAlias

import av
import numpy as np
import numpy.typing as npt

if typing.TYPE_CHECKING:
    from av.audio.codeccontext import AudioCodecContext

__all__ = [
    "DURATION_TOLERANCE_S",
    "SPEECH_FORMATS",
    "DecodedAudio",
    "SpeechFormat",
    "decode_audio",
    "decode_g711",
    "dominant_frequency",
]

SpeechFormat: TypeAlias = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
"""A ``response_format`` of OpenAI's speech API, as the OpenAI SDK types it."""
SPEECH_FORMATS: tuple[SpeechFormat, ...] = typing.get_args(SpeechFormat)

PCM_RATE = 24000
#: mp3 and ADTS carry encoder priming and padding that decoders cannot trim (up to ~90 ms for AAC).
DURATION_TOLERANCE_S = 0.1


@dataclass(frozen=True)
class DecodedAudio:
    samples: npt.NDArray[np.float32]
    """Mono samples in [-1, 1]."""
    sample_rate: int
    channels: int
    codec: str

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate

    @property
    def rms(self) -> float:
        return float(np.sqrt(np.mean(np.square(self.samples)))) if len(self.samples) else 0.0


def decode_g711(data: bytes, law: Literal["pcmu", "pcma"]) -> DecodedAudio:
    """Decode raw G.711 (OpenAI Realtime's ``audio/pcmu`` and ``audio/pcma``, 8 kHz) with ffmpeg's own decoders."""
    codec = "pcm_mulaw" if law == "pcmu" else "pcm_alaw"
    context = typing.cast("AudioCodecContext", av.CodecContext.create(codec, "r"))
    context.sample_rate = 8000
    context.layout = "mono"
    frames = [frame.to_ndarray() for frame in context.decode(av.Packet(data))] if data else []
    samples = np.concatenate([_to_mono_float(f) for f in frames]) if frames else np.zeros(0, np.float32)
    return DecodedAudio(samples, 8000, 1, codec)


def decode_audio(data: bytes, response_format: str) -> DecodedAudio:
    """Decode a whole response body in ``response_format``."""
    if response_format == "pcm":
        pcm = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
        return DecodedAudio(pcm, PCM_RATE, 1, "pcm_s16le")
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray() for frame in container.decode(stream)]
        codec = stream.codec_context.name
        rate = stream.codec_context.sample_rate
        channels = stream.codec_context.channels
    if not frames:
        return DecodedAudio(np.zeros(0, np.float32), rate, channels, codec)
    samples = np.concatenate([_to_mono_float(f) for f in frames])
    return DecodedAudio(samples, rate, channels, codec)


def _to_mono_float(frame: npt.NDArray[np.generic]) -> npt.NDArray[np.float32]:
    values = frame.astype(np.float32)
    if frame.dtype == np.int16:
        values /= 32768
    elif frame.dtype == np.int32:
        values /= 2**31
    return values.reshape(-1) if values.shape[0] == 1 else values.mean(axis=0)


def dominant_frequency(audio: DecodedAudio) -> float:
    """The strongest frequency of the clip, in Hz."""
    spectrum = np.abs(np.fft.rfft(audio.samples * np.hanning(len(audio.samples))))
    return float(np.argmax(spectrum) * audio.sample_rate / len(audio.samples))
