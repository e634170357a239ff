"""Streaming encoders: round trips through PyAV, streaming behaviour, WAV headers and edge cases."""

from __future__ import annotations

import gc
import io
import struct
import wave
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import av
import numpy as np
import numpy.typing as npt
import pytest
import soundfile

from gateway.audio import (
    AudioEncoder,
    AudioFormat,
    Codec,
    Encoding,
    open_encoder,
    open_encoding,
    output_sample_rate,
    wav_header,
)
from gateway.audio.formats import sample_rates

if TYPE_CHECKING:
    from av.audio.codeccontext import AudioCodecContext

TONE_HZ = 440.0
TONE_PEAK = 10000  # of 32767: loud enough to survive lossy codecs, far from clipping
TONE_RMS = TONE_PEAK / 32768 / np.sqrt(2)
TEMPOS = [1.0, 0.5, 2.0, 0.25, 4.0]
# Lossy codecs add whole frames of priming and padding that ADTS and bare MP3 carry no trimming info for:
# up to ~1.5 frames (~70 ms at 24 kHz). atempo in turn loses up to ~1 % of the audio at its edges.
ENCODER_SLACK_S = 0.1
TEMPO_SLACK = 0.02


@dataclass(frozen=True)
class Decoded:
    """Audio decoded from an encoder's output, as mono floats in [-1, 1]."""

    sample_rate: int
    channels: int
    samples: npt.NDArray[np.float64]

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate

    @property
    def rms(self) -> float:
        return float(np.sqrt(np.mean(np.square(self.samples)))) if len(self.samples) else 0.0

    def dominant_hz(self) -> float:
        """The strongest frequency in one second from the middle of the audio (1 Hz resolution)."""
        rate = self.sample_rate
        start = max(0, len(self.samples) // 2 - rate // 2)
        window = self.samples[start : start + rate]
        spectrum = np.abs(np.fft.rfft(window * np.hanning(len(window))))
        return float(np.argmax(spectrum)) * rate / len(window)


def tone(rate: int, seconds: float) -> bytes:
    """A 440 Hz sine as mono s16le PCM."""
    t = np.arange(round(rate * seconds)) / rate
    return (np.sin(2 * np.pi * TONE_HZ * t) * TONE_PEAK).astype("<i2").tobytes()


def chunks(pcm: bytes, rate: int, seconds: float = 0.1) -> list[bytes]:
    """``pcm`` cut into pieces of ``seconds`` each, as an engine hands them over."""
    size = round(rate * seconds) * 2
    return [pcm[i : i + size] for i in range(0, len(pcm), size)]


def encode_all(encoder: AudioEncoder, pieces: list[bytes]) -> list[bytes]:
    """What ``encode`` returned for each piece, then what ``finish`` returned."""
    return [encoder.encode(piece) for piece in pieces] + [encoder.finish()]


def decode(fmt: AudioFormat, data: bytes, pcm_rate: int = 24000) -> Decoded:
    """Decode a whole response with PyAV; ``pcm`` has no container and is read as raw s16le mono at ``pcm_rate``,
    G.711 as raw 8 kHz bytes with FFmpeg's decoders."""
    if fmt is AudioFormat.PCM:
        return Decoded(pcm_rate, 1, np.frombuffer(data, dtype="<i2") / 32768.0)
    if fmt in {AudioFormat.PCMU, AudioFormat.PCMA}:
        return _decode_g711("pcm_mulaw" if fmt is AudioFormat.PCMU else "pcm_alaw", data)
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.audio[0]
        arrays = [_as_float(frame.to_ndarray()) for frame in container.decode(stream)]
        samples = np.concatenate(arrays, axis=1)[0] if arrays else np.zeros(0)
        return Decoded(stream.codec_context.sample_rate, stream.codec_context.channels, samples)


def _as_float(array: npt.NDArray[np.generic]) -> npt.NDArray[np.float64]:
    # Lossless formats decode to s16, lossy ones to floats already in [-1, 1].
    scale = 32768.0 if array.dtype == np.int16 else 1.0
    floats: npt.NDArray[np.float64] = np.asarray(array, dtype=np.float64) / scale
    return floats


def _round_trip_cases() -> list[tuple[AudioFormat, int, float]]:
    every_tempo = [(fmt, 22050, tempo) for fmt in AudioFormat for tempo in TEMPOS]
    other_rates = [(fmt, rate, 1.0) for fmt in AudioFormat for rate in (24000, 16000)]
    return every_tempo + other_rates + [(AudioFormat.OPUS, 24000, 0.5), (AudioFormat.AAC, 24000, 2.0)]


@pytest.mark.parametrize(("fmt", "input_rate", "tempo"), _round_trip_cases(), ids=str)
def test_round_trip_keeps_rate_duration_loudness_and_pitch(fmt: AudioFormat, input_rate: int, tempo: float) -> None:
    seconds = 2.0
    data = b"".join(encode_all(open_encoder(fmt, input_rate, tempo), chunks(tone(input_rate, seconds), input_rate)))

    decoded = decode(fmt, data)

    assert decoded.sample_rate == output_sample_rate(fmt)
    assert decoded.channels == 1
    expected = seconds / tempo
    assert abs(decoded.duration - expected) <= TEMPO_SLACK * expected + ENCODER_SLACK_S
    assert decoded.rms == pytest.approx(TONE_RMS, rel=0.15)
    # atempo changes speed, not pitch; a resampler fed the wrong input rate would move the tone.
    assert decoded.dominant_hz() == pytest.approx(TONE_HZ, abs=3)


@pytest.mark.parametrize("tempo", [1.0, 2.0, 0.5], ids=str)
@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_bytes_stream_out_while_pcm_goes_in(fmt: AudioFormat, tempo: float) -> None:
    rate = 22050
    outputs = encode_all(open_encoder(fmt, rate, tempo), chunks(tone(rate, 3.0), rate))
    during, last = outputs[:-1], outputs[-1]

    # Codec frames, atempo's window and Ogg pages hold back at most a few hundred ms, never the clip.
    assert b"".join(during[:5]), "nothing came out during the first 0.5 s of input"
    assert _longest_empty_run(during[5:]) <= 2, "output stalled for more than 0.2 s of input"
    total = sum(map(len, outputs))
    assert len(last) < 0.2 * total
    decoded = decode(fmt, b"".join(outputs))
    assert decoded.duration == pytest.approx(3.0 / tempo, abs=TEMPO_SLACK * 3.0 / tempo + ENCODER_SLACK_S)


def _longest_empty_run(outputs: list[bytes]) -> int:
    longest = run = 0
    for out in outputs:
        run = 0 if out else run + 1
        longest = max(longest, run)
    return longest


def test_wav_header_is_streamed_riff_with_unknown_sizes() -> None:
    header = wav_header(24000)
    assert len(header) == 44
    riff, riff_size, wave_id = struct.unpack_from("<4sI4s", header, 0)
    assert (riff, riff_size, wave_id) == (b"RIFF", 0xFFFFFFFF, b"WAVE")
    fmt_id, fmt_size, tag, channels, rate, byte_rate, align, bits = struct.unpack_from("<4sIHHIIHH", header, 12)
    assert (fmt_id, fmt_size, tag, channels, rate, byte_rate, align, bits) == (b"fmt ", 16, 1, 1, 24000, 48000, 2, 16)
    assert struct.unpack_from("<4sI", header, 36) == (b"data", 0xFFFFFFFF)


def test_wav_stream_starts_with_header_at_once_and_reads_whole_in_wave_and_soundfile() -> None:
    pcm = tone(24000, 1.5)
    encoder = open_encoder(AudioFormat.WAV, 24000)
    first = encoder.encode(pcm[:4800])
    data = first + b"".join(encode_all(encoder, chunks(pcm[4800:], 24000)))

    assert first[:44] == wav_header(24000)
    assert data[44:] == pcm  # 24 kHz in, tempo 1: the samples pass through untouched
    with wave.open(io.BytesIO(data)) as reader:
        assert (reader.getframerate(), reader.getnchannels(), reader.getsampwidth()) == (24000, 1, 2)
        assert reader.readframes(reader.getnframes()) == pcm
    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == 24000
    assert samples.tobytes() == pcm


def test_flac_is_lossless() -> None:
    pcm = tone(24000, 1.0)
    data = b"".join(encode_all(open_encoder(AudioFormat.FLAC, 24000), chunks(pcm, 24000)))
    assert data.startswith(b"fLaC")
    with av.open(io.BytesIO(data), mode="r") as container:
        decoded = b"".join(frame.to_ndarray().tobytes() for frame in container.decode(audio=0))
    assert decoded == pcm


# What an encoder gives for no audio at all: a valid empty stream where the format has one.
_EMPTY_STREAM_PREFIX = {
    AudioFormat.MP3: b"",  # MP3 has no header: no frames is no bytes
    AudioFormat.OPUS: b"OggS",
    AudioFormat.AAC: b"",  # ADTS likewise carries a header only on each frame
    AudioFormat.FLAC: b"fLaC",
    AudioFormat.WAV: b"RIFF",
    AudioFormat.PCM: b"",
    AudioFormat.PCMU: b"",
    AudioFormat.PCMA: b"",
}


@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_empty_input_then_finish(fmt: AudioFormat) -> None:
    encoder = open_encoder(fmt, 22050)
    data = encoder.encode(b"") + encoder.finish()

    assert data.startswith(_EMPTY_STREAM_PREFIX[fmt])
    if not _EMPTY_STREAM_PREFIX[fmt]:
        assert data == b""
    elif fmt in {AudioFormat.FLAC, AudioFormat.WAV}:
        assert decode(fmt, data).duration == 0


@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_ten_ms_in_tiny_odd_pieces_still_decodes(fmt: AudioFormat) -> None:
    pcm = tone(22050, 0.01)
    encoder = open_encoder(fmt, 22050)
    data = b"".join(encode_all(encoder, [pcm[i : i + 3] for i in range(0, len(pcm), 3)]))

    decoded = decode(fmt, data)
    assert decoded.sample_rate == output_sample_rate(fmt)
    assert 0.009 <= decoded.duration <= 0.01 + ENCODER_SLACK_S
    assert decoded.rms > 0.05


@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_unfinished_encoder_is_simply_garbage_collected(fmt: AudioFormat) -> None:
    encoder = open_encoder(fmt, 22050, 1.5)
    encoder.encode(tone(22050, 0.3))
    del encoder
    gc.collect()  # a dealloc that warned or raised would fail the test under -W error


@pytest.mark.parametrize(
    ("fmt", "rate", "tempo"),
    [("mp4", 24000, 1.0), ("mp3", 0, 1.0), ("mp3", 24000, 0.2), ("opus", 24000, 4.5), ("aac", -1, 1.0)],
)
def test_bad_arguments_are_refused(fmt: str, rate: int, tempo: float) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case fails on a different argument
        open_encoder(fmt, rate, tempo)  # type: ignore[arg-type]


def test_plain_string_format_is_accepted() -> None:
    encoder = open_encoder("mp3", 24000)  # type: ignore[arg-type]
    data = b"".join(encode_all(encoder, chunks(tone(24000, 0.5), 24000)))
    assert decode(AudioFormat.MP3, data).duration == pytest.approx(0.5, abs=ENCODER_SLACK_S)


def _last_loud_s(decoded: Decoded) -> float:
    """Where the tone ends: the time just after the last sample above a quarter of its peak."""
    loud = np.nonzero(np.abs(decoded.samples) > TONE_PEAK / 32768 / 4)[0]
    return (int(loud[-1]) + 1) / decoded.sample_rate if len(loud) else 0.0


# atempo blends the last few milliseconds of a tone into what follows it (silence, after a drain) instead of
# flushing them on their own.
DRAIN_EDGE_S = 0.008
# Silence one drain may add: Opus waits for an Ogg page to close (100 ms), the others for a frame or two, and
# atempo's window fills with silence too (measured: at most 0.33 s, Opus at half speed).
DRAIN_MAX_PAD_S = 0.35


@pytest.mark.parametrize("tempo", [1.0, 0.5, 4.0], ids=str)
@pytest.mark.parametrize("input_rate", [24000, 22050], ids=str)
@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_drain_emits_everything_fed_so_far_and_the_stream_goes_on(
    fmt: AudioFormat,
    input_rate: int,
    tempo: float,
) -> None:
    """What a realtime session relies on: after ``drain`` a segment is audible in full, and the next continues."""
    segment = chunks(tone(input_rate, 0.53), input_rate, 0.05)
    drained, reference = open_encoder(fmt, input_rate, tempo), open_encoder(fmt, input_rate, tempo)
    first = b"".join(drained.encode(piece) for piece in segment) + drained.drain()
    finished = b"".join(encode_all(reference, segment))

    tone_end = _last_loud_s(decode(fmt, finished))
    heard = decode(fmt, first)
    assert _last_loud_s(heard) >= tone_end - DRAIN_EDGE_S
    assert heard.duration <= tone_end + DRAIN_MAX_PAD_S

    whole = first + b"".join(drained.encode(piece) for piece in segment) + drained.drain() + drained.finish()
    decoded = decode(fmt, whole)  # one stream: a second header or a closed container would not decode on
    assert decoded.duration >= 2 * 0.53 / tempo - 2 * DRAIN_EDGE_S
    assert decoded.duration <= 2 * 0.53 / tempo + 2 * DRAIN_MAX_PAD_S
    assert decoded.dominant_hz() == pytest.approx(TONE_HZ, abs=3)


@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_drained_s_is_the_silence_a_drain_puts_before_what_follows(fmt: AudioFormat) -> None:
    """What the ElevenLabs WebSocket's alignment counts between two sentences: the gap heard between two tones."""
    rate = 22050
    encoder = open_encoder(fmt, rate)
    segment = chunks(tone(rate, 0.4), rate, 0.05)
    data = b"".join(encoder.encode(piece) for piece in segment) + encoder.drain()
    gap_s = encoder.drained_s
    data += b"".join(encoder.encode(piece) for piece in segment) + encoder.finish()
    decoded = decode(fmt, data)
    loud = np.nonzero(np.abs(decoded.samples) > TONE_PEAK / 32768 / 4)[0]
    heard_gap_s = float(np.max(np.diff(loud)) - 1) / decoded.sample_rate  # the longest quiet run between the tones
    assert heard_gap_s == pytest.approx(gap_s, abs=DRAIN_EDGE_S)


@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_drain_before_any_audio_adds_nothing(fmt: AudioFormat) -> None:
    encoder = open_encoder(fmt, 24000)
    assert len(encoder.drain()) <= len(wav_header(24000))


# ----------------------------------------------------------------------------------------------------------------
# open_encoding: a codec at the rate and bit rate an API names (ElevenLabs' output formats)

ENCODINGS = [
    Encoding(Codec.MP3, 44100, 128),
    Encoding(Codec.MP3, 44100, 32),
    Encoding(Codec.MP3, 22050, 32),
    Encoding(Codec.MP3, 24000, 48),
    Encoding(Codec.OPUS, 48000, 64),
    Encoding(Codec.PCM, 16000),
    Encoding(Codec.PCM, 44100),
    Encoding(Codec.WAV, 8000),
    Encoding(Codec.MULAW, 8000),
    Encoding(Codec.ALAW, 8000),
]


def decode_encoding(encoding: Encoding, data: bytes) -> Decoded:
    """Headerless codecs at the encoding's rate; the rest through PyAV."""
    if encoding.codec is Codec.PCM:
        return Decoded(encoding.sample_rate, 1, np.frombuffer(data, dtype="<i2") / 32768.0)
    if encoding.codec in {Codec.MULAW, Codec.ALAW}:
        return _decode_g711("pcm_mulaw" if encoding.codec is Codec.MULAW else "pcm_alaw", data)
    return decode(AudioFormat.MP3, data)  # PyAV finds the container itself (MP3, Ogg, WAV)


def _decode_g711(codec: str, data: bytes) -> Decoded:
    context = cast("AudioCodecContext", av.CodecContext.create(codec, "r"))
    context.sample_rate, context.layout = 8000, "mono"
    frames = [_as_float(frame.to_ndarray()) for frame in context.decode(av.Packet(data))] if data else []
    return Decoded(8000, 1, np.concatenate(frames, axis=1)[0] if frames else np.zeros(0))


@pytest.mark.parametrize("encoding", ENCODINGS, ids=str)
def test_an_encoding_comes_out_at_its_rate_with_the_audio_intact(encoding: Encoding) -> None:
    seconds = 2.0
    data = b"".join(encode_all(open_encoding(encoding, 24000, 1.25), chunks(tone(24000, seconds), 24000)))

    decoded = decode_encoding(encoding, data)

    assert (decoded.sample_rate, decoded.channels) == (encoding.sample_rate, 1)
    assert abs(decoded.duration - seconds / 1.25) <= TEMPO_SLACK * seconds + ENCODER_SLACK_S
    assert decoded.rms == pytest.approx(TONE_RMS, rel=0.15)
    assert decoded.dominant_hz() == pytest.approx(TONE_HZ, abs=3)


@pytest.mark.parametrize("kbps", [32, 64, 128, 192])
def test_mp3_comes_out_at_the_bit_rate_asked(kbps: int) -> None:
    data = b"".join(encode_all(open_encoding(Encoding(Codec.MP3, 44100, kbps), 24000), chunks(tone(24000, 4), 24000)))

    assert len(data) * 8 / 4 == pytest.approx(kbps * 1000, rel=0.05)


def test_opus_bit_rate_follows_the_one_asked() -> None:
    sizes = [
        len(b"".join(encode_all(open_encoding(Encoding(Codec.OPUS, 48000, kbps), 24000), chunks(noise(), 24000))))
        for kbps in (32, 128)
    ]
    assert sizes[1] > 2 * sizes[0]


def noise() -> bytes:
    """Two seconds of white noise: Opus spends its whole budget on it, as on nothing simpler."""
    return (np.random.default_rng(7).standard_normal(48000) * 5000).clip(-32768, 32767).astype("<i2").tobytes()


def test_mp3_at_mpeg1_rates_drains_everything_fed() -> None:
    """At 32 kHz and over LAME's frames are twice as long (1152 samples): a drain must wait for them (waiting for
    576-sample frames left the last 6.5 ms of the tone unheard). No time-stretch here: nothing blurs the edge."""
    encoding = Encoding(Codec.MP3, 44100, 128)
    segment = chunks(tone(24000, 0.53), 24000, 0.05)
    drained, reference = open_encoding(encoding, 24000), open_encoding(encoding, 24000)
    first = b"".join(drained.encode(piece) for piece in segment) + drained.drain()
    tone_end = _last_loud_s(decode(AudioFormat.MP3, b"".join(encode_all(reference, segment))))

    assert _last_loud_s(decode(AudioFormat.MP3, first)) >= tone_end - 0.001


@pytest.mark.parametrize(
    "encoding",
    [Encoding(Codec.MP3, 44000), Encoding(Codec.OPUS, 44100), Encoding(Codec.MULAW, 16000), Encoding(Codec.PCM, 0)],
    ids=str,
)
def test_a_rate_the_codec_does_not_run_at_is_refused(encoding: Encoding) -> None:
    with pytest.raises(ValueError, match=r"Hz|positive"):
        open_encoding(encoding, 24000)


def _rate_cases() -> list[tuple[AudioFormat, int]]:
    return [(fmt, rate) for fmt in AudioFormat for rate in sorted(sample_rates(fmt))]


@pytest.mark.parametrize(("fmt", "rate"), _rate_cases(), ids=str)
def test_a_format_comes_out_at_the_rate_asked_with_the_audio_intact(fmt: AudioFormat, rate: int) -> None:
    seconds = 2.0
    encoder = open_encoder(fmt, 24000, 1.25, sample_rate=rate)
    data = b"".join(encode_all(encoder, chunks(tone(24000, seconds), 24000)))

    decoded = decode(fmt, data, pcm_rate=rate)

    assert (decoded.sample_rate, decoded.channels) == (rate, 1)
    # Codec priming and frames are counted in samples: at a lower rate they last longer.
    slack = ENCODER_SLACK_S * max(1.0, 24000 / rate)
    assert abs(decoded.duration - seconds / 1.25) <= TEMPO_SLACK * seconds + slack
    assert decoded.rms == pytest.approx(TONE_RMS, rel=0.15)
    assert decoded.dominant_hz() == pytest.approx(TONE_HZ, abs=3)


def test_pcm_at_8000_is_a_third_of_24000() -> None:
    pcm = tone(24000, 1.5)
    sizes = [
        len(b"".join(encode_all(open_encoder(AudioFormat.PCM, 24000, sample_rate=r), [pcm]))) for r in (8000, 24000)
    ]
    assert sizes == [sizes[1] // 3, len(pcm)]


@pytest.mark.parametrize(
    ("fmt", "rate"), [(AudioFormat.OPUS, 24000), (AudioFormat.PCMU, 16000), (AudioFormat.MP3, 12345)], ids=str
)
def test_a_rate_the_format_does_not_take_is_refused(fmt: AudioFormat, rate: int) -> None:
    with pytest.raises(ValueError, match="Hz"):
        open_encoder(fmt, 24000, sample_rate=rate)
