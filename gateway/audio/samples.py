"""Uploaded recordings (consent recordings, voice samples): any supported container in, mono PCM out, and a compact
copy to keep for audit.

:func:`decode_recording` takes the bytes of an upload in one of the containers OpenAI lists for its custom voices
(mp3, wav, ogg, aac, flac, webm, mp4) and returns mono signed 16-bit PCM at 24000 Hz, refusing what is not audio,
too large, too short or too long with a :class:`RecordingError` that says which. :func:`encode_for_audit` turns that
PCM into Ogg/Opus at a low bit rate: what the gateway keeps of a consent recording, never the upload itself.

The container is recognised from its first bytes and the demuxer is then named to ffmpeg, so ffmpeg never probes:
a probed upload could pick a demuxer that opens other files or URLs (an HLS playlist, a concat list).

Knows nothing of HTTP, engines or storage; callers run these functions in a worker thread (they take milliseconds
of CPU per second of audio, see ``bench/voice_samples.py``).
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

__all__ = [
    "MAX_RECORDING_BYTES",
    "MAX_RECORDING_S",
    "MIN_RECORDING_S",
    "SAMPLE_RATE",
    "DecodedRecording",
    "RecordingError",
    "decode_recording",
    "encode_for_audit",
    "sniff_container",
]

SAMPLE_RATE = 24000
"""The rate of the PCM :func:`decode_recording` returns: the rate engines speak at (OpenAI's ``pcm``)."""
MAX_RECORDING_BYTES = 10 * 1024 * 1024
"""The largest upload, as OpenAI allows for consent recordings and audio samples (10 MiB)."""
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
# Encoder priming and padding that some containers carry untrimmed (ADTS and MP4 AAC: up to ~0.1 s): a recording of
# exactly the longest duration must not be refused for it.
_PADDING_S = 0.25

RecordingProblem = Literal["not_audio", "too_large", "too_short", "too_long"]


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
        if not source.streams.audio:
            raise RecordingError("not_audio", f"The {container} file has no audio stream.")
        stream = source.streams.audio[0]
        # Resampled in its own layout, then the channels averaged: ffmpeg's own downmix to mono is 3 dB quieter.
        resampler = AudioResampler(format="fltp", rate=SAMPLE_RATE)
        for frame in source.decode(stream):
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray().mean(axis=0))
                samples += out.samples
            if samples >= limit:
                break
        else:
            chunks.extend(out.to_ndarray().mean(axis=0) for out in resampler.resample(None))
        codec = stream.codec_context.name
    mono = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return (np.clip(mono, -1.0, 1.0) * 32767).astype("<i2").tobytes(), codec


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
