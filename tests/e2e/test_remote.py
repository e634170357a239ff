"""Two tiers on loopback: a front gateway whose engines are ``kind: openai``, in front of two engine nodes (real
``chattts-gateway serve`` processes with ``server.profile: engine`` and synthetic engines). Clients: the OpenAI SDK,
httpx and ``websockets``; audio decoded with PyAV."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from websockets.asyncio.client import connect

from auth.keys import generate_api_key, hash_api_key
from engines.synthetic import voice_frequency
from harness.gateway_process import CONSOLE_SCRIPT, GatewayProcess, closed_port, free_port
from tests.audio_decode import DURATION_TOLERANCE_S, SPEECH_FORMATS, SpeechFormat, decode_audio, dominant_frequency
from tests.starting import running_together, start_together, stop_together
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SECONDS_PER_CHAR = 0.02
SERVICE_TOKEN = "svc-" + "0123456789abcdef" * 3
SERVICE = {"authorization": f"Bearer {SERVICE_TOKEN}"}  # what a front sends its engine nodes
KEY = generate_api_key()
CAPPED_KEY = generate_api_key()  # one request per minute


def node_config() -> dict[str, Any]:
    return {
        "server": {"profile": "engine"},
        "auth": {"service_token": SERVICE_TOKEN},
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            # Real-time pacing: a stream lasts long enough to kill its node or walk away from it.
            "paced": {"kind": "synthetic", "workers": 2, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        },
    }


def remote(nodes: list[GatewayProcess] | list[str], model: str = "tones", **options: Any) -> dict[str, Any]:
    endpoints = [n if isinstance(n, str) else f"{n.base_url}/v1" for n in nodes]
    return {
        "kind": "openai",
        "options": {
            "endpoints": endpoints,
            "model": model,
            "api_key": SERVICE_TOKEN,
            "probe_interval_s": 0.2,
            "first_byte_timeout_s": 5,
            **options,
        },
    }


def front_config(nodes: list[GatewayProcess], **engines: dict[str, Any]) -> dict[str, Any]:
    return {
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEY)]},
                {"name": "capped", "api_key_sha256": [hash_api_key(CAPPED_KEY)], "limits": {"requests_per_minute": 1}},
            ]
        },
        # "mystery" is a voice of the front that the nodes do not have: their refusal reaches the client.
        "engines": engines
        or {"remote": remote(nodes, voices={"mystery": "no-such-voice"}), "remote-paced": remote(nodes, "paced")},
        "aliases": {"tts-1": ["remote"]},
    }


def node_processes(workdir: Path, count: int = 2) -> list[GatewayProcess]:
    """Engine nodes, not started yet: a front's config names them by their ports, so both can start together."""
    for i in range(count):
        (workdir / f"node{i}").mkdir()
    return [GatewayProcess(node_config(), workdir / f"node{i}") for i in range(count)]


#: How long a front started together with its nodes may take to see them all ready: they start meanwhile.
NODES_READY_S = 60.0


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[GatewayProcess], GatewayProcess]]:
    """The two engine nodes and the front in front of them, started together."""
    nodes = node_processes(tmp_path_factory.mktemp("nodes"))
    front = GatewayProcess(front_config(nodes), tmp_path_factory.mktemp("front"))
    with running_together([*nodes, front]):
        front.wait_engine("remote", NODES_READY_S, state="ready", ready_workers=2)
        yield nodes, front


@pytest.fixture(scope="module")
def nodes(tiers: tuple[list[GatewayProcess], GatewayProcess]) -> list[GatewayProcess]:
    return tiers[0]


@pytest.fixture(scope="module")
def front(tiers: tuple[list[GatewayProcess], GatewayProcess]) -> GatewayProcess:
    return tiers[1]


@pytest.fixture
def client(front: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{front.base_url}/v1", api_key=KEY, max_retries=0) as sdk:
        yield sdk


#: For the metrics that tests poll (:func:`served_by_nodes`, :func:`metric`): ``httpx.get`` builds a client and an SSL
#: context on every call, about 26 ms of CPU, which a poll every 20 ms spends on nothing else. No connection is kept.
_POLLS = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def served_by_nodes(nodes: list[GatewayProcess]) -> list[float]:
    """Speech requests each engine node has served (its usage counters, one per tenant the fronts named)."""
    counts = []
    for node in nodes:
        metrics = _POLLS.get(f"{node.base_url}/metrics", headers=SERVICE, timeout=5).text
        lines = [line for line in metrics.splitlines() if line.startswith("tts_tenant_requests_total{")]
        counts.append(sum(float(line.split()[1]) for line in lines))
    return counts


def subdir(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir()
    return path


def speech_requests_seen(node: GatewayProcess) -> int:
    """Speech requests that reached the node at all (served or not), from its access log."""
    return node.log().count('"path": "/v1/audio/speech"')


def endpoints_of(front: GatewayProcess, engine: str = "remote") -> list[dict[str, Any]]:
    endpoints: list[dict[str, Any]] = front.engine(engine)["endpoints"]
    return endpoints


def metric(front: GatewayProcess, name: str, endpoint: str) -> float:
    metrics = _POLLS.get(f"{front.base_url}/metrics", timeout=5).text
    prefix = f"{name}{{"
    for line in metrics.splitlines():
        if line.startswith(prefix) and f'endpoint="{endpoint}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} for {endpoint} not in the metrics")


# ----------------------------------------------------------------------------------------------------------------
# the gateway's features over a remote engine


@pytest.mark.parametrize("response_format", SPEECH_FORMATS)
def test_every_format_decodes_through_the_front(client: openai.OpenAI, response_format: SpeechFormat) -> None:
    text = f"Two tiers speak {response_format} here."
    response = client.audio.speech.with_raw_response.create(
        model="tts-1", voice="coral", input=text, response_format=response_format
    )

    assert response.headers["x-engine"] == "remote"
    audio = decode_audio(response.content, response_format)
    assert audio.duration == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=DURATION_TOLERANCE_S)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("coral"), rel=0.03)


def test_speed_is_time_stretched_at_the_front(client: openai.OpenAI) -> None:
    text = "Half the time, twice the speed."
    audio = decode_audio(
        client.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="wav", speed=2.0).read(),
        "wav",
    )
    assert audio.duration == pytest.approx(len(text) * SECONDS_PER_CHAR / 2, abs=DURATION_TOLERANCE_S)


async def test_sse_through_the_front(front: GatewayProcess) -> None:
    text = "Events over two tiers."
    body = {
        "model": "tts-1",
        "input": text,
        "voice": "sage",
        "response_format": "pcm",
        "stream_format": "sse",
        "word_timestamps": True,
    }
    async with (
        httpx.AsyncClient(base_url=front.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http,
        http.stream("POST", "/v1/audio/speech", json=body) as response,
    ):
        assert response.status_code == 200
        events = [
            json.loads(line.removeprefix("data: "))
            async for line in response.aiter_lines()
            if line.startswith("data: ")
        ]
    *others, done = events
    deltas = [event for event in others if event["type"] == "speech.audio.delta"]
    assert deltas and done["type"] == "speech.audio.done"
    audio = decode_audio(b"".join(base64.b64decode(event["audio"]) for event in deltas), "pcm")
    assert audio.duration == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=DURATION_TOLERANCE_S)
    # The hop carries audio only: the front estimates the words from the audio it got, within it.
    stamps = [event for event in others if event["type"] == "speech.audio.timestamps"]
    assert {event["kind"] for event in stamps} == {"estimated"}
    assert "".join(c for event in stamps for c in event["alignment"]["characters"]) == text
    assert all(word["end"] <= audio.duration + 0.001 for event in stamps for word in event["words"])


async def test_a_realtime_session_over_the_remote_engine(front: GatewayProcess) -> None:
    url = front.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    events: list[dict[str, Any]] = []
    async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as socket_:
        await socket_.send(
            json.dumps(
                {"type": "session.update", "session": {"model": "remote", "voice": "nova", "response_format": "pcm"}}
            )
        )
        await socket_.send(json.dumps({"type": "input.append", "text": "First sentence here. And a second one."}))
        await socket_.send(json.dumps({"type": "session.close"}))
        async with asyncio.timeout(20):
            async for message in socket_:
                events.append(json.loads(message))
    done = [event for event in events if event["type"] == "audio.done"]
    assert [event["text"] for event in done] == ["First sentence here.", "And a second one."]
    assert all(event["status"] == "completed" for event in done)
    pcm = b"".join(base64.b64decode(event["audio"]) for event in events if event["type"] == "audio.delta")
    audio = decode_audio(pcm, "pcm")
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("nova"), rel=0.03)


def test_cache_hits_and_tenant_limits_never_reach_the_engine_nodes(
    client: openai.OpenAI,
    front: GatewayProcess,
    nodes: list[GatewayProcess],
) -> None:
    text = f"Cached once, served twice {time.time()}."
    before, seen = sum(served_by_nodes(nodes)), sum(map(speech_requests_seen, nodes))
    first = client.audio.speech.with_raw_response.create(model="tts-1", voice="echo", input=text, response_format="mp3")
    wait_until(lambda: sum(served_by_nodes(nodes)) == before + 1, what="the node counting the miss")

    again = client.audio.speech.with_raw_response.create(model="tts-1", voice="echo", input=text, response_format="mp3")
    assert again.content == first.content
    assert again.headers["x-cache"] == "hit"

    with openai.OpenAI(base_url=f"{front.base_url}/v1", api_key=CAPPED_KEY, max_retries=0) as capped:
        capped.audio.speech.create(model="tts-1", voice="echo", input="one allowed", response_format="pcm").read()
        with pytest.raises(openai.RateLimitError):
            capped.audio.speech.create(model="tts-1", voice="echo", input="one too many", response_format="pcm")
    wait_until(lambda: sum(served_by_nodes(nodes)) == before + 2, what="the node counting the capped request")
    time.sleep(0.5)  # a request that leaked through would be counted by now
    assert sum(served_by_nodes(nodes)) == before + 2
    assert sum(map(speech_requests_seen, nodes)) == seen + 2


def test_requests_spread_over_both_nodes(front: GatewayProcess, nodes: list[GatewayProcess]) -> None:
    before = served_by_nodes(nodes)
    results: list[int] = []

    def speak(i: int) -> None:
        response = httpx.post(
            f"{front.base_url}/v1/audio/speech",
            timeout=30,
            headers={"Authorization": f"Bearer {KEY}"},
            json={"model": "remote-paced", "input": f"spread {i} " * 6, "voice": "ash"},
        )
        results.append(response.status_code)

    threads = [threading.Thread(target=speak, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    wait_until(
        lambda: [e["in_flight"] for e in endpoints_of(front, "remote-paced")] == [2, 2],
        what="two requests in flight on each node",
    )
    for thread in threads:
        thread.join()
    assert results == [200] * 4
    wait_until(
        lambda: [a - b for a, b in zip(served_by_nodes(nodes), before, strict=True)] == [2, 2],
        what="each node serving two",
    )


async def test_a_client_that_goes_away_frees_the_upstream_request(
    front: GatewayProcess,
    nodes: list[GatewayProcess],
) -> None:
    body = {
        "model": "remote-paced",
        "input": "A long paced sentence to walk away from. " * 4,
        "voice": "ash",
        "response_format": "pcm",
    }
    async with (
        httpx.AsyncClient(base_url=front.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http,
        http.stream("POST", "/v1/audio/speech", json=body) as response,
    ):
        assert response.status_code == 200
        audio = response.aiter_raw()  # held: a dropped iterator is finalized, which closes the connection
        await anext(audio)
        busy = [node.engine("paced")["active_jobs"] for node in nodes]
        assert sum(busy) == 1
    # The response is closed: the front closes its upstream stream, and the node cancels its job.
    await asyncio.to_thread(
        wait_until,
        lambda: sum(node.engine("paced")["active_jobs"] for node in nodes) == 0,
        10.0,
        "the engine node's job cancelled",
    )
    assert [e["in_flight"] for e in endpoints_of(front, "remote-paced")] == [0, 0]


def test_an_upstream_refusal_of_the_input_is_a_400_with_its_message(front: GatewayProcess) -> None:
    response = httpx.post(
        f"{front.base_url}/v1/audio/speech",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "remote", "input": "who am I", "voice": "mystery"},
        timeout=10,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert "no-such-voice" in error["message"]
    assert error["param"] == "voice"
    assert endpoints_of(front)[0]["breaker"] == "closed"


# ----------------------------------------------------------------------------------------------------------------
# the engine node profile


def test_an_engine_node_needs_the_service_token(nodes: list[GatewayProcess]) -> None:
    url = f"{nodes[0].base_url}/v1/audio/speech"
    body = {"model": "tones", "input": "hi", "voice": "alloy"}
    assert httpx.post(url, json=body, timeout=10).status_code == 401
    wrong = httpx.post(url, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert wrong.status_code == 401
    assert KEY not in wrong.text
    right = httpx.post(url, json=body, headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}, timeout=10)
    assert right.status_code == 200
    assert SERVICE_TOKEN not in nodes[0].log()


def test_an_engine_node_has_no_custom_voices_admin_or_cache(nodes: list[GatewayProcess]) -> None:
    auth = {"Authorization": f"Bearer {SERVICE_TOKEN}"}
    base = nodes[0].base_url
    created = httpx.post(f"{base}/v1/audio/voices", headers=auth, json={"name": "mine", "model": "tones"}, timeout=10)
    assert created.status_code == 404
    assert httpx.get(f"{base}/admin/tenants", headers=auth, timeout=10).status_code == 404
    body = {"model": "tones", "input": f"not cached {time.time()}", "voice": "alloy"}
    for _ in range(2):
        response = httpx.post(f"{base}/v1/audio/speech", json=body, headers=auth, timeout=10)
        assert response.headers["x-cache"] == "miss"


def test_an_engine_profile_without_a_service_token_refuses_to_start(tmp_path: Path) -> None:
    config = tmp_path / "node.yaml"
    config.write_text(json.dumps({"server": {"profile": "engine"}, "engines": {"chattts": None, "espeak": None}}))
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--port", str(free_port()), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "auth.service_token" in result.stderr


# ----------------------------------------------------------------------------------------------------------------
# bad configuration


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        (["http://127.0.0.1:1/v1", "engine-without-scheme:8000/v1"], "engine-without-scheme:8000/v1"),
        ([], "endpoints"),
    ],
)
def test_a_malformed_or_missing_endpoint_refuses_to_start(tmp_path: Path, endpoints: list[str], message: str) -> None:
    config = tmp_path / "front.yaml"
    engines = {"chattts": None, "espeak": None, "remote": {"kind": "openai", "options": {"endpoints": endpoints}}}
    config.write_text(json.dumps({"engines": engines}))
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--port", str(free_port()), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "invalid configuration" in result.stderr
    assert message in result.stderr


def test_unreachable_endpoints_start_and_say_why_in_readyz(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{closed_port()}/v1"
    config = {"engines": {"remote": remote([closed, "http://no-such-host.invalid/v1"])}}
    with GatewayProcess(config, tmp_path) as front:
        response = httpx.get(f"{front.base_url}/readyz", timeout=5)
        assert response.status_code == 503
        engine = response.json()["engines"]["remote"]
        assert engine["state"] == "unavailable"
        assert closed in engine["reason"]
        assert "cannot resolve no-such-host.invalid" in engine["reason"]
        assert [e["state"] for e in engine["endpoints"]] == ["unhealthy", "unhealthy"]
        speech = httpx.post(
            f"{front.base_url}/v1/audio/speech", timeout=10, json={"model": "remote", "input": "hi", "voice": "alloy"}
        )
        assert speech.status_code == 503
        assert SERVICE_TOKEN not in front.log()


# ----------------------------------------------------------------------------------------------------------------
# faults: a test that harms a node (kills it, hangs it) has nodes of its own; one that only sends requests that fail
# borrows the module's first node, which the tests above have done with


def test_a_killed_node_is_taken_out_and_the_other_serves(tmp_path: Path) -> None:
    own_nodes = node_processes(tmp_path)
    front = GatewayProcess(front_config(own_nodes), subdir(tmp_path, "front"))
    with running_together([*own_nodes, front]):
        front.wait_engine("remote", NODES_READY_S, state="ready", ready_workers=2)
        victim = own_nodes[0]
        victim_url = f"{victim.base_url}/v1"
        loads = [LoadLoop(front) for _ in range(3)]
        for load in loads:
            load.start()
        wait_until(lambda: all(load.count >= 3 for load in loads), what="load on the front")
        assert victim.process is not None
        victim.process.send_signal(signal.SIGKILL)
        wait_until(
            lambda: next(e for e in endpoints_of(front) if e["url"] == victim_url)["state"] == "unhealthy",
            what="the killed node taken out",
        )
        served_after = sum(load.count for load in loads)
        wait_until(lambda: sum(load.count for load in loads) >= served_after + 9, what="more requests served")
        for load in loads:
            load.stop()
        assert served_by_nodes(own_nodes[1:])[0] > 0
        # Only a request whose audio had started when its node died may fail (cut); with failover before the
        # first byte (gateway/speech/failover.py) every other one is served by the surviving node.
        assert [failure for load in loads for failure in load.failures] == []
        assert all(len(load.cut) <= 1 for load in loads)


class LoadLoop:
    """Requests one after another from a thread until stopped; counts successes, keeps failures (an error status:
    the request never got audio) apart from streams cut after their audio had started."""

    def __init__(self, front: GatewayProcess) -> None:
        self.front = front
        self.count = 0
        self.failures: list[str] = []
        self.cut: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with httpx.Client(base_url=self.front.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http:
            while not self._stop.is_set():
                try:
                    response = http.post(
                        "/v1/audio/speech",
                        timeout=30,
                        json={
                            "model": "tts-1",
                            "input": f"load {self.count}",
                            "voice": "alloy",
                            "response_format": "pcm",
                        },
                    )
                except httpx.HTTPError as exc:  # cut after its 200 and first audio: the one kind allowed to fail
                    self.cut.append(repr(exc))
                    continue
                if response.status_code == 200:
                    self.count += 1
                else:
                    self.failures.append(f"{response.status_code}: {response.text}")


def test_a_node_that_hangs_before_the_first_byte_counts_in_its_breaker(tmp_path: Path) -> None:
    hanging = hanging_node(tmp_path / "node")
    options: dict[str, Any] = {"first_byte_timeout_s": 0.5, "breaker": {"failures": 2, "open_s": 60}}
    with silent_server() as silent:
        fronts = [
            GatewayProcess({"engines": {"remote": remote([silent], **options)}}, subdir(tmp_path, "silent-front")),
            GatewayProcess({"engines": {"remote": remote([hanging.node], **options)}}, subdir(tmp_path, "front")),
        ]
        with hanging.alongside(*fronts) as node:
            # A bare TCP server that accepts and never answers: probes fail too, so it is unhealthy from the start...
            assert endpoints_of(fronts[0])[0]["state"] == "unhealthy"
            front = fronts[1]
            # ...while a node whose engine hangs (#hang-after=0) answers its probes: only the timeout can catch it.
            front.wait_engine("remote", NODES_READY_S, state="ready")
            url = f"{node.base_url}/v1"
            for attempt in range(2):
                started = time.monotonic()
                response = httpx.post(
                    f"{front.base_url}/v1/audio/speech",
                    timeout=30,
                    json={"model": "remote", "input": "hang #hang-after=0", "voice": "alloy"},
                )
                assert response.status_code == 503, response.text
                assert time.monotonic() - started < 10
                if attempt == 0:
                    assert "no answer within 0.5 s" in endpoints_of(front)[0]["last_error"]
            assert endpoints_of(front)[0]["breaker"] == "open"
            assert metric(front, "tts_engine_endpoint_breaker_state", url) == 2


def test_a_request_to_an_endpoint_that_hangs_is_served_by_the_other_node(
    nodes: list[GatewayProcess], tmp_path: Path
) -> None:
    engines = {"remote": remote(nodes[:1], first_byte_timeout_s=0.5, breaker={"failures": 100})}
    with healthy_but_silent_server() as silent:
        engines["remote"]["options"]["endpoints"].append(silent.url)
        with (
            GatewayProcess({"engines": engines}, tmp_path) as front,
            httpx.Client(base_url=front.base_url, timeout=30) as http,
        ):
            front.wait_engine("remote", state="ready", ready_workers=2)
            for i in range(4):
                started = time.monotonic()
                response = http.post(
                    "/v1/audio/speech",
                    json={"model": "remote", "input": f"try {i}", "voice": "alloy", "response_format": "pcm"},
                )
                assert response.status_code == 200, response.text
                assert time.monotonic() - started < 5.0  # the 0.5 s first-byte timeout, not the client's 30 s
            assert silent.posts >= 1, "the balancer never sent a request to the silent endpoint"
            silent_endpoint = next(e for e in endpoints_of(front) if e["url"] == silent.url)
            assert "no answer within 0.5 s" in silent_endpoint["last_error"]


class healthy_but_silent_server:  # noqa: N801 - used like a function in a with statement
    """An HTTP server whose probes (GET) answer 200 but whose speech requests (POST) never get an answer."""

    def __enter__(self) -> healthy_but_silent_server:
        release = self._release = threading.Event()
        owner = self
        self.posts = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def do_POST(self) -> None:
                owner.posts += 1
                release.wait(30)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


def test_the_breaker_opens_fails_fast_half_opens_and_closes(nodes: list[GatewayProcess], tmp_path: Path) -> None:
    node = nodes[0]
    url = f"{node.base_url}/v1"
    engines = {"remote": remote([node], breaker={"failures": 2, "window_s": 30, "open_s": 2})}
    with (
        GatewayProcess({"engines": engines}, tmp_path) as front,
        httpx.Client(base_url=front.base_url, timeout=30) as http,
    ):
        front.wait_engine("remote", state="ready")

        def speak(text: str) -> httpx.Response:
            return http.post("/v1/audio/speech", json={"model": "remote", "input": text, "voice": "alloy"})

        for _ in range(2):
            assert speak("broken #fail").status_code == 503
        assert endpoints_of(front)[0]["breaker"] == "open"
        assert metric(front, "tts_engine_endpoint_breaker_state", url) == 2
        seen = speech_requests_seen(node)

        refused = speak("fails fast")
        assert refused.status_code == 503
        assert "circuit breaker open" in refused.json()["error"]["message"]
        assert front.engine("remote")["state"] == "unavailable"
        time.sleep(0.3)  # the access log line of a request that reached the node would be written by now
        assert speech_requests_seen(node) == seen, "an open breaker must not reach the node"

        wait_until(lambda: endpoints_of(front)[0]["breaker"] == "half_open", 10, "half-open")
        assert metric(front, "tts_engine_endpoint_breaker_state", url) == 1
        assert speak("the node is back").status_code == 200
        assert endpoints_of(front)[0]["breaker"] == "closed"
        assert metric(front, "tts_engine_endpoint_breaker_state", url) == 0


class silent_server:  # noqa: N801 - used like a function in a with statement
    """A TCP listener that accepts connections and never answers (a hung process, a black-holed port)."""

    def __enter__(self) -> str:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self._socket.close()


class hanging_node:  # noqa: N801 - used like a function in a with statement
    """One engine node whose synthetic engine honours ``#hang-after=0``. A hung worker ignores its cancellation: the
    node's watchdog replaces it after a second, and any worker still alive when the node has stopped is killed, so
    that no hung process outlives the test."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir()
        config = node_config()
        config["engines"]["tones"]["stall_timeout_s"] = 1.0
        self.node = GatewayProcess(config, workdir)
        self._others: list[GatewayProcess] = []

    def alongside(self, *others: GatewayProcess) -> hanging_node:
        """Start ``others`` (fronts that name the node) together with the node, and stop them with it."""
        self._others = list(others)
        return self

    def __enter__(self) -> GatewayProcess:
        start_together([self.node, *self._others])
        return self.node

    def __exit__(self, *exc: object) -> None:
        workers = [pid for engine in self.node.readiness()["engines"].values() for pid in engine["pids"]]
        stop_together([self.node, *self._others])
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
