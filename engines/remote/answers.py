"""Reading an upstream's answers: its error bodies (bounded), an engine node's overload and readiness, a sample's
speaker."""

from __future__ import annotations

import httpx

__all__ = ["error_message", "node_engine_state", "node_overloaded", "read_bounded", "retry_after_s", "speaker_of"]

_MAX_ERROR_BODY = 4096
_OVERLOAD_RETRY_AFTER_S = 1
_OVERLOADED_CODE = "engine_overloaded"  # the error code of a chattts-gateway's 503 for a full queue


def node_engine_state(response: httpx.Response, model: str) -> str | None:
    """The state an engine node's ``/readyz`` body gives its engine ``model``; ``None`` when it names none (the model
    is an alias there, or the body is not a readiness report): the answer's status then decides."""
    try:
        state = response.json()["engines"][model]["state"]
    except (ValueError, KeyError, TypeError):
        return None
    return state if isinstance(state, str) else None


def speaker_of(response: httpx.Response) -> str | None:
    """The ``speaker`` of an engine node's answer to a sample, if it is a usable one."""
    try:
        speaker = response.json().get("speaker")
    except (ValueError, AttributeError):
        return None
    return speaker if isinstance(speaker, str) and speaker else None


async def read_bounded(response: httpx.Response) -> bytes:
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _MAX_ERROR_BODY:
            break
    return body[:_MAX_ERROR_BODY]


def node_overloaded(status: int, body: bytes) -> bool:
    """An engine node's 503 when its queue, or the tenant's share of it (``max_queued``), is full: the endpoint
    works, so this is an overload to pass on, not a failure for its breaker (one tenant over its cap would otherwise
    open the breaker for every tenant)."""
    if status != httpx.codes.SERVICE_UNAVAILABLE:
        return False
    try:
        error = httpx.Response(200, content=body).json().get("error") or {}
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("code") == _OVERLOADED_CODE


def error_message(body: bytes) -> tuple[str, str | None]:
    """The message and parameter of an OpenAI-shaped error body, else its text."""
    try:
        error = httpx.Response(200, content=body).json().get("error") or {}
        param = error.get("param")
        return str(error.get("message") or "")[:500], param if isinstance(param, str) else None
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace").strip()[:500], None


def retry_after_s(response: httpx.Response) -> int:
    try:
        return max(1, int(float(response.headers.get("retry-after", _OVERLOAD_RETRY_AFTER_S))))
    except ValueError:
        return _OVERLOAD_RETRY_AFTER_S
