"""The HTTP guards' refusals: what the defences every API family shares refuse, in the gateway's own words.

The guards (credentials before bodies, the credential and admin throttles, the service token, the JSON checks, the
watch for a client gone) raise these, or the domain errors of the parts they guard (``auth.errors``,
``auth.limits``), and nothing of any API family; each family has one table that gives them its shape (OpenAI's in
``gateway/http/errors.py``, ElevenLabs' in ``gateway/elevenlabs/errors.py``). Their codes are the gateway's own: a
table may name them otherwise, and decides the status.

::

    GuardRefusalError                 kind (machine-readable), message
    ├── NotServedHereError            not on this gateway: the admin API off, a front's route on an engine node
    ├── AddressThrottledError         retry_after_s: an address with too many refused credentials (or admin tokens)
    ├── UnsupportedMediaTypeError     a body that does not say it is JSON
    ├── JsonTooDeepError              max_depth: a body nested deeper than the limit
    ├── ClientClosedError             the client left before its response (never sent: nobody listens)
    └── ProtocolRefusalError          status_code, retry_after_s: what the HTTP protocol refuses before the
                                      application sees the request (``gateway/http/connection_limits.py``)

    RefusedBeforeBodyError            refused: a refusal from a request's head whose announced body is not read, so
                                      the connection cannot go on (answered as ``refused``, and closed)

Also here, what a client refused by one of its tenant's limits is told (:func:`limit_message`, :func:`quota_message`):
the same words in every API family.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from litestar.exceptions import InternalServerException
from redis.exceptions import RedisError

from auth.errors import AuthBackendError
from auth.limits import LimitsUnavailableError, RequestTooLargeError
from auth.usage import UsageUnavailableError

if TYPE_CHECKING:
    from auth.limits import QuotaExceededError, RateLimitExceededError

__all__ = [
    "BACKEND_ERRORS",
    "BACKEND_UNAVAILABLE",
    "AddressThrottledError",
    "ClientClosedError",
    "GuardRefusalError",
    "JsonTooDeepError",
    "NotServedHereError",
    "ProtocolRefusalError",
    "RefusedBeforeBodyError",
    "UnsupportedMediaTypeError",
    "client_closed",
    "limit_message",
    "quota_message",
]


class GuardRefusalError(Exception):
    """A request a guard refuses; ``kind`` names it for machines, ``message`` for people."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


class NotServedHereError(GuardRefusalError):
    """What this gateway does not serve: the admin API without a token configured, a front gateway's route (custom
    voices, consent recordings) on an engine node."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="not_found")


class AddressThrottledError(GuardRefusalError):
    """A client address refused before its credential is looked up: too many refused there lately
    (``too_many_failed_authentications``; ``rate_limit_exceeded`` for admin tokens); ``retry_after_s``: when the
    oldest leaves the window."""

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: int,
        kind: Literal["too_many_failed_authentications", "rate_limit_exceeded"],
    ) -> None:
        super().__init__(message, kind=kind)
        self.retry_after_s = retry_after_s


class UnsupportedMediaTypeError(GuardRefusalError):
    """A body that does not say it is JSON, refused before it is parsed."""

    def __init__(self, content_type: str) -> None:
        super().__init__(
            f"Unsupported content type {content_type or '(none)'!r}: send application/json.",
            kind="unsupported_media_type",
        )
        self.content_type = content_type


class JsonTooDeepError(GuardRefusalError):
    """A JSON document nested deeper than the configured limit."""

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"The JSON body is nested deeper than {max_depth} levels.", kind="json_too_deep")
        self.max_depth = max_depth


class ClientClosedError(GuardRefusalError):
    """The client closed its connection before its response started (or before its whole body came): logged and
    counted, never sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="client_closed_request")


class ProtocolRefusalError(GuardRefusalError):
    """A request (or a connection) the HTTP protocol refuses before the application sees it: a head too large or too
    late, a malformed request, an HTTP version not spoken here, too many connections. Its status is its own (one kind,
    ``too_many_connections``, is a 429 from one address and a 503 at the server's cap); ``retry_after_s``: when to
    come back, where waiting helps."""

    def __init__(self, status_code: int, message: str, kind: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message, kind=kind)
        self.status_code = status_code
        self.retry_after_s = retry_after_s


def client_closed(exc: Exception) -> ClientClosedError | None:
    """The client gone that ``exc`` reports, if it does: Litestar reports a client that disconnected before its whole
    body arrived (gone mid-upload, or closed by the body timeout) as an ``InternalServerException`` told apart only by
    its detail; it is no server error, and wants no traceback."""
    if isinstance(exc, InternalServerException) and exc.detail == "client disconnected prematurely":
        return ClientClosedError("The client closed the connection before sending the whole body.")
    return None


class RefusedBeforeBodyError(Exception):
    """``refused`` (a credential refused, a tenant unknown, an address throttled), raised from a request's head while
    its announced body is left unread: the connection cannot carry another request, so the answer closes it."""

    def __init__(self, refused: Exception) -> None:
        super().__init__(str(refused))
        self.refused = refused


BACKEND_ERRORS: tuple[type[Exception], ...] = (
    LimitsUnavailableError,
    AuthBackendError,
    UsageUnavailableError,  # GET /v1/usage while Redis is unreachable
    RedisError,  # custom voices and admin operations while Redis is unreachable
)
"""A shared backend of the gateway unreachable (Redis behind limits, tenants, usage, voices): worth a retry soon."""
BACKEND_UNAVAILABLE = "A backend of the gateway is unreachable; retry soon."
"""What a client refused for one of :data:`BACKEND_ERRORS` is told (never the backend's own words)."""

_LIMIT_MESSAGES = {
    "requests": "Rate limit reached for requests per minute.",
    "characters": "Rate limit reached for input characters per minute.",
    "concurrency": "Too many concurrent streams for your tenant.",
    "sessions": "Too many open sessions for your tenant.",
    "bodies": "Too many requests of your tenant are still sending their body.",
    "fair_share": "The server is near its connection capacity and your tenant holds its fair share of it.",
}


def limit_message(exc: RateLimitExceededError) -> str:
    """What a client refused by a per-minute or concurrency limit is told: which limit, and when to retry (or, for a
    request larger than the whole limit, that no wait helps)."""
    if isinstance(exc, RequestTooLargeError):
        return (
            f"Request too large for input characters per minute: limit {exc.limit}, requested {exc.asked}. "
            "Send a shorter input; no wait admits this one."
        )
    return f"{_LIMIT_MESSAGES[exc.reason]} Retry after {exc.retry_after_s} s."


def quota_message(exc: QuotaExceededError) -> str:
    """What a client refused by a monthly budget is told: which budget, how it stands, and when it returns."""
    resets = datetime.fromtimestamp(exc.standing.month.end, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    standing = _budget_standing(exc)
    return f"You exceeded your current quota: your monthly budget of {standing}. It starts again at {resets}."


def _budget_standing(exc: QuotaExceededError) -> str:
    """How the refusing budget stands: what is left of it against what the request asks, where it asks characters;
    else (a session or a job, admitted before its text is known, and audio, known only once spoken) what is used."""
    standing = exc.standing
    if exc.budget == "characters_per_month":
        limit, used = standing.characters_limit or 0, standing.characters_used or 0
        if exc.asked > 0:
            return f"{limit} input characters: {max(0, limit - used)} remain, this request needs {int(exc.asked)}"
        return f"{limit} input characters is spent ({used} used this month)"
    # Both to six significant digits: a count at the line never reads as below it.
    limit_s, used_s = standing.audio_seconds_limit or 0.0, standing.audio_seconds_used or 0.0
    return f"{limit_s:g} audio seconds is spent ({used_s:g} used this month)"
