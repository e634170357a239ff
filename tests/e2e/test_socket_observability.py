"""A WebSocket's handshake in the HTTP metrics and in its OpenTelemetry server span, with the status its client got.

A handshake the gateway refuses is answered with an HTTP status (uvicorn's denial response): it is counted in
``tts_http_requests_total`` with that status, and its span carries it (an error only for a 5xx, as OpenTelemetry's
HTTP conventions say of server spans, for a request's as for a socket's). An accepted socket is counted as Litestar's
middleware counts one (200) and its span says 101. Real websockets clients against a real gateway that exports its
spans to a receiver of the test's.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess, closed_port
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator

    from harness.otlp_receiver import OtlpReceiver

KEY = generate_api_key()
ONE_STREAM_KEY = generate_api_key()
MODEL = "gpt-realtime-2.1-mini"
REALTIME = "/v1/realtime"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> Iterator[GatewayProcess]:
    config = {
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEY)]},
                {"name": "solo", "api_key_sha256": [hash_api_key(ONE_STREAM_KEY)], "limits": {"concurrent_streams": 1}},
            ]
        },
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1},
            # An upstream that is never there: its requests get 503.
            "gone": {
                "kind": "openai",
                "options": {"endpoints": [f"http://127.0.0.1:{closed_port()}/v1"], "model": "x"},
            },
        },
        "aliases": {MODEL: ["tones"], "tts-1": ["tones"]},
        "tracing": {"otlp_endpoint": receiver.url, "export_delay_ms": 50},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("socket-observability")) as process:
        yield process


class Handshake:
    """One socket opened with a trace of its own, so that its server span can be found."""

    def __init__(self, gateway: GatewayProcess, target: str, headers: dict[str, str]) -> None:
        self.trace_id = secrets.token_hex(16)
        self.url = gateway.base_url.replace("http://", "ws://") + target
        self.headers = {**headers, "traceparent": traceparent(self.trace_id)}

    def connect(self) -> connect:
        return connect(self.url, additional_headers=self.headers)

    async def refused_with(self) -> int:
        with pytest.raises(InvalidStatus) as refused:
            async with self.connect():
                pass
        return refused.value.response.status_code


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"


async def server_span(receiver: OtlpReceiver, trace_id: str) -> Span:
    """The one server span of the trace ``trace_id``, once exported."""

    def spans() -> list[Span]:
        return [span for _, span in receiver.of_trace(trace_id) if span.kind == Span.SPAN_KIND_SERVER]

    await wait_for(lambda: bool(spans()), what="the server span")
    (span,) = spans()
    return span


def socket_requests(gateway: GatewayProcess, path: str) -> dict[str, float]:
    """``tts_http_requests_total`` of the WebSockets of route ``path``, by status code."""
    text = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text
    return {
        sample.labels["status_code"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "tts_http_requests_total"
        and (sample.labels["method"], sample.labels["path"]) == ("websocket", path)
    }


def attributes(span: Span) -> dict[str, Any]:
    return {a.key: a.value.int_value or a.value.string_value for a in span.attributes}


async def counted(gateway: GatewayProcess, path: str, before: dict[str, float], more: dict[str, float]) -> None:
    """Wait until the sockets of ``path`` counted since ``before`` are ``more`` by status code, and only those: a
    socket is counted when the application is done with it, which may be after its client saw the end."""

    def moved() -> dict[str, float]:
        now = socket_requests(gateway, path)
        return {code: count - before.get(code, 0.0) for code, count in now.items() if count != before.get(code)}

    await wait_for(lambda: moved() == more, what=f"{path} sockets counted as {more}, and no others")


async def test_an_unknown_model_is_counted_and_traced_as_its_404(
    gateway: GatewayProcess, receiver: OtlpReceiver
) -> None:
    before = socket_requests(gateway, REALTIME)
    handshake = Handshake(gateway, f"{REALTIME}?model=no-such-model", {"authorization": f"Bearer {KEY}"})
    assert await handshake.refused_with() == 404
    await counted(gateway, REALTIME, before, {"404": 1})
    span = await server_span(receiver, handshake.trace_id)
    assert attributes(span)["http.response.status_code"] == 404
    assert span.status.code == Status.STATUS_CODE_UNSET  # a 4xx is the client's, not the server span's error


async def test_a_socket_over_the_tenants_streams_is_counted_and_traced_as_its_429(
    gateway: GatewayProcess, receiver: OtlpReceiver
) -> None:
    target, headers = f"{REALTIME}?model={MODEL}", {"authorization": f"Bearer {ONE_STREAM_KEY}"}
    before = socket_requests(gateway, REALTIME)
    async with Handshake(gateway, target, headers).connect() as first:
        await first.recv()  # session.created: the first holds the tenant's one stream
        handshake = Handshake(gateway, target, headers)
        assert await handshake.refused_with() == 429
        await counted(gateway, REALTIME, before, {"429": 1})
    await counted(gateway, REALTIME, before, {"429": 1, "200": 1})  # the first, once it ended
    span = await server_span(receiver, handshake.trace_id)
    assert attributes(span)["http.response.status_code"] == 429
    assert span.status.code == Status.STATUS_CODE_UNSET


async def test_a_wrong_key_on_elevenlabs_socket_is_counted_as_its_401(gateway: GatewayProcess) -> None:
    path = "/v1/text-to-speech/{voice_id}/stream-input"
    before = socket_requests(gateway, path)
    handshake = Handshake(gateway, "/v1/text-to-speech/v/stream-input?model_id=tts-1", {"xi-api-key": "sk-wrong"})
    assert await handshake.refused_with() == 401
    await counted(gateway, path, before, {"401": 1})


async def test_an_accepted_socket_still_counts_as_200_and_its_span_says_101(
    gateway: GatewayProcess, receiver: OtlpReceiver
) -> None:
    before = socket_requests(gateway, REALTIME)
    handshake = Handshake(gateway, f"{REALTIME}?model={MODEL}", {"authorization": f"Bearer {KEY}"})
    async with handshake.connect() as socket:
        await socket.recv()
    await counted(gateway, REALTIME, before, {"200": 1})
    span = await server_span(receiver, handshake.trace_id)
    assert attributes(span)["http.response.status_code"] == 101
    assert span.status.code == Status.STATUS_CODE_UNSET


async def test_a_5xx_answer_makes_its_server_span_an_error(gateway: GatewayProcess, receiver: OtlpReceiver) -> None:
    trace_id = secrets.token_hex(16)
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as http:
        response = await http.post(
            "/v1/audio/speech",
            json={"model": "gone", "input": "Nobody is there.", "voice": "alloy"},
            headers={"authorization": f"Bearer {KEY}", "traceparent": traceparent(trace_id)},
        )
    assert response.status_code == 503
    span = await server_span(receiver, trace_id)
    assert attributes(span).items() >= {"http.response.status_code": 503, "error.type": "503"}.items()
    assert span.status.code == Status.STATUS_CODE_ERROR
