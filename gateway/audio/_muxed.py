"""Encoders whose codec and container come from ffmpeg through PyAV: Ogg-Opus, ADTS-AAC and FLAC."""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import av
from av.audio.stream import AudioStream

from gateway.audio._tempo import TempoResampler, drain_with_silence

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from av.audio.frame import AudioFrame
    from av.container import OutputContainer

__all__ = ["MuxSpec", "MuxedEncoder"]


@dataclass(frozen=True, slots=True)
class MuxSpec:
    """How one format is encoded with PyAV."""

    container: str
    """ffmpeg muxer name, such as ``ogg``."""
    codec: str
    """ffmpeg encoder name, such as ``libopus``."""
    sample_format: str
    """Sample format the encoder takes, such as ``fltp``."""
    bit_rate: int = 0
    """Target bits per second; 0 leaves the encoder's default (FLAC is lossless and ignores it)."""
    codec_options: Mapping[str, str] = field(default_factory=dict)
    """Encoder options, such as how much CPU to spend."""
    container_options: Mapping[str, str] = field(default_factory=dict)
    """Muxer options, such as how long an Ogg page may grow."""
    held_samples: int = 0
    """Samples the codec and muxer hold back beyond a frame (codec delay, a page being filled)."""


class _ByteSink:
    """A write-only file for the muxer: it collects bytes until the encoder hands them out.

    Having no ``seek`` tells ffmpeg the output is not seekable: muxers then never seek back to patch headers,
    and ffmpeg flushes its I/O buffer to ``write`` after every packet (its ``flush_packets`` default for
    such outputs), so bytes leave as soon as a packet is muxed.
    """

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data


class MuxedEncoder:
    """An ``AudioEncoder`` that encodes with an ffmpeg codec and muxes into a streamable container."""

    def __init__(self, spec: MuxSpec, input_rate: int, output_rate: int, tempo: float) -> None:
        """Open the container and codec.

        Args:
            spec: Container, codec and settings of the format.
            input_rate: Sample rate of the PCM given to ``encode``, in Hz.
            output_rate: Sample rate to encode at, in Hz.
            tempo: Speed factor applied before encoding.
        """
        self._sink = _ByteSink()
        self._container: OutputContainer = av.open(
            self._sink, mode="w", format=spec.container, container_options=dict(spec.container_options)
        )
        # A PyAV output container and its streams refer to each other, so one dropped unclosed (a client left
        # mid-stream) would wait for the cyclic garbage collector with its codec's buffers (over 7 MiB for FLAC,
        # 0.75 MiB for AAC). Closing it the moment the encoder is dropped frees them at once.
        self._close = weakref.finalize(self, _discard, self._container)
        self._close.atexit = False
        self._stream = _add_audio_stream(self._container, spec, output_rate)
        self._held_samples = spec.held_samples
        self.drained_s = 0.0
        self._time_base = Fraction(1, output_rate)
        self._samples = 0
        self._stage = TempoResampler(
            input_rate, output_rate, tempo, spec.sample_format, self._stream.codec_context.frame_size
        )

    def encode(self, pcm: bytes) -> bytes:
        """Encode a chunk of PCM; see ``AudioEncoder.encode``."""
        self._mux(self._stage.push(pcm))
        return self._sink.take()

    def drain(self) -> bytes:
        """Emit everything fed so far, keeping the stream open; see ``AudioEncoder.drain``."""
        data, self.drained_s = drain_with_silence(self._stage, self.encode, self._held_samples)
        return data

    def finish(self) -> bytes:
        """Flush codec and muxer; see ``AudioEncoder.finish``."""
        self._mux(self._stage.flush())
        # With no audio at all the muxer has not started yet; starting it still yields a valid, empty file.
        self._container.start_encoding()
        self._container.mux(self._stream.encode(None))
        self._container.close()
        self._close.detach()
        return self._sink.take()

    def _mux(self, frames: Iterable[AudioFrame]) -> None:
        for frame in frames:
            # Restamp by sample count: the encoder needs gapless timestamps in its own time base.
            frame.pts = self._samples
            frame.time_base = self._time_base
            self._samples += frame.samples
            self._container.mux(self._stream.encode(frame))


def _discard(container: OutputContainer) -> None:
    """Close the container of an encoder dropped unfinished; what the muxer still writes goes nowhere."""
    with contextlib.suppress(av.FFmpegError):
        container.close()


def _add_audio_stream(container: OutputContainer, spec: MuxSpec, rate: int) -> AudioStream:
    stream = container.add_stream(spec.codec, rate=rate, options=dict(spec.codec_options))
    if not isinstance(stream, AudioStream):
        msg = f"{spec.codec} is not an audio encoder"
        raise TypeError(msg)
    stream.layout = "mono"
    stream.format = spec.sample_format
    if spec.bit_rate:
        stream.bit_rate = spec.bit_rate
    # Opened now rather than on the first frame so its frame size is known before the filter graph is built.
    stream.codec_context.open()
    return stream
