"""Pipecat's own test runner (``pipecat.tests.utils.run_test``), with time for its pipeline to start; its ElevenLabs
services as the tests import and point them at a gateway.

The runner gives a pipeline 1 s to start by default; on a loaded 2-core CI machine one took 2.4 s, so the test
failed before the gateway was asked anything. What the tests measure is the gateway's speech, not Pipecat's start.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = [
    "PIPELINE_START_S",
    "elevenlabs_dialogue_service",
    "elevenlabs_socket_service",
    "pipecat_elevenlabs",
    "run_pipeline",
]

PIPELINE_START_S = 30.0


async def run_pipeline(processor: Any, frames_to_send: list[Any]) -> list[Any]:
    """The frames ``processor`` sent downstream, ``frames_to_send`` pushed through it (Pipecat's ``run_test``)."""
    utils = importlib.import_module("pipecat.tests.utils")
    down, _ = await utils.run_test(processor, frames_to_send=frames_to_send, start_timeout=PIPELINE_START_S)
    return list(down)


def pipecat_elevenlabs() -> tuple[Any, Any, Any]:
    """Pipecat's frames, ElevenLabs services and test runner, imported when a test needs them: Pipecat loads
    onnxruntime and more, and warns of its own deprecations (audioop, its AudioContextTTSService), not ours."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        frames = importlib.import_module("pipecat.frames.frames")
        elevenlabs = importlib.import_module("pipecat.services.elevenlabs.tts")
        utils = importlib.import_module("pipecat.tests.utils")
    return frames, elevenlabs, utils


def _pipecat_dialogue() -> Any:
    """Pipecat's ``ElevenLabsDialogueTTSService`` module, imported as :func:`pipecat_elevenlabs` imports the others."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module("pipecat.services.elevenlabs.dialogue.tts")


def elevenlabs_socket_service(base_url: str, key: str, voice: str, model: str = "eleven_multilingual_v2") -> Any:
    """Pipecat's ``ElevenLabsTTSService`` (the ``multi-stream-input`` socket) pointed at the gateway at ``base_url``,
    in 24 kHz PCM."""
    _, elevenlabs, _ = pipecat_elevenlabs()
    return elevenlabs.ElevenLabsTTSService(
        api_key=key,
        url=base_url.replace("http://", "ws://"),
        settings=elevenlabs.ElevenLabsTTSService.Settings(voice=voice, model=model),
        sample_rate=24000,
    )


def elevenlabs_dialogue_service(base_url: str, key: str, voice: str) -> Any:
    """Pipecat's ``ElevenLabsDialogueTTSService`` (the Text-to-Dialogue ``multi-stream-input`` socket, its default
    model ``eleven_v4_turbo``) pointed at the gateway at ``base_url``, in 24 kHz PCM."""
    dialogue = _pipecat_dialogue()
    return dialogue.ElevenLabsDialogueTTSService(
        api_key=key,
        url=base_url.replace("http://", "ws://"),
        settings=dialogue.ElevenLabsDialogueTTSService.Settings(voice=voice),
        sample_rate=24000,
    )
