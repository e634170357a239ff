"""Response formats: every format has a content type and an output rate."""

from __future__ import annotations

import pytest

from gateway.audio import CONTENT_TYPES, AudioFormat, output_sample_rate


def test_formats_are_openai_response_formats() -> None:
    assert [f.value for f in AudioFormat] == ["mp3", "opus", "aac", "flac", "wav", "pcm"]
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
    assert output_sample_rate(fmt) == (48000 if fmt is AudioFormat.OPUS else 24000)
