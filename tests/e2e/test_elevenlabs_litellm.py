"""LiteLLM's ``elevenlabs/`` speech provider against a real gateway (issue #49): it sends OpenAI's ``alloy`` as
ElevenLabs' premade Rachel (``21m00Tcm4TlvDq8ikWAM``), which the gateway speaks as ``alloy`` again. Skipped where
``litellm`` is not installed (the test extra pins it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio

if TYPE_CHECKING:
    from collections.abc import Iterator

litellm = pytest.importorskip("litellm")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {"engines": {"espeak": {"kind": "espeak"}}}
    process = GatewayProcess(config, tmp_path_factory.mktemp("elevenlabs-litellm")).start(timeout_s=90)
    yield process
    process.stop()


def test_litellm_elevenlabs_provider_speaks_alloy(gateway: GatewayProcess) -> None:
    response = litellm.speech(
        model="elevenlabs/eleven_multilingual_v2",
        voice="alloy",
        input="Hello from LiteLLM.",
        api_base=gateway.base_url,
        api_key="anything",
        response_format="mp3",
    )
    audio = decode_audio(response.content, "mp3")
    assert audio.duration > 0.5
