"""Requests refused before any handler ran, counted by where, by status and by the error code they got.

An attack on capacity or on credentials (issue #23) is otherwise visible only in warnings that are rate-limited on
purpose: one line per interval, whatever the count. ``tts_requests_refused_total{source, status, code}`` counts each
refusal:

- ``connection``: the HTTP connection layer (``gateway/http/connection_limits.py``): the caps on connections
  (``too_many_connections``: 503 at ``server.max_connections``, 429 at ``server.max_connections_per_address``), the
  deadlines (408 ``request_timeout``), the head's limits (431 ``request_headers_too_large``) and RFC 9112's refusals
  (400 ``invalid_http_request``, 505 ``http_version_not_supported``); and a realtime socket refused a place among
  those awaiting their first message's credentials (503 ``too_many_connections``, closed with 1013);
- ``credentials``: an API key or JWT refused (401 ``invalid_api_key``), or not even looked up because its address had
  too many refused (429 ``too_many_failed_authentications``, ``gateway/http/credential_throttle.py``);
- ``admin``: the admin API's token missing or wrong (401 ``invalid_api_key``) or its address throttled (429
  ``rate_limit_exceeded``);
- ``service_token``: an engine node's request without the tier's service token (401 ``invalid_api_key``).

Per process, as the HTTP metrics are: the connection layer runs in uvicorn's protocol, outside any one app. No label
holds an address or a credential.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from prometheus_client import Counter

if TYPE_CHECKING:
    from gateway.http.errors import OpenAIError

__all__ = ["RefusalSource", "count_refusal", "counted"]

RefusalSource = Literal["connection", "credentials", "admin", "service_token"]

_REFUSALS = Counter(
    "tts_requests_refused",
    "Requests refused before any handler ran, by where (connection layer, credentials, admin token, service token), "
    "status and error code.",
    ["source", "status", "code"],
)


def count_refusal(source: RefusalSource, status: int, code: str | None) -> None:
    """Count one refusal; ``code`` is the response's error code (OpenAI's error body's ``code``)."""
    _REFUSALS.labels(source, str(status), code or "").inc()


def counted(source: RefusalSource, error: OpenAIError) -> OpenAIError:
    """``error``, counted as a refusal from ``source``: ``raise counted(...)``."""
    count_refusal(source, error.status_code, error.code)
    return error
