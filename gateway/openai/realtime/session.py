"""One OpenAI Realtime session as a speaker: the conversation's text in, each response's speech out.

A response speaks the last user message of its context (the conversation, or the response's own ``input``) verbatim,
with the session's ``instructions`` as style, as ``gpt-4o-mini-tts`` takes them; its transcript is that text. The
speech comes from the one pipeline every transport uses (:meth:`SpeechService.speak`, as 24 kHz PCM, in the session
that counted as the tenant's request and holds its stream), so limits, usage, cache, fair scheduling, custom voices
and failover hold here as on ``POST /v1/audio/speech``. One response runs at a time, as on OpenAI's server; the
receiver keeps reading while it speaks, so ``response.cancel`` stops its audio at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from litestar.exceptions import WebSocketDisconnect

from gateway.audio import open_g711_encoder
from gateway.http.socket_errors import socket_error, unexpected
from gateway.openai.realtime import events
from gateway.openai.realtime.events import (
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    Item,
    ItemReference,
    OutputAudioBufferClear,
    RateLimit,
    RealtimeProtocolError,
    ResponseCancel,
    ResponseCreate,
    ResponseParams,
    ResponseState,
    SessionSettings,
    SessionUpdate,
    Unsupported,
)
from gateway.schemas import MAX_INPUT_CHARS
from gateway.sessions.ending import EndedByServer
from gateway.sessions.lanes import PIPELINE_RATE, HeardClock, Lane, Tally, failure, play, stop
from gateway.sessions.session_errors import SessionDrainedError, SlowClientError
from gateway.speech.delivery import speech_usage
from gateway.speech.errors import SpeechError
from gateway.text import Markup

if TYPE_CHECKING:
    from auth.limits import LimitState
    from gateway.audio import AudioEncoder
    from gateway.openai.realtime.events import ClientEvent
    from gateway.schemas import SpeechUsage
    from gateway.sessions.dialect import Opened

__all__ = ["MAX_CONVERSATION_ITEMS", "OpenAIRealtimeSession"]

MAX_CONVERSATION_ITEMS = 64
"""Items a conversation keeps; older ones drop, as OpenAI truncates a long conversation. A response speaks only its
last user message, so what drops is never needed, and a session's memory stays bounded (by
``realtime.max_conversation_chars`` too)."""
_SHUTTING_DOWN = (
    "The server is shutting down: no new response is started; the response in progress finishes, then the session "
    "closes (1012). Reconnect to go on."
)
# The session's own settings, by the name of what a speech request would call them.
_SETTING_PARAMS = {
    "model": "session.model",
    "voice": "session.audio.output.voice",
    "speed": "session.audio.output.speed",
    "instructions": "session.instructions",
}
# A response's own settings, where ``response.create`` gave them (the rest are the session's).
_RESPONSE_PARAMS = {**_SETTING_PARAMS, "voice": "response.audio.output.voice", "instructions": "response.instructions"}


@dataclass
class _Response:
    """The response in progress: what it says, and how much of it has been heard."""

    state: ResponseState
    text: str
    clock: HeardClock = field(default_factory=HeardClock)
    """Audio sent so far."""
    limits: list[RateLimit] | None = None
    """The tenant's standing once the speech pipeline admitted the response (``None``: it has no limits)."""
    characters: int | None = None
    """What the response was charged (what it made the engine say), once the speech pipeline planned it."""
    lane: Lane[None] = field(default_factory=Lane)
    """The response's lane: its task speaks it, nothing is queued."""

    def usage(self) -> SpeechUsage | None:
        """Its usage, once its audio began (as the speech pipeline records it for the tenant)."""
        if not self.state.transcript:
            return None
        return speech_usage(len(self.text) if self.characters is None else self.characters, self.clock.seconds)


class OpenAIRealtimeSession(EndedByServer):
    """Serves one accepted, authenticated ``/v1/realtime`` WebSocket until either side closes it."""

    def __init__(self, opened: Opened, *, model: str) -> None:
        super().__init__()  # ``run`` raises what the session is ended with (revocation, shutdown, a client too slow)
        self.id = opened.session_id
        self._channel = opened.channel(self._busy)
        self._speaker = opened.speaker
        self._max_json_depth = opened.max_json_depth
        self._max_conversation_chars = opened.settings.max_conversation_chars
        self._settings = SessionSettings(model=model)
        self._conversation_id = events.new_id("conv")
        self._items: list[Item] = []
        self._active: _Response | None = None
        self._tally = Tally("responses")
        """Responses that produced audio (completed or cut short), for the session's log line."""

    async def check(self) -> None:
        """Check, before the handshake is accepted, that the session's model and default voice can be served.

        Raises:
            SpeechError: a model the tenant may not use (403), an unknown model (404) or voice (400).
        """
        await self._speaker.check(self._settings.speech_request("-"))

    async def run(self) -> None:
        """Serve the session; returns when the client closed it.

        Raises:
            SlowClientError: the client stopped taking audio.
            SessionIdleError: no client event and no response for ``realtime.idle_timeout_s``.
            SessionRevokedError: its key was revoked or its tenant deleted.
            SessionDrainedError: the server drained it for a shutdown.
            WebSocketDisconnect: the client went away while the session was sending.
        """
        await self._send(events.session_created(self.id, self._settings))
        receiver = asyncio.create_task(self._receive(), name=f"openai-realtime-receiver-{self.id}")
        try:
            await self._until_ended(receiver)
        finally:
            await stop(receiver, *(() if self._active is None else self._active.lane.tasks))

    def log_fields(self) -> dict[str, Any]:
        return {"model": self._settings.model, **self._tally.fields()}

    # ----------------------------------------------------------------- client events
    async def _receive(self) -> None:
        while True:
            message = await self._channel.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            try:
                if not isinstance(text, str):
                    raise events.binary_frame_error()
                await self._handle(events.parse_client_event(text, max_depth=self._max_json_depth))
            except RealtimeProtocolError as exc:
                await self._send(events.error_event(socket_error(exc), client_event_id=exc.event_id))

    def _busy(self) -> bool:
        """A response is being spoken: a client listening to a long response is not idle."""
        return self._active is not None and self._active.lane.running

    async def _handle(self, event: ClientEvent) -> None:
        if isinstance(event, SessionUpdate):
            await self._update(event)
        elif isinstance(event, ConversationItemCreate):
            await self._add_item(event)
        elif isinstance(event, ConversationItemDelete):
            await self._delete_item(event)
        elif isinstance(event, ConversationItemRetrieve):
            await self._echo(events.conversation_item_retrieved(self._item(event.item_id, event.event_id)))
        elif isinstance(event, ResponseCreate):
            await self._create_response(event)
        elif isinstance(event, ResponseCancel | OutputAudioBufferClear):
            await self._cancel(event)
        elif isinstance(event, Unsupported):
            await self._send(events.error_event(event.error, client_event_id=event.event_id))

    async def _update(self, event: SessionUpdate) -> None:
        settings = self._settings.apply(event.patch)
        if await self._servable(settings, _SETTING_PARAMS, event.event_id):
            self._settings = settings
            await self._send(events.session_updated(self.id, settings))

    async def _servable(self, settings: SessionSettings, params: dict[str, str], event_id: str | None) -> bool:
        """Whether ``settings`` can be spoken (model, voice, what the tenant may use); if not, an error event says why,
        naming the setting by its path in the client's event (``params``)."""
        try:
            await self._speaker.check(settings.speech_request("-"))
        except SpeechError as refused:
            exc = socket_error(refused)
            exc.param = params.get(exc.param or "", exc.param)
            await self._send(events.error_event(exc, client_event_id=event_id))
            return False
        return True

    # ----------------------------------------------------------------- the conversation
    async def _add_item(self, event: ConversationItemCreate) -> None:
        previous = event.previous_item_id
        if previous is None:
            at = len(self._items)
        elif previous == "root":
            at = 0
        else:
            at = self._index(previous, event.event_id, param="previous_item_id") + 1
        if any(item.id == event.item.id for item in self._items):
            raise RealtimeProtocolError(
                f"Item with id '{event.item.id}' already exists.",
                code="item_already_exists",
                param="item.id",
                event_id=event.event_id,
            )
        if (size := len(event.item.text)) > self._max_conversation_chars:
            raise RealtimeProtocolError(
                f"The item has {size} characters; a conversation keeps at most {self._max_conversation_chars}.",
                code="conversation_too_large",
                param="item.content",
                event_id=event.event_id,
            )
        before = self._items[at - 1].id if at > 0 else None
        self._keep(event.item, at)
        await self._echo(events.conversation_item_added(event.item, previous_item_id=before))
        await self._echo(events.conversation_item_done(event.item, previous_item_id=before))

    async def _delete_item(self, event: ConversationItemDelete) -> None:
        del self._items[self._index(event.item_id, event.event_id, param="item_id")]
        await self._send(events.conversation_item_deleted(event.item_id))

    def _item(self, item_id: str, event_id: str | None, *, param: str = "item_id") -> Item:
        return self._items[self._index(item_id, event_id, param=param)]

    def _index(self, item_id: str, event_id: str | None, *, param: str) -> int:
        for index, item in enumerate(self._items):
            if item.id == item_id:
                return index
        raise RealtimeProtocolError(
            f"Item with item_id not found: {item_id}", code="item_not_found", param=param, event_id=event_id
        )

    def _spoken_text(self, params: ResponseParams, event_id: str | None) -> str:
        """The last user message of the response's context: its ``input`` when it has one, else the conversation."""
        if params.input is None:
            context: list[Item] = self._items
        else:
            context = [
                self._item(entry.id, event_id, param="response.input") if isinstance(entry, ItemReference) else entry
                for entry in params.input
            ]
        for item in reversed(context):
            if item.role == "user" and item.text.strip():
                if len(item.text) > MAX_INPUT_CHARS:  # each part is within it; several together may not be
                    raise RealtimeProtocolError(
                        f"The user message to speak has {len(item.text)} characters; at most {MAX_INPUT_CHARS}, as "
                        "for /v1/audio/speech.",
                        code="string_above_max_length",
                        param="response.input",
                        event_id=event_id,
                    )
                return item.text
        raise RealtimeProtocolError(
            "Nothing to speak: the response's context has no user message with text. Add one with "
            "conversation.item.create, or give it in response.input.",
            code="missing_user_message",
            param="response.input",
            event_id=event_id,
        )

    # ----------------------------------------------------------------- responses
    async def _create_response(self, event: ResponseCreate) -> None:
        if self._draining:
            raise RealtimeProtocolError(_SHUTTING_DOWN, code="server_shutting_down", event_id=event.event_id)
        if (active := self._active) is not None and active.lane.running:
            raise RealtimeProtocolError(
                f"Conversation already has an active response in progress: {active.state.id}. Wait until the "
                "response is finished before creating a new one.",
                code="conversation_already_has_active_response",
                event_id=event.event_id,
            )
        text = self._spoken_text(event.params, event.event_id)
        settings = self._settings.for_response(event.params)
        # Only a response's own settings are checked here: the session's were when they were set.
        if settings != self._settings and not await self._servable(settings, _RESPONSE_PARAMS, event.event_id):
            return  # refused before it was created, as session.update refuses a voice
        state = ResponseState.start(self._settings, event.params, conversation_id=self._conversation_id)
        active = self._active = _Response(state, text)
        speaking = self._respond(active, settings)
        active.lane.start(speaking, name=f"openai-realtime-{state.id}", ended=self._response_ended)

    async def _respond(self, active: _Response, settings: SessionSettings) -> None:
        """Speak one response, sending its events in OpenAI's order; a failure ends it ``failed``.

        Raises:
            asyncio.CancelledError: ``response.cancel``, whose handler reports the response once its audio stopped.
            SlowClientError, WebSocketDisconnect: the client stopped taking audio, or left; the session ends.
        """
        await self._send(events.response_created(active.state))
        try:
            await self._speak(active, settings)
        except (SlowClientError, WebSocketDisconnect):
            raise
        except Exception as exc:
            error = socket_error(failure(exc, "realtime response", unexpected))
            await self._send(events.error_event(error))
            active.state = active.state.finish("failed", usage=active.usage(), error=error)
        else:
            active.state = active.state.finish("completed", usage=active.usage())
        await self._report_end(active)

    async def _speak(self, active: _Response, settings: SessionSettings) -> None:
        request = settings.speech_request(active.text)
        speaking = self._speaker.speak(request, record_id=active.state.id, markup=Markup.SSML)
        async with await speaking as reply:
            active.characters = reply.characters
            active.limits = _rate_limits(reply.limits)
            await self._send(events.response_output_item_added(active.state))
            if active.state.conversation_id is not None:
                added = events.conversation_item_added(active.state.item, previous_item_id=self._last_item_id())
                await self._send(added)
            await self._send(events.response_content_part_added(active.state))
            active.state = active.state.add_transcript(active.text)
            await self._send(events.response_output_audio_transcript_delta(active.state, active.text))
            encoder = _encoder(settings)
            try:
                async for _, data in play(reply, active.clock, encoder):
                    if data:
                        await self._send(events.response_output_audio_delta(active.state, data))
                if encoder is not None and (tail := encoder.finish()):
                    await self._send(events.response_output_audio_delta(active.state, tail))
            finally:
                self._tally.add(active.clock.seconds)
        await self._send(events.response_output_audio_done(active.state))
        await self._send(events.response_output_audio_transcript_done(active.state))
        await self._send(events.response_content_part_done(active.state))

    async def _report_end(self, active: _Response) -> None:
        """A response's last events: its item done (and kept in the conversation), ``response.done``, then the
        tenant's standing against its limits."""
        state = active.state
        if state.transcript:  # its item was announced
            await self._send(events.response_output_item_done(state))
            if state.conversation_id is not None:
                previous = self._last_item_id()
                self._keep(state.item)
                await self._send(events.conversation_item_done(state.item, previous_item_id=previous))
        await self._send(events.response_done(state))
        if active.limits is not None:  # after response.done, as OpenAI sends them
            await self._send(events.rate_limits_updated(active.limits))

    async def _cancel(self, event: ResponseCancel | OutputAudioBufferClear) -> None:
        """Barge-in: the audio stops at once (the engine's job is cancelled with it); the response ends
        ``cancelled``, and nothing of it follows its ``response.done``."""
        active = self._active
        if active is None or not active.lane.running:
            if isinstance(event, OutputAudioBufferClear):
                return  # nothing is playing: nothing to clear
            raise RealtimeProtocolError(
                "Cancellation failed: no active response found",
                code="response_cancel_not_active",
                event_id=event.event_id,
            )
        if isinstance(event, ResponseCancel) and event.response_id not in {None, active.state.id}:
            raise RealtimeProtocolError(
                f"Cancellation failed: response '{event.response_id}' is not the active response.",
                code="response_cancel_not_active",
                param="response_id",
                event_id=event.event_id,
            )
        if await active.lane.stop():  # else it ended on its own meanwhile, and said so
            active.state = active.state.finish("cancelled", usage=active.usage())
            await self._report_end(active)

    def _response_ended(self, task: asyncio.Task[None]) -> None:
        """A response's task ended: a client too slow or gone ends the session (as would a bug, with its traceback);
        a drain that waited for the response ends now."""
        self._lane_ended(task)
        if self._draining:
            self._end(SessionDrainedError())

    def _keep(self, item: Item, at: int | None = None) -> None:
        """Add ``item`` to the conversation (at the end, or at ``at``), dropping the oldest beyond the caps: at most
        ``MAX_CONVERSATION_ITEMS`` items, ``realtime.max_conversation_chars`` characters (the item kept whatever)."""
        self._items.insert(len(self._items) if at is None else at, item)
        del self._items[: max(0, len(self._items) - MAX_CONVERSATION_ITEMS)]
        chars = sum(len(kept.text) for kept in self._items)
        while chars > self._max_conversation_chars and len(self._items) > 1:
            chars -= len(self._items.pop(1 if self._items[0] is item else 0).text)

    def _last_item_id(self) -> str | None:
        return self._items[-1].id if self._items else None

    # ----------------------------------------------------------------- plumbing
    async def _send(self, text: str) -> None:
        await self._channel.send(text)

    async def _echo(self, text: str) -> None:
        """Send what repeats the client's own message back to it: its bytes are the client's to pay for, so that an
        echo never multiplies what a client may make the server send."""
        if self._channel.budget is not None:
            self._channel.budget.echoed(len(text))
        await self._send(text)


def _encoder(settings: SessionSettings) -> AudioEncoder | None:
    """G.711 from the pipeline's 24 kHz PCM; ``None`` for PCM, which goes out as it comes."""
    law = settings.output_format.g711_law
    return None if law is None else open_g711_encoder(law, PIPELINE_RATE)


def _rate_limits(state: LimitState | None) -> list[RateLimit] | None:
    """``rate_limits.updated``'s entries: the tenant's requests and characters (its "tokens") per minute."""
    if state is None:
        return None
    limits: list[RateLimit] = []
    if state.limit_requests is not None and state.remaining_requests is not None:
        limits.append(
            RateLimit("requests", state.limit_requests, state.remaining_requests, state.reset_requests_s or 0)
        )
    if state.limit_tokens is not None and state.remaining_tokens is not None:
        limits.append(RateLimit("tokens", state.limit_tokens, state.remaining_tokens, state.reset_tokens_s or 0))
    return limits or None
