"""The shared resample and time-stretch stage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gateway.audio._tempo import (
    MAX_TEMPO,
    MIN_TEMPO,
    TempoResampler,
    UnchangedS16,
    atempo_steps,
    drain_with_silence,
    s16_stage,
)


def _ramp(samples: int) -> bytes:
    return (np.arange(samples) % 2000 - 1000).astype("<i2").tobytes()


@pytest.mark.parametrize(
    ("tempo", "steps"),
    [(1.0, []), (1.5, [1.5]), (0.5, [0.5]), (2.0, [2.0]), (0.25, [0.5, 0.5]), (4.0, [2.0, 2.0]), (3.0, [2.0, 1.5])],
)
def test_atempo_steps_stay_within_one_filter_range(tempo: float, steps: list[float]) -> None:
    assert atempo_steps(tempo) == steps
    assert all(0.5 <= step <= 2.0 for step in steps)
    assert math.isclose(math.prod(steps), tempo)


@pytest.mark.parametrize("tempo", [MIN_TEMPO - 0.01, MAX_TEMPO + 0.01, 0.0, -1.0, math.nan])
def test_tempo_out_of_range_is_refused(tempo: float) -> None:
    with pytest.raises(ValueError, match="tempo"):
        TempoResampler(24000, 24000, tempo)


@pytest.mark.parametrize("rates", [(0, 24000), (24000, 0), (-8000, 24000)])
def test_rates_must_be_positive(rates: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="rates"):
        TempoResampler(*rates)


@pytest.mark.parametrize("stage_kind", [TempoResampler, UnchangedS16])
def test_same_rate_and_tempo_passes_samples_through_unchanged_whatever_the_chunking(
    stage_kind: type[TempoResampler | UnchangedS16],
) -> None:
    pcm = _ramp(5000)
    stage = TempoResampler(24000, 24000) if stage_kind is TempoResampler else UnchangedS16(24000)
    # Odd sizes split samples across calls; the dangling byte must wait for its other half.
    pieces = [pcm[i : i + 777] for i in range(0, len(pcm), 777)]
    out = [stage.push_s16(piece) for piece in pieces]
    assert all(len(chunk) % 2 == 0 for chunk in out)
    assert b"".join(out) + stage.flush_s16() == pcm
    assert stage.pushed_samples == 5000
    assert stage.emitted_samples == 5000
    assert stage.pending_samples() == 0


@pytest.mark.parametrize(
    ("rates", "tempo", "kind"),
    [((24000, 24000), 1.0, UnchangedS16), ((16000, 24000), 1.0, TempoResampler), ((24000, 24000), 1.5, TempoResampler)],
)
def test_the_s16_stage_skips_the_filters_only_when_nothing_changes(
    rates: tuple[int, int],
    tempo: float,
    kind: type[object],
) -> None:
    assert type(s16_stage(*rates, tempo)) is kind


def test_draining_a_pass_through_stage_pushes_exactly_the_codec_delay_in_silence() -> None:
    stage = UnchangedS16(24000)
    encoded: list[bytes] = []

    def encode(pcm: bytes) -> bytes:
        encoded.append(stage.push_s16(pcm))
        return b""

    encode(_ramp(1000))
    data, silence_s = drain_with_silence(stage, encode, held_samples=300)
    assert data == b""
    silence = b"".join(encoded)[2000:]
    assert set(silence) == {0}
    assert 300 <= len(silence) // 2 < 300 + 240  # whole 10 ms steps of silence
    assert silence_s == len(silence) / 2 / 24000


def test_frames_come_in_the_requested_size_and_format() -> None:
    stage = TempoResampler(22050, 48000, 1.0, sample_format="fltp", frame_size=960)
    frames = stage.push(_ramp(22050)) + stage.flush()
    assert {frame.format.name for frame in frames} == {"fltp"}
    assert {frame.sample_rate for frame in frames} == {48000}
    assert {frame.layout.name for frame in frames} == {"mono"}
    assert {frame.samples for frame in frames[:-1]} == {960}
    assert 0 < frames[-1].samples <= 960
    assert sum(frame.samples for frame in frames) == pytest.approx(48000, abs=48)


def test_empty_and_odd_input_before_flush() -> None:
    stage = TempoResampler(16000, 24000, 2.0)
    assert stage.push(b"") == []
    assert stage.push(b"\x01") == []
    assert stage.flush() == []
