"""Disconnects, crashes, stuck engines and overload, against the real server and its real worker processes."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import TYPE_CHECKING, Any

import httpx
import openai
import psutil
import pytest

if TYPE_CHECKING:
    from harness.gateway_process import GatewayProcess


def speech(model: str, text: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "input": text, "voice": "alloy", "response_format": "pcm", **fields}


async def time_to_first_byte(http: httpx.AsyncClient, body: dict[str, Any]) -> float:
    started = time.monotonic()
    async with http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        async for _ in response.aiter_raw():
            return time.monotonic() - started
    raise AssertionError("no audio")


async def abort_after_first_chunk(http: httpx.AsyncClient, body: dict[str, Any]) -> None:
    async with http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        async for _ in response.aiter_raw():
            break  # leaving the block closes the connection mid-stream


async def test_a_dropped_client_frees_the_only_worker_promptly(
    http: httpx.AsyncClient,
    gateway: GatewayProcess,
) -> None:
    await abort_after_first_chunk(http, speech("slow", "x" * 400))  # 20 s of real-time synthesis
    assert await time_to_first_byte(http, speech("slow", "x" * 10)) < 1.5
    gateway.wait_engine("slow", active_jobs=0, restarts=0)


async def test_fifty_aborted_streams_leak_nothing(http: httpx.AsyncClient, gateway: GatewayProcess) -> None:
    server = psutil.Process(gateway.process.pid)  # type: ignore[union-attr]
    before = gateway.engine("slow")
    fds_before = server.num_fds()
    for _ in range(50):
        await abort_after_first_chunk(http, speech("slow", "x" * 200))
    after = gateway.wait_engine("slow", active_jobs=0, busy_workers=0, queued=0)
    assert after["pids"] == before["pids"] and after["restarts"] == before["restarts"]
    assert server.num_fds() <= fds_before + 5
    # Every slot is usable: one running plus a full queue (4) all get served.
    results = await asyncio.gather(*(http.post("/v1/audio/speech", json=speech("slow", f"{n}x")) for n in range(5)))
    assert [r.status_code for r in results] == [200] * 5


async def test_killing_a_worker_mid_stream_ends_that_stream_and_heals(
    http: httpx.AsyncClient,
    gateway: GatewayProcess,
) -> None:
    before = gateway.engine("slow")
    victim = before["pids"][0]
    received = 0
    with pytest.raises(httpx.RemoteProtocolError):  # the response ends without its final chunk
        async with http.stream("POST", "/v1/audio/speech", json=speech("slow", "x" * 100)) as response:
            async for chunk in response.aiter_raw():
                if not received:
                    os.kill(victim, signal.SIGKILL)
                received += len(chunk)
    assert 0 < received < 5 * 24000 * 2  # some audio, not all of it
    after = gateway.wait_engine("slow", ready_workers=1, active_jobs=0)
    assert after["restarts"] == before["restarts"] + 1
    assert victim not in after["pids"]
    assert (await http.post("/v1/audio/speech", json=speech("slow", "x" * 4))).status_code == 200


def test_a_request_that_kills_every_worker_it_reaches_is_a_clean_503(
    client: openai.OpenAI,
    gateway: GatewayProcess,
) -> None:
    # It fails the same way on every try: retried once on another worker (failover.same_engine_attempts: 2), then
    # answered with the last error; two workers were killed and replaced.
    restarts = gateway.engine("slow")["restarts"]
    with pytest.raises(openai.InternalServerError) as failed:
        client.audio.speech.create(model="slow", voice="alloy", input="x" * 20 + " #crash-after=0")
    assert failed.value.status_code == 503
    assert failed.value.response.headers["retry-after"] == "1"
    assert "worker died" in failed.value.message
    assert failed.value.response.headers["x-retries"] == "1"
    gateway.wait_engine("slow", ready_workers=1, restarts=restarts + 2)
    assert client.audio.speech.create(model="slow", voice="alloy", input="back").content


def test_a_stuck_engine_is_replaced_by_the_watchdog(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    restarts = gateway.engine("fragile")["restarts"]
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError, match="no progress"):
        client.audio.speech.create(model="fragile", voice="alloy", input="stuck #hang-after=0")
    assert time.monotonic() - started < 10  # two tries of a 1 s watchdog, each on a fresh worker
    gateway.wait_engine("fragile", ready_workers=1, restarts=restarts + 2)
    assert client.audio.speech.create(model="fragile", voice="alloy", input="fine").content


async def test_overload_gets_fast_503s_and_the_rest_succeed(http: httpx.AsyncClient, gateway: GatewayProcess) -> None:
    # "tight": one worker and a queue of two, each request 1 s of real-time synthesis.
    # Distinct texts: identical requests would share one synthesis (single-flight).
    async def one(n: int) -> tuple[httpx.Response, float]:
        started = time.monotonic()
        response = await http.post("/v1/audio/speech", json=speech("tight", f"{n} " + "x" * 48))
        return response, time.monotonic() - started

    results = await asyncio.gather(*(one(n) for n in range(6)))
    served = [r for r, _ in results if r.status_code == 200]
    refused = [(r, took) for r, took in results if r.status_code == 503]
    assert len(served) == 3 and len(refused) == 3
    for response, took in refused:
        assert response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "engine_overloaded"
        assert took < 0.5
    gateway.wait_engine("tight", queued=0, active_jobs=0)


def test_the_sdk_retries_503_and_gets_served(gateway: GatewayProcess) -> None:
    # The SDK retries 503s honouring Retry-After; a retry lands once the queue drains.
    import threading

    blocker = threading.Thread(
        target=httpx.post,
        args=(f"{gateway.base_url}/v1/audio/speech",),
        kwargs={"json": speech("tight", "x" * 40), "timeout": 30},
    )
    blocker.start()
    fillers = [
        threading.Thread(
            target=httpx.post,
            args=(f"{gateway.base_url}/v1/audio/speech",),
            kwargs={"json": speech("tight", "x" * 4), "timeout": 30},
        )
        for _ in range(2)
    ]
    time.sleep(0.3)
    for filler in fillers:
        filler.start()
    time.sleep(0.3)
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="anything", max_retries=5) as client:
        assert client.audio.speech.create(model="tight", voice="alloy", input="eventually").content
    blocker.join()
    for filler in fillers:
        filler.join()


async def test_probes_and_catalog(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    ready = await http.get("/readyz")
    assert ready.status_code == 200
    engines = ready.json()["engines"]
    assert engines["espeak"]["state"] == "ready"
    assert engines["chattts"]["state"] == "unavailable" and engines["chattts"]["reason"]
    models = (await http.get("/v1/models")).json()
    assert models["object"] == "list"
    ids = {m["id"] for m in models["data"]}
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "synthetic", "espeak", "chattts"} <= ids
    assert (await http.get("/v1/models/tts-1")).json()["id"] == "tts-1"
    assert (await http.get("/v1/models/nope")).status_code == 404
    voices = (await http.get("/v1/audio/voices")).json()
    assert voices["object"] == "list"
    models_of = {voice["id"]: set(voice["models"]) for voice in voices["data"]}
    assert set(models_of) >= {"alloy", "nova", "onyx", "shimmer", "marin", "cedar"}
    assert models_of["nova"] >= {"tts-1", "espeak", "synthetic"}
    assert all("chattts" not in models for models in models_of.values())  # not loaded: no voices to offer
