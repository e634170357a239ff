"""A WebSocket handshake refused with an HTTP answer (a wrong key's 401) is logged once, as the session's line at info
level with its status, and never as an error: uvicorn's websockets-sansio protocol says "ASGI callable returned without
completing handshake." at error level after every such answer, which the gateway drops for the refusals it logged."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY = generate_api_key()
#: Each socket route that authenticates at the handshake, with the header its clients send their key in.
REFUSED = [
    ("/v1/realtime?model=tts-1", "authorization", "Bearer sk-wrong", "/v1/realtime"),
    ("/v1/text-to-speech/v/stream-input?model_id=tts-1", "xi-api-key", "sk-wrong", "/v1/text-to-speech/stream-input"),
    (
        "/v1/text-to-speech/v/multi-stream-input?model_id=tts-1",
        "xi-api-key",
        "sk-wrong",
        "/v1/text-to-speech/multi-stream-input",
    ),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {"tts-1": ["tones"]},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("handshakes")) as process:
        yield process


def log_lines(gateway: GatewayProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gateway.log().splitlines() if line.startswith("{")]


@pytest.mark.parametrize(("target", "header", "value", "path"), REFUSED)
async def test_a_refused_handshake_is_one_info_line_and_no_error(
    gateway: GatewayProcess, target: str, header: str, value: str, path: str
) -> None:
    before = len(log_lines(gateway))
    with pytest.raises(InvalidStatus) as refused:
        async with connect(gateway.base_url.replace("http://", "ws://") + target, additional_headers={header: value}):
            pass
    assert refused.value.response.status_code == 401

    def sessions() -> list[dict[str, Any]]:
        return [line for line in log_lines(gateway)[before:] if line.get("message") == "realtime session"]

    await wait_for(lambda: bool(sessions()), what="the session's log line")
    # uvicorn writes its error line, when it does, as the application returns: before a request sent afterwards ends.
    async with httpx.AsyncClient(base_url=gateway.base_url) as http:
        assert (await http.get("/readyz")).status_code == 200
    await wait_for(lambda: any(line.get("path") == "/readyz" for line in log_lines(gateway)[before:]))
    lines = log_lines(gateway)[before:]
    (session,) = sessions()
    assert session["level"] == "info"
    assert (session["path"], session["status"], session["outcome"]) == (path, 401, "refused: invalid_api_key")
    assert [line for line in lines if line["level"] in {"warning", "error", "critical"}] == []
