"""Uploaded recordings (consent recordings, voice samples): any supported container in, mono PCM out, and a compact
copy to keep for audit.

:func:`decode_recording` takes the bytes of an upload in one of the containers OpenAI lists for its custom voices
(mp3, wav, ogg, aac, flac, webm, mp4) and returns mono signed 16-bit PCM at 24000 Hz, refusing what is not audio,
unsupported, too large, too short or too long with a :class:`RecordingError` that says which.
:func:`encode_for_audit` turns that PCM into Ogg/Opus at a low bit rate: what the gateway keeps of a consent
recording, never the upload itself.

The container is recognised from its first bytes and the demuxer is then named to ffmpeg, so ffmpeg never probes:
a probed upload could pick a demuxer that opens other files or URLs (an HLS playlist, a concat list).

Before it decodes, :func:`decode_recording` refuses what the headers declare beyond bounds (sample rates outside
8-192 kHz, more than 8 channels, a duration over the longest), checks every decoded frame again, and stops at the
longest duration: what a small file can make it spend is bounded. FFmpeg's decoders still parse untrusted bytes, so
the gateway runs it only in decoder processes of their own, under memory and CPU caps (``gateway/uploads``), never
in the server. :func:`encode_for_audit` encodes the gateway's own PCM and runs in a thread of the server.

Knows nothing of HTTP, engines or storage. Both take milliseconds of CPU per second of audio
(``bench/voice_samples.py``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, BinaryIO, Literal

import av
import numpy as np
from av.audio.resampler import AudioResampler

from gateway.audio._muxed import MuxedEncoder, MuxSpec

if TYPE_CHECKING:
    import numpy.typing as npt
    from av.audio.frame import AudioFrame
    from av.audio.stream import AudioStream
    from av.container import InputContainer

__all__ = [
    "MAX_CHANNELS",
    "MAX_RECORDING_BYTES",
    "MAX_RECORDING_S",
    "MAX_SAMPLE_RATE",
    "MIN_RECORDING_S",
    "MIN_SAMPLE_RATE",
    "SAMPLE_RATE",
    "DecodedRecording",
    "RecordingError",
    "RecordingProblem",
    "decode_recording",
    "encode_for_audit",
    "sniff_container",
]

SAMPLE_RATE = 24000
"""The rate of the PCM :func:`decode_recording` returns: the rate engines speak at (OpenAI's ``pcm``)."""
MAX_RECORDING_BYTES = 10 * 1024 * 1024
"""The largest upload, as OpenAI allows for consent recordings and audio samples (10 MiB)."""
MIN_SAMPLE_RATE = 8000
"""Recordings declaring a lower sample rate are refused: telephone audio is the least a voice is recorded at, and a
rate of a few hertz would make a few kilobytes resample to gigabytes."""
MAX_SAMPLE_RATE = 192_000
"""Recordings declaring a higher sample rate are refused: studio recorders stop here, and planning the resampling of
hundreds of megahertz alone costs seconds of CPU."""
MAX_CHANNELS = 8
"""Recordings of more channels are refused; up to 7.1 they are mixed down to mono."""
MIN_RECORDING_S = 1.0
"""Shorter recordings are refused: too little of a voice to learn from, or to hear a consent in."""
MAX_RECORDING_S = 30.0
"""Longer recordings are refused: a speaker prompt grows with its sample (ChatTTS encodes all of it), and a consent
phrase takes seconds."""

_AUDIT_SPEC = MuxSpec(
    "ogg",
    "libopus",
    "s16",
    bit_rate=16000,  # Opus's own figure for good wideband speech; 30 s keep in about 60 KB
    # Tuned for speech. Complexity 5, as for speech responses: cheaper than 10 for files of the same size, and a
    # consent is encoded once (what it costs: BENCHMARKS.md, "Voice samples and consent recordings").
    codec_options=MappingProxyType({"compression_level": "5", "application": "voip"}),
)
_ID3_HEADER_BYTES = 10
_SNIFFED_BYTES = 12
# What a container's declared duration may exceed the longest recording by before it is refused undecoded: a
# declared duration is an estimate in some containers (MP3 without a Xing header: the bit rate and the file's size).
_DECLARED_SLACK_S = 2.0
# Encoder priming and padding that some containers carry untrimmed (ADTS and MP4 AAC: up to ~0.1 s): a recording of
# exactly the longest duration must not be refused for it.
_PADDING_S = 0.25

RecordingProblem = Literal["not_audio", "unsupported", "too_large", "too_short", "too_long", "decoder_failed"]
"""Why an upload is refused: not audio in a supported container; audio in an encoding no decoder reads, or whose
sample rate or channels are outside the bounds; over the size; outside the duration bounds; or its decoding ended
badly (crashed, out of memory or time)."""


class RecordingError(ValueError):
    """An upload the gateway will not take; ``problem`` says why, ``str()`` says it to the client."""

    def __init__(self, problem: RecordingProblem, message: str) -> None:
        super().__init__(message)
        self.problem: RecordingProblem = problem


@dataclass(frozen=True, slots=True)
class DecodedRecording:
    """A recording as mono signed 16-bit little-endian PCM at :data:`SAMPLE_RATE`."""

    pcm: bytes
    container: str
    """The container it came in (``wav``, ``mp3``, ``ogg``, ``aac``, ``flac``, ``matroska``, ``mp4``)."""
    codec: str
    """ffmpeg's name of the codec it was decoded from."""

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / SAMPLE_RATE


def sniff_container(source: bytes | BinaryIO) -> str | None:
    """The ffmpeg demuxer for a file from its first bytes, or ``None`` for none of the supported containers."""
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    stream.seek(0)
    head = stream.read(_SNIFFED_BYTES)
    if head.startswith(b"ID3") and len(head) >= _ID3_HEADER_BYTES:
        # An ID3v2 tag (MP3, sometimes ADTS) before the audio: its size is four 7-bit bytes, the header excluded.
        stream.seek(_ID3_HEADER_BYTES + int.from_bytes(bytes(b & 0x7F for b in head[6:10]), "big"))
        return _sniff_head(stream.read(_SNIFFED_BYTES)) or "mp3"
    return _sniff_head(head)


def _sniff_head(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[4:8] == b"ftyp":
        return "mp4"
    return {b"OggS": "ogg", b"fLaC": "flac", b"\x1a\x45\xdf\xa3": "matroska"}.get(data[:4]) or _sniff_frames(data)


def _sniff_frames(data: bytes) -> str | None:
    """Bare MPEG audio frames: ADTS AAC (layer bits 00) or MP3, told apart by their 12-bit sync word's next bits."""
    if len(data) < 2 or data[0] != 0xFF or data[1] & 0xE0 != 0xE0:
        return None
    return "aac" if data[1] & 0xF6 == 0xF0 else "mp3"


def decode_recording(
    source: bytes | BinaryIO, *, min_s: float = MIN_RECORDING_S, max_s: float = MAX_RECORDING_S
) -> DecodedRecording:
    """Decode an upload to mono 16-bit PCM at :data:`SAMPLE_RATE`, within the size and duration bounds.

    ``source`` may be a seekable file (an upload spooled to disk): it is read as ffmpeg needs it, never copied whole.
    Decoding stops as soon as the audio passes ``max_s``: a small file that would decode to hours costs no more than
    ``max_s`` of audio.

    Raises:
        RecordingError: not audio in a supported container, over :data:`MAX_RECORDING_BYTES`, or outside the
            duration bounds.
    """
    file = io.BytesIO(source) if isinstance(source, bytes) else source
    size = file.seek(0, io.SEEK_END)
    if size > MAX_RECORDING_BYTES:
        raise RecordingError("too_large", f"The recording is {size} bytes; at most {MAX_RECORDING_BYTES}.")
    container = sniff_container(file)
    if container is None:
        raise RecordingError(
            "not_audio", "The file is not audio in a supported format (mp3, wav, ogg, aac, flac, webm or mp4)."
        )
    file.seek(0)
    try:
        pcm, codec = _decode(file, container, max_s)
    except (RecordingError, MemoryError):  # MemoryError: FFmpeg's ENOMEM too, for whoever caps memory to tell
        raise
    except (av.FFmpegError, ValueError) as exc:  # ValueError: PyAV's resampler on a stream that changes format
        raise RecordingError("not_audio", f"The {container} file could not be decoded: {exc}") from None
    recording = DecodedRecording(pcm, container, codec)
    _check_duration(recording.duration_s, min_s, max_s)
    return recording


def _decode(file: BinaryIO, container: str, max_s: float) -> tuple[bytes, str]:
    limit = int((max_s + _PADDING_S) * SAMPLE_RATE) + 1  # one sample beyond the bound tells it is too long
    chunks: list[npt.NDArray[np.float32]] = []
    samples = 0
    with av.open(file, mode="r", format=container) as source:
        stream = _probe(source, container, max_s)
        # Resampled in its own layout, packed, then the channels averaged: ffmpeg's own downmix to mono is 3 dB quieter,
        # and PyAV 18 crashes converting planar frames of 8 or more channels to arrays (packed frames are one plane).
        resampler = AudioResampler(format="flt", rate=SAMPLE_RATE)
        for frame in source.decode(stream):
            _check_frame(frame, max_s)
            for out in resampler.resample(frame):
                chunks.append(_mono(out))
                samples += out.samples
            if samples >= limit:
                break
        else:
            chunks.extend(_mono(out) for out in resampler.resample(None))
        codec = stream.codec_context.name
    mono = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return (np.clip(mono, -1.0, 1.0) * 32767).astype("<i2").tobytes(), codec


def _probe(source: InputContainer, container: str, max_s: float) -> AudioStream:
    """The audio stream to decode, once what its headers declare is within bounds: a sample rate and a channel count
    that resampling can take at a bounded cost (a few kilobytes declaring 6 Hz would resample to gigabytes; 500 MHz
    costs seconds of CPU to plan) and a duration not already over the longest."""
    if not source.streams.audio:
        raise RecordingError("not_audio", f"The {container} file has no audio stream.")
    stream = source.streams.audio[0]
    if stream.codec_context is None:  # FFmpeg found no codec for what the header declares: nothing can decode it
        raise RecordingError(
            "unsupported",
            f"The {container} file declares its audio in an encoding no decoder reads "
            "(an unknown codec, or an impossible sample size such as 0 bits).",
        )
    _check_format(stream.codec_context.sample_rate, stream.codec_context.channels, declared=True)
    declared_s = source.duration / av.time_base if source.duration else 0.0
    if declared_s > max_s + _PADDING_S + _DECLARED_SLACK_S:
        raise RecordingError("too_long", f"The recording declares {declared_s:.1f} s; at most {max_s:g} s.")
    stream.codec_context.thread_count = 1  # one core per decode: its CPU-time cap is then the time it takes
    return stream


def _check_frame(frame: AudioFrame, max_s: float) -> None:
    """A decoded frame may say other than the headers did (FLAC frames carry their own rate): checked again, and a
    frame longer than the longest recording is refused before it is resampled whole."""
    _check_format(frame.sample_rate, frame.layout.nb_channels, declared=False)
    if frame.samples > (max_s + _PADDING_S) * frame.sample_rate:
        raise RecordingError("too_long", f"The recording lasts more than {max_s:g} s, the most allowed.")


def _check_format(rate: int, channels: int, *, declared: bool) -> None:
    where = "declares" if declared else "has audio at"
    if rate and not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise RecordingError(
            "unsupported",
            f"The recording {where} a sample rate of {rate} Hz; "
            f"from {MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz are accepted.",
        )
    if channels > MAX_CHANNELS:
        raise RecordingError(
            "unsupported", f"The recording {where} {channels} channels; at most {MAX_CHANNELS} are accepted."
        )


def _mono(frame: AudioFrame) -> npt.NDArray[np.float32]:
    """A packed float frame's channels averaged."""
    interleaved = np.asarray(frame.to_ndarray(), dtype=np.float32)
    mono: npt.NDArray[np.float32] = interleaved.reshape(-1, frame.layout.nb_channels).mean(axis=1, dtype=np.float32)
    return mono


def _check_duration(duration_s: float, min_s: float, max_s: float) -> None:
    if duration_s < min_s:
        problem: RecordingProblem = "too_short"
        message = f"The recording lasts {duration_s:.2f} s; at least {min_s:g} s."
    elif duration_s > max_s + _PADDING_S:
        problem, message = "too_long", f"The recording lasts more than {max_s:g} s, the most allowed."
    else:
        return
    raise RecordingError(problem, message)


def encode_for_audit(pcm: bytes) -> bytes:
    """Mono 16-bit PCM at :data:`SAMPLE_RATE` as Ogg/Opus at 16 kbit/s: the copy of a recording worth keeping."""
    encoder = MuxedEncoder(_AUDIT_SPEC, SAMPLE_RATE, SAMPLE_RATE, 1.0)
    return encoder.encode(pcm) + encoder.finish()
