"""W3C trace context across two tiers, and OpenTelemetry spans exported over OTLP/HTTP to a receiver of the test's.

A front gateway speaks through an engine node (real processes on loopback). One pair exports spans to the receiver,
one pair exports nothing (the default): in both, a request's trace id is on every tier's log lines.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from websockets.asyncio.client import connect

from harness.gateway_process import GatewayProcess
from tests.starting import start_together, stop_together
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from harness.otlp_receiver import OtlpReceiver

SERVICE_TOKEN = "svc-" + "0123456789abcdef" * 3


class Tiers:
    def __init__(self, workdir: Path, otlp_endpoint: str | None) -> None:
        def tracing(service: str) -> dict[str, Any]:
            if otlp_endpoint is None:
                return {}
            return {"tracing": {"otlp_endpoint": otlp_endpoint, "service_name": service, "export_delay_ms": 50}}

        node = {
            "server": {"profile": "engine"},
            "auth": {"service_token": SERVICE_TOKEN},
            "engines": {"tones": {"kind": "synthetic", "workers": 1}},
            **tracing("node"),
        }
        (workdir / "node").mkdir()
        self.node = GatewayProcess(node, workdir / "node")
        options = {
            "endpoints": [f"{self.node.base_url}/v1"],
            "model": "tones",
            "api_key": SERVICE_TOKEN,
            "probe_interval_s": 0.2,
        }
        front = {"engines": {"tones": {"kind": "openai", "options": options}}, **tracing("front")}
        self.front = GatewayProcess(front, workdir)

    def __enter__(self) -> Tiers:
        start_together([self.node, self.front])
        self.front.wait_engine("tones", 60, state="ready")  # the front may have settled before its node
        return self

    def __exit__(self, *_: object) -> None:
        stop_together([self.front, self.node])


@pytest.fixture(scope="module")
def exporting(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> Iterator[Tiers]:
    with Tiers(tmp_path_factory.mktemp("exporting"), receiver.url) as tiers:
        yield tiers


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiers]:
    with Tiers(tmp_path_factory.mktemp("quiet"), None) as tiers:
        yield tiers


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def speak(tiers: Tiers, headers: dict[str, str]) -> httpx.Response:
    # A text of its own each time: a cached answer would never reach the node.
    body = {"model": "tones", "input": f"Trace me {secrets.token_hex(4)}.", "voice": "alloy", "response_format": "pcm"}
    response = httpx.post(f"{tiers.front.base_url}/v1/audio/speech", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.content
    return response


def access_lines(process: GatewayProcess, path: str = "/v1/audio/speech") -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in process.log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("message") == "request" and line.get("path") == path]


def trace_ids(process: GatewayProcess) -> list[str]:
    return [line.get("trace_id", "") for line in access_lines(process)]


@pytest.mark.parametrize("tiers_name", ["quiet", "exporting"])
def test_a_callers_trace_id_is_on_both_tiers_log_lines(tiers_name: str, request: pytest.FixtureRequest) -> None:
    tiers: Tiers = request.getfixturevalue(tiers_name)
    header, trace_id, _ = traceparent()
    speak(tiers, {"traceparent": header})
    wait_until(lambda: trace_id in trace_ids(tiers.front) and trace_id in trace_ids(tiers.node), timeout_s=10)


@pytest.mark.parametrize("tiers_name", ["quiet", "exporting"])
def test_a_request_without_one_gets_a_trace_of_its_own(tiers_name: str, request: pytest.FixtureRequest) -> None:
    tiers: Tiers = request.getfixturevalue(tiers_name)
    for request_id in ("untraced-1", "untraced-2"):
        speak(tiers, {"x-request-id": request_id})

    def front_traces() -> dict[str, str]:
        return {line["request_id"]: line.get("trace_id", "") for line in access_lines(tiers.front)}

    wait_until(lambda: {"untraced-1", "untraced-2"} <= front_traces().keys(), timeout_s=10)
    made = [front_traces()[request_id] for request_id in ("untraced-1", "untraced-2")]
    assert all(len(trace_id) == 32 and int(trace_id, 16) for trace_id in made)
    assert made[0] != made[1]
    wait_until(lambda: set(made) <= set(trace_ids(tiers.node)), timeout_s=10)  # the node joins each of them


def test_no_spans_are_exported_by_default(quiet: Tiers, receiver: OtlpReceiver) -> None:
    header, trace_id, _ = traceparent()
    speak(quiet, {"traceparent": header})
    wait_until(lambda: trace_id in trace_ids(quiet.node), timeout_s=10)
    assert receiver.of_trace(trace_id) == []


def test_spans_of_both_tiers_join_the_callers_trace(exporting: Tiers, receiver: OtlpReceiver) -> None:
    header, trace_id, caller_span = traceparent()
    speak(exporting, {"traceparent": header})

    def both_servers() -> bool:
        names = {(service, span.name) for service, span in receiver.of_trace(trace_id)}
        return {("front", "POST /v1/audio/speech"), ("node", "POST /v1/audio/speech")} <= names

    wait_until(both_servers, timeout_s=15)
    spans = receiver.of_trace(trace_id)
    front_server = next(s for service, s in spans if service == "front" and s.name == "POST /v1/audio/speech")
    node_server = next(s for service, s in spans if service == "node" and s.name == "POST /v1/audio/speech")
    assert front_server.parent_span_id.hex() == caller_span
    front_ids = {s.span_id.hex() for service, s in spans if service == "front"}
    assert node_server.parent_span_id.hex() in front_ids  # the node's part hangs under the front's
    assert {attribute.key for attribute in front_server.attributes} >= {"http.response.status_code"}


def test_the_speech_operations_steps_are_spans_of_each_tier(exporting: Tiers, receiver: OtlpReceiver) -> None:
    header, trace_id, _ = traceparent()
    speak(exporting, {"traceparent": header})
    steps = {"authenticate", "speech.plan", "speech.admission", "speech.first_audio", "speech.queue_wait"}
    steps |= {"speech.segment"}

    def names(service: str) -> set[str]:
        return {span.name for name, span in receiver.of_trace(trace_id) if name == service}

    # Each tier's server span ends after its steps, so it may come in a later export batch than they do: wait for it.
    every = steps | {"POST /v1/audio/speech"}
    wait_until(lambda: every <= names("front") and every <= names("node"), timeout_s=15)
    spans = receiver.of_trace(trace_id)
    front_server = next(s for service, s in spans if service == "front" and s.name == "POST /v1/audio/speech")
    front = {s.span_id: s for service, s in spans if service == "front"}
    for step in front.values():  # every step hangs, through its parents, under the front's server span
        root = step
        while root.parent_span_id in front:
            root = front[root.parent_span_id]
        assert root.span_id == front_server.span_id
    queue_wait = next(s for s in front.values() if s.name == "speech.queue_wait")
    node_server = next(s for service, s in spans if service == "node" and s.name == "POST /v1/audio/speech")
    assert node_server.parent_span_id == queue_wait.span_id  # the node's part is the front's wait for an engine


async def test_a_sockets_steps_are_spans_under_its_server_span(exporting: Tiers, receiver: OtlpReceiver) -> None:
    header, trace_id, _ = traceparent()
    url = exporting.front.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with connect(url, additional_headers={"traceparent": header}) as socket, asyncio.timeout(30):
        session = {"model": "tones", "voice": "alloy", "response_format": "pcm"}
        await socket.send(json.dumps({"type": "session.update", "session": session}))
        await socket.send(json.dumps({"type": "input.append", "text": f"Trace me {secrets.token_hex(4)}."}))
        await socket.send(json.dumps({"type": "input.flush"}))
        await socket.send(json.dumps({"type": "session.close"}))
        async for _ in socket:  # until the session is done
            pass
    steps = {"authenticate", "speech.plan", "speech.admission", "speech.first_audio", "speech.segment"}
    server = "WEBSOCKET /v1/audio/speech/stream"

    def front() -> dict[bytes, Any]:
        return {s.span_id: s for service, s in receiver.of_trace(trace_id) if service == "front"}

    wait_until(lambda: steps | {server} <= {s.name for s in front().values()}, timeout_s=15)
    spans = front()
    socket_span = next(s for s in spans.values() if s.name == server)
    authenticate = next(s for s in spans.values() if s.name == "authenticate")
    assert authenticate.parent_span_id == socket_span.span_id
