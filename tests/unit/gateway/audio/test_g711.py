"""G.711 encoders: codes against the ITU-T reference, and round trips through ffmpeg's own G.711 decoders."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import av
import numpy as np
import pytest

from gateway.audio import G711_SAMPLE_RATE, open_g711_encoder

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from gateway.audio import G711Law

LAWS: list[G711Law] = ["pcmu", "pcma"]
INPUT_RATE = 24000
PEAK = 10000  # of 32767: G.711 keeps about 38 dB of SNR over most of its range, clipping at neither end
# The resampler's edges: the first and last few milliseconds ramp in and out.
EDGE_S = 0.01


def _tone(freq: float, seconds: float, rate: int = INPUT_RATE) -> npt.NDArray[np.float64]:
    return np.sin(2 * np.pi * freq * np.arange(round(seconds * rate)) / rate)


def _chirp(start: float, end: float, seconds: float, rate: int) -> npt.NDArray[np.float64]:
    """A linear sweep from ``start`` to ``end`` Hz: every frequency of the telephone band, each at one moment."""
    t = np.arange(round(seconds * rate)) / rate
    return np.sin(2 * np.pi * (start * t + (end - start) / (2 * seconds) * t**2))


SIGNALS: dict[str, Callable[[int], npt.NDArray[np.float64]]] = {
    "tone": lambda rate: _tone(440.0, 1.0, rate),
    "chirp": lambda rate: _chirp(100.0, 3000.0, 1.0, rate),  # up to where the resampler's low-pass begins
}


def _pcm(signal: npt.NDArray[np.float64]) -> bytes:
    return np.round(PEAK * signal).astype("<i2").tobytes()


def _decode(law: G711Law, data: bytes) -> npt.NDArray[np.float64]:
    """ffmpeg's decoder of the law (an implementation independent of ours), as samples scaled like the input."""
    context = av.CodecContext.create("pcm_mulaw" if law == "pcmu" else "pcm_alaw", "r")
    context.sample_rate = G711_SAMPLE_RATE
    context.layout = "mono"
    frames = context.decode(av.Packet(data))
    return np.concatenate([frame.to_ndarray().reshape(-1) for frame in frames]).astype(np.float64) / PEAK


def _snr_db(decoded: npt.NDArray[np.float64], expected: npt.NDArray[np.float64]) -> float:
    edge = round(EDGE_S * G711_SAMPLE_RATE)
    signal, noise = expected[edge:-edge], (decoded - expected)[edge:-edge]
    return float(10 * np.log10(np.sum(signal**2) / np.sum(noise**2)))


def _encode_at_8k(law: G711Law, samples: npt.NDArray[np.int16]) -> npt.NDArray[np.uint8]:
    """At 8 kHz the stage passes samples through untouched, so each byte is the code of one input sample."""
    encoder = open_g711_encoder(law, G711_SAMPLE_RATE)
    return np.frombuffer(encoder.encode(samples.astype("<i2").tobytes()) + encoder.finish(), dtype=np.uint8)


def _stl_ulaw(sample: int) -> int:
    """ITU-T G.191 STL ``ulaw_compress``, line for line, for one sample."""
    absno = ((~sample) >> 2) + 33 if sample < 0 else (sample >> 2) + 33
    absno = min(absno, 0x1FFF)
    i, segno = absno >> 6, 1
    while i:
        segno, i = segno + 1, i >> 1
    code = ((8 - segno) << 4) | (0x0F - ((absno >> segno) & 0x0F))
    return code | 0x80 if sample >= 0 else code


def _stl_alaw(sample: int) -> int:
    """ITU-T G.191 STL ``alaw_compress``, line for line, for one sample."""
    ix = (~sample) >> 4 if sample < 0 else sample >> 4
    if ix > 15:
        iexp = 1
        while ix > 16 + 15:
            ix, iexp = ix >> 1, iexp + 1
        ix = ix - 16 + (iexp << 4)
    if sample >= 0:
        ix |= 0x80
    return ix ^ 0x55


@pytest.mark.parametrize(
    ("law", "sample", "code"),
    [
        ("pcmu", 0, 0xFF),  # μ-law inverts every bit: positive zero is all ones
        ("pcmu", -1, 0x7F),  # negative zero
        ("pcmu", 1000, 0xCE),  # segment 3, step 1
        ("pcmu", 32767, 0x80),
        ("pcmu", -32768, 0x00),
        ("pcma", 0, 0xD5),  # 0x80 with the even bits inverted
        ("pcma", -1, 0x55),
        ("pcma", 1000, 0xFA),  # segment 2, step 15
        ("pcma", 32767, 0xAA),
        ("pcma", -32768, 0x2A),
    ],
)
def test_known_codes(law: G711Law, sample: int, code: int) -> None:
    assert _encode_at_8k(law, np.array([sample], dtype=np.int16)).tolist() == [code]


@pytest.mark.parametrize("law", LAWS)
def test_every_sample_is_coded_as_the_itu_reference_codes_it(law: G711Law) -> None:
    samples = np.arange(-32768, 32768, dtype=np.int32)
    reference = _stl_ulaw if law == "pcmu" else _stl_alaw
    expected = np.array([reference(int(sample)) for sample in samples], dtype=np.uint8)
    np.testing.assert_array_equal(_encode_at_8k(law, samples.astype(np.int16)), expected)


@pytest.mark.parametrize("law", LAWS)
@pytest.mark.parametrize("signal", ["tone", "chirp"])
def test_24k_input_decodes_to_the_same_signal_at_8k(law: G711Law, signal: str) -> None:
    """ffmpeg decodes what we send to the 8 kHz version of the input, to within G.711's quantisation noise."""
    make = SIGNALS[signal]
    encoder = open_g711_encoder(law, INPUT_RATE)
    data = encoder.encode(_pcm(make(INPUT_RATE))) + encoder.finish()
    decoded, expected = _decode(law, data), make(G711_SAMPLE_RATE)
    assert abs(len(decoded) - len(expected)) <= 0.003 * G711_SAMPLE_RATE  # one byte per sample, 1 s of them
    decoded = decoded[: len(expected)]
    assert np.corrcoef(decoded, expected[: len(decoded)])[0, 1] > 0.99
    assert _snr_db(decoded, expected[: len(decoded)]) > 30


@pytest.mark.parametrize("law", LAWS)
def test_chunks_of_any_size_make_the_same_stream(law: G711Law) -> None:
    """A chunk may end mid-sample (an odd byte count): the half sample waits for the next chunk."""
    pcm = _pcm(_tone(440.0, 0.5))
    whole = open_g711_encoder(law, INPUT_RATE)
    expected = whole.encode(pcm) + whole.finish()
    chunked = open_g711_encoder(law, INPUT_RATE)
    cuts = [0, 1, 2, 999, 4801, 12001, len(pcm)]
    data = b"".join(chunked.encode(pcm[a:b]) for a, b in itertools.pairwise(cuts)) + chunked.finish()
    assert data == expected


@pytest.mark.parametrize("law", LAWS)
def test_drain_emits_the_segment_and_the_stream_goes_on(law: G711Law) -> None:
    """What a realtime response relies on: after ``drain`` all of it is out, and the next one continues the bytes."""
    segment = round(0.5 * G711_SAMPLE_RATE)
    encoder = open_g711_encoder(law, INPUT_RATE)
    first = encoder.encode(_pcm(_tone(440.0, 0.5))) + encoder.drain()
    assert segment <= len(first) <= segment + 0.05 * G711_SAMPLE_RATE  # all of it, and little silence after
    second = encoder.encode(_pcm(_tone(1000.0, 0.5))) + encoder.drain() + encoder.finish()
    decoded = _decode(law, first + second)
    assert _dominant_hz(decoded[:segment]) == pytest.approx(440.0, abs=20.0)
    assert _dominant_hz(decoded[len(first) : len(first) + segment]) == pytest.approx(1000.0, abs=20.0)
    edge = round(EDGE_S * G711_SAMPLE_RATE)
    for start in (0, len(first)):  # both segments at full level up to their last 10 ms: nothing lost to the drain
        middle = decoded[start + edge : start + segment - edge]
        assert np.sqrt(np.mean(middle**2)) == pytest.approx(1 / np.sqrt(2), rel=0.05)


def _dominant_hz(samples: npt.NDArray[np.float64]) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * G711_SAMPLE_RATE / len(samples))


@pytest.mark.parametrize("law", LAWS)
def test_drain_before_any_audio_adds_nothing(law: G711Law) -> None:
    assert open_g711_encoder(law, INPUT_RATE).drain() == b""


@pytest.mark.parametrize(("law", "tempo"), [("pcmu", 2.0), ("pcma", 0.5)])
def test_tempo_changes_the_duration(law: G711Law, tempo: float) -> None:
    encoder = open_g711_encoder(law, INPUT_RATE, tempo)
    data = encoder.encode(_pcm(_tone(440.0, 1.0))) + encoder.finish()
    assert len(data) / G711_SAMPLE_RATE == pytest.approx(1.0 / tempo, rel=0.02)


def test_an_unknown_law_is_refused() -> None:
    with pytest.raises(ValueError, match="law must be"):
        open_g711_encoder("g722", INPUT_RATE)  # type: ignore[arg-type]  # what a caller without types could pass
