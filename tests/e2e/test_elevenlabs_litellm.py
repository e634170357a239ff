"""LiteLLM's ``elevenlabs/`` speech provider against a real gateway (issue #49): it sends OpenAI's ``alloy`` as
ElevenLabs' premade Rachel (``21m00Tcm4TlvDq8ikWAM``), which the gateway speaks as ``alloy`` again."""

from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio

if TYPE_CHECKING:
    from collections.abc import Iterator


def litellm() -> Any:
    """LiteLLM, imported with its model list read from the package (it would fetch it from the network at import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with litellms_warnings():
        return importlib.import_module("litellm")


@contextlib.contextmanager
def litellms_warnings() -> Iterator[None]:
    """LiteLLM's own warnings, not ours: its deprecations, and pydantic's about its ``ReadOnly`` TypedDicts."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=r".*using the `ReadOnly` qualifier", category=UserWarning)
        yield


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {"engines": {"espeak": {"kind": "espeak"}}}
    process = GatewayProcess(config, tmp_path_factory.mktemp("elevenlabs-litellm")).start(timeout_s=90)
    yield process
    process.stop()


def test_litellm_elevenlabs_provider_speaks_alloy(gateway: GatewayProcess) -> None:
    speech = litellm().speech
    with litellms_warnings():
        response = speech(
            model="elevenlabs/eleven_multilingual_v2",
            voice="alloy",
            input="Hello from LiteLLM.",
            api_base=gateway.base_url,
            api_key="anything",
            response_format="mp3",
        )
    audio = decode_audio(response.content, "mp3")
    assert audio.duration > 0.5
