"""``unless_client_leaves``: the work is cancelled when the client disconnects, and only then; and a streaming
speech response releases its synthesis however the client left (the running speech route:
``tests/e2e/test_client_gone.py``)."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.http.disconnect import unless_client_leaves
from gateway.http.errors import CLIENT_CLOSED_REQUEST, as_openai_error
from gateway.http.refusals import ClientClosedError
from gateway.state import gateway_state
from tests.inprocess import in_process_app
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar.types import Message, ReceiveMessage, Scope

LONGER_THAN_THE_GRACE_S = 0.2


class ClientChannel:
    """An ASGI ``receive`` after the body: it returns what is put in, and notes when a call is cancelled."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[ReceiveMessage] = asyncio.Queue()
        self.calls = 0
        self.cancelled_calls = 0

    async def receive(self) -> ReceiveMessage:
        self.calls += 1
        try:
            return await self.messages.get()
        except asyncio.CancelledError:
            self.cancelled_calls += 1
            raise

    def disconnect(self) -> None:
        self.messages.put_nowait({"type": "http.disconnect"})


async def answer_after(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "audio"


async def test_the_result_comes_back_and_the_pending_receive_is_cancelled() -> None:
    channel = ClientChannel()
    assert await unless_client_leaves(channel.receive, answer_after(LONGER_THAN_THE_GRACE_S)) == "audio"
    await asyncio.sleep(0)  # the watcher's cancellation reaches its receive
    assert (channel.calls, channel.cancelled_calls) == (1, 1)
    assert channel.messages.empty()


async def test_work_done_within_the_grace_never_watches() -> None:
    channel = ClientChannel()
    assert await unless_client_leaves(channel.receive, answer_after(0)) == "audio"
    await asyncio.sleep(LONGER_THAN_THE_GRACE_S)
    assert channel.calls == 0


async def test_a_disconnect_cancels_the_work_after_its_cleanup_and_raises_499() -> None:
    channel = ClientChannel()
    channel.messages.put_nowait({"type": "http.request", "body": b"", "more_body": False})  # not a disconnect
    cleaned_up = asyncio.Event()

    async def wait_for_ever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.01)  # a cleanup that awaits: it must run to its end
            cleaned_up.set()

    loop = asyncio.get_running_loop()
    loop.call_later(LONGER_THAN_THE_GRACE_S, channel.disconnect)
    with pytest.raises(ClientClosedError) as raised:
        await unless_client_leaves(channel.receive, wait_for_ever())
    answer = as_openai_error(raised.value)
    assert (answer.status_code, answer.code) == (CLIENT_CLOSED_REQUEST, "client_closed_request")
    assert cleaned_up.is_set()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cancellation is taken back: the task goes on normally


async def test_a_receive_that_fails_counts_as_a_disconnect(caplog: pytest.LogCaptureFixture) -> None:
    """Another ASGI server may raise from ``receive`` once the connection is gone: the work is freed, the failure
    is not left unretrieved in the watcher's task (asyncio would log it as an error when the task is collected)."""

    async def receive() -> ReceiveMessage:
        raise OSError("connection reset")

    with caplog.at_level("DEBUG", "chattts_gateway.connections"), pytest.raises(ClientClosedError) as raised:
        await unless_client_leaves(receive, answer_after(10))
    assert raised.value.kind == "client_closed_request"
    assert "OSError" in caplog.text
    assert "connection reset" not in caplog.text  # the type only: a message may carry what a log must not


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    channel = ClientChannel()
    serving = asyncio.create_task(unless_client_leaves(channel.receive, answer_after(10)))
    await asyncio.sleep(LONGER_THAN_THE_GRACE_S)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    await asyncio.sleep(0)
    assert channel.cancelled_calls == 1


async def test_the_works_own_timeout_is_not_mistaken_for_a_disconnect() -> None:
    async def time_out() -> None:
        async with asyncio.timeout(LONGER_THAN_THE_GRACE_S):
            await asyncio.sleep(10)

    with pytest.raises(TimeoutError):
        await unless_client_leaves(ClientChannel().receive, time_out())


# ------------------------------------------------------------------------------- the streaming speech response
PACED: dict[str, Any] = {
    "engines": {"chattts": None, "paced": {"kind": "synthetic", "options": {"seconds_per_char": 0.05, "rtf": 1.0}}},
}


def speech_scope(body: bytes) -> Scope:
    headers = [(b"host", b"gateway"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/audio/speech",
        "raw_path": b"/v1/audio/speech",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    return scope  # type: ignore[return-value]


class StalledSocket:
    """A client whose socket stops draining after the first audio and which then hangs up: the response's next
    ``send`` waits for ever, and the disconnect cancels the response there, outside the audio iterator."""

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.gone = asyncio.Event()
        self.status = 0
        self.wrote_audio = False

    async def receive(self) -> ReceiveMessage:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif self.wrote_audio:
            self.gone.set()  # the client hangs up while this write waits
            await asyncio.Event().wait()  # the socket never drains
        self.wrote_audio = message["type"] == "http.response.body"


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
async def test_a_client_gone_during_a_write_frees_the_engine(stream_format: str) -> None:
    app = in_process_app(PACED)
    async with AsyncTestClient(app=app):
        pool = gateway_state(app).router.pools["paced"]
        request = {"model": "paced", "input": "word " * 200, "voice": "alloy", "stream_format": stream_format}
        client = StalledSocket(json.dumps(request).encode())
        gc.disable()  # the release must not wait for a collection to find the suspended iterator
        try:
            await asyncio.wait_for(app(speech_scope(client.body or b""), client.receive, client.send), 10)
            assert client.status == 200
            # 50 s of speech at the pace of speaking: the job runs on unless the response released it.
            await wait_for(lambda: pool.status().active_jobs == 0, 5, "the engine job ended")
        finally:
            gc.enable()


SECONDS_PER_CHAR = 0.02
FAST: dict[str, Any] = {
    "engines": {"chattts": None, "tones": {"kind": "synthetic", "options": {"seconds_per_char": SECONDS_PER_CHAR}}}
}


class ReaderGoneOnceAllWasMade(StalledSocket):
    """A client that takes the first piece of audio, then stops reading until the synthesis has made all of it
    (it ran ahead of the client), then hangs up."""

    def __init__(self, body: bytes, made: Callable[[], bool]) -> None:
        super().__init__(body)
        self.made = made
        self.received = 0

    async def send(self, message: Message) -> None:
        if self.wrote_audio:
            await wait_for(self.made, 5, "the synthesis made all of its audio")
        elif message["type"] == "http.response.body":
            self.received += len(message["body"])
        await super().send(message)


async def test_a_client_gone_mid_stream_is_charged_what_it_was_sent_not_what_was_made() -> None:
    app = in_process_app(FAST)
    async with AsyncTestClient(app=app) as http:
        speech = gateway_state(app).speech
        text = "word " * 100
        body = json.dumps({"model": "tones", "input": text, "voice": "alloy", "response_format": "pcm"}).encode()
        client = ReaderGoneOnceAllWasMade(body, lambda: speech.flights.in_flight == 0)
        await asyncio.wait_for(app(speech_scope(body), client.receive, client.send), 10)
        used = (await http.get("/v1/usage")).json()

    received_s = client.received / (2 * 24000)
    made_s = len(text.strip()) * SECONDS_PER_CHAR
    assert used["requests"] == 1
    # The piece it received, and the next one, which its response took and was sending when it left.
    assert received_s <= used["audio_seconds"] <= received_s + 0.25 < made_s, (received_s, used)
