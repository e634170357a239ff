"""One upstream response read as a :class:`~engines.backend.PcmStream`: whole samples, bounded silences, word marks,
and a verdict for the endpoint's breaker.

An engine node answers in server-sent events that carry its engine's word marks with the audio
(``engines/remote/node_events.py``): they are used as the node placed them, exact for espeak-ng. Any other upstream
is asked for raw ``pcm`` only (as is an engine node of an older version, which sends no marks): the words are then
placed here, estimated from the text and the audio received (``engines/timing.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from typing import TYPE_CHECKING

import httpx
import numpy as np

from engines.errors import SynthesisFailedError
from engines.remote.context import TIMESTAMPS_HEADER
from engines.remote.node_events import MalformedEventsError, NodeEvents
from engines.timing import JobTiming
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from engines.base import EngineInfo
    from engines.remote.endpoints import EndpointAddress
    from engines.remote.node_events import NodeItem
    from engines.timing import TimestampsKind, WordMark

__all__ = ["Attempt", "RemotePcmStream", "describe_error"]

logger = naming.logger("remote")

_SAMPLE_BYTES = 2  # s16le mono
_EVENT_STREAM = "text/event-stream"
_KINDS: dict[str, TimestampsKind] = {"exact": "exact", "estimated": "estimated"}
"""The values of an engine node's ``X-TTS-Timestamps``: its answer carries its engine's word marks."""


def describe_error(exc: BaseException) -> str:
    """A short reason for ``/readyz`` and logs: the exception's kind and message (httpx never puts headers, and so
    no credential, in them)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Attempt:
    """One request on one endpoint address: it reports the outcome to the endpoint's breaker exactly once."""

    def __init__(self, endpoint: EndpointAddress) -> None:
        self.endpoint = endpoint
        self._settled = False

    def succeeded(self) -> None:
        if not self._settled:
            self._settled = True
            self.endpoint.breaker.record_success()

    def failed(self, reason: str, *, unreachable: bool = False) -> SynthesisFailedError:
        """Count the failure (once) and return the error to raise; an unreachable endpoint is also taken out."""
        endpoint = self.endpoint
        if not self._settled:
            self._settled = True
            endpoint.breaker.record_failure()
        endpoint.last_error = reason
        if unreachable:
            endpoint.mark_unhealthy(reason)
        logger.warning("endpoint %s (%s) failed: %s", endpoint.url, endpoint.address, reason)
        return SynthesisFailedError(f"upstream {endpoint.url} failed: {reason}")

    def settle(self) -> None:
        """The request ended without a verdict (its client went away): free a half-open trial slot."""
        if not self._settled:
            self._settled = True
            self.endpoint.breaker.release()


class RemotePcmStream:
    """The audio of one upstream response. The first chunk must come before ``first_byte_deadline`` (a
    ``time.monotonic`` value), each later one within ``idle_timeout_s`` of the one before."""

    def __init__(
        self,
        response: httpx.Response,
        info: EngineInfo,
        attempt: Attempt,
        *,
        text: str,
        first_byte_deadline: float,
        idle_timeout_s: float,
    ) -> None:
        self.sample_rate = info.sample_rate
        self.marks: list[WordMark] = []
        node_events = response.headers.get("content-type", "").startswith(_EVENT_STREAM)
        kind = _KINDS.get(response.headers.get(TIMESTAMPS_HEADER, "").strip()) if node_events else None
        self._events = NodeEvents(len(text), info.sample_rate, marks=kind is not None) if node_events else None
        self.info = info if kind is None else dataclasses.replace(info, timestamps=kind)
        # The words are placed here unless the node sends its own.
        self._timing: JobTiming | None = JobTiming(text, info.sample_rate) if kind is None else None
        self._attempt = attempt
        self._chunks: AsyncIterator[bytes] = response.aiter_bytes()
        self._first_byte_deadline = first_byte_deadline
        self._idle_timeout_s = idle_timeout_s
        self._started = False
        self._odd_byte = b""
        self._items: deque[NodeItem] = deque()
        self.produced_bytes = 0
        """PCM bytes handed on so far (what the scheduler charges the tenant once the request ends)."""

    def __aiter__(self) -> RemotePcmStream:
        return self

    async def __anext__(self) -> bytes:
        while True:
            data = await self._next_pcm()
            if data is None:
                self._attempt.succeeded()  # a complete (possibly empty) answer
                if self._timing is not None:
                    self.marks.extend(self._timing.finish())
                    self._timing = None
                raise StopAsyncIteration
            # The upstream's chunks need not hold whole samples: carry an odd byte over to the next one.
            data = self._odd_byte + data
            whole = len(data) - len(data) % _SAMPLE_BYTES
            self._odd_byte = data[whole:]
            if whole:
                self.produced_bytes += whole
                if self._timing is not None:
                    self._timing.add_audio(np.frombuffer(data, dtype="<i2", count=whole // _SAMPLE_BYTES))
                return data[:whole]

    async def _next_pcm(self) -> bytes | None:
        """The next PCM of the answer (``None`` at its end); a node's marks are taken as they come, after the audio
        they lie in."""
        events = self._events
        if events is None:
            return await self._next_raw()
        while not self._items:
            data = await self._next_raw()
            if data is None:
                if not events.done:
                    raise self._attempt.failed("stream cut: its events ended before speech.audio.done")
                return None
            try:
                self._items.extend(events.feed(data))
            except MalformedEventsError as exc:
                raise self._attempt.failed(f"malformed answer: {exc}") from None
        item = self._items.popleft()
        if isinstance(item, bytes):
            return item
        self.marks.extend(item)
        return b""  # no audio: the loop above asks again

    async def aclose(self) -> None:
        await self._chunks.aclose()  # type: ignore[attr-defined]

    async def _next_raw(self) -> bytes | None:
        timeout = self._idle_timeout_s if self._started else max(0.0, self._first_byte_deadline - time.monotonic())
        try:
            async with asyncio.timeout(timeout):
                data = await anext(self._chunks, None)
        except TimeoutError:
            phase = "between chunks" if self._started else "before the first byte"
            raise self._attempt.failed(f"no audio for {timeout:.1f} s {phase}") from None
        except httpx.HTTPError as exc:
            reason = describe_error(exc)
            raise self._attempt.failed(f"stream cut: {reason}" if self._started else reason) from exc
        if data and not self._started:
            self._started = True
            self._attempt.succeeded()
        return data
