"""What every realtime WebSocket endpoint does around its session: authentication through the address's credential
throttle, admission, and how each way a session ends becomes a close code (or, before the handshake is accepted, an
HTTP refusal), with one log line per session.

Both protocols (``/v1/audio/speech/stream`` and OpenAI's ``/v1/realtime``) are served this way; only how the
credentials arrive and what the session speaks differ.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from litestar.exceptions import WebSocketDisconnect

from auth.errors import AuthBackendError, InvalidCredentialsError, UnknownTenantError
from auth.limits import LimitsUnavailableError, QuotaExceededError, RateLimitExceededError
from gateway.http.client_address import address_key
from gateway.observability.logs import HANDSHAKE_REFUSAL_LOGGED
from gateway.observability.refusals import RefusalSource, count_refusal
from gateway.observability.tracing import span
from gateway.sessions.budget import SOCKET_BUDGET_CLOSE_CODE, SocketBudget, TenantShare
from gateway.sessions.session_errors import (
    SessionDrainedError,
    SessionError,
    SessionIdleError,
    SessionRevokedError,
    SlowClientError,
    SocketBudgetExceededError,
)
from gateway.state import gateway_state
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from contextlib import AsyncExitStack

    from litestar import WebSocket

    from auth import Principal, Tenant
    from gateway.sessions.dialect import Said
    from gateway.settings import RealtimeSettings

__all__ = [
    "NORMAL_CLOSURE",
    "POLICY_VIOLATION",
    "TRY_AGAIN_LATER",
    "SessionLog",
    "SessionRefusedError",
    "admit_session",
    "authenticated",
    "awaiting_credentials",
    "close_reason",
    "serving",
    "socket_budget",
    "tenant_realtime",
]

MAX_CLOSE_REASON_BYTES = 123
"""A close frame's reason, in UTF-8 (RFC 6455: 125 bytes of payload, two of them the code)."""

logger = naming.logger("realtime")

NORMAL_CLOSURE = 1000  # the session ended idle
# Bad or revoked credentials; a tenant's monthly budget spent; a client too slow to take its audio, or over its socket
# budget: what reconnecting soon would meet again.
POLICY_VIOLATION = 1008
SERVICE_RESTART = 1012  # the server is shutting down: reconnect (to another replica)
TRY_AGAIN_LATER = 1013  # over a per-minute or concurrency limit, or the gateway cannot admit sessions now
_AUTH_ERRORS = (InvalidCredentialsError, UnknownTenantError)


class SessionRefusedError(Exception):
    """The session cannot open for ``error`` (a :class:`~gateway.sessions.session_errors.SessionError`, or a domain
    error: bad credentials, a tenant over its limits, a model it may not use), which the dialect's table says: refused
    at the handshake (an HTTP status), or closed with ``close_code`` when the socket was accepted already."""

    def __init__(self, error: Exception, close_code: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.close_code = close_code


class LoggedSession(Protocol):
    def log_fields(self) -> dict[str, Any]:
        """What the session did, for its log line."""
        ...


@dataclass
class SessionLog:
    """The session's one log line, filled in as it goes."""

    path: str
    session_id: str = field(default_factory=lambda: f"sess_{uuid.uuid4().hex[:20]}")
    tenant: str | None = None
    session: LoggedSession | None = None
    realtime: RealtimeSettings | None = None
    """The settings the session runs under (:func:`tenant_realtime`), once its tenant is known."""
    budget: SocketBudget | None = None
    """What the client sent, paid for (:func:`socket_budget`), once the session has one."""


@asynccontextmanager
async def serving(
    socket: WebSocket[Any, Any, Any],
    path: str,
    say: Callable[[BaseException], Said],
) -> AsyncIterator[SessionLog]:
    """Serve one socket in the block; how the session ended decides how the socket closes (after an error event that
    says why, in the words of the dialect's table ``say``), and is logged. A refusal at the handshake is answered with
    the HTTP status and body ``say`` makes of it."""
    metrics = gateway_state(socket.app).metrics
    server_realtime = gateway_state(socket.app).settings.realtime
    log = SessionLog(path)
    started = time.perf_counter()
    outcome = "closed"
    status: int | None = None  # the HTTP status of a handshake refused
    metrics.realtime_connections.inc()
    try:
        yield log
    except SessionRevokedError as revoked:
        outcome = f"revoked: {revoked.error.code}"
        await _close(socket, POLICY_VIOLATION, say(counted("socket", revoked.error)))
    except SessionDrainedError:
        outcome = "drained for shutdown"
        await _close(socket, SERVICE_RESTART, None, reason="server shutting down; reconnect")
    except SessionRefusedError as refused:
        said = say(refused.error)
        outcome = f"refused: {said.code}"
        if said.unexpected:  # a bug met while refusing (credentials, admission): answered as an internal error
            logger.error("realtime session refused", exc_info=refused.error)
        status = await _refuse(socket, refused.close_code, said)
    except SlowClientError:
        outcome = "client too slow"
        slow = SessionError(400, "The client read audio too slowly.", code="client_too_slow")
        await _close(socket, POLICY_VIOLATION, say(counted("socket", slow)))
    except SocketBudgetExceededError as over:
        outcome = f"over socket budget: {over.error.code}"
        await _close(socket, SOCKET_BUDGET_CLOSE_CODE, say(counted("socket", over.error)))
    except SessionIdleError:
        outcome = "idle timeout"
        idle_timeout_s = (log.realtime or server_realtime).idle_timeout_s
        message = f"The session was idle for {idle_timeout_s:g} s and has been closed."
        await _close(socket, NORMAL_CLOSURE, say(SessionError(408, message, code="session_idle_timeout")))
    except WebSocketDisconnect:
        outcome = "client left"  # leaving the session cancelled its speech and released its lease
    finally:
        metrics.realtime_connections.dec()
        record: dict[str, Any] = {"session_id": log.session_id, "path": path, "tenant": log.tenant, "outcome": outcome}
        if status is not None:
            record["status"] = status
        record["duration_ms"] = round((time.perf_counter() - started) * 1000, 2)
        if log.session is not None:
            record.update(log.session.log_fields())
        if log.budget is not None:
            record.update(messages_in=log.budget.messages, bytes_in=log.budget.bytes)
        logger.info("realtime session", extra={"record": record})  # one line per session, like the access log


def tenant_realtime(settings: RealtimeSettings, tenant: Tenant) -> RealtimeSettings:
    """The realtime settings as they hold for ``tenant``'s sessions: its own idle timeout
    (``limits.session_idle_timeout_s``) when it has one. Read as each session opens, so a tenant changed in the admin
    API holds for its next sessions; one already open keeps what it opened with."""
    idle_timeout_s = tenant.limits.session_idle_timeout_s
    return settings if idle_timeout_s is None else settings.model_copy(update={"idle_timeout_s": idle_timeout_s})


def socket_budget(socket: WebSocket[Any, Any, Any], log: SessionLog) -> SocketBudget:
    """A new budget for the session's socket (``gateway/sessions/budget.py``), under the settings the session runs
    under, paying into its tenant's on this replica as well (once the tenant is known), noted in its log line."""
    state = gateway_state(socket.app)
    settings = log.realtime or state.settings.realtime
    max_message_bytes = state.settings.server.max_body_bytes  # uvicorn's ws_max_size
    tenant = (
        None
        if log.tenant is None
        else TenantShare(state.sessions.socket_budgets, log.tenant, settings, max_message_bytes)
    )
    log.budget = SocketBudget(settings, max_message_bytes=max_message_bytes, tenant=tenant)
    return log.budget


async def authenticated(socket: WebSocket[Any, Any, Any], authorization: str | None) -> Principal:
    """The caller of ``authorization`` (anyone, without it, on a gateway that runs open), through the address's
    credential throttle (``gateway/http/auth/credential_throttle.py``).

    Raises:
        SessionRefusedError: bad credentials (1008), an auth backend unreachable or the address throttled (1013).
    """
    state = gateway_state(socket.app)
    client = socket.client.host if socket.client else None
    try:
        with span("authenticate"):
            return await state.credential_throttle.authenticate(client, authorization, state.authenticator.authenticate)
    except _AUTH_ERRORS as exc:
        raise SessionRefusedError(exc, POLICY_VIOLATION) from None
    except AuthBackendError as exc:
        raise SessionRefusedError(exc, TRY_AGAIN_LATER) from None
    except Exception as throttled:  # the address is throttled for refused credentials: the throttle's 429 (a bug
        # would be an internal error, logged by ``serving``)
        raise SessionRefusedError(throttled, TRY_AGAIN_LATER) from None


@contextmanager
def awaiting_credentials(socket: WebSocket[Any, Any, Any], settings: RealtimeSettings) -> Iterator[None]:
    """Hold, while the block waits for credentials in the client's first message, one of the places of the accepted
    sockets that wait for theirs: at most ``max_unauthenticated`` of them, ``max_unauthenticated_per_address`` from one
    address, so that unauthenticated sockets cannot pile up.

    Raises:
        SessionRefusedError: no place is free (503 ``too_many_connections``, 1013).
    """
    waiting = gateway_state(socket.app).awaiting_credentials
    address = address_key(socket.client.host if socket.client else "unknown")
    if waiting.total() >= settings.max_unauthenticated or waiting[address] >= settings.max_unauthenticated_per_address:
        busy = SessionError(
            503,
            "Too many connections are waiting to authenticate: send the credentials in the Authorization header, "
            "or retry soon.",
            code="too_many_connections",
        )
        raise SessionRefusedError(counted("connection", busy), TRY_AGAIN_LATER)
    waiting[address] += 1
    try:
        yield
    finally:
        waiting[address] -= 1
        if waiting[address] <= 0:
            del waiting[address]


async def admit_session(socket: WebSocket[Any, Any, Any], principal: Principal, held: AsyncExitStack) -> None:
    """A session holds its place among what the tenant holds of this replica (refused over its fair share of a
    crowded one) and, through the speech service, one of the tenant's open sessions, one request and one concurrent
    stream, until ``held`` closes.

    Raises:
        SessionRefusedError: over one of those, or the limits' storage unreachable (1013); the tenant's monthly budget
            spent (1008: a client that reconnects on 1013 would be refused until the month ends).
    """
    state = gateway_state(socket.app)
    try:
        held.callback(state.held.take(principal.tenant.name, "sessions"))
        await state.speech.open_session(principal.tenant, held)
    except QuotaExceededError as exc:
        raise SessionRefusedError(exc, POLICY_VIOLATION) from None
    except (RateLimitExceededError, LimitsUnavailableError) as exc:
        raise SessionRefusedError(exc, TRY_AGAIN_LATER) from None


def counted(source: RefusalSource, fault: SessionError) -> SessionError:
    """``fault``, counted among the refusals of the gateway's defences (``gateway/observability/refusals.py``)."""
    count_refusal(source, fault.status_code, fault.code)
    return fault


async def _refuse(socket: WebSocket[Any, Any, Any], close_code: int, said: Said) -> int | None:
    """Before the handshake is accepted: the HTTP answer ``said`` where the server can send one (uvicorn's
    ``websocket.http.response`` extension), else the handshake's plain 403; after it, a close. Returns the HTTP status
    the handshake was refused with (``None`` for a close)."""
    if socket.connection_state != "init":
        await _close(socket, close_code, said)
        return None
    if "websocket.http.response" not in (socket.scope.get("extensions") or {}):
        await socket.close(close_code)
        return None
    body = json.dumps(said.body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.lower().encode(), value.encode()) for name, value in said.headers.items()]
    try:
        await socket.send({"type": "websocket.http.response.start", "status": said.status, "headers": headers})
        await socket.send({"type": "websocket.http.response.body", "body": body, "more_body": False})
    except (WebSocketDisconnect, OSError):
        pass  # the client is gone
    HANDSHAKE_REFUSAL_LOGGED.set(True)  # the session's line says so (serving); uvicorn's error line would be false
    return said.status


async def _close(socket: WebSocket[Any, Any, Any], code: int, said: Said | None, reason: str = "") -> None:
    """Say why in an error event (unless the session said so already), then close; a client gone (or not reading)
    by now just misses it."""
    try:
        async with asyncio.timeout(1.0):
            if said is not None:
                await socket.send_text(said.event)
                reason = said.reason
            await socket.close(code, close_reason(reason))
    except (TimeoutError, WebSocketDisconnect, OSError):
        pass


def close_reason(reason: str) -> str:
    """``reason`` as a close frame carries it: whole when it fits, else cut at a word's end and marked "…" (the
    error event before the close says it whole)."""
    if len(reason.encode()) <= MAX_CLOSE_REASON_BYTES:
        return reason
    room = MAX_CLOSE_REASON_BYTES - len("…".encode())
    cut = reason.encode()[:room].decode(errors="ignore")
    words = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return words.rstrip(" ,;:(") + "…"
