"""The record of one request: what it did, filled in by whoever knows (the handlers, the error table), and written as
its access log line by ``gateway/http/tracking.py`` once the response has gone."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from litestar.types import Scope

__all__ = ["RECORD_KEY", "RequestRecord", "request_record"]

RECORD_KEY = "tts_request_record"
"""Where the record lives in the request's ``scope["state"]``."""


@dataclass(slots=True)
class RequestRecord:
    """What one request did; filled in by the handlers, logged by the middleware."""

    request_id: str
    method: str
    path: str
    trace_id: str | None = None
    """The W3C trace the request belongs to (its caller's ``traceparent``, or one made for it)."""
    started: float = field(default_factory=time.perf_counter, repr=False)
    status: int = 0
    duration_ms: float = 0.0
    tenant: str | None = None
    model: str | None = None
    engine: str | None = None
    format: str | None = None
    characters: int | None = None
    audio_seconds: float | None = None
    ttfb_ms: float | None = None
    cache: str | None = None
    truncated: bool | None = None
    """True when the response began and ended short (its engine failed after the first audio)."""
    code: str | None = None
    """The error's code when the answer is one (``invalid_api_key``, ``rate_limit_exceeded``...)."""
    api_key_id: str | None = None
    """The id of the API key the caller presented (``None``: a JSON Web Token, an open gateway): usage by key."""

    def as_log(self) -> dict[str, Any]:
        # Attribute by attribute: ``dataclasses.asdict`` deep-copies every value, a cost paid on every request.
        return {name: value for name in _LOGGED_FIELDS if (value := getattr(self, name)) is not None}


_LOGGED_FIELDS = tuple(f.name for f in fields(RequestRecord) if f.name not in {"started", "api_key_id"})


def request_record(scope: Scope) -> RequestRecord | None:
    """The record of the request being served (None outside the tracking middleware, e.g. in unit tests)."""
    record: RequestRecord | None = scope.get("state", {}).get(RECORD_KEY)
    return record
