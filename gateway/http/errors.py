"""OpenAI's error body, and the one table that maps every domain error to it.

Handlers never catch exceptions themselves: they raise, and :data:`EXCEPTION_HANDLERS` turns the exception into
``{"error": {"message", "type", "param", "code"}}`` with the status code the OpenAI SDKs map to their exceptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import MediaType, Response
from litestar.exceptions import HTTPException, InternalServerException, ValidationException
from litestar.openapi import ResponseSpec
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_401_UNAUTHORIZED,
    HTTP_403_FORBIDDEN,
    HTTP_404_NOT_FOUND,
    HTTP_409_CONFLICT,
    HTTP_415_UNSUPPORTED_MEDIA_TYPE,
    HTTP_429_TOO_MANY_REQUESTS,
    HTTP_500_INTERNAL_SERVER_ERROR,
    HTTP_503_SERVICE_UNAVAILABLE,
)
from pydantic import ValidationError

from auth.errors import InvalidCredentialsError, UnknownTenantError
from auth.limits import QuotaExceededError, RateLimitExceededError
from engines.base import InvalidSynthesisRequestError
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.http.ratelimit_headers import refusal_headers
from gateway.http.refusals import (
    BACKEND_ERRORS,
    BACKEND_UNAVAILABLE,
    AddressThrottledError,
    GuardRefusalError,
    ProtocolRefusalError,
    RefusedBeforeBodyError,
    client_closed,
    limit_message,
    quota_message,
)
from gateway.http.request_record import request_record
from gateway.http.routing_errors import ROUTING_ERRORS
from gateway.schemas import ErrorResponse
from gateway.speech.errors import (
    FailoverExhaustedError,
    InvalidSpeechRequestError,
    JobQuotaError,
    OverLimitError,
    ResponseTruncatedError,
    SpeechError,
)
from gateway.text import MarkupError
from gateway.uploads.errors import TooManyUploadsError, UploadsBusyError
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar import Request
    from litestar.types import ExceptionHandlersMap

__all__ = [
    "EXCEPTION_HANDLERS",
    "OpenAIError",
    "ResponseTruncatedError",
    "as_openai_error",
    "error_body",
    "error_response",
    "error_responses",
    "note_error",
    "quota_message",
    "refusal_body",
]

logger = naming.logger("errors")

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
#: nginx's status for a request its client abandoned: never sent (nobody is listening), but logged and counted.
CLIENT_CLOSED_REQUEST = 499


class OpenAIError(Exception):
    """An error the client should see exactly as OpenAI would send it."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = INVALID_REQUEST,  # noqa: A002 - OpenAI's field name
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.source: Exception | None = None
        """The error this one renders (a domain error, as :func:`as_openai_error` made it), for another API
        family's table to render in its own words where a socket carries it as this (``gateway/sessions/serving.py``).
        """


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:  # noqa: A002
    """OpenAI's error body."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


_ERROR_DESCRIPTIONS = {
    400: "Invalid request: the error names the parameter.",
    401: "Missing, malformed, unknown, revoked or expired credentials.",
    403: "The tenant may not use this model, or the token names an unknown tenant.",
    404: "Unknown model, voice, tenant or key.",
    405: "Method not allowed on this route.",
    409: "Not in this state: a speech job that failed or was cancelled has no audio.",
    410: "The resource has expired (a speech job's audio after its TTL).",
    413: "Request body over the size limit.",
    415: "The body is not application/json.",
    416: "The Range lies beyond the end of the file.",
    429: "Over a tenant limit; see Retry-After and the x-ratelimit-* headers.",
    503: "Overloaded, not ready, engine failure before the first byte, or a backend unreachable; see Retry-After.",
}


def error_responses(*status_codes: int) -> dict[int, ResponseSpec]:
    """The OpenAPI declaration of the OpenAI-shaped errors a route can answer with."""
    return {
        code: ResponseSpec(ErrorResponse, description=_ERROR_DESCRIPTIONS[code], generate_examples=False)
        for code in status_codes
    }


def _respond(error: OpenAIError) -> Response[dict[str, Any]]:
    return Response(
        error_body(error.message, error.type, error.param, error.code),
        status_code=error.status_code,
        headers=error.headers,
        media_type=MediaType.JSON,
    )


def as_openai_error(exc: Exception) -> OpenAIError:
    """The OpenAI error a domain exception becomes: the table's entry for its most specific class.

    The HTTP handlers send it as a response; the realtime endpoint sends it as an ``error`` event.
    """
    convert = next((_CONVERSIONS[cls] for cls in type(exc).__mro__ if cls in _CONVERSIONS), _unexpected)
    error = convert(exc)
    if error is not exc:
        error.source = exc
    return error


def _openai_error(exc: OpenAIError) -> OpenAIError:
    return exc


# The speech domain's errors by kind, where the kind alone decides: (status, type, code).
_SPEECH_KINDS: dict[str, tuple[int, str, str]] = {
    "model_not_found": (HTTP_404_NOT_FOUND, INVALID_REQUEST, "model_not_found"),
    "model_not_allowed": (HTTP_403_FORBIDDEN, INVALID_REQUEST, "model_not_allowed"),
    "voice_not_found": (HTTP_404_NOT_FOUND, INVALID_REQUEST, "voice_not_found"),
    "voice_not_offered": (HTTP_400_BAD_REQUEST, INVALID_REQUEST, "invalid_value"),
    "pronunciation_dictionary_not_found": (HTTP_404_NOT_FOUND, INVALID_REQUEST, "pronunciation_dictionary_not_found"),
    "job_not_found": (HTTP_404_NOT_FOUND, INVALID_REQUEST, "not_found"),
    "conflict": (HTTP_409_CONFLICT, INVALID_REQUEST, "conflict"),
}


def _speech_error(exc: SpeechError) -> OpenAIError:
    """A speech domain error in OpenAI's words: a request refused as it is is a 400 with the kind as its code; a
    limit of the domain's own is a 429 as OpenAI's limits are (a job's quota as ``insufficient_quota``)."""
    if isinstance(exc, InvalidSpeechRequestError):
        return OpenAIError(HTTP_400_BAD_REQUEST, exc.message, param=exc.param, code=exc.kind)
    if isinstance(exc, OverLimitError):
        kind = "insufficient_quota" if isinstance(exc, JobQuotaError) else "requests"
        headers = {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
        return OpenAIError(HTTP_429_TOO_MANY_REQUESTS, exc.message, type=kind, code=exc.kind, headers=headers)
    if (known := _SPEECH_KINDS.get(exc.kind)) is None:
        return _unexpected(exc)
    status_code, kind, code = known
    return OpenAIError(status_code, exc.message, type=kind, param=exc.param, code=code)


def _failover_exhausted(exc: FailoverExhaustedError) -> OpenAIError:
    """The engine's error the failover gave up on, with the retries the request took (``x-retries``), as a success
    tells them."""
    error = as_openai_error(exc.error)
    error.headers = {**error.headers, "x-retries": str(exc.retries)}
    return error


def _validation_error(exc: ValidationException) -> OpenAIError:
    problems = exc.extra if isinstance(exc.extra, list) else []
    first = problems[0] if problems else {}
    key = str(first.get("key") or "") if isinstance(first, dict) else ""
    param = key.split(".")[0] or None
    detail = str(first.get("message", "")) if isinstance(first, dict) else ""
    return OpenAIError(HTTP_400_BAD_REQUEST, _describe(param, detail, exc.detail), param=param, code=_code_for(detail))


def _model_validation_error(exc: ValidationError) -> OpenAIError:
    # Raised by handlers that validate a second model themselves (e.g. admin input checked as configuration).
    first = exc.errors()[0]
    param = ".".join(str(part) for part in first["loc"]) or None
    return OpenAIError(
        HTTP_400_BAD_REQUEST,
        _describe(param, first["msg"], "Invalid request."),
        param=param,
        code=_code_for(first["msg"]),
    )


def _describe(param: str | None, detail: str, fallback: str) -> str:
    detail = detail.removeprefix("Value error, ")  # pydantic's words for a validator's ValueError, not the client's
    if param is None:
        return detail or fallback
    if detail == "Field required":
        return f"Missing required parameter: '{param}'."
    if detail == "Extra inputs are not permitted":
        return f"Unrecognized request argument supplied: {param}"
    return f"Invalid value for '{param}': {detail}"


def _code_for(detail: str) -> str | None:
    if detail == "Field required":
        return "missing_required_parameter"
    if detail == "Extra inputs are not permitted":
        return "unknown_parameter"
    return "invalid_value" if detail else None


def _http_error(exc: HTTPException) -> OpenAIError:
    kind = SERVER_ERROR if exc.status_code >= HTTP_500_INTERNAL_SERVER_ERROR else INVALID_REQUEST
    code = "not_found" if exc.status_code == HTTP_404_NOT_FOUND else None
    return OpenAIError(exc.status_code, exc.detail, type=kind, code=code, headers=exc.headers)


def _server_exception(exc: InternalServerException) -> OpenAIError:
    gone = client_closed(exc)  # a client gone mid-body, as Litestar reports it
    return _http_error(exc) if gone is None else _guard_refusal(gone)


def _unavailable(message: str, code: str, retry_after_s: int) -> OpenAIError:
    """A 503 worth retrying after ``retry_after_s``: an engine or a backend that cannot serve now."""
    headers = {"Retry-After": str(retry_after_s)}
    return OpenAIError(HTTP_503_SERVICE_UNAVAILABLE, message, type=SERVER_ERROR, code=code, headers=headers)


def _not_ready(exc: EngineNotReadyError) -> OpenAIError:
    return _unavailable(str(exc), "engine_not_ready", 5)


def _overloaded(exc: EngineOverloadedError) -> OpenAIError:
    return _unavailable(str(exc), "engine_overloaded", exc.retry_after_s)


def _synthesis_failed(exc: SynthesisFailedError) -> OpenAIError:
    return _unavailable(f"The engine failed: {exc}", "engine_failed", 1)


def _invalid_for_engine(exc: InvalidSynthesisRequestError) -> OpenAIError:
    return OpenAIError(HTTP_400_BAD_REQUEST, str(exc), param=exc.param, code="invalid_value")


def _invalid_markup(exc: MarkupError) -> OpenAIError:
    return OpenAIError(HTTP_400_BAD_REQUEST, str(exc), param="input", code="invalid_ssml")


def _invalid_credentials(exc: InvalidCredentialsError) -> OpenAIError:
    return OpenAIError(HTTP_401_UNAUTHORIZED, str(exc), code="invalid_api_key")


def _unknown_tenant(exc: UnknownTenantError) -> OpenAIError:
    return OpenAIError(HTTP_403_FORBIDDEN, str(exc), code="unknown_tenant")


def _rate_limited(exc: RateLimitExceededError) -> OpenAIError:
    # OpenAI names the exhausted budget in `type` ("requests" or "tokens"); characters are our tokens.
    kind = "tokens" if exc.reason == "characters" else "requests"
    code = "rate_limit_exceeded" if exc.reason in {"requests", "characters"} else "concurrency_limit_exceeded"
    return OpenAIError(
        HTTP_429_TOO_MANY_REQUESTS, limit_message(exc), type=kind, code=code, headers=refusal_headers(exc)
    )


def _quota_exceeded(exc: QuotaExceededError) -> OpenAIError:
    # OpenAI's answer when a project's budget is spent: 429 `insufficient_quota` in both type and code. Nothing but the
    # month's end helps, so the OpenAI SDKs are told not to retry (they honour `x-should-retry`).
    return OpenAIError(
        HTTP_429_TOO_MANY_REQUESTS,
        quota_message(exc),
        type="insufficient_quota",
        code="insufficient_quota",
        headers=refusal_headers(exc),
    )


def _uploads_busy(exc: UploadsBusyError) -> OpenAIError:
    return _unavailable(str(exc), "uploads_busy", exc.retry_after_s)


def _too_many_uploads(exc: TooManyUploadsError) -> OpenAIError:
    return OpenAIError(
        HTTP_429_TOO_MANY_REQUESTS,
        f"{exc} Retry after {exc.retry_after_s} s.",
        type="requests",
        code="concurrency_limit_exceeded",
        headers={"Retry-After": str(exc.retry_after_s)},
    )


def _backend_down(exc: Exception) -> OpenAIError:
    logger.warning("a shared backend is unreachable: %s", exc)
    return _unavailable(BACKEND_UNAVAILABLE, "backend_unavailable", 1)


# The guards' refusals by kind: (status, type); the kind is the code.
_GUARD_KINDS: dict[str, tuple[int, str]] = {
    "not_found": (HTTP_404_NOT_FOUND, INVALID_REQUEST),
    "too_many_failed_authentications": (HTTP_429_TOO_MANY_REQUESTS, "requests"),
    "rate_limit_exceeded": (HTTP_429_TOO_MANY_REQUESTS, "requests"),
    "unsupported_media_type": (HTTP_415_UNSUPPORTED_MEDIA_TYPE, INVALID_REQUEST),
    "json_too_deep": (HTTP_400_BAD_REQUEST, INVALID_REQUEST),
    "client_closed_request": (CLIENT_CLOSED_REQUEST, INVALID_REQUEST),
}


def _guard_refusal(exc: GuardRefusalError) -> OpenAIError:
    """A guard's refusal in OpenAI's words: its kind as the code; a throttled address is told when to retry."""
    if (known := _GUARD_KINDS.get(exc.kind)) is None:
        return _unexpected(exc)
    status_code, kind = known
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, AddressThrottledError) else {}
    return OpenAIError(status_code, exc.message, type=kind, code=exc.kind, headers=headers)


# The protocol's refusals by status: the type (else ``invalid_request_error``); the kind is the code.
_PROTOCOL_TYPES: dict[int, str] = {HTTP_429_TOO_MANY_REQUESTS: "requests", HTTP_503_SERVICE_UNAVAILABLE: SERVER_ERROR}


def _protocol_refusal(exc: ProtocolRefusalError) -> OpenAIError:
    """A refusal of the HTTP protocol's in OpenAI's words: a 429 names its budget (``requests``) as OpenAI does."""
    kind = _PROTOCOL_TYPES.get(exc.status_code, INVALID_REQUEST)
    headers = {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
    return OpenAIError(exc.status_code, exc.message, type=kind, code=exc.kind, headers=headers)


def _refused_before_body(exc: RefusedBeforeBodyError) -> OpenAIError:
    """The refusal, closing the connection: its announced body is not read, so it cannot carry another request."""
    error = as_openai_error(exc.refused)
    error.headers = {**error.headers, "connection": "close"}
    return error


def _unexpected(_: Exception) -> OpenAIError:
    return OpenAIError(
        HTTP_500_INTERNAL_SERVER_ERROR, "The server had an error processing your request.", type=SERVER_ERROR
    )


_CONVERSIONS: dict[type[Exception], Callable[[Any], OpenAIError]] = {
    OpenAIError: _openai_error,
    SpeechError: _speech_error,
    FailoverExhaustedError: _failover_exhausted,
    ValidationException: _validation_error,
    ValidationError: _model_validation_error,
    HTTPException: _http_error,
    InternalServerException: _server_exception,
    EngineNotReadyError: _not_ready,
    EngineOverloadedError: _overloaded,
    SynthesisFailedError: _synthesis_failed,
    InvalidSynthesisRequestError: _invalid_for_engine,
    MarkupError: _invalid_markup,
    InvalidCredentialsError: _invalid_credentials,
    UnknownTenantError: _unknown_tenant,
    RateLimitExceededError: _rate_limited,
    QuotaExceededError: _quota_exceeded,
    UploadsBusyError: _uploads_busy,
    TooManyUploadsError: _too_many_uploads,
    GuardRefusalError: _guard_refusal,
    ProtocolRefusalError: _protocol_refusal,
    RefusedBeforeBodyError: _refused_before_body,
    **dict.fromkeys(BACKEND_ERRORS, _backend_down),
}


def refusal_body(exc: Exception) -> dict[str, Any]:
    """The body of the OpenAI error ``exc`` becomes: what the HTTP protocol sends, where no response object is made
    (``gateway/http/connection_refusals.py``)."""
    error = as_openai_error(exc)
    return error_body(error.message, error.type, error.param, error.code)


def error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """The response an exception becomes (the handler of :data:`EXCEPTION_HANDLERS`); its error code is noted on the
    request's record, for the access log line."""
    error = as_openai_error(exc)
    note_error(request, exc, error.status_code, error.code)
    return _respond(error)


def note_error(request: Request[Any, Any, Any], exc: Exception, status_code: int, code: str | None) -> None:
    """What every API family's error handler does with the error it answers: its code on the request's record (for
    the access log line), a traceback for a 500, a line for a client gone."""
    if (record := request_record(request.scope)) is not None:
        record.code = code
    if status_code == HTTP_500_INTERNAL_SERVER_ERROR:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    elif status_code == CLIENT_CLOSED_REQUEST:
        logger.info("client went away during %s %s", request.method, request.url.path)


EXCEPTION_HANDLERS: ExceptionHandlersMap = dict.fromkeys([*_CONVERSIONS, *ROUTING_ERRORS, Exception], error_response)
