"""A streamed file made whole (``gateway/audio/whole.py``): a FLAC that goes out complete says its samples in
STREAMINFO, so libsndfile (soundfile) reads it as PyAV does; a streamed one still says "unknown" and PyAV reads it."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile

from gateway.audio import AudioFormat, open_encoder, whole_file


def tone(rate: int, seconds: float) -> bytes:
    t = np.arange(round(rate * seconds)) / rate
    return (np.sin(2 * np.pi * 440 * t) * 10000).astype("<i2").tobytes()


def encoded(fmt: AudioFormat, pcm: bytes, tempo: float = 1.0, sample_rate: int | None = None) -> bytes:
    encoder = open_encoder(fmt, 24000, tempo, sample_rate)
    half = len(pcm) // 4 * 2
    return encoder.encode(pcm[:half]) + encoder.encode(pcm[half:]) + encoder.finish()


def pyav_samples(data: bytes) -> int:
    with av.open(io.BytesIO(data), mode="r") as container:
        return sum(int(frame.samples) for frame in container.decode(audio=0))


def streaminfo_total(data: bytes) -> int:
    return int.from_bytes(data[18:26], "big") & ((1 << 36) - 1)


@pytest.mark.parametrize(("tempo", "sample_rate"), [(1.0, None), (1.37, 44100), (0.5, 16000)])
def test_a_whole_flac_says_its_samples_and_soundfile_reads_them(tempo: float, sample_rate: int | None) -> None:
    streamed = encoded(AudioFormat.FLAC, tone(24000, 1.3), tempo, sample_rate)
    expected = pyav_samples(streamed)  # PyAV reads a streamed FLAC to its end

    whole = whole_file(AudioFormat.FLAC, streamed)

    assert streaminfo_total(streamed) == 0, "a stream cannot know its length"
    assert streaminfo_total(whole) == expected
    samples, rate = soundfile.read(io.BytesIO(whole), dtype="int16")
    assert (len(samples), rate) == (expected, sample_rate or 24000)
    assert pyav_samples(whole) == expected
    assert whole[:18] == streamed[:18]
    assert whole[26:] == streamed[26:], "only the sample count changes (its MD5 stays 0: not computed)"


def test_a_flac_that_says_its_length_and_other_formats_stay_as_they_are() -> None:
    whole = whole_file(AudioFormat.FLAC, encoded(AudioFormat.FLAC, tone(24000, 0.5)))
    assert whole_file(AudioFormat.FLAC, whole) is whole
    for fmt in (AudioFormat.WAV, AudioFormat.MP3, AudioFormat.PCM):
        data = encoded(fmt, tone(24000, 0.5))
        assert whole_file(fmt, data) is data
    assert whole_file(AudioFormat.PCM, b"fLaC" + bytes(60)) == b"fLaC" + bytes(60), "raw samples are never read"
