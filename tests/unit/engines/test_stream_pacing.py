"""How big the ChatTTS engine's streamed chunks are: they grow while the listener has audio enough, or while generation
is slower than real time, and stay small while a bigger one would leave the listener without audio.

Driven by a clock the test advances (a token every ``step_s``, a decode taking ``decode_s``); the audio is silence of
the window's length, as only its length matters to the pacing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engines.chattts.streaming import SAMPLES_PER_TOKEN, StreamDecoder

SAMPLE_RATE = 24000


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Chunk:
    at: float
    tokens: int
    """Tokens generated when it left."""
    seconds: float


def stream(step_s: float, decode_s: float, tokens: int = 400, **options: Any) -> list[Chunk]:
    clock = Clock()
    decoder = StreamDecoder(clock=clock, **options)
    chunks = []
    for _ in range(tokens):
        clock.now += step_s
        if decoder.add(torch.zeros(8)):
            window = decoder.window()
            clock.now += decode_s
            audio = decoder.emit(np.zeros(len(window) * SAMPLES_PER_TOKEN, dtype=np.float32))
            chunks.append(Chunk(clock.now, decoder.tokens, len(audio) / SAMPLE_RATE))
    return chunks


def sizes(chunks: list[Chunk]) -> list[int]:
    return [later.tokens - earlier.tokens for earlier, later in zip([Chunk(0, 0, 0), *chunks], chunks, strict=False)]


def underruns(chunks: list[Chunk]) -> list[float]:
    """How long the listener waited before each later chunk (playing from the first chunk on)."""
    waits, audio_until = [], chunks[0].at + chunks[0].seconds
    for chunk in chunks[1:]:
        waits.append(max(0.0, chunk.at - audio_until))
        audio_until = max(audio_until, chunk.at) + chunk.seconds
    return waits


def test_slower_than_real_time_chunks_double_up_to_the_largest() -> None:
    # 80 ms per token against 21.3 ms of audio: the listener waits anyway, and fewer re-decoded tokens end it sooner.
    assert sizes(stream(0.080, 0.050))[:5] == [24, 48, 96, 96, 96]


def test_much_faster_than_real_time_chunks_grow_and_the_listener_never_waits() -> None:
    chunks = stream(0.005, 0.010)
    assert 96 in sizes(chunks)[:3]
    assert max(underruns(chunks)) == 0.0


def test_the_first_chunk_does_not_wait_for_growth() -> None:
    assert stream(0.080, 0.050)[0].tokens == 24


def test_a_chunk_leaves_early_when_the_listener_would_run_out() -> None:
    # 18 ms per token: just faster than real time, so the listener can be kept playing, but not while a chunk grows.
    chunks, fixed = stream(0.018, 0.030), stream(0.018, 0.030, max_chunk_tokens=24)
    assert sizes(chunks)[:3] == [24, 24, 24]
    assert sum(underruns(chunks)) <= sum(underruns(fixed)), "growing never leaves the listener waiting longer"
    assert max(sizes(chunks)) > 24, "once the listener is far enough ahead, chunks grow"


def test_fixed_size_chunks_when_the_largest_is_the_smallest() -> None:
    assert set(sizes(stream(0.080, 0.050, chunk_tokens=24, max_chunk_tokens=24))) == {24}


def paced(step_s: float, tokens: int, *, fixed_chunks: bool = False) -> tuple[StreamDecoder, Clock]:
    """A decoder past its first chunk (24 tokens), then ``tokens`` more, one every ``step_s``."""
    clock = Clock()
    decoder = StreamDecoder(clock=clock, chunk_tokens=8, fixed_chunks=fixed_chunks)
    for count in range(24 + tokens):
        clock.now += step_s
        if decoder.add(torch.zeros(8)) and count < 24:
            decoder.emit(np.zeros(len(decoder.window()) * SAMPLES_PER_TOKEN, dtype=np.float32))
    return decoder, clock


def test_a_first_chunk_never_waits() -> None:
    decoder = StreamDecoder(clock=Clock())
    for _ in range(24):
        decoder.add(torch.zeros(8))
    assert not decoder.started
    assert not decoder.may_wait()


def test_a_later_chunk_waits_while_the_listener_has_audio_enough() -> None:
    decoder, _ = paced(step_s=0.002, tokens=16)  # far faster than real time: 20 tokens of audio barely started
    assert decoder.started
    assert decoder.may_wait()


def test_a_later_chunk_does_not_wait_when_the_listener_would_run_short() -> None:
    decoder, _ = paced(step_s=0.02, tokens=16)  # just faster than real time: 0.43 s of audio, 0.32 s of it played
    assert not decoder.may_wait()


def test_a_later_chunk_waits_when_generation_is_slower_than_real_time() -> None:
    decoder, _ = paced(step_s=0.05, tokens=16)  # the listener waits anyway; a bigger chunk costs less
    assert decoder.may_wait()


def test_a_chunk_stops_waiting_at_its_largest_size() -> None:
    decoder, _ = paced(step_s=0.002, tokens=96)
    assert not decoder.may_wait()


def fixed_chunk_ends(step_s: float, every: int, tokens: int = 130) -> list[int]:
    """The last token of each window of a stream with ``fixed_chunks`` (a seeded request's), a token every ``step_s``,
    a due chunk taken only at every ``every``-th token (the previous one still decoded beside the steps meanwhile),
    then the last window."""
    clock = Clock()
    decoder = StreamDecoder(clock=clock, first_tokens=24, chunk_tokens=24, max_chunk_tokens=96, fixed_chunks=True)
    ends = []
    for token in range(1, tokens + 1):
        clock.now += step_s
        decoder.add(torch.full((2,), float(token)))
        if token % every == 0 and decoder.due():
            window = decoder.window()
            decoder.emit(np.zeros(len(window) * SAMPLES_PER_TOKEN, dtype=np.float32))
            ends.append(int(window[-1, 0]))
    ends.append(int(decoder.window(final=True)[-1, 0]))
    return ends


def test_fixed_chunks_are_cut_at_token_counts_whatever_the_clock_and_however_late_they_are_taken() -> None:
    expected = [24, 48, 72, 96, 120, 130]
    for step_s in (0.002, 0.018, 0.080):  # far faster, just faster and slower than real time
        assert fixed_chunk_ends(step_s, every=1) == expected
        assert fixed_chunk_ends(step_s, every=10) == expected
    assert fixed_chunk_ends(0.018, every=30)[:4] == [24, 48, 72, 96], "a backlog leaves one chunk at a time"


def test_a_fixed_chunk_never_waits_for_another_requests_first_one() -> None:
    waits = {}
    for fixed in (False, True):
        decoder, _ = paced(step_s=0.002, tokens=16, fixed_chunks=fixed)
        waits[fixed] = decoder.may_wait()
    assert waits == {False: True, True: False}
