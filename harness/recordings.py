"""Recordings for the custom-voice tests and benchmark, made with PyAV: a tone (or espeak's speech) encoded into
each container OpenAI lists for consent recordings and voice samples."""

from __future__ import annotations

import io
from fractions import Fraction
from typing import TYPE_CHECKING

import av
import numpy as np
from av.audio.resampler import AudioResampler
from av.audio.stream import AudioStream

from engines.base import CancelFlag, SynthesisRequest
from engines.espeak import EspeakEngine

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["CONTAINERS", "recording", "speech", "tone"]

#: Upload kind -> (ffmpeg muxer, encoder, its sample rate): mp3, wav, ogg (Opus and Vorbis), aac, flac, webm and mp4,
#: as OpenAI lists them.
CONTAINERS: dict[str, tuple[str, str, int]] = {
    "mp3": ("mp3", "libmp3lame", 44100),
    "wav": ("wav", "pcm_s16le", 44100),
    "ogg": ("ogg", "libopus", 48000),
    "ogg-vorbis": ("ogg", "vorbis", 44100),
    "aac": ("adts", "aac", 44100),
    "flac": ("flac", "flac", 44100),
    "webm": ("webm", "libopus", 48000),
    "mp4": ("mp4", "aac", 44100),
}
_EXPERIMENTAL = {"vorbis"}  # ffmpeg's own Vorbis encoder (no libvorbis in PyAV's wheel) asks to be allowed


def tone(seconds: float, frequency: float = 440.0, rate: int = 24000) -> npt.NDArray[np.int16]:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * 32767 * np.sin(2 * np.pi * frequency * t)).astype(np.int16)


def speech(text: str) -> tuple[npt.NDArray[np.int16], int]:
    """espeak's speech of ``text`` and its sample rate: a recording with words in it."""
    engine = EspeakEngine()
    info = engine.load()
    chunks = list(engine.synthesize(SynthesisRequest(text=text, voice="alloy"), CancelFlag()))
    return np.concatenate(chunks).astype(np.int16), info.sample_rate


def recording(
    kind: str,
    pcm: npt.NDArray[np.int16] | None = None,
    rate: int = 24000,
    *,
    stereo: bool = True,
) -> bytes:
    """``pcm`` (default: 3 s of a 440 Hz tone) as a file of ``kind`` (a key of :data:`CONTAINERS`), resampled to
    the encoder's rate and, by default, in stereo (the same in both channels): what the gateway must turn into 24 kHz
    mono."""
    muxer, codec, codec_rate = CONTAINERS[kind]
    samples = tone(3.0) if pcm is None else pcm
    layout = "stereo" if stereo else "mono"
    planes = np.tile(samples, (2 if stereo else 1, 1))  # both channels alike: ffmpeg's upmix would lower the level
    source = av.AudioFrame.from_ndarray(planes, format="s16p", layout=layout)
    source.sample_rate = rate
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=muxer) as container:
        stream = container.add_stream(codec, rate=codec_rate)
        assert isinstance(stream, AudioStream)
        if codec in _EXPERIMENTAL:
            stream.codec_context.options = {"strict": "experimental"}
        stream.layout = layout
        stream.codec_context.open()
        resampler = AudioResampler(
            format=stream.format.name, layout=layout, rate=codec_rate, frame_size=stream.codec_context.frame_size
        )
        written = 0
        for frame in [*resampler.resample(source), *resampler.resample(None)]:
            frame.pts, frame.time_base = written, Fraction(1, codec_rate)
            written += frame.samples
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return buffer.getvalue()
