"""Requests refused by the gateway's defences, counted by where, by status and by the error code they got.

An attack on capacity or on credentials (issue #23) is otherwise visible only in warnings that are rate-limited on
purpose: one line per interval, whatever the count. ``tts_requests_refused_total{source, status, code}`` counts each
refusal:

- ``connection``: the HTTP connection layer (``gateway/http/connection_limits.py``), before any handler: the caps on
  connections (``too_many_connections``: 503 at ``server.max_connections``, 429 at
  ``server.max_connections_per_address``; counted too when such a connection sends nothing and is closed), the head's
  deadline and limits (408 ``request_timeout``, 431 ``request_headers_too_large``) and RFC 9112's refusals (400
  ``invalid_http_request``, 505 ``http_version_not_supported``); also, while a handler reads it, a body that came too
  slowly (408 ``request_timeout``: the client hears it unless its response had begun); and a realtime socket refused
  a place among those awaiting their first message's credentials (503 ``too_many_connections``, closed with 1013);
- ``credentials``: an API key or JWT refused (401 ``invalid_api_key``), a tenant unknown (403 ``unknown_tenant``),
  or a credential not even looked up because its address had too many refused (429
  ``too_many_failed_authentications``, ``gateway/http/auth/credential_throttle.py``);
- ``admin``: the admin API's token wrong (401 ``invalid_api_key``) or its address throttled (429
  ``rate_limit_exceeded``);
- ``socket``: a realtime socket closed (1008) for sending more than its budget (429 ``rate_limit_exceeded``): its
  own messages or bytes a second, or those of all its tenant's sockets on the replica (``gateway/sessions/budget.py``);
  for reading its audio too slowly (400 ``client_too_slow``: ``realtime.send_timeout_s``); or because its API key was
  revoked or its tenant deleted while it was open (401 ``api_key_revoked``, ``tenant_deleted``);
- ``service_token``: an engine node's request without the tier's service token (401 ``invalid_api_key``; 403 for a
  WebSocket upgrade, refused before it is accepted); its only callers are front gateways, so a request without any
  token counts too.

A request to the API or the admin API without any credential is not counted, as the throttles do not count it: it
guesses nothing, costs no lookup, and a realtime socket may send its credential in its first message.

Per process, as the HTTP metrics are: the connection layer runs in uvicorn's protocol, outside any one app. No label
holds an address or a credential.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from prometheus_client import Counter

from gateway.http.errors import as_openai_error

__all__ = ["RefusalSource", "count_refusal", "counted"]

_Refusal = TypeVar("_Refusal", bound=Exception)

RefusalSource = Literal["connection", "credentials", "admin", "socket", "service_token"]

_REFUSALS = Counter(
    "tts_requests_refused",
    "Requests refused by the gateway's defences, by where (connection layer, credentials, admin token, socket: budget, "
    "slow client or revoked credentials; service token), status and error code.",
    ["source", "status", "code"],
)


def count_refusal(source: RefusalSource, status: int, code: str | None) -> None:
    """Count one refusal; ``code`` is the response's error code (OpenAI's error body's ``code``)."""
    _REFUSALS.labels(source, str(status), code or "").inc()


def counted(source: RefusalSource, error: _Refusal) -> _Refusal:
    """``error``, counted as a refusal from ``source``: ``raise counted(...)``. A domain error is counted with the
    status and code the gateway's own table gives it (OpenAI's: the codes this counter has always carried), whichever
    API family answers it."""
    answer = as_openai_error(error)
    count_refusal(source, answer.status_code, answer.code)
    return error
