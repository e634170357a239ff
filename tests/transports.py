"""One way to speak, seven transports: ``POST /v1/audio/speech`` (httpx), the stream WebSocket
``/v1/audio/speech/stream`` (``websockets``), OpenAI's Realtime API on ``/v1/realtime`` (the official SDK),
ElevenLabs' ``POST /v1/text-to-speech/{voice_id}/stream`` (the official ``elevenlabs`` SDK) and its
``/v1/text-to-speech/{voice_id}/stream-input`` WebSocket (``websockets``, as the SDK's ``convert_realtime`` speaks it;
the multi-context socket is the same session), and its Text-to-Dialogue ``multi-stream-input`` WebSocket (a dialect on
that session), and vLLM-Omni's dialect of the stream WebSocket.

Each asks a real gateway for 24 kHz PCM and reports what a client of it sees, so that one test can state a rule of the
speech pipeline once and check it on every transport. A module, not a test module: test modules import from here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import httpx
import openai
from elevenlabs import AsyncElevenLabs
from elevenlabs.core.api_error import ApiError
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

if TYPE_CHECKING:
    from openai.resources.realtime.realtime import AsyncRealtimeConnection
    from openai.types.realtime import RealtimeResponseCreateParamsParam, RealtimeSessionCreateRequestParam
    from openai.types.realtime.realtime_audio_config_output_param import Voice as RealtimeVoice
    from websockets.asyncio.client import ClientConnection

    from harness.gateway_process import GatewayProcess

__all__ = ["TRANSPORTS", "Outcome", "Spoken", "Transport", "Voice"]

Voice: TypeAlias = "str | dict[str, str]"
"""A built-in voice's name, or ``{"id": "voice_..."}`` for a custom one."""
Outcome: TypeAlias = Literal["completed", "cancelled", "failed"]
_TIMEOUT_S = 20.0


@dataclass
class Spoken:
    """What one client heard and was told."""

    outcome: Outcome
    audio: bytes
    """The PCM received (24 kHz, 16-bit, mono): the whole clip, or what came before the cancellation."""
    error: str | None = None
    """The code of the error the server reported (an HTTP error body, or the first ``error`` event); vLLM-Omni's
    events have no code: its message."""
    status_code: int | None = None
    """HTTP transports only (``http``, ``elevenlabs``): the response's status."""
    headers: dict[str, str] = field(default_factory=dict)
    """HTTP transports only: the response's headers."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """WebSockets only: the server's events after the session's settings were accepted."""
    message: str | None = None
    """The first error's message, as the client was told it."""
    close_code: int | None = None
    """WebSockets but OpenAI's Realtime (its SDK keeps it): the close code the server sent, or answered the client's
    close with (``None``: refused at the handshake)."""

    @property
    def seconds(self) -> float:
        return len(self.audio) / 48_000

    def __repr__(self) -> str:  # what a failed assertion shows: no audio, and the events by type
        kinds = [str(event.get("type", sorted(event))) for event in self.events]
        kinds = [kind for kind in kinds if not kind.endswith("audio.delta")]
        closed = f", closed {self.close_code}" if self.close_code is not None else ""
        return (
            f"Spoken({self.outcome}, error={self.error}, status={self.status_code}{closed}, {self.seconds:.2f} s, "
            f"{kinds}, message={self.message!r})"
        )


class Transport(Protocol):
    """A client of one of the gateway's speech transports."""

    name: str

    async def speak(self, gateway: GatewayProcess, key: str, *, model: str, voice: Voice, text: str) -> Spoken:
        """Ask for ``text`` as PCM and take all of it."""
        ...

    async def speak_and_cancel_after_first_audio(
        self, gateway: GatewayProcess, key: str, *, model: str, voice: Voice, text: str
    ) -> Spoken:
        """Ask for ``text``, and stop it the way this transport does as soon as the first audio arrives."""
        ...


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class _Client:
    """:class:`Transport`'s two operations as one, ``_speak``, which each transport implements."""

    name: str

    async def speak(self, gateway: GatewayProcess, key: str, *, model: str, voice: Voice, text: str) -> Spoken:
        return await self._speak(gateway, key, model, voice, text, cancel=False)

    async def speak_and_cancel_after_first_audio(
        self, gateway: GatewayProcess, key: str, *, model: str, voice: Voice, text: str
    ) -> Spoken:
        return await self._speak(gateway, key, model, voice, text, cancel=True)

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        raise NotImplementedError


class Http(_Client):
    """``POST /v1/audio/speech``; cancelling is hanging up after the first bytes."""

    name = "http"

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        body = {"model": model, "voice": voice, "input": text, "response_format": "pcm"}
        async with (
            httpx.AsyncClient(base_url=gateway.base_url, headers=_auth(key), timeout=_TIMEOUT_S) as http,
            http.stream("POST", "/v1/audio/speech", json=body) as response,
        ):
            headers, status = dict(response.headers), response.status_code
            if status != 200:
                error = json.loads(await response.aread())["error"]
                return Spoken("failed", b"", error["code"], status, headers, message=error["message"])
            if cancel:
                first = await anext(response.aiter_raw())
                return Spoken("cancelled", first, None, status, headers)  # leaving the block hangs up
            return Spoken("completed", await response.aread(), None, status, headers)


class StreamSocket(_Client):
    """``/v1/audio/speech/stream``: ``session.update``, ``input.append`` and ``input.flush``, then
    ``session.close`` (or ``response.cancel`` after the first ``audio.delta``)."""

    name = "stream"

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        async with connect(url, additional_headers=_auth(key)) as socket, asyncio.timeout(_TIMEOUT_S):
            events = await self._session(socket, model, voice, text, cancel=cancel)
        return _stream_spoken(events, socket.close_code)  # the client's close waited for the server's answer

    @staticmethod
    async def _session(
        socket: ClientConnection, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> list[dict[str, Any]]:
        """The session's events: the error alone when its settings were refused (or the session was)."""
        await _send(socket, type="session.update", session={"model": model, "voice": voice, "response_format": "pcm"})
        while (event := json.loads(await socket.recv()))["type"] != "session.updated":
            if event["type"] == "error":
                return [event]
        await _send(socket, type="input.append", text=text)
        await _send(socket, type="input.flush")
        if not cancel:
            await _send(socket, type="session.close")
        events: list[dict[str, Any]] = []
        with contextlib.suppress(ConnectionClosedError):  # a close other than 1000: its code is the caller's to read
            async for message in socket:  # until the server closes the session, or the cancelled segment is done
                events.append(event := json.loads(message))
                if cancel and event["type"] == "audio.delta" and len(_of(events, "audio.delta")) == 1:
                    await _send(socket, type="response.cancel")
                if cancel and event["type"] == "audio.done":
                    break
        return events


async def _send(socket: ClientConnection, **event: Any) -> None:
    await socket.send(json.dumps(event))


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]


def _first_error(events: list[dict[str, Any]]) -> str | None:
    errors = _of(events, "error")
    return str(errors[0]["error"]["code"]) if errors else None


def _first_error_message(events: list[dict[str, Any]]) -> str | None:
    errors = _of(events, "error")
    return str(errors[0]["error"]["message"]) if errors else None


def _stream_spoken(events: list[dict[str, Any]], close_code: int | None) -> Spoken:
    """A session's segments, heard as one: failed if any failed (or none ended), cancelled if any was."""
    statuses = {done["status"] for done in _of(events, "audio.done")}
    outcome: Outcome = "completed"
    if "failed" in statuses or not statuses:
        outcome = "failed"
    elif "cancelled" in statuses:
        outcome = "cancelled"
    audio = b"".join(base64.b64decode(delta["audio"]) for delta in _of(events, "audio.delta"))
    return Spoken(
        outcome, audio, _first_error(events), events=events, message=_first_error_message(events), close_code=close_code
    )


class OpenAIRealtime(_Client):
    """``/v1/realtime`` through the official SDK: ``session.update``, an out-of-band ``response.create``, and
    ``response.cancel`` after the first ``response.output_audio.delta``."""

    name = "realtime"

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        websocket_base = gateway.base_url.replace("http://", "ws://") + "/v1"
        client = openai.AsyncOpenAI(api_key=key, base_url=f"{gateway.base_url}/v1", websocket_base_url=websocket_base)
        voice_param: RealtimeVoice = voice if isinstance(voice, str) else {"id": voice["id"]}
        session: RealtimeSessionCreateRequestParam = {
            "type": "realtime",
            "output_modalities": ["audio"],
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": voice_param}},
        }
        response: RealtimeResponseCreateParamsParam = {
            "conversation": "none",
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
        }
        try:
            async with client, client.realtime.connect(model=model) as connection, asyncio.timeout(_TIMEOUT_S):
                await connection.session.update(session=session)
                while (event := await _recv(connection))["type"] != "session.updated":
                    if event["type"] == "error":
                        code, message = event["error"]["code"], event["error"]["message"]
                        return Spoken("failed", b"", code, events=[event], message=message)
                await connection.response.create(response=response)
                events: list[dict[str, Any]] = []
                while not events or events[-1]["type"] != "response.done":
                    events.append(event := await _recv(connection))
                    if cancel and event["type"] == "response.output_audio.delta" and len(_audio_deltas(events)) == 1:
                        await connection.response.cancel()
        except InvalidStatus as refused:  # at the handshake, in OpenAI's error body
            error = json.loads(refused.response.body or b"")["error"]
            return Spoken("failed", b"", error["code"], refused.response.status_code, message=error["message"])
        audio = b"".join(base64.b64decode(delta["delta"]) for delta in _audio_deltas(events))
        status, message = events[-1]["response"]["status"], _first_error_message(events)
        return Spoken(status, audio, _first_error(events), events=events, message=message)


async def _recv(connection: AsyncRealtimeConnection) -> dict[str, Any]:
    """The next event, parsed by the SDK into its own type, as a plain mapping."""
    return (await connection.recv()).model_dump(mode="json")


def _audio_deltas(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _of(events, "response.output_audio.delta")


class ElevenLabsRest(_Client):
    """ElevenLabs' streamed route through its SDK, asking for ``pcm_24000`` (the tenant's key as ``xi-api-key``, as
    the SDK sends it); cancelling is closing the stream after the first bytes. The SDK does not retry here, so that
    a refusal is counted once."""

    name = "elevenlabs"

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        voice_id = voice if isinstance(voice, str) else voice["id"]
        received: list[bytes] = []
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT_S) as http, asyncio.timeout(_TIMEOUT_S):
                client = AsyncElevenLabs(api_key=key, base_url=gateway.base_url, httpx_client=http)
                audio = client.text_to_speech.stream(
                    voice_id, text=text, model_id=model, output_format="pcm_24000", request_options={"max_retries": 0}
                )
                async with contextlib.aclosing(audio):
                    async for chunk in audio:
                        received.append(chunk)
                        if cancel:
                            return Spoken("cancelled", chunk)  # leaving the block closes the stream: it hangs up
        except ApiError as error:
            detail = error.body["detail"] if isinstance(error.body, dict) else None
            code = str(detail["status"]) if isinstance(detail, dict) else "validation_error"
            message = str(detail["message"]) if isinstance(detail, dict) else None
            return Spoken(
                "failed", b"".join(received), code, error.status_code, dict(error.headers or {}), message=message
            )
        return Spoken("completed", b"".join(received))


class ElevenLabsSocket(_Client):
    """ElevenLabs' ``stream-input`` WebSocket, asking for ``pcm_24000`` with the key as ``xi-api-key``:
    ``{"text": " "}``, the text, then ``{"text": ""}`` to end it (the server closes the socket after ``isFinal``);
    cancelling is hanging up after the first audio, the protocol having no other way."""

    name = "elevenlabs-ws"

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        voice_id = voice if isinstance(voice, str) else voice["id"]
        base = gateway.base_url.replace("http://", "ws://")
        url = f"{base}/v1/text-to-speech/{voice_id}/stream-input?model_id={model}&output_format=pcm_24000"
        messages: list[dict[str, Any]] = []
        try:
            async with connect(url, additional_headers={"xi-api-key": key}) as socket, asyncio.timeout(_TIMEOUT_S):
                for opening in (" ", text, ""):
                    await _send(socket, text=opening)
                with contextlib.suppress(ConnectionClosedError):  # a close other than 1000: its code is read below
                    async for message in socket:  # until the server closes the socket
                        messages.append(json.loads(message))
                        if cancel and messages[-1].get("audio"):
                            break  # leaving the block hangs up
        except InvalidStatus as refused:
            return _elevenlabs_refused(refused)
        return _elevenlabs_spoken(messages, socket.close_code, cancel=cancel)


def _elevenlabs_refused(refused: InvalidStatus) -> Spoken:
    """An ElevenLabs socket refused at the handshake, in ElevenLabs' error body."""
    detail = json.loads(refused.response.body or b"")["detail"]
    return Spoken("failed", b"", detail["status"], refused.response.status_code, message=detail["message"])


def _elevenlabs_spoken(messages: list[dict[str, Any]], close_code: int | None, *, cancel: bool) -> Spoken:
    audio = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    error = next((m for m in messages if "error" in m), None)
    outcome: Outcome = "cancelled" if cancel else "failed" if error is not None or close_code != 1000 else "completed"
    events = [m for m in messages if "audio" not in m]
    if error is None:
        return Spoken(outcome, audio, None, events=events, close_code=close_code)
    return Spoken(outcome, audio, str(error["error"]), events=events, message=error["message"], close_code=close_code)


class ElevenLabsDialogueSocket(_Client):
    """ElevenLabs' Text-to-Dialogue ``multi-stream-input`` WebSocket, asking for ``pcm_24000`` with the key as
    ``xi-api-key``, as Pipecat's and LiveKit's dialogue clients speak it: a context registered with its voice, the text
    as an input in that voice with a flush, then ``close_socket`` (the server speaks it, sends ``is_final`` and closes
    the socket); cancelling is hanging up after the first audio (``close_context`` speaks what is held)."""

    name = "elevenlabs-dialogue-ws"

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        voice_id = voice if isinstance(voice, str) else voice["id"]
        base = gateway.base_url.replace("http://", "ws://")
        url = f"{base}/v1/text-to-dialogue/multi-stream-input?model_id={model}&output_format=pcm_24000"
        messages: list[dict[str, Any]] = []
        try:
            async with connect(url, additional_headers={"xi-api-key": key}) as socket, asyncio.timeout(_TIMEOUT_S):
                await _send(socket, context_id="turn", voices=[voice_id])
                await _send(socket, context_id="turn", inputs=[{"text": text, "voice_id": voice_id}], flush=True)
                await _send(socket, close_socket=True)
                with contextlib.suppress(ConnectionClosedError):  # a close other than 1000: its code is read below
                    async for message in socket:  # until the server closes the socket
                        messages.append(json.loads(message))
                        if cancel and messages[-1].get("audio"):
                            break  # leaving the block hangs up
        except InvalidStatus as refused:
            return _elevenlabs_refused(refused)
        return _elevenlabs_spoken(messages, socket.close_code, cancel=cancel)


class VllmOmniSocket(_Client):
    """vLLM-Omni's dialect of ``/v1/audio/speech/stream``, as its own example client speaks it: ``session.config``
    first (no greeting awaited), the text as ``input.text``, ``input.done``, reading ``audio.start``, the binary PCM
    frames and ``audio.done`` until ``session.done``; cancelling is hanging up after the first audio frame. Its
    ``error`` events carry a message and no code, so :attr:`Spoken.error` is the message here."""

    name = "vllm-omni"

    async def _speak(
        self, gateway: GatewayProcess, key: str, model: str, voice: Voice, text: str, *, cancel: bool
    ) -> Spoken:
        url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        # A custom voice as this dialect takes one: {"id": ...} (vLLM-Omni itself clones from ``ref_audio``).
        config = {"model": model, "voice": voice, "response_format": "pcm", "stream_audio": True}
        frames: list[bytes] = []
        events: list[dict[str, Any]] = []
        async with connect(url, additional_headers=_auth(key)) as socket, asyncio.timeout(_TIMEOUT_S):
            await _send(socket, type="session.config", **config)
            await _send(socket, type="input.text", text=text)
            await _send(socket, type="input.done")
            with contextlib.suppress(ConnectionClosedError):  # a close other than 1000: its code is read below
                async for message in socket:  # until session.done, or the first audio of a cancelled one
                    if isinstance(message, bytes):
                        frames.append(message)
                        if cancel:
                            break  # leaving the block hangs up
                        continue
                    events.append(event := json.loads(message))
                    if event["type"] == "session.done":
                        break
        error = next((str(e["message"]) for e in events if e["type"] == "error"), None)
        closed = socket.close_code
        outcome: Outcome = "cancelled" if cancel else "failed" if error is not None or closed != 1000 else "completed"
        return Spoken(outcome, b"".join(frames), error, events=events, message=error, close_code=closed)


TRANSPORTS: tuple[Transport, ...] = (
    Http(),
    StreamSocket(),
    OpenAIRealtime(),
    ElevenLabsRest(),
    ElevenLabsSocket(),
    ElevenLabsDialogueSocket(),
    VllmOmniSocket(),
)
"""Every transport, for ``pytest.mark.parametrize(..., ids=lambda t: t.name)``."""
