"""Response formats: every format has a content type, an output rate and the rates a request may ask for."""

from __future__ import annotations

import pytest

from gateway.audio import CONTENT_TYPES, AudioFormat, output_sample_rate
from gateway.audio.formats import SPEECH_SAMPLE_RATES, sample_rates


def test_formats_are_openai_response_formats_then_g711() -> None:
    assert [f.value for f in AudioFormat] == ["mp3", "opus", "aac", "flac", "wav", "pcm", "pcmu", "pcma"]
    assert AudioFormat("opus") is AudioFormat.OPUS


@pytest.mark.parametrize(
    ("fmt", "content_type"),
    [
        (AudioFormat.MP3, "audio/mpeg"),
        (AudioFormat.OPUS, "audio/ogg"),
        (AudioFormat.AAC, "audio/aac"),
        (AudioFormat.FLAC, "audio/flac"),
        (AudioFormat.WAV, "audio/wav"),
        (AudioFormat.PCM, "audio/pcm"),
        (AudioFormat.PCMU, "audio/pcmu"),
        (AudioFormat.PCMA, "audio/pcma"),
    ],
)
def test_content_types(fmt: AudioFormat, content_type: str) -> None:
    assert CONTENT_TYPES[fmt] == content_type


def test_content_types_cover_every_format_and_are_read_only() -> None:
    assert set(CONTENT_TYPES) == set(AudioFormat)
    with pytest.raises(TypeError):
        CONTENT_TYPES[AudioFormat.MP3] = "audio/mp3"  # type: ignore[index]


@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_output_sample_rate(fmt: AudioFormat) -> None:
    own = {AudioFormat.OPUS: 48000, AudioFormat.PCMU: 8000, AudioFormat.PCMA: 8000}.get(fmt, 24000)
    assert output_sample_rate(fmt) == own
    assert own in sample_rates(fmt)
    assert output_sample_rate(fmt, 16000) == 16000


def test_each_format_takes_the_rates_its_codec_runs_at() -> None:
    assert sample_rates(AudioFormat.OPUS) == {48000}  # Ogg Opus decodes at 48 kHz, whatever went in
    assert sample_rates(AudioFormat.PCMU) == sample_rates(AudioFormat.PCMA) == {8000}
    for fmt in (AudioFormat.MP3, AudioFormat.AAC, AudioFormat.FLAC, AudioFormat.WAV, AudioFormat.PCM):
        assert sample_rates(fmt) == SPEECH_SAMPLE_RATES == {8000, 16000, 22050, 24000, 44100, 48000}
