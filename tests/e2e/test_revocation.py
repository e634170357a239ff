"""Revocation and deletion that hold, bounds that hold, and a drain that lets speech finish — against real processes.

Two gateway replicas share one real redis-server: what is revoked on one must end what the other holds open.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import socket
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.uri import parse_uri

from harness.gateway_process import GatewayProcess
from tests.realtime_client import Session, open_connections
from tests.starting import start_together, stop_together
from tests.tenancy import ADMIN_TOKEN, Admin
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from openai.resources.realtime.realtime import AsyncRealtimeConnection
    from openai.types.realtime import RealtimeResponseCreateParamsParam

    from tests.redis_server import RedisServer

MAX_VOICES = 3
MAX_SPEAKER_CHARS = 1000
MAX_PENDING_CHARS = 400
SECONDS_PER_CHAR = 0.05  # the paced engine: real time, so that a segment is still being spoken when we act


def config(redis_url: str | None, **server: Any) -> dict[str, Any]:
    return {
        **({"redis_url": redis_url} if redis_url else {}),
        "server": {"send_timeout_s": 2.0, **server},
        "limits": {"fail_mode": "open"},
        "auth": {"admin_token": ADMIN_TOKEN, "tenants": [{"name": "seeded"}]},
        "voices": {"max_per_tenant": MAX_VOICES, "max_speaker_chars": MAX_SPEAKER_CHARS},
        "realtime": {"max_pending_chars": MAX_PENDING_CHARS},
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.02}},
            "paced": {"kind": "synthetic", "workers": 2, "options": {"rtf": 1.0, "seconds_per_char": SECONDS_PER_CHAR}},
            # Long audio made at full speed: more than any socket buffer holds, for the client that never reads.
            "long": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 1.0, "chunk_ms": 500}},
        },
        "aliases": {"tts-1": ["tones"]},
    }


def start_all(processes: list[GatewayProcess]) -> list[GatewayProcess]:
    start_together(processes)
    return processes


@pytest.fixture(scope="module")
def replicas(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    redis_server.flush()
    processes = start_all(
        [GatewayProcess(config(redis_server.url), tmp_path_factory.mktemp(f"replica{i}")) for i in range(2)]
    )
    yield processes
    stop_together(processes)


@pytest.fixture(scope="module")
def admin(replicas: list[GatewayProcess]) -> Iterator[Admin]:
    client = Admin(replicas[0].base_url)
    yield client
    client.close()


def ws_url(replica: GatewayProcess) -> str:
    return replica.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"


@pytest.fixture
async def open_session() -> AsyncIterator[Any]:
    sockets: list[ClientConnection] = []

    async def open_(replica: GatewayProcess, key: str, **session: Any) -> Session:
        socket_ = await connect(ws_url(replica), additional_headers={"Authorization": f"Bearer {key}"})
        sockets.append(socket_)
        opened = Session(socket_)
        await opened.next("session.created")
        if session:
            await opened.send(type="session.update", session=session)
            await opened.next("session.updated")
        return opened

    yield open_
    for socket_ in sockets:
        await socket_.close()


async def speaking(session: Session, text: str = "This sentence keeps the session busy for a while.") -> None:
    """Start a segment on the paced engine and wait until its audio flows."""
    await session.send(type="input.append", text=text)
    await session.send(type="input.flush")
    await session.next("audio.delta")


async def closed_code(session: Session, timeout_s: float) -> int:
    """Read until the server closes the socket; the close code it sent."""
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(timeout_s):
            while True:
                session.events.append((time.perf_counter(), json.loads(await session.socket.recv())))
    assert closed.value.rcvd is not None, "the server did not send a close frame"
    return closed.value.rcvd.code


def speak(replica: GatewayProcess, key: str, text: str = "hello") -> httpx.Response:
    body = {"model": "tones", "input": text, "voice": "alloy", "response_format": "pcm"}
    return httpx.post(
        f"{replica.base_url}/v1/audio/speech", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30
    )


def get(replica: GatewayProcess, path: str, key: str) -> httpx.Response:
    return httpx.get(f"{replica.base_url}{path}", headers={"authorization": f"Bearer {key}"}, timeout=10)


def create_voice(replica: GatewayProcess, key: str, **body: Any) -> httpx.Response:
    body = {"name": f"v-{uuid.uuid4().hex[:8]}", "model": "tones", "seed": 7, **body}
    return httpx.post(
        f"{replica.base_url}/v1/audio/voices", json=body, headers={"authorization": f"Bearer {key}"}, timeout=10
    )


def openai_realtime(replica: GatewayProcess, key: str) -> openai.AsyncOpenAI:
    """The official SDK, for OpenAI's Realtime API on ``/v1/realtime``."""
    websocket_base = replica.base_url.replace("http://", "ws://") + "/v1"
    return openai.AsyncOpenAI(api_key=key, base_url=f"{replica.base_url}/v1", websocket_base_url=websocket_base)


def out_of_band(text: str) -> RealtimeResponseCreateParamsParam:
    return {
        "conversation": "none",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
    }


async def responding(connection: AsyncRealtimeConnection, text: str) -> list[dict[str, Any]]:
    """Start a response on the paced engine; its events until its audio flows."""
    await connection.response.create(response=out_of_band(text))
    received = [(await connection.recv()).model_dump(mode="json")]
    while received[-1]["type"] != "response.output_audio.delta":
        received.append((await connection.recv()).model_dump(mode="json"))
    return received


async def openai_closed_code(
    connection: AsyncRealtimeConnection, received: list[dict[str, Any]], timeout_s: float
) -> int:
    """Read events into ``received`` until the server closes the socket; the close code it sent."""
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(timeout_s):
            while True:
                received.append((await connection.recv()).model_dump(mode="json"))
    assert closed.value.rcvd is not None, "the server did not send a close frame"
    return closed.value.rcvd.code


# ------------------------------------------------------------------ revocation reaches open sessions
async def test_a_revoked_keys_open_socket_closes_within_a_second_on_the_other_replica(
    replicas: list[GatewayProcess],
    admin: Admin,
    open_session: Any,
) -> None:
    tenant = admin.tenant()
    revoked, kept = admin.key(tenant), admin.key(tenant)
    doomed = await open_session(replicas[1], revoked["key"], model="paced")
    survivor = await open_session(replicas[1], kept["key"], model="paced")
    await speaking(doomed)
    counted = replicas[1].refusals()[("socket", 401, "api_key_revoked")]
    admin.revoke(revoked)  # on the other replica
    revoked_at = time.perf_counter()
    assert await closed_code(doomed, timeout_s=5.0) == 1008
    assert time.perf_counter() - revoked_at < 1.0
    assert [event["error"]["code"] for event in doomed.of("error")] == ["api_key_revoked"]
    assert replicas[1].refusals()[("socket", 401, "api_key_revoked")] == counted + 1  # a refusal of the socket's
    # The tenant's other key still holds its session.
    await survivor.send(type="session.update", session={"voice": "echo"})
    await survivor.next("session.updated")


async def test_a_revoked_keys_openai_realtime_session_closes_within_a_second(
    replicas: list[GatewayProcess],
    admin: Admin,
) -> None:
    revoked = admin.key(admin.tenant())
    async with openai_realtime(replicas[1], revoked["key"]).realtime.connect(model="paced") as connection:
        received = await responding(connection, "This sentence keeps the session busy for a while.")
        admin.revoke(revoked)  # on the other replica
        revoked_at = time.perf_counter()
        code = await openai_closed_code(connection, received, timeout_s=5.0)
        closed_in = time.perf_counter() - revoked_at
    assert code == 1008
    assert closed_in < 1.0
    assert [event["error"]["code"] for event in received if event["type"] == "error"] == ["api_key_revoked"]


async def test_deleting_a_tenant_closes_its_sockets_on_every_replica(
    replicas: list[GatewayProcess],
    admin: Admin,
    open_session: Any,
) -> None:
    tenant = admin.tenant()
    key = admin.key(tenant)["key"]
    sessions = [await open_session(replica, key) for replica in replicas]
    admin.delete_tenant(tenant)
    deleted_at = time.perf_counter()
    codes = await asyncio.gather(*(closed_code(session, timeout_s=5.0) for session in sessions))
    assert codes == [1008, 1008]
    assert time.perf_counter() - deleted_at < 1.0
    for session in sessions:
        assert [event["error"]["code"] for event in session.of("error")] == ["tenant_deleted"]


# ------------------------------------------------------------------ deletion leaves nothing to the next tenant
def test_a_tenant_created_again_under_a_deleted_name_starts_empty(
    replicas: list[GatewayProcess],
    admin: Admin,
) -> None:
    name = admin.tenant()
    key = admin.key(name)["key"]
    text = f"remember me {uuid.uuid4().hex}"
    assert create_voice(replicas[0], key, name="mine").status_code == 201
    assert speak(replicas[0], key, text).headers["x-cache"] == "miss"
    assert speak(replicas[1], key, text).headers["x-cache"] == "hit"
    admin.delete_tenant(name)
    admin.tenant(name)
    fresh = admin.key(name)["key"]
    assert not [v for v in get(replicas[1], "/v1/audio/voices", fresh).json()["data"] if v["custom"]]
    usage = get(replicas[1], "/v1/usage", fresh).json()
    assert (usage["requests"], usage["input_characters"], usage["cache_hits"]) == (0, 0, 0)
    assert speak(replicas[1], fresh, text).headers["x-cache"] == "miss"
    assert speak(replicas[0], key, text).status_code == 401  # the old key died with the old tenant


# ------------------------------------------------------------------ custom voices are bounded and counted
def test_creating_voices_counts_against_requests_per_minute(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant(requests_per_minute=2))["key"]
    assert create_voice(replicas[0], key).status_code == 201
    assert create_voice(replicas[1], key).status_code == 201
    refused = create_voice(replicas[0], key)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    assert speak(replicas[1], key).status_code == 429  # the same budget as speech
    usage = get(replicas[0], "/v1/usage", key).json()
    assert usage["rejections"]["requests"] >= 2


def test_a_tenant_may_keep_only_so_many_voices(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant())["key"]
    created = [create_voice(replicas[i % 2], key) for i in range(MAX_VOICES)]
    assert [response.status_code for response in created] == [201] * MAX_VOICES
    refused = create_voice(replicas[1], key)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "voice_limit_reached"
    voice_id = created[0].json()["id"]
    deleted = httpx.delete(
        f"{replicas[0].base_url}/v1/audio/voices/{voice_id}", headers={"authorization": f"Bearer {key}"}, timeout=10
    )
    assert deleted.status_code == 200
    assert create_voice(replicas[1], key).status_code == 201  # room again


def test_a_speaker_over_the_size_limit_is_refused(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant())["key"]
    refused = create_voice(replicas[0], key, seed=None, speaker="x" * (MAX_SPEAKER_CHARS + 1))
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "message": refused.json()["error"]["message"],
        "type": "invalid_request_error",
        "param": "speaker",
        "code": "string_above_max_length",
    }
    assert create_voice(replicas[0], key, seed=None, speaker="x" * MAX_SPEAKER_CHARS).status_code == 201


# ------------------------------------------------------------------ realtime sessions hold bounded text
async def test_queued_segments_count_against_the_pending_text_bound(
    replicas: list[GatewayProcess],
    admin: Admin,
    open_session: Any,
) -> None:
    session = await open_session(replicas[0], admin.key(admin.tenant())["key"], model="paced")
    sentence = "One more short sentence to speak. "  # 34 characters: each append is cut into a segment at once
    refused_at = None
    for number in range(2 * MAX_PENDING_CHARS // len(sentence)):
        await session.send(type="input.append", text=sentence, event_id=f"append-{number}")
        await session.send(type="input.flush")
    while refused_at is None:
        error = await session.next("error")
        assert error["error"]["code"] == "input_buffer_full", error
        refused_at = int(error["event_id"].removeprefix("append-"))
    # Refused once the queue held about max_pending_chars (the segment being spoken is not queued any more).
    assert (refused_at - 1) * len(sentence) <= MAX_PENDING_CHARS + len(sentence)
    await session.send(type="response.cancel")  # the bound frees as the queue empties
    await session.send(type="input.append", text=sentence, event_id="after-cancel")
    await session.send(type="input.flush")
    done = await session.next("audio.done", timeout_s=20.0)
    while done["text"] != sentence.strip() or done["status"] != "completed":
        done = await session.next("audio.done", timeout_s=20.0)
    assert not [e for e in session.of("error") if e.get("event_id") == "after-cancel"]


def rss_bytes(process: GatewayProcess) -> int:
    assert process.process is not None
    with Path(f"/proc/{process.process.pid}/status").open() as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


async def test_a_client_that_appends_and_never_reads_is_bounded_and_disconnected(
    replicas: list[GatewayProcess],
    admin: Admin,
) -> None:
    replica = replicas[0]
    key = admin.key(admin.tenant())["key"]
    before = rss_bytes(replica)
    # 4,000 appends of ten whole sentences each (each append is segmented at once, so the text not yet segmented
    # stays near zero), never reading: 1.56 M characters offered, which an unbounded queue would keep.
    text = "Another sentence arrives without end. " * 10
    messages: list[dict[str, Any]] = [
        {"type": "session.update", "session": {"model": "long"}},
        *({"type": "input.append", "text": text} for _ in range(4000)),
    ]
    sending = asyncio.create_task(asyncio.to_thread(send_without_reading, replica, key, messages))
    peak = before
    deadline = time.perf_counter() + 15.0  # send_timeout_s after the socket filled up with audio, and a margin
    while not sending.done() or await asyncio.to_thread(open_connections, replica) > 0:
        peak = max(peak, rss_bytes(replica))
        assert time.perf_counter() < deadline, "the session was not closed"
        await asyncio.sleep(0.02)
    (await sending).close()
    # Measured on this 2-core machine: 3.4 MiB with the bound; 16.4 MiB when queued segments were not counted.
    assert peak - before < 8 * 1024 * 1024


async def test_a_client_too_slow_to_read_its_audio_is_closed_and_counted(
    replicas: list[GatewayProcess],
    admin: Admin,
) -> None:
    """A session whose client stops reading is closed (1008) once a send has waited ``server.send_timeout_s``, and the
    close is counted among the socket's refusals (``/metrics``)."""
    replica = replicas[0]
    key = admin.key(admin.tenant())["key"]
    counted = replica.refusals()[("socket", 400, "client_too_slow")]
    messages: list[dict[str, Any]] = [
        {"type": "session.update", "session": {"model": "long"}},  # far more audio than the buffers on the way hold
        # 266 characters, a second of audio each: 12.8 MB of PCM, more than the kernel's socket buffers take.
        {"type": "input.append", "text": "Another sentence arrives without end. " * 7},
        {"type": "input.flush"},
    ]
    raw = await asyncio.to_thread(send_without_reading, replica, key, messages)
    with raw:
        deadline = time.perf_counter() + 20.0  # send_timeout_s (2 s) once the buffers filled, and a margin
        while replica.refusals()[("socket", 400, "client_too_slow")] == counted:
            assert time.perf_counter() < deadline, "the client that never read was not closed as too slow"
            await asyncio.sleep(0.2)
    assert replica.refusals()[("socket", 400, "client_too_slow")] == counted + 1


def send_without_reading(replica: GatewayProcess, key: str, messages: list[dict[str, Any]]) -> socket.socket:
    """A WebSocket client that sends what the server will take and never reads (a small, fixed receive buffer).

    Once the server stops reading (its refusals cannot be delivered), the rest is dropped.
    """
    protocol = ClientProtocol(parse_uri(ws_url(replica)))
    request = protocol.connect()
    request.headers["Authorization"] = f"Bearer {key}"
    protocol.send_request(request)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    raw.settimeout(2.0)
    raw.connect(("127.0.0.1", replica.port))
    raw.sendall(b"".join(protocol.data_to_send()))
    protocol.receive_data(raw.recv(4096))  # the handshake's answer
    assert protocol.handshake_exc is None
    for message in messages:
        protocol.send_text(json.dumps(message).encode())
        try:
            raw.sendall(b"".join(protocol.data_to_send()))
        except TimeoutError:
            break  # the server stopped reading: the bound holds
    return raw


# ------------------------------------------------------------------ a Redis outage does not bring revoked keys back
@pytest.fixture
def outage_replicas(
    outage_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[GatewayProcess]]:
    processes = start_all(
        [GatewayProcess(config(outage_redis.url), tmp_path_factory.mktemp(f"outage{i}")) for i in range(2)]
    )
    yield processes
    stop_together(processes)


def test_during_an_outage_a_replica_refuses_what_it_learned_was_revoked(
    outage_replicas: list[GatewayProcess],
    outage_redis: RedisServer,
) -> None:
    first, second = outage_replicas
    admin = Admin(first.base_url)
    try:
        tenant, doomed_tenant = admin.tenant(), admin.tenant()
        revoked, valid, orphan = admin.key(tenant), admin.key(tenant), admin.key(doomed_tenant)
        for key in (revoked, valid, orphan):
            assert speak(second, key["key"]).status_code == 200  # the second replica has served all three
        admin.revoke(revoked)
        admin.delete_tenant(doomed_tenant)
    finally:
        admin.close()
    outage_redis.stop()
    try:
        # The second replica heard of both through the revocation channel, before the outage began.
        assert speak(second, revoked["key"]).status_code == 401
        assert speak(second, orphan["key"]).status_code == 401
        assert speak(second, valid["key"]).status_code == 200  # fail-open still serves what is valid
    finally:
        outage_redis.start()


# ------------------------------------------------------------------ SIGTERM drains realtime sessions
@pytest.fixture
def lone_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(config(None, shutdown_grace_s=10), tmp_path_factory.mktemp("drain")).start()
    yield process
    process.stop()


async def test_sigterm_lets_the_segment_being_spoken_finish_then_closes_with_1012(
    lone_gateway: GatewayProcess,
) -> None:
    admin = Admin(lone_gateway.base_url)
    key = admin.key("seeded")["key"]
    admin.close()
    first = "This sentence takes two seconds to say."
    async with connect(ws_url(lone_gateway), additional_headers={"Authorization": f"Bearer {key}"}) as socket_:
        session = Session(socket_)
        await session.send(type="session.update", session={"model": "paced"})
        await session.next("session.updated")
        await session.send(type="input.append", text=f"{first} And this one waits in the queue.")
        await session.send(type="input.flush")
        await session.next("audio.delta")
        assert lone_gateway.process is not None
        lone_gateway.process.send_signal(signal.SIGTERM)
        notice = await session.next("error")
        assert notice["error"]["code"] == "server_shutting_down"
        await session.send(type="input.append", text="Too late.", event_id="late")
        code = await closed_code(session, timeout_s=10.0)
    assert code == 1012
    late = [e for e in session.of("error") if e.get("event_id") == "late"]
    assert late and late[0]["error"]["code"] == "server_shutting_down"
    done = session.of("audio.done")
    assert [(d["text"], d["status"]) for d in done] == [
        (first, "completed"),
        ("And this one waits in the queue.", "cancelled"),
    ]
    spoken = sum(len(base64.b64decode(e["audio"])) for e in session.of("audio.delta") if e["segment_id"] == "seg_1")
    assert spoken / 48_000 == pytest.approx(len(first) * SECONDS_PER_CHAR, abs=0.1)  # pcm: 24 kHz, 16-bit
    assert lone_gateway.process.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it caught


def refuses_connections(replica: GatewayProcess) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", replica.port)) != 0


async def test_sigterm_lets_an_openai_realtime_response_finish_then_closes_with_1012(
    lone_gateway: GatewayProcess,
) -> None:
    admin = Admin(lone_gateway.base_url)
    key = admin.key("seeded")["key"]
    admin.close()
    text = "This sentence takes two seconds to say."
    async with openai_realtime(lone_gateway, key).realtime.connect(model="paced") as connection:
        received = await responding(connection, text)
        assert lone_gateway.process is not None
        lone_gateway.process.send_signal(signal.SIGTERM)
        # The listener closes as the drain begins (OpenAI's protocol has no event that says so).
        await asyncio.to_thread(wait_until, lambda: refuses_connections(lone_gateway), 5.0, "the drain beginning")
        await connection.response.create(response=out_of_band("Too late."), event_id="late")
        code = await openai_closed_code(connection, received, timeout_s=10.0)
    assert code == 1012
    errors = [event["error"] for event in received if event["type"] == "error"]  # OpenAI's: the client's id inside
    assert [(error["event_id"], error["code"]) for error in errors] == [("late", "server_shutting_down")]
    done = [event["response"] for event in received if event["type"] == "response.done"]
    assert [(response["status"], response["output"][0]["content"][0]["transcript"]) for response in done] == [
        ("completed", text)
    ]
    audio = b"".join(base64.b64decode(e["delta"]) for e in received if e["type"] == "response.output_audio.delta")
    assert len(audio) / 48_000 == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.1)  # pcm: 24 kHz, 16-bit
    assert lone_gateway.process.wait(15) in (0, -signal.SIGTERM)
