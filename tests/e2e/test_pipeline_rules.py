"""Every rule of the speech pipeline holds on every transport: ``POST /v1/audio/speech``, the stream WebSocket,
OpenAI's Realtime API, ElevenLabs' streamed text-to-speech and its ``stream-input`` WebSocket
(``tests/transports.py``), against one real gateway and the engine node behind it.

The gateway is also a front: its ``remote`` engine is the node's ``tones``. Each test makes a tenant of its own
through the admin API, so that its limits, usage and cache are its alone whatever ran before it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from engines.synthetic import voice_frequency
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio, dominant_frequency
from tests.tenancy import ADMIN_TOKEN, Admin, bearer
from tests.transports import TRANSPORTS, Http, Spoken, Transport
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SECONDS_PER_CHAR = 0.02
BACKUP_SECONDS_PER_CHAR = 0.01  # the fallback engine's clips are half as long: the duration says who spoke
PACED_SECONDS_PER_CHAR = 0.05
SERVICE_TOKEN = "svc-" + uuid.uuid4().hex * 2
NODE_AUTH = bearer(SERVICE_TOKEN)  # the node's metrics need it
LONG_TEXT = "This sentence takes several seconds to say at real-time pace, which leaves time to cut in"

by_transport = pytest.mark.parametrize("transport", TRANSPORTS, ids=lambda transport: transport.name)


def synthetic(seconds_per_char: float = SECONDS_PER_CHAR, **options: Any) -> dict[str, Any]:
    return {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": seconds_per_char, **options}}


def node_config() -> dict[str, Any]:
    return {
        "server": {"profile": "engine"},
        "auth": {"service_token": SERVICE_TOKEN},
        "engines": {"tones": synthetic()},
    }


def gateway_config(node: GatewayProcess) -> dict[str, Any]:
    remote = {"endpoints": [f"{node.base_url}/v1"], "model": "tones", "api_key": SERVICE_TOKEN, "probe_interval_s": 0.2}
    return {
        "auth": {"admin_token": ADMIN_TOKEN, "tenants": [{"name": "seeded"}]},
        "engines": {
            "tones": synthetic() | {"workers": 2},
            # Real-time pacing: LONG_TEXT takes 4.5 s to say, time enough to cut in.
            "paced": synthetic(PACED_SECONDS_PER_CHAR, rtf=1.0),
            "unready": synthetic(unavailable="no weights here"),
            "broken": synthetic(fail_after_chunks=0),  # fails every job before its first audio
            "backup": synthetic(BACKUP_SECONDS_PER_CHAR),
            "remote": {"kind": "openai", "options": remote},
        },
        "aliases": {"after-unready": ["unready", "backup"], "after-broken": ["broken", "backup"]},
    }


class Gateways:
    """The engine node, and the gateway in front of it."""

    def __init__(self, workdir: Path) -> None:
        (workdir / "node").mkdir()
        self.node = GatewayProcess(node_config(), workdir / "node")
        self.gateway = GatewayProcess(gateway_config(self.node), workdir)

    def start(self) -> None:
        with ThreadPoolExecutor(2) as starting:
            list(starting.map(GatewayProcess.start, [self.node, self.gateway]))
        self.gateway.wait_engine("remote", state="ready")

    def stop(self) -> None:
        for process in (self.gateway, self.node):
            if process.process is not None:
                process.stop()


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    running = Gateways(tmp_path_factory.mktemp("pipeline-rules"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def gateway(gateways: Gateways) -> GatewayProcess:
    return gateways.gateway


@pytest.fixture(scope="module")
def admin(gateway: GatewayProcess) -> Iterator[Admin]:
    client = Admin(gateway.base_url)
    yield client
    client.close()


def new_tenant(admin: Admin, **limits: int) -> tuple[str, str]:
    """A tenant of the test's own (with ``limits``) and a key of it."""
    tenant = admin.tenant(None, None, **limits)
    return tenant, str(admin.key(tenant)["key"])


def metric(gateway: GatewayProcess, name: str, headers: dict[str, str] | None = None, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 when there is none)."""
    text = httpx.get(f"{gateway.base_url}/metrics", headers=headers, timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def usage(gateway: GatewayProcess, key: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway.base_url}/v1/usage", headers=bearer(key), timeout=5)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def usage_after(gateway: GatewayProcess, key: str, requests: int) -> dict[str, Any]:
    """The tenant's usage once ``requests`` requests are recorded (an HTTP response's is, just after its last byte)."""
    await wait_for(lambda: usage(gateway, key)["requests"] >= requests, what=f"{requests} requests in the usage")
    return usage(gateway, key)


def assert_tone(spoken: Spoken, text: str, frequency: float, seconds_per_char: float = SECONDS_PER_CHAR) -> None:
    assert (spoken.outcome, spoken.error) == ("completed", None), spoken
    audio = decode_audio(spoken.audio, "pcm")
    assert audio.duration == pytest.approx(len(text) * seconds_per_char, abs=0.03)
    assert dominant_frequency(audio) == pytest.approx(frequency, abs=3)


# ----------------------------------------------------------------------------------------------------------------
# the rules


@by_transport
async def test_a_tenant_over_its_characters_is_refused_and_the_refusal_counted(
    gateway: GatewayProcess, admin: Admin, transport: Transport
) -> None:
    tenant, key = new_tenant(admin, characters_per_minute=60)
    fits = await transport.speak(
        gateway, key, model="tones", voice="alloy", text="Forty characters of text fit the budget."
    )
    over = await transport.speak(
        gateway, key, model="tones", voice="alloy", text="These forty characters no longer fit it."
    )

    assert fits.outcome == "completed", fits
    assert (over.outcome, over.audio) == ("failed", b""), over
    if transport.name == "vllm-omni":  # its error events carry a message, no code
        assert over.error is not None
        assert "rate limit" in over.error.lower(), over.error
    else:
        assert over.error == "rate_limit_exceeded"
    if transport.name in {"http", "elevenlabs"}:
        assert over.status_code == 429
        assert int(over.headers["retry-after"]) >= 1
    assert usage(gateway, key)["rejections"] == {"characters": 1}
    assert metric(gateway, "tts_rate_limit_rejections_total", tenant=tenant, reason="characters") == 1


# How each transport refuses what a spent monthly budget refuses: (HTTP status, close code). A request past it is
# refused whole, and a session's segment past it as the session refuses any segment, the session going on (closed
# normally once done; OpenAI's SDK keeps its code); a session opened once it is spent is refused as it opens: at the
# handshake, or with 1008 (policy violation) where the socket was accepted first (the stream socket reads its first
# message before it authenticates), never 1013 (try again later), on which clients reconnect until the month ends.
PAST_THE_BUDGET = {
    "http": (429, None),
    "stream": (None, 1000),
    "realtime": (None, None),
    "elevenlabs": (401, None),
    "elevenlabs-ws": (None, 1000),
    "elevenlabs-dialogue-ws": (None, 1000),
    "vllm-omni": (None, 1000),
}
ONCE_SPENT = {
    "http": (429, None),
    "stream": (None, 1008),
    "realtime": (429, None),
    "elevenlabs": (401, None),
    "elevenlabs-ws": (401, None),
    "elevenlabs-dialogue-ws": (401, None),
    "vllm-omni": (None, 1008),
}


@by_transport
async def test_a_spent_monthly_budget_is_refused_with_its_numbers_and_no_socket_told_to_retry(
    gateway: GatewayProcess, admin: Admin, transport: Transport
) -> None:
    """Before: a session refused by a spent budget was closed with 1013, told "0 remain, this request needs 0"."""
    _, key = new_tenant(admin, characters_per_month=60)
    speak = functools.partial(transport.speak, gateway, key, model="tones", voice="alloy")
    first = await speak(text="Forty characters of text fit the budget.")
    past = await speak(text="These forty characters no longer fit it.")
    rest = await speak(text="Twenty more fit too.")
    spent = await speak(text="Nothing is left now.")

    assert (first.outcome, rest.outcome) == ("completed", "completed"), (first, rest)
    quota = "quota_exceeded" if transport.name.startswith("elevenlabs") else "insufficient_quota"
    for refused in (past, spent):
        assert (refused.outcome, refused.audio) == ("failed", b""), refused
        assert refused.error == (refused.message if transport.name == "vllm-omni" else quota), refused  # no code
    assert "monthly budget of 60 input characters: 20 remain, this request needs 40." in str(past.message), past
    assert (past.status_code, past.close_code) == PAST_THE_BUDGET[transport.name], past
    asked = "0 remain, this request needs 20" if transport.name in {"http", "elevenlabs"} else None
    standing = asked or "is spent (60 used this month)"  # a session asks nothing as it opens
    assert f"monthly budget of 60 input characters{':' if asked else ''} {standing}." in str(spent.message), spent
    assert (spent.status_code, spent.close_code) == ONCE_SPENT[transport.name], spent
    assert usage(gateway, key)["rejections"] == {"characters_per_month": 2}


@pytest.mark.parametrize(
    "path",
    [
        "/v1/text-to-speech/alloy/stream-input",
        "/v1/text-to-speech/alloy/multi-stream-input",
        "/v1/text-to-dialogue/multi-stream-input",
    ],
)
async def test_a_socket_accepted_for_its_first_messages_key_closes_with_1008_on_a_spent_budget(
    gateway: GatewayProcess, admin: Admin, path: str
) -> None:
    """ElevenLabs' sockets, where a browser sends its key in the first message: they are accepted to read it, so a
    spent budget closes them, as it closes the stream socket. Before: 1013 (try again later)."""
    _, key = new_tenant(admin, characters_per_month=6)
    assert (await Http().speak(gateway, key, model="tones", voice="alloy", text="Spent.")).outcome == "completed"
    url = gateway.base_url.replace("http://", "ws://") + f"{path}?model_id=tones&output_format=pcm_24000"
    async with connect(url) as socket, asyncio.timeout(10):
        await socket.send(json.dumps({"text": " ", "xi_api_key": key}))
        error = json.loads(await socket.recv())
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert (error["error"], error["code"]) == ("quota_exceeded", 401)
    assert "monthly budget of 6 input characters is spent (6 used this month)." in error["message"]
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1008


@by_transport
async def test_usage_counts_the_request_its_characters_and_its_audio(
    gateway: GatewayProcess, admin: Admin, transport: Transport
) -> None:
    _, key = new_tenant(admin)
    text = f"Counted once over {transport.name}"
    spoken = await transport.speak(gateway, key, model="tones", voice="nova", text=text)

    assert_tone(spoken, text, voice_frequency("nova"))
    used = await usage_after(gateway, key, 1)
    assert (used["requests"], used["input_characters"], used["cache_hits"]) == (1, len(text), 0)
    assert used["audio_seconds"] == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.01)
    assert used["audio_seconds"] == pytest.approx(spoken.seconds, abs=0.01)


@by_transport
async def test_the_same_text_and_voice_again_is_a_cache_hit_with_the_same_audio(
    gateway: GatewayProcess, admin: Admin, transport: Transport
) -> None:
    _, key = new_tenant(admin)
    text = f"Said twice over {transport.name} {uuid.uuid4().hex[:6]}"
    hits_before = metric(gateway, "tts_cache_requests_total", result="hit")
    first = await transport.speak(gateway, key, model="tones", voice="echo", text=text)
    await usage_after(gateway, key, 1)  # the first is complete, and so cached
    second = await transport.speak(gateway, key, model="tones", voice="echo", text=text)

    assert_tone(first, text, voice_frequency("echo"))
    assert second.audio == first.audio
    if transport.name == "http":
        assert (first.headers["x-cache"], second.headers["x-cache"]) == ("miss", "hit")
    assert metric(gateway, "tts_cache_requests_total", result="hit") == hits_before + 1
    assert (await usage_after(gateway, key, 2))["cache_hits"] == 1


@by_transport
async def test_cancelling_after_the_first_audio_stops_the_job_and_counts_what_was_heard(
    gateway: GatewayProcess, admin: Admin, transport: Transport
) -> None:
    _, key = new_tenant(admin)
    text = f"{LONG_TEXT} over {transport.name}"
    spoken = await transport.speak_and_cancel_after_first_audio(gateway, key, model="paced", voice="alloy", text=text)
    engine = await asyncio.to_thread(gateway.wait_engine, "paced", 1.0, active_jobs=0, queued=0)

    assert (spoken.outcome, spoken.error) == ("cancelled", None), spoken
    assert engine["active_jobs"] == 0
    used = await usage_after(gateway, key, 1)
    assert (used["requests"], used["input_characters"]) == (1, len(text))
    full_s = len(text) * PACED_SECONDS_PER_CHAR
    assert 0 < spoken.seconds <= used["audio_seconds"] < full_s / 4, (spoken.seconds, used)
    assert used["audio_seconds"] == pytest.approx(spoken.seconds, abs=0.5)


@by_transport
async def test_a_custom_voice_is_heard_by_its_id(gateway: GatewayProcess, admin: Admin, transport: Transport) -> None:
    _, key = new_tenant(admin)
    made = httpx.post(
        f"{gateway.base_url}/v1/audio/voices",
        json={"name": "seeded", "model": "tones", "seed": 7},
        headers=bearer(key),
        timeout=10,
    )
    assert made.status_code == 201, made.text
    text = f"A voice of my own over {transport.name}"
    spoken = await transport.speak(gateway, key, model="tones", voice={"id": made.json()["id"]}, text=text)

    assert_tone(spoken, text, voice_frequency("", "seed:7"))


@by_transport
@pytest.mark.parametrize("alias", ["after-unready", "after-broken"])
async def test_an_alias_whose_first_engine_cannot_speak_is_answered_by_the_next(
    gateway: GatewayProcess, admin: Admin, transport: Transport, alias: str
) -> None:
    _, key = new_tenant(admin)
    fallbacks_before = metric(gateway, "tts_alias_fallbacks_total", alias=alias, engine="backup")
    text = f"Answered {alias} over {transport.name}"
    spoken = await transport.speak(gateway, key, model=alias, voice="coral", text=text)

    assert_tone(spoken, text, voice_frequency("coral"), BACKUP_SECONDS_PER_CHAR)
    if transport.name == "http":
        assert spoken.headers["x-engine"] == "backup"
    assert metric(gateway, "tts_alias_fallbacks_total", alias=alias, engine="backup") == fallbacks_before + 1


@by_transport
async def test_a_front_serves_from_the_engine_node_with_the_tenant_carried_across(
    gateways: Gateways, admin: Admin, transport: Transport
) -> None:
    tenant, key = new_tenant(admin)
    text = f"Spoken on the node for a front over {transport.name}"
    spoken = await transport.speak(gateways.gateway, key, model="remote", voice="shimmer", text=text)

    assert_tone(spoken, text, voice_frequency("shimmer"))
    if transport.name == "http":
        assert spoken.headers["x-engine"] == "remote"
    node = gateways.node  # the node scheduled, and counted, the job as the tenant's
    assert metric(node, "tts_engine_queue_wait_seconds_count", NODE_AUTH, engine="tones", tenant=tenant) == 1
    assert metric(node, "tts_tenant_requests_total", NODE_AUTH, tenant=tenant) == 1


@by_transport
async def test_a_text_of_a_break_alone_is_that_much_silence_and_no_engine_job(
    gateway: GatewayProcess, admin: Admin, transport: Transport
) -> None:
    """Never read aloud as markup; charged the characters sent; the engine is not asked to say nothing. Break tags are
    read as such on ElevenLabs' transports, SSML on the others (docs/ssml.md)."""
    tenant, key = new_tenant(admin)
    text = '<break time="1s"/>' if transport.name.startswith("elevenlabs") else '<speak><break time="1s"/></speak>'
    spoken = await transport.speak(gateway, key, model="tones", voice="nova", text=text)

    assert (spoken.outcome, spoken.error) == ("completed", None), spoken
    audio = decode_audio(spoken.audio, "pcm")
    assert audio.duration == pytest.approx(1.0, abs=0.01)
    assert not spoken.audio.strip(b"\0")
    used = await usage_after(gateway, key, 1)
    assert (used["requests"], used["input_characters"]) == (1, len(text))
    assert used["audio_seconds"] == pytest.approx(1.0, abs=0.01)
    assert metric(gateway, "tts_engine_queue_wait_seconds_count", engine="tones", tenant=tenant) == 0
