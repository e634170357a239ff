"""From an engine's PCM to encoded audio, and what that audio counts for: one loop and one usage rule for the HTTP
endpoint and the realtime sessions alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.schemas import SpeechUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator

    from gateway.audio import AudioEncoder

__all__ = ["AudioClock", "encode_stream", "speech_usage"]

OUTPUT_FRAMES_PER_SECOND = 50
"""Usage counts output audio in 20 ms frames (OpenAI's ``output_tokens`` for speech)."""


@dataclass
class AudioClock:
    """Audio seconds delivered so far, as the listener hears them (after the tempo change)."""

    seconds: float = 0.0


async def encode_stream(
    pcm: AsyncIterable[bytes],
    sample_rate: int,
    tempo: float,
    encoder: AudioEncoder,
    clock: AudioClock,
) -> AsyncIterator[bytes]:
    """Encode 16-bit mono ``pcm`` chunk by chunk as it arrives, advancing ``clock`` by each chunk's duration.

    The encoder is not finished here: the HTTP endpoint finishes it at the end of a response, a realtime session
    drains it after each segment and finishes it when the session ends.
    """
    bytes_per_second = sample_rate * 2 * tempo
    async for chunk in pcm:
        clock.seconds += len(chunk) / bytes_per_second
        if data := encoder.encode(chunk):
            yield data


def speech_usage(characters: int, audio_seconds: float) -> SpeechUsage:
    """Usage of one response or segment: input characters as tokens, output audio in 20 ms frames."""
    output = round(audio_seconds * OUTPUT_FRAMES_PER_SECOND)
    return SpeechUsage(input_tokens=characters, output_tokens=output, total_tokens=characters + output)
