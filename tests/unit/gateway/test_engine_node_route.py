"""``POST /v1/engine/speaker_from_sample`` and ``POST /v1/engine/check_speaker`` in process: the real app of an engine
node and of a front gateway, engines in threads (``tests/inprocess.py``)."""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

SERVICE_TOKEN = "svc-" + "0123456789abcdef" * 3
ENGINES: dict[str, Any] = {
    "chattts": None,  # would load torch into the test process; tests/e2e/test_voice_samples.py speaks through it
    "espeak": None,
    "tones": {"kind": "synthetic"},
    "mute": {"kind": "synthetic", "options": {"clones_voices": False}},
    "robot": {"kind": "espeak"},
}
NODE: dict[str, Any] = {"server": {"profile": "engine"}, "auth": {"service_token": SERVICE_TOKEN}, "engines": ENGINES}
PATH = "/v1/engine/speaker_from_sample"
CHECK_PATH = "/v1/engine/check_speaker"
PCM = bytes(range(256)) * 40
AUTH = {"Authorization": f"Bearer {SERVICE_TOKEN}"}


def body(**fields: Any) -> dict[str, Any]:
    sample = {"model": "tones", "transcript": "Hello.", "sample_rate": 24000, "pcm": base64.b64encode(PCM).decode()}
    return sample | fields


@pytest.fixture
async def node() -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=in_process_app(NODE)) as client:
        yield client


async def test_a_node_answers_its_engines_speaker(node: AsyncTestClient[Litestar]) -> None:
    answer = await node.post(PATH, json=body(), headers=AUTH)
    assert answer.status_code == 200, answer.text
    expected = "sample:" + hashlib.sha256(b"24000:Hello.:" + PCM).hexdigest()[:32]
    assert answer.json() == {"speaker": expected}


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"model": "mute"}, "audio_sample", "cannot make a voice"),
        ({"transcript": " "}, "transcript", "transcript"),
        ({"pcm": "not base64!"}, "pcm", "base64"),
        ({"pcm": base64.b64encode(b"\0\0\0").decode()}, "audio_sample", "whole 16-bit samples"),
        ({"sample_rate": 10}, "sample_rate", ""),
    ],
)
async def test_what_no_engine_can_use_is_a_400(
    node: AsyncTestClient[Litestar], fields: dict[str, Any], param: str, message: str
) -> None:
    answer = await node.post(PATH, json=body(**fields), headers=AUTH)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param
    assert message in error["message"]


async def test_only_the_service_token_admits(node: AsyncTestClient[Litestar]) -> None:
    for headers in ({}, {"Authorization": "Bearer sk-someone-else"}):
        answer = await node.post(PATH, json=body(), headers=headers)
        assert answer.status_code == 401


async def test_an_unknown_model_is_a_404(node: AsyncTestClient[Litestar]) -> None:
    answer = await node.post(PATH, json=body(model="nope"), headers=AUTH)
    assert answer.status_code == 404


async def test_the_node_takes_a_sample_larger_than_its_speech_bodies(node: AsyncTestClient[Litestar]) -> None:
    pcm = bytes(2 * 24000 * 20)  # 20 s: 1.3 MB in base64, ten times server.max_body_bytes
    answer = await node.post(PATH, json=body(pcm=base64.b64encode(pcm).decode()), headers=AUTH)
    assert answer.status_code == 200, answer.text
    speech = await node.post("/v1/audio/speech", json={"input": "x" * 200_000}, headers=AUTH)
    assert speech.status_code == 413, "the rest of the node keeps its own bound"


async def test_a_front_gateway_has_no_such_route() -> None:
    async with AsyncTestClient(app=in_process_app({"engines": ENGINES})) as front:
        answer = await front.post(PATH, json=body())
        assert answer.status_code == 404


async def test_a_node_checks_a_speaker_against_its_engine(node: AsyncTestClient[Litestar]) -> None:
    fits = await node.post(CHECK_PATH, json={"model": "tones", "speaker": "seed:7"}, headers=AUTH)
    assert fits.status_code == 204, fits.text
    for speaker_body, param in (
        ({"model": "tones", "speaker": "bell\x07"}, "speaker"),
        ({"model": "robot", "speaker": "seed:7"}, "model"),
    ):
        refused = await node.post(CHECK_PATH, json=speaker_body, headers=AUTH)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == param
    assert (await node.post(CHECK_PATH, json={"model": "tones", "speaker": "seed:7"})).status_code == 401
    assert (await node.post(CHECK_PATH, json={"model": "nope", "speaker": "seed:7"}, headers=AUTH)).status_code == 404
