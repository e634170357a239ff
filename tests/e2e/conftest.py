"""One real gateway for the end-to-end suite, with an engine per kind of test so tests do not disturb each other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from harness.gateway_process import GatewayProcess
from harness.otlp_receiver import OtlpReceiver

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

#: Seconds of synthetic audio per input character: the expected duration of every synthetic clip.
SECONDS_PER_CHAR = 0.02

GATEWAY_CONFIG: dict[str, Any] = {
    "server": {"max_body_bytes": 65536},
    "engines": {
        # Fast deterministic tones for the format and SDK matrix.
        "synthetic": {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
        "espeak": {"kind": "espeak"},
        "chattts": {"kind": "chattts"},  # not ready here: aliases fall back
        # Real-time pacing for streaming, disconnect and crash tests; one worker so that leaks show.
        "slow": {"kind": "synthetic", "workers": 1, "queue_size": 4, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        # One worker and a queue of two: the overload test.
        "tight": {"kind": "synthetic", "workers": 1, "queue_size": 2, "options": {"rtf": 1.0}},
        # A short watchdog for the stuck-generation test.
        "fragile": {"kind": "synthetic", "workers": 1, "stall_timeout_s": 1.0},
    },
    "aliases": {
        "tts-1": ["chattts", "espeak"],
        "tts-1-hd": ["chattts", "espeak"],
        "gpt-4o-mini-tts": ["chattts", "espeak"],
    },
}


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(GATEWAY_CONFIG, tmp_path_factory.mktemp("gateway")) as process:
        yield process


@pytest.fixture(scope="session")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="anything", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
async def async_client(gateway: GatewayProcess) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key="anything", max_retries=0) as client:
        yield client


@pytest.fixture
async def http(gateway: GatewayProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP receiver for the spans of a module's gateways (``tracing.otlp_endpoint: receiver.url``)."""
    with OtlpReceiver() as running:
        yield running
