"""LiveKit Agents as a client of the gateway: an ``AgentSession`` with ``elevenlabs.TTS(base_url=…)`` (its
``multi-stream-input`` WebSocket) that says a text, with no room (no LiveKit server is reachable here): its audio and
transcript outputs are sinks of the test's own, and the transcript is aligned to the audio by the gateway's timestamps
(``use_tts_aligned_transcript``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from livekit import rtc
    from livekit.plugins.elevenlabs import TTSEncoding

__all__ = ["say_through_an_agent_session"]


async def say_through_an_agent_session(
    base_url: str, api_key: str, voice_id: str, text: str, encoding: TTSEncoding
) -> tuple[list[rtc.AudioFrame], list[Any]]:
    """Have an agent say ``text`` through the gateway at ``base_url``, awaited until played out; returns the audio
    frames it played and the timed words of its transcript."""
    from livekit.agents import Agent, AgentSession
    from livekit.agents.voice import io
    from livekit.plugins import elevenlabs

    class Speaker(io.AudioOutput):
        """Plays each frame at once; a flush ends the playout."""

        def __init__(self) -> None:
            super().__init__(label="test", capabilities=io.AudioOutputCapabilities(pause=False))
            self.frames: list[rtc.AudioFrame] = []

        async def capture_frame(self, frame: rtc.AudioFrame) -> None:
            await super().capture_frame(frame)
            self.frames.append(frame)

        def flush(self) -> None:
            super().flush()
            self.on_playback_finished(playback_position=sum(f.duration for f in self.frames), interrupted=False)

        def clear_buffer(self) -> None:
            pass

    class Captions(io.TextOutput):
        def __init__(self) -> None:
            super().__init__(label="test", next_in_chain=None)
            self.words: list[Any] = []

        async def capture_text(self, text: str) -> None:
            self.words.append(text)

        def flush(self) -> None:
            pass

    async with aiohttp.ClientSession() as http:
        tts = elevenlabs.TTS(
            api_key=api_key,
            base_url=f"{base_url}/v1",
            voice_id=voice_id,
            model="eleven_multilingual_v2",
            encoding=encoding,
            http_session=http,
        )
        session: AgentSession[None] = AgentSession(tts=tts, use_tts_aligned_transcript=True)
        session.output.audio, session.output.transcription = speaker, captions = Speaker(), Captions()
        try:
            await session.start(Agent(instructions="Say what you are told."), record=False)
            await asyncio.wait_for(session.say(text).wait_for_playout(), 10)
        finally:
            await session.aclose()
            await tts.aclose()
    return speaker.frames, captions.words
