"""Streaming encoders: 16-bit mono PCM from an engine in, bytes of a response format out."""

from __future__ import annotations

import struct
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import lameenc

from gateway.audio._muxed import MuxedEncoder, MuxSpec
from gateway.audio._tempo import MAX_TEMPO, MIN_TEMPO, S16Stage, drain_with_silence, s16_stage
from gateway.audio.formats import AudioFormat, Codec, output_sample_rate, sample_rates
from gateway.audio.g711 import G711_SAMPLE_RATE, open_g711_encoder

if TYPE_CHECKING:
    from gateway.audio.formats import Encoding

__all__ = ["MAX_TEMPO", "MIN_TEMPO", "MP3_SAMPLE_RATES", "OPUS_SAMPLE_RATES", "AudioEncoder", "open_encoder",
           "open_encoding", "wav_header"]  # fmt: skip

_MP3_KBPS = 64
# LAME's scale runs from 2 (best) to 7 (fastest); 2 took three times the CPU of 5 for 10 s of audio.
_MP3_QUALITY = 5
# Encoding runs on the server's event loop, so the CPU-hungry codecs trade a little quality for speed:
# libopus at complexity 5 and ffmpeg's "fast" AAC coder each took about 40 % less time than their defaults.
_MUXED = MappingProxyType(
    {
        AudioFormat.OPUS: MuxSpec(
            "ogg",
            "libopus",
            "s16",
            bit_rate=32000,
            codec_options=MappingProxyType({"compression_level": "5"}),
            # Ogg holds a page back until it spans page_duration (default 1 s); 100 ms pages keep bytes flowing.
            container_options=MappingProxyType({"page_duration": "100000"}),
            # libopus's lookahead and a frame; the muxer closes a page only once a packet beyond 100 ms arrives.
            held_samples=312 + 960 + 2 * 4800,
        ),
        AudioFormat.AAC: MuxSpec(
            "adts",
            "aac",
            "fltp",
            bit_rate=64000,
            codec_options=MappingProxyType({"aac_coder": "fast"}),
            held_samples=2 * 1024,  # ffmpeg's AAC encoder delay: a frame, and the one it looks ahead to
        ),
        AudioFormat.FLAC: MuxSpec("flac", "flac", "s16"),
    }
)
# LAME holds back its encoder delay (576 + 529 samples) and the frames it is filling: 576 samples each at the rates of
# MPEG-2 and 2.5 (up to 24 kHz), 1152 at MPEG-1's (32 to 48 kHz).
_MP3_DELAY_SAMPLES = 576 + 529
_MPEG1_MIN_RATE = 32000
MP3_SAMPLE_RATES = frozenset({8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000})
"""The sample rates of MPEG-1, 2 and 2.5 Layer III: the ones LAME encodes at."""
OPUS_SAMPLE_RATES = frozenset({8000, 12000, 16000, 24000, 48000})
"""The sample rates libopus encodes at."""
_STREAMED_SIZE = 0xFFFFFFFF  # RIFF and data sizes of a WAV whose length is unknown while it streams


class AudioEncoder(Protocol):
    """Encodes a stream of PCM into one response format, chunk by chunk.

    Used by one coroutine at a time; not thread-safe. Call ``finish`` once, last; an encoder that is dropped
    unfinished (a client went away) needs no cleanup: it frees its codec as soon as the last reference to it goes,
    without waiting for the cyclic garbage collector.
    """

    def encode(self, pcm: bytes) -> bytes:
        """Feed PCM and collect the encoded bytes that are ready.

        Args:
            pcm: Mono signed 16-bit little-endian samples at the encoder's input rate, of any length.

        Returns:
            Encoded bytes ready now; often ``b""`` while a codec fills a frame.
        """
        ...

    def drain(self) -> bytes:
        """Emit all the audio fed so far and keep the stream open (a segment of speech ends, more may follow).

        The codec's delay is pushed out with silence: up to about 0.13 s of it is added (Opus, whose Ogg pages
        span 100 ms), less for the other formats, none for PCM and WAV at the engine's rate.

        Returns:
            The bytes that complete the audio fed so far; ``encode`` may continue the stream afterwards.
        """
        ...

    @property
    def drained_s(self) -> float:
        """Seconds of silence the last ``drain`` added to the audio (0 before any): where a stream's time runs
        ahead of the audio fed (the alignment of the next speech after it)."""
        ...

    def finish(self) -> bytes:
        """Flush everything the encoder holds.

        Returns:
            The last bytes. All bytes returned by ``encode`` and ``finish``, in order, form a complete file.
        """
        ...


def open_encoder(fmt: AudioFormat, input_rate: int, tempo: float = 1.0, sample_rate: int | None = None) -> AudioEncoder:
    """Open a streaming encoder.

    Audio is resampled from ``input_rate`` to ``output_sample_rate(fmt, sample_rate)`` and, unless ``tempo`` is 1.0,
    sped up or slowed down at the same pitch.

    Args:
        fmt: Response format to produce.
        input_rate: Sample rate of the PCM that will be fed, in Hz.
        tempo: Speed factor from ``MIN_TEMPO`` (0.25) to ``MAX_TEMPO`` (4.0); output lasts ``1 / tempo``
            as long as the input.
        sample_rate: The rate to encode at, one of ``sample_rates(fmt)``; ``None``: the format's own.

    Returns:
        A fresh encoder for one stream.

    Raises:
        ValueError: If ``fmt`` is not a format, ``input_rate`` is not positive, ``sample_rate`` is not one of the
            format's or ``tempo`` is out of range.
    """
    fmt = AudioFormat(fmt)  # a plain "mp3" would fail the identity checks below and come out as PCM
    rate = output_sample_rate(fmt, sample_rate)
    if sample_rate is not None:
        _check_rate(fmt, rate, sample_rates(fmt))
    if fmt in {AudioFormat.PCMU, AudioFormat.PCMA}:
        return open_g711_encoder("pcmu" if fmt is AudioFormat.PCMU else "pcma", input_rate, tempo)
    if fmt in _MUXED:
        return MuxedEncoder(_MUXED[fmt], input_rate, rate, tempo)
    stage = s16_stage(input_rate, rate, tempo)
    if fmt is AudioFormat.MP3:
        return _Mp3Encoder(stage, rate)
    return _PcmEncoder(stage, wav_header(rate) if fmt is AudioFormat.WAV else b"")


def open_encoding(encoding: Encoding, input_rate: int, tempo: float = 1.0) -> AudioEncoder:
    """Open a streaming encoder for ``encoding``: its codec at its sample rate and bit rate.

    As :func:`open_encoder`, for APIs that name the rate and bit rate themselves (ElevenLabs' ``mp3_44100_128``,
    ``pcm_16000``, ``ulaw_8000``, ``opus_48000_64``); the same codecs, built with the same settings but those.

    Args:
        encoding: The codec, sample rate and bit rate to produce.
        input_rate: Sample rate of the PCM that will be fed, in Hz.
        tempo: Speed factor from ``MIN_TEMPO`` (0.25) to ``MAX_TEMPO`` (4.0).

    Returns:
        A fresh encoder for one stream.

    Raises:
        ValueError: A sample rate the codec does not run at, a rate that is not positive, or ``tempo`` out of range.
    """
    codec, rate = Codec(encoding.codec), encoding.sample_rate
    if codec in {Codec.MULAW, Codec.ALAW}:
        _check_rate(codec, rate, {G711_SAMPLE_RATE})
        return open_g711_encoder("pcmu" if codec is Codec.MULAW else "pcma", input_rate, tempo)
    if codec is Codec.OPUS:
        _check_rate(codec, rate, OPUS_SAMPLE_RATES)
        spec = _MUXED[AudioFormat.OPUS]
        if encoding.kbps is not None:
            spec = replace(spec, bit_rate=encoding.kbps * 1000)
        return MuxedEncoder(spec, input_rate, rate, tempo)
    if rate <= 0:
        msg = f"a sample rate must be positive, got {rate}"
        raise ValueError(msg)
    if codec is Codec.MP3:
        _check_rate(codec, rate, MP3_SAMPLE_RATES)
        return _Mp3Encoder(s16_stage(input_rate, rate, tempo), rate, encoding.kbps or _MP3_KBPS)
    return _PcmEncoder(s16_stage(input_rate, rate, tempo), wav_header(rate) if codec is Codec.WAV else b"")


def _check_rate(codec: Codec | AudioFormat, rate: int, rates: frozenset[int] | set[int]) -> None:
    if rate not in rates:
        msg = f"{codec} runs at {', '.join(map(str, sorted(rates)))} Hz, not {rate}"
        raise ValueError(msg)


def wav_header(sample_rate: int, data_bytes: int | None = None) -> bytes:
    """Return the 44-byte header of a streamed mono 16-bit PCM WAV file.

    Both sizes are 0xFFFFFFFF, which decoders read as "until the end of the data"; a size of 0 would read as
    empty.

    Args:
        sample_rate: Samples per second.
        data_bytes: The size of the data when it is known (a file written whole); ``None``: streamed.

    Returns:
        The RIFF/WAVE header, ``fmt `` chunk and ``data`` chunk header.
    """
    channels, sample_bytes = 1, 2
    fmt_chunk = struct.pack(
        "<4sIHHIIHH",
        b"fmt ",
        16,
        1,  # WAVE_FORMAT_PCM
        channels,
        sample_rate,
        sample_rate * channels * sample_bytes,
        channels * sample_bytes,
        8 * sample_bytes,
    )
    data_size = _STREAMED_SIZE if data_bytes is None else data_bytes
    riff_size = _STREAMED_SIZE if data_bytes is None else 4 + len(fmt_chunk) + 8 + data_bytes
    riff = struct.pack("<4sI4s", b"RIFF", riff_size, b"WAVE")
    return riff + fmt_chunk + struct.pack("<4sI", b"data", data_size)


class _PcmEncoder:
    """Raw s16le samples, after an optional fixed header (the WAV header, sent with the first chunk)."""

    def __init__(self, stage: S16Stage, header: bytes) -> None:
        self._stage = stage
        self._header = header
        self.drained_s = 0.0

    def encode(self, pcm: bytes) -> bytes:
        return self._take_header() + self._stage.push_s16(pcm)

    def drain(self) -> bytes:
        data, self.drained_s = drain_with_silence(self._stage, self.encode, 0)
        return data

    def finish(self) -> bytes:
        return self._take_header() + self._stage.flush_s16()

    def _take_header(self) -> bytes:
        header, self._header = self._header, b""
        return header


class _Mp3Encoder:
    """MP3 through LAME (lameenc), which encodes incrementally and costs far less than ffmpeg's muxing path."""

    def __init__(self, stage: S16Stage, rate: int, kbps: int = _MP3_KBPS) -> None:
        self._stage = stage
        self._held_samples = _MP3_DELAY_SAMPLES + 2 * (1152 if rate >= _MPEG1_MIN_RATE else 576)
        self._lame = lameenc.Encoder()
        self._lame.set_in_sample_rate(rate)
        self._lame.set_out_sample_rate(rate)
        self._lame.set_channels(1)
        self._lame.set_bit_rate(kbps)
        self._lame.set_quality(_MP3_QUALITY)
        self._lame.silence()
        self._started = False
        self.drained_s = 0.0

    def encode(self, pcm: bytes) -> bytes:
        return self._encode(self._stage.push_s16(pcm))

    def drain(self) -> bytes:
        data, self.drained_s = drain_with_silence(self._stage, self.encode, self._held_samples if self._started else 0)
        return data

    def finish(self) -> bytes:
        tail = self._encode(self._stage.flush_s16())
        # LAME refuses to flush before its first sample; an MP3 of no audio is simply no frames.
        return tail + bytes(self._lame.flush()) if self._started else tail

    def _encode(self, pcm: bytes) -> bytes:
        if not pcm:
            return b""
        self._started = True
        return bytes(self._lame.encode(pcm))
