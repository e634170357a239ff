"""The record of one request: what it did, filled in by whoever knows (the handlers, the error table, the speech
operation: its transport-neutral part is ``gateway/speech/contract.py``'s record), and written as its access log line
by ``gateway/http/tracking.py`` once the response has gone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.speech.contract import SpeechRecord

if TYPE_CHECKING:
    from litestar.types import Scope

__all__ = ["RECORD_KEY", "RequestRecord", "http_record", "request_record"]

RECORD_KEY = "tts_request_record"
"""Where the record lives in the request's ``scope["state"]``."""


@dataclass(slots=True, kw_only=True)
class RequestRecord(SpeechRecord):
    """What one HTTP request did; filled in by the handlers, logged by the middleware."""

    method: str
    path: str
    transport: str = "http"
    status: int = 0
    duration_ms: float = 0.0
    truncated: bool | None = None
    """True when the response began and ended short (its engine failed after the first audio)."""
    code: str | None = None
    """The error's code when the answer is one (``invalid_api_key``, ``rate_limit_exceeded``...)."""

    def as_log(self) -> dict[str, Any]:
        # Attribute by attribute: ``dataclasses.asdict`` deep-copies every value, a cost paid on every request.
        return {name: value for name in _LOGGED_FIELDS if (value := getattr(self, name)) is not None}


# The access log line's fields, in its order (the transport is always HTTP here; the key's id is not logged).
_LOGGED_FIELDS = (
    "request_id", "method", "path", "trace_id", "status", "duration_ms", "tenant", "model", "engine", "format",
    "characters", "audio_seconds", "ttfb_ms", "cache", "truncated", "code",
)  # fmt: skip


def request_record(scope: Scope) -> RequestRecord | None:
    """The record of the request being served (None outside the tracking middleware, e.g. in unit tests)."""
    record: RequestRecord | None = scope.get("state", {}).get(RECORD_KEY)
    return record


def http_record(scope: Scope) -> RequestRecord:
    """The record of the HTTP request being served, for the speech operation to fill in; outside the tracking
    middleware (unit tests), one of its own that nothing logs."""
    return request_record(scope) or RequestRecord(
        request_id="-", method=str(scope.get("method", "POST")), path=scope["path"]
    )
