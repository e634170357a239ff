"""Uploaded recordings: every container OpenAI lists decodes to 24 kHz mono; what is not audio, too large, too short
or too long is refused with the reason; the audit copy is small Ogg/Opus that still holds the recording."""

from __future__ import annotations

import io
import struct
import time

import av
import lameenc
import numpy as np
import pytest
import soundfile

from gateway.audio.samples import (
    MAX_RECORDING_BYTES,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    SAMPLE_RATE,
    RecordingError,
    decode_recording,
    encode_for_audit,
    sniff_container,
)
from harness.recordings import CONTAINERS, recording, tone
from tests.audio_decode import decode_audio, dominant_frequency

# Codec priming that a container does not trim (ADTS and MP4 AAC: up to a frame and a half at 44.1 kHz).
PRIMING_S = 0.05


def pcm_audio(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768


@pytest.mark.parametrize("kind", sorted(CONTAINERS))
def test_every_container_becomes_24_khz_mono_of_the_same_sound(kind: str) -> None:
    decoded = decode_recording(recording(kind, tone(2.5, 660.0)))  # stereo at 44.1 or 48 kHz
    assert decoded.duration_s == pytest.approx(2.5, abs=PRIMING_S)
    samples = pcm_audio(decoded.pcm)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    assert np.argmax(spectrum) * SAMPLE_RATE / len(samples) == pytest.approx(660.0, abs=3)
    assert 0.15 < float(np.sqrt(np.mean(samples**2))) < 0.25  # 0.3 peak sine: neither silence nor doubled channels


def test_an_id3_tag_before_the_audio_is_skipped() -> None:
    tagged = io.BytesIO()
    with av.open(tagged, mode="w", format="mp3") as out:
        out.metadata["title"] = "consent"
        stream = out.add_stream("libmp3lame", rate=24000)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(tone(1.5).reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = 24000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    data = tagged.getvalue()
    assert data.startswith(b"ID3")
    assert sniff_container(data) == "mp3"
    assert decode_recording(data).duration_s == pytest.approx(1.5, abs=PRIMING_S)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"just some text, no audio at all" * 10,
        # A playlist ffmpeg's HLS demuxer would follow to another file: never probed, so never opened.
        b"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n",
        b"OggS" + bytes(range(256)) * 20,  # the magic of a container, then garbage
        b"RIFF\x00\x00\x00\x00WAVEfmt " + b"\x00" * 64,
    ],
    ids=["empty", "text", "hls-playlist", "garbage-ogg", "broken-wav"],
)
def test_what_is_not_audio_is_refused_as_such(data: bytes) -> None:
    with pytest.raises(RecordingError) as refused:
        decode_recording(data)
    assert refused.value.problem == "not_audio"


def test_a_container_without_audio_is_not_audio() -> None:
    video = io.BytesIO()
    with av.open(video, mode="w", format="matroska") as out:
        stream = out.add_stream("ffv1", rate=5)
        stream.width = stream.height = 16
        for index in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
            frame.pts = index
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    with pytest.raises(RecordingError, match="no audio stream") as refused:
        decode_recording(video.getvalue())
    assert refused.value.problem == "not_audio"


def test_over_ten_mebibytes_is_refused_before_decoding() -> None:
    too_big = recording("wav") + b"\x00" * MAX_RECORDING_BYTES
    with pytest.raises(RecordingError) as refused:
        decode_recording(too_big)
    assert refused.value.problem == "too_large"


@pytest.mark.parametrize(("seconds", "problem"), [(0.5, "too_short"), (31.0, "too_long")])
def test_the_duration_is_bounded(seconds: float, problem: str) -> None:
    with pytest.raises(RecordingError) as refused:
        decode_recording(recording("flac", tone(seconds)))
    assert refused.value.problem == problem


def test_a_small_file_of_hours_is_refused_after_decoding_the_bound_only() -> None:
    # MP3 frames stand alone: ten seconds of 8 kbit/s silence, 360 times over, is an hour in 3.5 MiB.
    encoder = lameenc.Encoder()
    encoder.set_in_sample_rate(8000)
    encoder.set_channels(1)
    encoder.set_bit_rate(8)
    hour = (bytes(encoder.encode(bytes(2 * 80000))) + bytes(encoder.flush())) * 360
    assert len(hour) < MAX_RECORDING_BYTES
    started = time.perf_counter()
    with pytest.raises(RecordingError) as refused:
        decode_recording(hour)
    assert refused.value.problem == "too_long"
    assert time.perf_counter() - started < 2.0  # an hour decodes in far more; 30 s in milliseconds


def test_the_audit_copy_is_small_ogg_opus_of_the_same_recording() -> None:
    decoded = decode_recording(recording("wav", tone(10.0, 440.0)))
    audit = encode_for_audit(decoded.pcm)
    assert audit.startswith(b"OggS")
    assert len(audit) < 10 * 16000 / 8 * 1.3  # 16 kbit/s, with Ogg's overhead
    heard = decode_audio(audit, "opus")
    assert heard.codec == "opus"
    assert heard.channels == 1
    assert heard.duration == pytest.approx(10.0, abs=0.1)
    assert dominant_frequency(heard) == pytest.approx(440.0, abs=3)


def wav_declaring(rate: int, channels: int = 1, sample_bytes: int = 2, frames: int = 24000) -> bytes:
    """A PCM WAV whose header declares ``rate`` and ``channels`` (any values: written by hand), with ``frames`` of
    silence."""
    data = bytes(frames * channels * sample_bytes)
    fmt = struct.pack(
        "<HHIIHH", 1, channels, rate, rate * channels * sample_bytes, channels * sample_bytes, 8 * sample_bytes
    )
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("rate", [1, 6, 7999, 192_001, 380_000_000])
def test_sample_rates_outside_the_bounds_are_refused_before_decoding(rate: int) -> None:
    with pytest.raises(RecordingError, match=f"sample rate of {rate} Hz") as refused:
        decode_recording(wav_declaring(rate, frames=min(rate * 2, 24000)))
    assert refused.value.problem == "unsupported"


@pytest.mark.parametrize("rate", [MIN_SAMPLE_RATE, MAX_SAMPLE_RATE])
def test_the_bounds_themselves_are_accepted(rate: int) -> None:
    assert decode_recording(wav_declaring(rate, frames=int(rate * 1.5))).duration_s == pytest.approx(1.5, abs=0.01)


def test_more_than_eight_channels_are_refused() -> None:
    with pytest.raises(RecordingError, match="16 channels") as refused:
        decode_recording(wav_declaring(24000, channels=16))
    assert refused.value.problem == "unsupported"


@pytest.mark.parametrize("channels", [3, 6, 7, 8])
@pytest.mark.parametrize(("container", "rate"), [("WAV", 24000), ("WAV", 48000), ("FLAC", 24000), ("FLAC", 48000)])
def test_multichannel_recordings_are_mixed_down_to_mono(channels: int, container: str, rate: int) -> None:
    # What a studio or a phone's 5.1/7.1 capture gives: the same sound in every channel must come out at its level.
    # Planar frames of 8 channels crashed PyAV's conversion to arrays (the process died of SIGSEGV).
    seconds = 2.0
    sound = 0.3 * np.sin(2 * np.pi * 550.0 * np.arange(int(seconds * rate)) / rate)
    upload = io.BytesIO()
    soundfile.write(upload, np.tile(sound[:, None], (1, channels)), rate, format=container, subtype="PCM_16")
    decoded = decode_recording(upload.getvalue())
    assert decoded.duration_s == pytest.approx(seconds, abs=0.01)
    samples = pcm_audio(decoded.pcm)
    assert float(np.sqrt(np.mean(samples**2))) == pytest.approx(0.3 / np.sqrt(2), rel=0.05)
