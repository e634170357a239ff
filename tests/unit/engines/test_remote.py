"""The ``openai`` engine kind against real sockets: a tiny HTTP/1.1 upstream on loopback that answers as each test
scripts it (odd chunk sizes, errors, silence), and the options' validation."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError

from engines.base import InvalidSynthesisRequestError, SynthesisRequest
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.remote.backend import RemoteEngine
from engines.remote.context import (
    InvalidTenantContextError,
    TenantContext,
    context_headers,
    engine_node_headers,
    is_engine_node,
    read_context,
    tenant_context,
)
from engines.remote.endpoints import EndpointAddress, Resolver
from engines.remote.options import OpenAIRemoteOptions
from engines.scheduling import DEFAULT_SHARE, TenantShare
from engines.settings import RemoteEngineSettings, engine_settings
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

TOKEN = "upstream-secret-0123456789abcdef0123"
SPEECH = SynthesisRequest(text="hello", voice="alloy", instructions="calm")


@dataclass
class Upstream:
    """A loopback HTTP server; ``answer`` writes the response to each request (``None``: a 200 with ``chunks``)."""

    chunks: list[bytes] = field(default_factory=list)
    status: int = 200
    body: bytes = b""
    hang: bool = False
    has_readyz: bool = True
    """False: ``/readyz`` answers 404 and ``/v1/models`` 200, as OpenAI's own API does."""
    engine_node: bool = False
    """True: ``/readyz`` answers with the engine node's marker header, as a chattts-gateway engine node does."""
    ready: bool = True
    """False: the probe's path answers 503 (an upstream that is not ready)."""
    probes: list[str] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    server: asyncio.Server | None = None
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ")
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "GET":
                    self.probes.append(path)
                    found = path == "/readyz" if self.has_readyz else path == "/v1/models"
                    marker = b"x-tts-engine-node: 1\r\n" if self.engine_node else b""
                    status = (b"200 OK" if self.ready else b"503 Service Unavailable") if found else b""
                    writer.write(
                        b"HTTP/1.1 " + status + b"\r\n" + marker + b"content-length: 2\r\n\r\nok"
                        if found
                        else b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
                    )
                    await writer.drain()
                    continue
                self.requests.append(
                    {"method": method, "path": path, "headers": headers, "json": json.loads(body) if body else None}
                )
                await self._answer(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter) -> None:
        if self.hang:
            await self.release.wait()
            return
        if self.status != 200:
            writer.write(
                f"HTTP/1.1 {self.status} X\r\ncontent-type: application/json\r\n"
                f"content-length: {len(self.body)}\r\n\r\n".encode()
                + self.body
            )
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for chunk in self.chunks:
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)  # separate reads, so the odd sizes reach the client as they are
        writer.write(b"0\r\n\r\n")
        await writer.drain()


@pytest.fixture
async def upstreams() -> AsyncIterator[Callable[..., Awaitable[Upstream]]]:
    started: list[Upstream] = []

    async def start(host: str = "127.0.0.1", port: int = 0, **fields: Any) -> Upstream:
        upstream = Upstream(**fields)
        upstream.server = await asyncio.start_server(upstream.handle, host, port)
        started.append(upstream)
        return upstream

    yield start
    for upstream in started:
        upstream.release.set()
        assert upstream.server is not None
        upstream.server.close()


@pytest.fixture
async def engines() -> AsyncIterator[Callable[..., Awaitable[RemoteEngine]]]:
    started: list[RemoteEngine] = []

    async def start(
        endpoints: list[str], *, settle: bool = True, resolver: Resolver | None = None, **options: Any
    ) -> RemoteEngine:
        settings = engine_settings(
            kind="openai",
            queue_size=0,
            options={"endpoints": endpoints, "api_key": TOKEN, "probe_interval_s": 0.05, **options},
        )
        assert isinstance(settings, RemoteEngineSettings)
        engine = RemoteEngine("remote", settings, resolver=resolver)
        await engine.start()
        started.append(engine)
        if settle:
            await wait_for(lambda: engine.status().state != "starting")
        return engine

    yield start
    for engine in started:
        await engine.stop()


async def read_all(engine: RemoteEngine, request: SynthesisRequest = SPEECH) -> list[bytes]:
    async with engine.open_stream(request) as stream:
        return [chunk async for chunk in stream]


# ----------------------------------------------------------------------------------------------------------------
# streaming


async def test_odd_chunks_come_out_as_whole_samples_and_the_request_is_openai_shaped(
    upstreams: Any,
    engines: Any,
) -> None:
    pcm = bytes(range(200)) * 5  # 1000 bytes = 500 samples
    upstream = await upstreams(chunks=[pcm[:3], pcm[3:4], pcm[4:511], pcm[511:]])
    engine = await engines([upstream.url], voices={"alloy": "upstream-alloy"}, model="tts-1-hd")

    chunks = await read_all(engine)

    assert all(len(chunk) % 2 == 0 for chunk in chunks)
    assert b"".join(chunks) == pcm
    sent = upstream.requests[-1]
    assert sent["path"] == "/v1/audio/speech"
    assert sent["json"] == {
        "model": "tts-1-hd",
        "input": "hello",
        "voice": "upstream-alloy",
        "response_format": "pcm",
        "speed": 1.0,
        "instructions": "calm",
    }
    assert sent["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert sent["headers"]["host"] == upstream.url.split("/")[2]
    assert engine.status().endpoints is not None
    assert engine.status().endpoints[0].in_flight == 0


async def test_a_trailing_odd_byte_is_dropped_not_glued_to_nothing(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(chunks=[b"\x01\x02\x03"])
    engine = await engines([upstream.url])
    assert b"".join(await read_all(engine)) == b"\x01\x02"


async def test_an_upstream_input_error_is_the_clients_400_with_its_message(upstreams: Any, engines: Any) -> None:
    body = json.dumps({"error": {"message": "Input is too long.", "param": "input"}}).encode()
    upstream = await upstreams(status=400, body=body)
    engine = await engines([upstream.url], breaker={"failures": 1})

    with pytest.raises(InvalidSynthesisRequestError, match="Input is too long") as caught:
        await read_all(engine)

    assert caught.value.param == "input"
    assert engine.status().endpoints[0].breaker == "closed"


async def test_server_errors_open_the_breaker_which_then_fails_fast(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(status=503, body=b'{"error": {"message": "engine down"}}')
    engine = await engines([upstream.url], breaker={"failures": 2, "open_s": 60})

    for _ in range(2):
        with pytest.raises(SynthesisFailedError, match="HTTP 503: engine down"):
            await read_all(engine)
    assert engine.status().endpoints[0].breaker == "open"
    with pytest.raises(EngineNotReadyError, match="circuit breaker open"):
        await read_all(engine)

    assert len(upstream.requests) == 2, "an open breaker must not send the request upstream"
    assert engine.status().state == "unavailable"


async def test_a_full_queue_on_an_engine_node_is_an_overload_not_a_failure(upstreams: Any, engines: Any) -> None:
    # What a node answers when the tenant's share of its queue (max_queued) or the queue is full.
    body = b'{"error": {"message": "engine \'paced\' is overloaded", "code": "engine_overloaded"}}'
    upstream = await upstreams(status=503, body=body)
    engine = await engines([upstream.url], breaker={"failures": 1})

    for _ in range(2):
        with pytest.raises(EngineOverloadedError):
            await read_all(engine)

    assert engine.status().endpoints[0].breaker == "closed"
    assert len(upstream.requests) == 2


async def test_an_upstream_silent_before_the_first_byte_fails_within_the_timeout(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(hang=True)
    engine = await engines([upstream.url], first_byte_timeout_s=0.3)

    started = time.monotonic()
    with pytest.raises(SynthesisFailedError, match=r"no answer within 0\.3 s"):
        await read_all(engine)

    assert time.monotonic() - started < 5.0
    assert "no answer" in (engine.status().endpoints[0].last_error or "")


async def test_a_failing_probe_after_a_failed_request_keeps_its_cause(upstreams: Any, engines: Any) -> None:
    # A node that replaces a hung worker answers its probes "starting" right after the request that hung: the
    # operator must still see why the request failed (and why the breaker opened), beside why the probe failed.
    upstream = await upstreams(status=503, body=b'{"error": {"message": "engine down"}}')
    engine = await engines([upstream.url], breaker={"failures": 1, "open_s": 60})
    with pytest.raises(SynthesisFailedError):
        await read_all(engine)
    upstream.ready = False

    await wait_for(lambda: engine.status().endpoints[0].state == "unhealthy", what="the probe failing")

    endpoint = engine.status().endpoints[0]
    assert "HTTP 503: engine down" in (endpoint.last_error or "")
    assert endpoint.reason == "probe /readyz answered HTTP 503"
    assert "probe /readyz answered HTTP 503" in (engine.status().reason or "")


async def test_an_open_breaker_is_explained_by_the_request_that_opened_it(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(status=503, body=b'{"error": {"message": "engine down"}}')
    engine = await engines([upstream.url], breaker={"failures": 1, "open_s": 60})
    with pytest.raises(SynthesisFailedError):
        await read_all(engine)
    endpoint = engine._endpoints.all()[0]  # a probe's failure in between, without a real outage
    endpoint.mark_unhealthy("the node's engine 'tones' is starting")
    endpoint.mark_healthy(engine_node=True)

    with pytest.raises(EngineNotReadyError, match=r"circuit breaker open after: .*HTTP 503: engine down"):
        await read_all(engine)
    assert engine.status().endpoints[0].reason is None


# ----------------------------------------------------------------------------------------------------------------
# balancing and health


async def test_requests_go_to_the_endpoint_with_fewest_in_flight(upstreams: Any, engines: Any) -> None:
    first, second = await upstreams(hang=True), await upstreams(hang=True)
    engine = await engines([first.url, second.url])
    opened = [engine.open_stream(SynthesisRequest(text=f"t{i}", voice="alloy")) for i in range(4)]
    entered = [asyncio.create_task(cm.__aenter__()) for cm in opened]
    await wait_for(lambda: len(first.requests) + len(second.requests) == 4)

    assert (len(first.requests), len(second.requests)) == (2, 2)
    assert [e.in_flight for e in engine.status().endpoints or ()] == [2, 2]
    for task in entered:
        task.cancel()
    await asyncio.gather(*entered, return_exceptions=True)


async def test_a_name_with_several_addresses_is_several_endpoints_resolved_again(
    upstreams: Any,
    engines: Any,
) -> None:
    # Two servers on one port at two loopback addresses: what a headless Service's name resolves to.
    first = await upstreams(chunks=[b"\1\0"])
    port = int(first.url.split(":")[2].split("/")[0])
    second = await upstreams(host="127.0.0.2", port=port, chunks=[b"\2\0"])
    addresses = ["127.0.0.1", "127.0.0.2"]

    async def headless_service(url: str) -> list[str] | str:
        assert url == f"http://engine.svc:{port}/v1"
        return list(addresses)

    engine = await engines([f"http://engine.svc:{port}/v1"], resolver=headless_service, resolve_interval_s=0.05)
    await wait_for(lambda: engine.status().ready_workers == 2)

    served = {b"".join(await read_all(engine)) for _ in range(4)}
    assert served == {b"\1\0", b"\2\0"}
    assert len(first.requests) == len(second.requests) == 2
    assert {r["headers"]["host"] for r in first.requests + second.requests} == {f"engine.svc:{port}"}

    addresses.remove("127.0.0.1")  # a pod went away
    await wait_for(lambda: [e.address for e in engine.status().endpoints or ()] == ["127.0.0.2"])
    assert {b"".join(await read_all(engine)) for _ in range(2)} == {b"\2\0"}


async def test_full_endpoints_without_a_queue_are_overloaded(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(hang=True)
    engine = await engines([upstream.url], max_in_flight=1)
    holder = asyncio.create_task(read_all(engine))
    await wait_for(lambda: len(upstream.requests) == 1)

    with pytest.raises(EngineOverloadedError):
        await read_all(engine)

    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    await wait_for(lambda: engine.status().active_jobs == 0)


async def test_unreachable_endpoints_leave_the_engine_unavailable_with_the_reason(
    upstreams: Any,
    engines: Any,
) -> None:
    upstream = await upstreams()
    url = upstream.url
    assert upstream.server is not None
    upstream.server.close()
    await upstream.server.wait_closed()

    engine = await engines([url, "http://no-such-host.invalid/v1"])

    status = engine.status()
    assert status.state == "unavailable"
    assert status.reason is not None
    assert url in status.reason
    assert "cannot resolve no-such-host.invalid" in status.reason
    with pytest.raises(EngineNotReadyError):
        await read_all(engine)


async def test_an_engine_node_is_sent_the_tenant_context_and_the_speaker(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(chunks=[b"\0\0"], engine_node=True)
    engine = await engines([upstream.url])
    share = TenantShare(weight=2.5, priority="high", max_queued=3)
    speaker = "\u4e00\u4e8c" * 3000  # base16384 text: non-ASCII, far beyond a header's room

    async with engine.open_stream(SynthesisRequest("hi", "voice_1", speaker=speaker), tenant="acme", share=share) as s:
        assert [chunk async for chunk in s] == [b"\0\0"]

    sent = upstream.requests[-1]
    assert sent["json"]["x_tts_speaker"] == speaker
    assert sent["json"]["voice"] == "voice_1"
    assert read_context(sent["headers"]) == TenantContext("acme", share)
    assert "acme" not in json.dumps(sent["json"])  # the tenant travels in headers only


@pytest.mark.parametrize("engine_node", [True, False], ids=["engine-node", "other-server"])
async def test_only_an_engine_node_is_told_that_a_request_continues_a_stream(
    upstreams: Any, engines: Any, engine_node: bool
) -> None:
    upstream = await upstreams(chunks=[b"\0\0"], engine_node=engine_node)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    for continuing in (False, True):
        async with engine.open_stream(SPEECH, tenant="acme", continuing=continuing) as stream:
            assert [chunk async for chunk in stream] == [b"\0\0"]
    first, later = (request["json"] for request in upstream.requests)
    assert "x_tts_continuing" not in first
    assert later.get("x_tts_continuing") is (True if engine_node else None)


@pytest.mark.parametrize("engine_node", [True, False], ids=["engine-node", "other-server"])
async def test_only_an_engine_node_is_told_that_the_caller_opted_in_to_control_tokens(
    upstreams: Any, engines: Any, engine_node: bool
) -> None:
    upstream = await upstreams(chunks=[b"\0\0"], engine_node=engine_node)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    for opted in (False, True):
        await read_all(engine, SynthesisRequest(text="ha [laugh]", voice="v", control_tokens=opted))
    plain, opted_in = (request["json"] for request in upstream.requests)
    assert "control_tokens" not in plain
    assert opted_in.get("control_tokens") is (True if engine_node else None)


@pytest.mark.parametrize("engine_node", [True, False], ids=["engine-node", "other-server"])
async def test_only_an_engine_node_is_sent_the_seed(upstreams: Any, engines: Any, engine_node: bool) -> None:
    """OpenAI answers 400 to a ``seed``; an engine node samples with it, so that the same seed gives the same audio
    through two tiers."""
    upstream = await upstreams(chunks=[b"\0\0"], engine_node=engine_node)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    for seed in (None, 0, 2**32 - 1):
        await read_all(engine, SynthesisRequest(text="Again.", voice="v", seed=seed))
    unseeded, zero, largest = (request["json"] for request in upstream.requests)
    assert "seed" not in unseeded
    assert (zero.get("seed"), largest.get("seed")) == ((0, 2**32 - 1) if engine_node else (None, None))


async def test_a_request_for_no_tenant_goes_to_a_node_without_a_context(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(chunks=[b"\0\0"], engine_node=True)
    engine = await engines([upstream.url])
    await read_all(engine)
    assert read_context(upstream.requests[-1]["headers"]) is None


@pytest.mark.parametrize("has_readyz", [True, False], ids=["readyz-without-marker", "openai-like"])
async def test_another_server_never_learns_tenants_or_speakers(upstreams: Any, engines: Any, has_readyz: bool) -> None:
    upstream = await upstreams(chunks=[b"\0\0"], has_readyz=has_readyz)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")

    async with engine.open_stream(SPEECH, tenant="acme", share=TenantShare(priority="high")) as stream:
        assert [chunk async for chunk in stream] == [b"\0\0"]
    with pytest.raises(InvalidSynthesisRequestError, match="not a chattts-gateway engine node") as caught:
        await read_all(engine, SynthesisRequest(text="hi", voice="v", speaker="spk"))

    assert caught.value.param == "voice"
    assert len(upstream.requests) == 1, "the custom voice must be refused before anything is sent"
    assert not [h for h in upstream.requests[0]["headers"] if h.startswith("x-tts-")]
    assert "x_tts_speaker" not in upstream.requests[0]["json"]


# ----------------------------------------------------------------------------------------------------------------
# voice samples

SAMPLE = bytes(range(256)) * 8  # 1024 samples of 16-bit PCM


async def test_an_engine_node_is_sent_the_sample_and_its_speaker_comes_back(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(chunks=[b'{"speaker": "smp:', "一二".encode(), b'|Hello."}'], engine_node=True)
    engine = await engines([upstream.url], model="chattts")
    await wait_for(lambda: engine.status().state == "ready")
    assert engine.info.clones_voices

    assert await engine.speaker_from_sample(SAMPLE, 24000, "Hello.") == "smp:一二|Hello."

    sent = upstream.requests[-1]
    assert sent["path"] == "/v1/engine/speaker_from_sample"
    assert sent["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert sent["json"] == {
        "model": "chattts", "transcript": "Hello.", "sample_rate": 24000, "pcm": base64.b64encode(SAMPLE).decode(),
    }  # fmt: skip
    assert engine.status().endpoints[0].in_flight == 0


async def test_a_nodes_refusal_of_a_sample_is_the_clients_400(upstreams: Any, engines: Any) -> None:
    body = json.dumps({"error": {"message": "The sample is too long.", "param": "audio_sample"}}).encode()
    upstream = await upstreams(status=400, body=body, engine_node=True)
    engine = await engines([upstream.url], breaker={"failures": 1})
    await wait_for(lambda: engine.status().state == "ready")
    with pytest.raises(InvalidSynthesisRequestError, match="too long") as refused:
        await engine.speaker_from_sample(SAMPLE, 24000, "Hello.")
    assert refused.value.param == "audio_sample"
    assert engine.status().endpoints[0].breaker == "closed"


async def test_a_node_failing_a_sample_counts_in_its_breaker(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(status=500, body=b'{"error": {"message": "boom"}}', engine_node=True)
    engine = await engines([upstream.url], breaker={"failures": 1, "open_s": 60})
    await wait_for(lambda: engine.status().state == "ready")
    with pytest.raises(SynthesisFailedError, match="HTTP 500: boom"):
        await engine.speaker_from_sample(SAMPLE, 24000, "Hello.")
    assert engine.status().endpoints[0].breaker == "open"
    with pytest.raises(EngineNotReadyError):
        await engine.speaker_from_sample(SAMPLE, 24000, "Hello.")
    assert len(upstream.requests) == 1


async def test_a_node_answering_no_speaker_is_a_failure(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(chunks=[b'{"speaker": ""}'], engine_node=True)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    with pytest.raises(SynthesisFailedError, match="names no speaker"):
        await engine.speaker_from_sample(SAMPLE, 24000, "Hello.")


async def test_a_silent_node_fails_a_sample_within_the_timeout(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(hang=True, engine_node=True)
    engine = await engines([upstream.url], first_byte_timeout_s=0.3)
    await wait_for(lambda: engine.status().state == "ready")
    started = time.monotonic()
    with pytest.raises(SynthesisFailedError, match=r"within 0\.3 s"):
        await engine.speaker_from_sample(SAMPLE, 24000, "Hello.")
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("has_readyz", [True, False], ids=["readyz-without-marker", "openai-like"])
async def test_another_server_is_never_sent_a_sample(upstreams: Any, engines: Any, has_readyz: bool) -> None:
    upstream = await upstreams(chunks=[b'{"speaker": "x"}'], has_readyz=has_readyz)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    assert not engine.info.clones_voices
    with pytest.raises(InvalidSynthesisRequestError, match="not a chattts-gateway engine node") as refused:
        await engine.speaker_from_sample(SAMPLE, 24000, "Hello.")
    assert refused.value.param == "audio_sample"
    assert upstream.requests == []


async def test_a_sample_before_any_endpoint_answers_is_not_ready(engines: Any) -> None:
    engine = await engines(["http://127.0.0.1:9/v1"], settle=False)
    with pytest.raises(EngineNotReadyError):
        await engine.speaker_from_sample(SAMPLE, 24000, "Hello.")


async def test_a_sample_no_engine_can_use_is_refused_before_it_is_sent(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(chunks=[b'{"speaker": "x"}'], engine_node=True)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    with pytest.raises(InvalidSynthesisRequestError) as refused:
        await engine.speaker_from_sample(SAMPLE, 24000, "")
    assert refused.value.param == "transcript"
    assert upstream.requests == []


# ----------------------------------------------------------------------------------------------------------------
# custom voices' speakers, checked when a voice is made


async def test_an_engine_node_is_asked_about_a_speaker(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(status=204, engine_node=True)
    engine = await engines([upstream.url], model="chattts")
    await wait_for(lambda: engine.status().state == "ready")

    await engine.check_speaker("seed:7")

    sent = upstream.requests[-1]
    assert sent["path"] == "/v1/engine/check_speaker"
    assert sent["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert sent["json"] == {"model": "chattts", "speaker": "seed:7"}
    assert engine.status().endpoints[0].in_flight == 0


async def test_a_nodes_refusal_of_a_speaker_is_the_clients_400(upstreams: Any, engines: Any) -> None:
    message = "the ChatTTS speaker embedding has 5 values; these weights need 768"
    body = json.dumps({"error": {"message": message, "param": "speaker"}}).encode()
    upstream = await upstreams(status=400, body=body, engine_node=True)
    engine = await engines([upstream.url], breaker={"failures": 1})
    await wait_for(lambda: engine.status().state == "ready")
    with pytest.raises(InvalidSynthesisRequestError, match="5 values") as refused:
        await engine.check_speaker("garbage")
    assert refused.value.param == "speaker"
    assert engine.status().endpoints[0].breaker == "closed"


async def test_a_node_without_the_check_lets_the_speaker_through(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(status=404, body=b'{"error": {"message": "Not Found"}}', engine_node=True)
    engine = await engines([upstream.url], breaker={"failures": 1})
    await wait_for(lambda: engine.status().state == "ready")
    await engine.check_speaker("seed:7")  # an older node: it judges the speaker when it speaks
    assert engine.status().endpoints[0].breaker == "closed"


@pytest.mark.parametrize("has_readyz", [True, False], ids=["readyz-without-marker", "openai-like"])
async def test_a_voice_for_another_server_is_refused_naming_the_model(
    upstreams: Any, engines: Any, has_readyz: bool
) -> None:
    upstream = await upstreams(status=204, has_readyz=has_readyz)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    with pytest.raises(InvalidSynthesisRequestError, match="not a chattts-gateway engine node") as refused:
        await engine.check_speaker("seed:7")
    assert refused.value.param == "model"
    assert upstream.requests == []


async def test_a_speaker_before_any_endpoint_answers_is_not_ready(engines: Any) -> None:
    engine = await engines(["http://127.0.0.1:9/v1"], settle=False)
    with pytest.raises(EngineNotReadyError):
        await engine.check_speaker("seed:7")


async def test_a_server_without_readyz_is_probed_at_its_models(upstreams: Any, engines: Any) -> None:
    upstream = await upstreams(has_readyz=False)
    engine = await engines([upstream.url])
    await wait_for(lambda: engine.status().state == "ready")
    assert upstream.probes[:2] == ["/readyz", "/v1/models"]
    assert set(upstream.probes[2:]) <= {"/v1/models"}


def test_probe_path_is_the_server_readyz_under_v1_else_models() -> None:
    from engines.breaker import BreakerSettings

    assert EndpointAddress("http://e:8000/v1", "10.0.0.1", BreakerSettings()).probe_path() == "/readyz"
    assert EndpointAddress("http://e/api/v1", "10.0.0.1", BreakerSettings()).probe_path() == "/api/readyz"
    assert EndpointAddress("http://e/openai", "10.0.0.1", BreakerSettings()).probe_path() == "/openai/models"
    url, headers, extensions = EndpointAddress("https://e.svc:8443/v1", "10.0.0.7", BreakerSettings()).target("/x")
    assert (str(url), headers, extensions) == (
        "https://10.0.0.7:8443/x",
        {"Host": "e.svc:8443"},
        {"sni_hostname": "e.svc"},
    )


# ----------------------------------------------------------------------------------------------------------------
# the tenant context on the wire


@pytest.mark.parametrize(
    "share",
    [DEFAULT_SHARE, TenantShare(weight=0.1, priority="low"), TenantShare(weight=1e6, priority="high", max_queued=1)],
)
def test_a_tenant_context_reads_back_as_sent(share: TenantShare) -> None:
    context = TenantContext("acme.eu-1_b", share)
    headers = context_headers(context)
    assert all(value.isascii() for value in headers.values())
    assert read_context(headers) == context


def test_a_context_without_its_share_headers_gets_the_default_share() -> None:
    assert read_context({"x-tts-tenant": "acme"}) == TenantContext("acme", DEFAULT_SHARE)


def test_no_context_headers_is_no_context() -> None:
    assert read_context({"authorization": "Bearer x", "x-tts-other": "1"}) is None


@pytest.mark.parametrize(
    ("headers", "param"),
    [
        ({"x-tts-tenant": "Acme"}, "x-tts-tenant"),
        ({"x-tts-tenant": ""}, "x-tts-tenant"),
        ({"x-tts-tenant": "a" * 64}, "x-tts-tenant"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-weight": "0"}, "x-tts-tenant-weight"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-weight": "-2"}, "x-tts-tenant-weight"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-weight": "nan"}, "x-tts-tenant-weight"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-weight": "inf"}, "x-tts-tenant-weight"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-weight": "heavy"}, "x-tts-tenant-weight"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-priority": "urgent"}, "x-tts-tenant-priority"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-max-queued": "0"}, "x-tts-tenant-max-queued"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-max-queued": "+4"}, "x-tts-tenant-max-queued"),
        ({"x-tts-tenant": "acme", "x-tts-tenant-max-queued": "9" * 10}, "x-tts-tenant-max-queued"),
        ({"x-tts-tenant-priority": "high"}, "x-tts-tenant-priority"),
    ],
)
def test_a_malformed_context_is_refused_naming_its_header(headers: dict[str, str], param: str) -> None:
    with pytest.raises(InvalidTenantContextError) as caught:
        read_context(headers)
    assert caught.value.param == param
    assert param.lower() in str(caught.value).lower()


def test_only_the_engine_nodes_marker_says_engine_node() -> None:
    assert is_engine_node(engine_node_headers())
    assert not is_engine_node({})
    assert not is_engine_node({"x-tts-engine-node": "2"})  # a later version of the extension is not this one
    assert tenant_context("", TenantShare(priority="high")) is None
    assert tenant_context("acme", None) == TenantContext("acme", DEFAULT_SHARE)


# ----------------------------------------------------------------------------------------------------------------
# options


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("engine:8000/v1", "must be an http:// or https:// URL"),
        ("ftp://engine/v1", "must be an http:// or https:// URL"),
        ("http://user:pw@engine/v1", "must not carry credentials"),
        ("http://engine/v1?x=1", "without query"),
        ("http://[::1/v1", "is not a valid URL"),
    ],
)
def test_a_malformed_endpoint_is_refused_naming_it(endpoint: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as caught:
        OpenAIRemoteOptions(endpoints=[endpoint])
    assert "pw" not in str(caught.value).split("input_value")[0]


def test_no_endpoints_is_an_error() -> None:
    with pytest.raises(ValidationError, match="at least 1"):
        OpenAIRemoteOptions(endpoints=[])


def test_credentials_come_from_one_source(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match="not both"):
        OpenAIRemoteOptions(endpoints=["http://e/v1"], api_key=TOKEN, api_key_env="KEY")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="'R1_UNSET_KEY', which is not set"):
        OpenAIRemoteOptions(endpoints=["http://e/v1"], api_key_env="R1_UNSET_KEY")
    monkeypatch.setenv("R1_SET_KEY", "from-env")
    assert OpenAIRemoteOptions(endpoints=["http://e/v1"], api_key_env="R1_SET_KEY").credential() == "from-env"
    assert TOKEN not in repr(OpenAIRemoteOptions(endpoints=["http://e/v1"], api_key=TOKEN))  # type: ignore[arg-type]


def test_a_remote_engine_has_the_queue_knobs_and_no_worker_knobs() -> None:
    for worker_knob in ({"workers": 2}, {"breaker": {"failures": 3}}, {"stall_timeout_s": 5}):
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            engine_settings(kind="openai", options={"endpoints": ["http://e/v1"]}, **worker_knob)
    settings = engine_settings(
        kind="openai", queue_size=3, scheduling="fifo", reserved_slots=0, options={"endpoints": ["http://e/v1/"]}
    )
    assert isinstance(settings, RemoteEngineSettings)
    assert settings.options.endpoints == ["http://e/v1"]
