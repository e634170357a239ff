"""``kind: openai``: an engine whose audio comes from upstream servers that speak OpenAI's ``POST /v1/audio/speech``.

Another chattts-gateway running as an engine node, vLLM-Omni, Kokoro-FastAPI or OpenAI itself. The upstream is asked for
streamed ``pcm`` at speed 1.0 (an engine node in server-sent events, with its engine's word marks), so the gateway's
own encoders, time-stretch, SSE, cache and realtime sessions work on top of it unchanged. Each request goes to the
usable endpoint address with the fewest requests in flight; a background task resolves host names and probes every
address; each address has a circuit breaker. A voice sample
goes to an engine node's own route (``SAMPLE_ROUTE``, ``engines/remote/context.py``), whose engine makes the speaker;
the node keeps nothing, the front stores the result.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
from opentelemetry import propagate

from engines.base import OPENAI_VOICES, EngineInfo, InvalidSynthesisRequestError, VoiceInfo
from engines.errors import EngineNotReadyError, EngineOverloadedError
from engines.remote.answers import (
    error_message,
    node_engine_state,
    node_overloaded,
    read_bounded,
    retry_after_s,
    speaker_of,
)
from engines.remote.context import (
    CONTINUING_FIELD,
    CONTROL_TOKENS_FIELD,
    LANGUAGE_FIELD,
    NORMALIZE_TEXT_FIELD,
    SAMPLE_ROUTE,
    SEED_FIELD,
    SPEAKER_CHECK_ROUTE,
    SPEAKER_FIELD,
    context_headers,
    is_engine_node,
    tenant_context,
)
from engines.remote.endpoints import EndpointAddress, EndpointSet, EndpointSlots
from engines.remote.stream import Attempt, RemotePcmStream, describe_error
from engines.samples import check_sample
from engines.scheduling import SlotScheduler, expected_speech_s
from engines.status import PoolStatus
from lifecycle import cancel_and_wait, naming

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable

    from engines.base import SynthesisRequest
    from engines.remote.context import TenantContext
    from engines.remote.endpoints import Resolver
    from engines.scheduling import Grant, TenantShare
    from engines.settings import RemoteEngineSettings
    from engines.status import PoolState

__all__ = ["RemoteEngine"]

logger = naming.logger("remote")
# httpx logs every request at INFO: the probes alone (every endpoint, every probe_interval_s) would flood the log.
logging.getLogger("httpx").setLevel(logging.WARNING)

# Upstream answers that mean "this input is wrong", passed on to the client as a 400 with the upstream's message.
# Anything else non-2xx (401/403: our credential, 404: our model name, 5xx) is the endpoint's fault.
_CLIENT_ERRORS = frozenset({400, 413, 422})


class RemoteEngine:
    """One ``kind: openai`` engine: balances, probes and breaks per endpoint address (implements
    :class:`~engines.backend.EngineBackend`)."""

    def __init__(self, name: str, settings: RemoteEngineSettings, *, resolver: Resolver | None = None) -> None:
        """Build the engine; nothing connects before :meth:`start`.

        Args:
            name: The engine's name (the model clients ask for).
            settings: Its ``kind: openai`` settings.
            resolver: Host name resolution (default: the system's, ``getaddrinfo``); tests map names to loopback
                addresses with it.
        """
        self.name = name
        self._settings = settings
        self._options = options = settings.options
        self._endpoints = EndpointSet(options.endpoints, options.breaker, resolver)
        self._credential = options.credential()
        self._info = _engine_info(name, settings)
        self._cloning_info = dataclasses.replace(self._info, clones_voices=True)
        self._client: httpx.AsyncClient | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._probed = False
        self._stopped = False
        self._slots = SlotScheduler(name, settings, EndpointSlots(self._endpoints, options.max_in_flight))

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Resolve and probe in the background; requests are taken once an endpoint answers its probe."""
        options = self._options
        self._client = httpx.AsyncClient(
            # Connect and the first byte are bounded per request (``first_byte_timeout_s``), later reads per chunk.
            timeout=httpx.Timeout(None, connect=options.connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=4 * options.max_in_flight),
            trust_env=False,  # we connect to resolved addresses: a proxy from the environment would see only IPs
        )
        self._watcher = asyncio.create_task(self._watch(), name=f"remote-{self.name}")

    async def stop(self) -> None:
        self._stopped = True
        if self._watcher is not None:
            await cancel_and_wait(self._watcher)
        self._slots.fail_waiters("the engine is stopping")
        if self._client is not None:
            await self._client.aclose()

    # ----------------------------------------------------------------- status
    @property
    def breaker_settings(self) -> None:
        """None: a remote engine breaks per endpoint address (``options.breaker``), not engine-wide."""
        return None

    @property
    def info(self) -> EngineInfo:
        """What the engine offers; it makes voices from samples while every usable endpoint is an engine node (whose
        own engine may still refuse: its 400 is passed on)."""
        usable = [endpoint for endpoint in self._endpoints.all() if endpoint.usable]
        return self._cloning_info if usable and all(e.engine_node for e in usable) else self._info

    def status(self) -> PoolStatus:
        endpoints = self._endpoints.all()
        usable = [endpoint for endpoint in endpoints if endpoint.usable]
        state = self._state(usable)
        return PoolStatus(
            engine=self.name,
            kind=self._settings.kind,
            state=state,
            reason=self._unavailable_reason(endpoints) if state == "unavailable" else None,
            workers=len(endpoints),
            ready_workers=len(usable),
            busy_workers=sum(1 for endpoint in endpoints if endpoint.in_flight),
            active_jobs=sum(endpoint.in_flight for endpoint in endpoints),
            queued=len(self._slots),
            queued_by_tenant=self._slots.queued_by_tenant(),
            restarts=0,
            pids=(),
            batch_sizes={},
            info=self._info,
            endpoints=tuple(endpoint.status() for endpoint in endpoints),
        )

    def _state(self, usable: list[EndpointAddress]) -> PoolState:
        if self._stopped:
            return "stopped"
        if usable:
            return "ready"
        return "unavailable" if self._probed else "starting"

    @staticmethod
    def _unavailable_reason(endpoints: list[EndpointAddress]) -> str:
        def why(endpoint: EndpointAddress) -> str:
            if endpoint.healthy:  # then its breaker is open
                return f"circuit breaker open after: {endpoint.last_error}"
            return endpoint.unhealthy_reason or "unhealthy"

        described = [f"{e.url} ({e.address or 'unresolved'}): {why(e)}" for e in endpoints]
        return "no endpoint can take requests: " + "; ".join(described)

    # ----------------------------------------------------------------- synthesis
    @asynccontextmanager
    async def open_stream(
        self,
        request: SynthesisRequest,
        *,
        tenant: str = "",
        share: TenantShare | None = None,
        continuing: bool = False,
    ) -> AsyncIterator[RemotePcmStream]:
        """Send ``request`` to the least loaded usable endpoint; leaving the block closes the upstream response.

        Each endpoint has ``max_in_flight`` slots; while every one is taken the request waits in ``tenant``'s queue,
        served in turn with other tenants' by ``share`` and by cost (``engines.scheduling``), as in a worker pool.
        ``tenant`` and ``share`` also go with the request to an engine node, whose pool schedules by them
        (``engines/remote/context.py``).

        Raises (on enter): EngineNotReadyError, EngineOverloadedError, InvalidSynthesisRequestError (the upstream
        refused the input) and SynthesisFailedError (the endpoint failed before any audio).
        """
        if request.speaker is not None and any(e.usable and not e.engine_node for e in self._endpoints.all()):
            raise self._no_custom_voices()
        grant = await self._acquire(tenant, share, expected_speech_s(request.text), continuing)
        grant.start()
        endpoint, stream = grant.holder, None
        attempt = Attempt(endpoint)
        try:
            deadline = time.monotonic() + self._options.first_byte_timeout_s
            context = tenant_context(tenant, share)
            response = await self._send(endpoint, request, attempt, deadline, context=context, continuing=continuing)
            stream = RemotePcmStream(
                response, self._info, attempt, text=request.text, first_byte_deadline=deadline,
                idle_timeout_s=self._options.idle_timeout_s,
            )  # fmt: skip
            try:
                yield stream
            finally:
                # Closing a response that was not read to its end closes its connection: the upstream sees the
                # client go away and stops synthesizing at once.
                await stream.aclose()
                await response.aclose()
        finally:
            attempt.settle()
            endpoint.in_flight -= 1
            grant.finish(stream.produced_bytes / (2 * self._info.sample_rate) if stream is not None else None)

    async def _send(
        self,
        endpoint: EndpointAddress,
        request: SynthesisRequest,
        attempt: Attempt,
        deadline: float,
        *,
        context: TenantContext | None,
        continuing: bool,
    ) -> httpx.Response:
        """Send the request, with the tenant ``context`` and the custom speaker when ``endpoint`` is an engine node
        (``engines/remote/context.py``): another server never learns tenants' names or speakers."""
        assert self._client is not None
        if request.speaker is not None and not endpoint.engine_node:
            raise self._no_custom_voices()  # the endpoints may have changed since the check in open_stream
        url, headers, extensions = endpoint.target(endpoint.api_path("/audio/speech"))
        accept = "text/event-stream" if endpoint.engine_node else "application/octet-stream"
        headers |= self._auth_headers() | {"Accept": accept, "Accept-Encoding": "identity"}
        propagate.inject(headers)  # the request's trace (``traceparent``): the node's log lines name it too
        if endpoint.engine_node and context is not None:
            headers |= context_headers(context)
        body = self._body(request, continuing=continuing and endpoint.engine_node, engine_node=endpoint.engine_node)
        upstream = self._client.build_request("POST", url, json=body, headers=headers, extensions=extensions)
        response = await _answer(
            attempt,
            self._client.send(upstream, stream=True),
            max(0.0, deadline - time.monotonic()),
            late=f"no answer within {self._options.first_byte_timeout_s:g} s",
        )
        if response.status_code != httpx.codes.OK:
            await self._refuse(response, attempt)
        return response

    async def _refuse(self, response: httpx.Response, attempt: Attempt) -> None:
        """Raise what a non-200 upstream answer means, after reading a bounded part of its body."""
        try:
            async with asyncio.timeout(self._options.idle_timeout_s):
                body = await read_bounded(response)
        except (TimeoutError, httpx.HTTPError):
            body = b""
        finally:
            await response.aclose()
        status = response.status_code
        message, param = error_message(body)
        if status in _CLIENT_ERRORS:
            attempt.succeeded()  # the endpoint works: it judged the input
            raise InvalidSynthesisRequestError(message or f"The upstream refused the request ({status}).", param)
        if status == httpx.codes.TOO_MANY_REQUESTS or node_overloaded(status, body):
            raise EngineOverloadedError(self.name, retry_after_s(response))
        raise attempt.failed(f"HTTP {status}" + (f": {message}" if message else ""))

    def _body(self, request: SynthesisRequest, *, continuing: bool, engine_node: bool = False) -> dict[str, Any]:
        """The upstream request; ``continuing`` (only for an engine node): a later segment of a stream under way. An
        engine node is asked for server-sent events, and told that the caller opted in to control tokens and the
        request's seed (another server knows no such fields)."""
        body: dict[str, Any] = {
            "model": self._options.model,
            "input": request.text,
            "voice": self._options.voices.get(request.voice, request.voice),
            "response_format": "pcm",
            "speed": 1.0,  # speed_range is (1, 1): the gateway time-stretches, the same for every upstream
        }
        if engine_node:  # its engine's word marks come with the audio (engines/remote/node_events.py)
            body["stream_format"] = "sse"
        if request.instructions is not None:
            body["instructions"] = request.instructions
        if request.speaker is not None:  # only ever sent to an engine node (_send checks)
            body[SPEAKER_FIELD] = request.speaker
        if continuing:
            body[CONTINUING_FIELD] = True
        if request.control_tokens and engine_node:
            body[CONTROL_TOKENS_FIELD] = True
        if request.seed is not None and engine_node:  # OpenAI refuses the field (400): only a node is told
            body[SEED_FIELD] = request.seed
        if request.language is not None and engine_node:  # the node's engine says whether it speaks it
            body[LANGUAGE_FIELD] = request.language
        if not request.normalize_text and engine_node:
            body[NORMALIZE_TEXT_FIELD] = False
        return body

    # ----------------------------------------------------------------- voice samples and speakers
    async def speaker_from_sample(self, pcm: bytes, sample_rate: int, transcript: str) -> str:
        """Ask an engine node to make the speaker of a sample (``POST SAMPLE_ROUTE``); see
        :meth:`~engines.backend.EngineBackend.speaker_from_sample`. Outside the scheduler's slots, as in a pool; the
        answer counts in the endpoint's breaker, and must come within ``first_byte_timeout_s``."""
        not_a_node = InvalidSynthesisRequestError(
            f"Model '{self.name}' cannot make a voice from an audio sample: its upstream is not a chattts-gateway "
            "engine node.",
            param="audio_sample",
        )
        endpoint = self._node_endpoint(not_a_node)
        check_sample(pcm, sample_rate, transcript)
        body = {
            "model": self._options.model,
            "transcript": transcript,
            "sample_rate": sample_rate,
            "pcm": base64.b64encode(pcm).decode("ascii"),
        }
        async with self._asking(endpoint, SAMPLE_ROUTE, body, "a voice sample") as (response, attempt):
            if response.status_code != httpx.codes.OK:
                await self._refuse(response, attempt)
            speaker = speaker_of(response)
            if speaker is None:
                raise attempt.failed("its answer to a voice sample names no speaker")
        return speaker

    async def check_speaker(self, speaker: str) -> None:
        """Ask an engine node whether its engine could speak with ``speaker`` (``POST SPEAKER_CHECK_ROUTE``): only
        the node knows its engine and weights. See :meth:`~engines.backend.EngineBackend.check_speaker`. Another
        server is never sent a speaker, so a voice for one is refused at once (``param`` ``model``); a node of an
        older version, without the route (404), lets the speaker through, and judges it when it speaks."""
        endpoint = self._node_endpoint(self._no_custom_voices(param="model"))
        body = {"model": self._options.model, "speaker": speaker}
        async with self._asking(endpoint, SPEAKER_CHECK_ROUTE, body, "a speaker check") as (response, attempt):
            if response.status_code not in {httpx.codes.NO_CONTENT, httpx.codes.NOT_FOUND}:
                await self._refuse(response, attempt)

    def _node_endpoint(self, not_a_node: InvalidSynthesisRequestError) -> EndpointAddress:
        """The usable engine node with the fewest requests in flight, to ask about a voice.

        Raises:
            EngineNotReadyError: no endpoint can take it now.
            InvalidSynthesisRequestError: ``not_a_node``, when an upstream is not an engine node: a voice made there
                could not be spoken on it (it is never sent speakers), and it has no route to ask.
        """
        usable = [endpoint for endpoint in self._endpoints.all() if endpoint.usable]
        if not usable:
            raise EngineNotReadyError(self.name, "probing its endpoints" if not self._probed else "no usable endpoint")
        if not all(endpoint.engine_node for endpoint in usable):
            raise not_a_node
        allowed = [endpoint for endpoint in usable if endpoint.breaker.would_allow()]
        if not allowed:
            raise EngineNotReadyError(self.name, self._unavailable_reason(usable))
        return min(allowed, key=lambda endpoint: endpoint.in_flight)

    @asynccontextmanager
    async def _asking(
        self, endpoint: EndpointAddress, route: str, body: dict[str, Any], what: str
    ) -> AsyncIterator[tuple[httpx.Response, Attempt]]:
        """POST ``body`` to an engine node's ``route`` (under its API base) within ``first_byte_timeout_s``, the
        answer counting in the endpoint's breaker: a success unless the block raised the attempt's failure."""
        assert self._client is not None
        endpoint.breaker.allow()  # a half-open breaker counts the trial now (_node_endpoint asked would_allow)
        attempt = Attempt(endpoint)
        url, headers, extensions = endpoint.target(endpoint.api_path(route))
        timeout = self._options.first_byte_timeout_s
        try:
            sent = self._client.post(url, json=body, headers=headers | self._auth_headers(), extensions=extensions)
            response = await _answer(attempt, sent, timeout, late=f"no answer to {what} within {timeout:g} s")
            yield response, attempt
            attempt.succeeded()
        finally:
            attempt.settle()

    def _no_custom_voices(self, param: str = "voice") -> InvalidSynthesisRequestError:
        return InvalidSynthesisRequestError(
            f"Custom voices are not available for model '{self.name}': its upstream is not a chattts-gateway engine "
            "node (no X-TTS-Engine-Node header in its /readyz answer), and only an engine node is sent a custom "
            "voice's speaker.",
            param=param,
        )

    def _auth_headers(self) -> dict[str, str]:
        return {} if self._credential is None else {"Authorization": f"Bearer {self._credential}"}

    # ----------------------------------------------------------------- balancing
    async def _acquire(
        self, tenant: str, share: TenantShare | None, cost: float, continuing: bool
    ) -> Grant[EndpointAddress]:
        """A slot on the usable endpoint with the fewest in flight, at once or after waiting in the tenant's queue.

        Raises:
            EngineNotReadyError: no endpoint is healthy with a breaker that lets requests through.
            EngineOverloadedError: the queue is full, or the wait timed out.
        """
        endpoints = self._endpoints.all()
        if not any(endpoint.usable for endpoint in endpoints):
            if self._stopped or not self._probed:
                raise EngineNotReadyError(self.name, "stopped" if self._stopped else "probing its endpoints")
            raise EngineNotReadyError(self.name, self._unavailable_reason(endpoints))
        return await self._slots.acquire(tenant, share, cost, continuing=continuing)

    def _after_probes(self) -> None:
        """A recovered endpoint may take what waits; with none usable any more, nothing will."""
        endpoints = self._endpoints.all()
        if any(endpoint.usable for endpoint in endpoints):
            self._slots.hand_out()
        else:
            self._slots.fail_waiters(self._unavailable_reason(endpoints))

    # ----------------------------------------------------------------- health
    async def _watch(self) -> None:
        """Resolve every ``resolve_interval_s`` and probe every ``probe_interval_s``, until stopped."""
        options = self._options
        next_resolve = 0.0
        while True:
            if time.monotonic() >= next_resolve:
                await self._endpoints.resolve()
                next_resolve = time.monotonic() + options.resolve_interval_s
            await asyncio.gather(*(self._probe(endpoint) for endpoint in self._endpoints.routable()))
            self._probed = True
            self._after_probes()
            await asyncio.sleep(options.probe_interval_s)

    async def _probe(self, endpoint: EndpointAddress) -> None:
        assert self._client is not None
        url, headers, extensions = endpoint.target(endpoint.probe_path())
        timeout = httpx.Timeout(
            max(self._options.probe_interval_s, self._options.connect_timeout_s),
            connect=self._options.connect_timeout_s,
        )
        try:
            response = await self._client.get(
                url, headers=headers | self._auth_headers(), extensions=extensions, timeout=timeout
            )
        except httpx.HTTPError as exc:
            endpoint.mark_unhealthy(f"probe failed: {describe_error(exc)}")
            return
        if is_engine_node(response.headers) and (state := node_engine_state(response, self._options.model)):
            # An engine node's /readyz says how each of its engines is: this engine is served by the one it names, so
            # a node whose other engines are down (its /readyz then answers 503) still serves this one.
            if state == "ready":
                endpoint.mark_healthy(engine_node=True)
            else:
                endpoint.mark_unhealthy(f"the node's engine {self._options.model!r} is {state}")
        elif response.status_code == httpx.codes.NOT_FOUND and not endpoint.probe_models:
            endpoint.probe_models = True  # not a chattts-gateway (OpenAI itself has no /readyz): ask for its models
            await self._probe(endpoint)
        elif response.status_code == httpx.codes.OK:
            endpoint.mark_healthy(engine_node=is_engine_node(response.headers))
        else:
            endpoint.mark_unhealthy(f"probe {url.path} answered HTTP {response.status_code}")


def _engine_info(name: str, settings: RemoteEngineSettings) -> EngineInfo:
    options = settings.options
    voices = dict.fromkeys([*OPENAI_VOICES, *options.voices])
    return EngineInfo(
        name=name,
        sample_rate=options.sample_rate,
        voices=tuple(VoiceInfo(voice) for voice in voices),
        speed_range=(1.0, 1.0),
        details={"upstream": "openai", "model": options.model, "endpoints": str(len(options.endpoints))},
        remote=True,
    )


async def _answer(attempt: Attempt, sent: Awaitable[httpx.Response], timeout_s: float, *, late: str) -> httpx.Response:
    """The upstream's answer to ``sent`` within ``timeout_s``; no answer (``late`` says so), a connection refused or
    broken is the attempt's failure, counted in its endpoint's breaker."""
    try:
        async with asyncio.timeout(timeout_s):
            return await sent
    except TimeoutError:
        raise attempt.failed(late) from None
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise attempt.failed(describe_error(exc), unreachable=True) from exc
    except httpx.HTTPError as exc:
        raise attempt.failed(describe_error(exc)) from exc
