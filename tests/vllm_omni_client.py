"""A client of vLLM-Omni's streaming-text TTS WebSocket, written as vLLM-Omni's own example client is
(``examples/online_serving/qwen3_tts/streaming_speech_client.py``): send ``session.config``, the ``input.text`` pieces
and ``input.done`` while reading ``audio.start``, binary frames, ``audio.done`` until ``session.done``."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import soundfile

if TYPE_CHECKING:
    import numpy.typing as npt
    from websockets.asyncio.client import ClientConnection

__all__ = ["Sentence", "Utterance", "pcm_samples", "speak", "utterance"]


@dataclass
class Sentence:
    """One sentence as the client saw it: its ``audio.start``, its binary frames, its ``audio.done``."""

    start: dict[str, Any]
    frames: list[bytes] = field(default_factory=list)
    done: dict[str, Any] = field(default_factory=dict)
    """Empty until it came."""

    @property
    def audio(self) -> bytes:
        return b"".join(self.frames)


@dataclass
class Utterance:
    """What one ``input.done`` brought back, and every text message on the way, in order."""

    sentences: list[Sentence] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    session_done: dict[str, Any] | None = None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [message for message in self.messages if message["type"] == kind]


async def speak(socket: ClientConnection, pieces: list[str], config: dict[str, Any] | None = None) -> Utterance:
    """Send ``config`` (if any) and ``pieces`` as ``input.text``, then ``input.done``, while reading the reply."""

    async def send_text() -> None:
        if config is not None:
            await socket.send(json.dumps({"type": "session.config", **config}))
        for piece in pieces:
            await socket.send(json.dumps({"type": "input.text", "text": piece}))
            await asyncio.sleep(0.01)  # as an STT or LLM would deliver it
        await socket.send(json.dumps({"type": "input.done"}))

    sender = asyncio.create_task(send_text())
    try:
        return await utterance(socket)
    finally:
        await sender


async def utterance(socket: ClientConnection, timeout_s: float = 20.0) -> Utterance:
    """Read until ``session.done``: binary frames belong to the sentence of the last ``audio.start``."""
    reply = Utterance()
    async with asyncio.timeout(timeout_s):
        while reply.session_done is None:
            message = await socket.recv()
            if isinstance(message, bytes):
                reply.sentences[-1].frames.append(message)
                continue
            event = json.loads(message)
            reply.messages.append(event)
            if event["type"] == "audio.start":
                reply.sentences.append(Sentence(event))
            elif event["type"] == "audio.done":
                reply.sentences[-1].done = event
            elif event["type"] == "session.done":
                reply.session_done = event
    return reply


def pcm_samples(pcm: bytes, sample_rate: int, channels: int) -> npt.NDArray[np.float64]:
    """Raw 16-bit PCM decoded at the rate and channel count ``audio.start`` announced, as a client must."""
    samples, _ = soundfile.read(
        io.BytesIO(pcm), format="RAW", subtype="PCM_16", samplerate=sample_rate, channels=channels, endian="LITTLE"
    )
    return np.asarray(samples, dtype=np.float64)
