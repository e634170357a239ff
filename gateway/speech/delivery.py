"""From an engine's PCM to encoded audio with its words' times, and what that audio counts for: one loop and one usage
rule for the HTTP endpoint and the realtime sessions alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.schemas import SpeechUsage
from gateway.speech.alignment import SpeechChunk, word_times

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from engines.backend import PcmStream
    from gateway.audio import AudioEncoder

__all__ = ["AudioClock", "encode_timed", "speech_usage"]

OUTPUT_FRAMES_PER_SECOND = 50
"""Usage counts output audio in 20 ms frames (OpenAI's ``output_tokens`` for speech)."""


@dataclass
class AudioClock:
    """Audio seconds delivered so far, as the listener hears them (after the tempo change)."""

    seconds: float = 0.0


async def encode_timed(
    pcm: PcmStream,
    tempo: float,
    encoder: AudioEncoder,
    clock: AudioClock,
    offload: Callable[[Callable[[bytes], bytes], bytes], Awaitable[bytes]] | None = None,
) -> AsyncIterator[SpeechChunk]:
    """Encode ``pcm`` chunk by chunk as it arrives, advancing ``clock`` by each chunk's duration, each piece with the
    words of the stream's marks that became known with it, in output time (stretched by ``tempo``).

    The encoder is not finished here: the HTTP endpoint finishes it at the end of a response, a realtime session
    drains it after each segment and finishes it when the session ends. ``offload``: where each piece is encoded
    (a speech job's: ``gateway/speech/background.py``); ``None``: here.
    """
    bytes_per_second = pcm.sample_rate * 2 * tempo
    told = 0
    async for chunk in pcm:
        clock.seconds += len(chunk) / bytes_per_second
        data = encoder.encode(chunk) if offload is None else await offload(encoder.encode, chunk)
        marks = pcm.marks
        words = word_times(marks[told:], pcm.sample_rate, tempo) if len(marks) > told else ()
        told = len(marks)
        if data or words:
            yield SpeechChunk(data, words, clock.seconds)
    if len(pcm.marks) > told:  # the words settled at the end of the stream
        yield SpeechChunk(b"", word_times(pcm.marks[told:], pcm.sample_rate, tempo), clock.seconds)


def speech_usage(characters: int, audio_seconds: float) -> SpeechUsage:
    """Usage of one response or segment: input characters as tokens, output audio in 20 ms frames."""
    output = round(audio_seconds * OUTPUT_FRAMES_PER_SECOND)
    return SpeechUsage(input_tokens=characters, output_tokens=output, total_tokens=characters + output)
