"""ElevenLabs' error bodies, and the one table that renders every error of its routes in them.

The routes raise what every route raises (the speech pipeline's, the engines', auth's and the HTTP guards' domain
errors, Litestar's validation and HTTP errors); :data:`EXCEPTION_HANDLERS`, scoped to the ElevenLabs routes, answers
them as ElevenLabs' server does, each from this module's own table (:data:`_ANSWERS`), never from another API
family's codes:

- a request that fails validation: 422 ``{"detail": [{"loc", "msg", "type"}, ...]}`` (FastAPI's shape, which the
  SDK raises as ``UnprocessableEntityError``);
- everything else: ``{"detail": {"status", "message"}}``, by the error's class and kind: ``voice_not_found`` (404,
  whether the voice is an unknown built-in or a custom voice the tenant does not have), ``model_not_found``,
  ``invalid_api_key`` (``needs_authorization`` when the request presented no credential), ``quota_exceeded`` (401,
  as ElevenLabs answers a spent character quota: a monthly budget), ``rate_limit_exceeded``,
  ``too_many_concurrent_requests``, ``system_busy`` (429, as ElevenLabs sends it: the engine's queue full)...; where
  ElevenLabs has no word of its own, the gateway's kind (``engine_not_ready``, ``backend_unavailable``,
  ``json_too_deep``...) with the status the gateway gives it everywhere, and the headers a client needs
  (``Retry-After``, the rate-limit headers); an error of failover that gave up answers as its engine's error, with
  ``x-retries``.

An ``OpenAIError`` that a shared route still raises itself is answered with its status, and its code as ``status``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import MediaType, Response
from litestar.exceptions import (
    ClientException,
    HTTPException,
    SerializationException,
    ValidationException,
)
from litestar.openapi import ResponseSpec
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_401_UNAUTHORIZED,
    HTTP_403_FORBIDDEN,
    HTTP_404_NOT_FOUND,
    HTTP_409_CONFLICT,
    HTTP_415_UNSUPPORTED_MEDIA_TYPE,
    HTTP_422_UNPROCESSABLE_ENTITY,
    HTTP_429_TOO_MANY_REQUESTS,
    HTTP_500_INTERNAL_SERVER_ERROR,
    HTTP_503_SERVICE_UNAVAILABLE,
)
from pydantic import ValidationError

from auth.errors import InvalidCredentialsError, UnknownTenantError
from auth.limits import QuotaExceededError, RateLimitExceededError
from engines.base import InvalidSynthesisRequestError
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.elevenlabs.wire import (
    ElevenLabsErrorDetail,
    ElevenLabsErrorResponse,
    ElevenLabsValidationError,
    ValidationProblem,
)
from gateway.http import refusals
from gateway.http.auth.security import presented_authorization
from gateway.http.errors import CLIENT_CLOSED_REQUEST, OpenAIError, as_openai_error, note_error
from gateway.http.errors import EXCEPTION_HANDLERS as OPENAI_EXCEPTION_HANDLERS
from gateway.http.ratelimit_headers import refusal_headers
from gateway.speech.errors import (
    FailoverExhaustedError,
    InvalidSpeechRequestError,
    OverLimitError,
    SpeechError,
    UnknownVoiceError,
)
from gateway.text import MarkupError
from gateway.uploads.errors import TooManyUploadsError, UploadsBusyError
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from litestar import Request
    from litestar.types import ExceptionHandlersMap

__all__ = [
    "EXCEPTION_HANDLERS",
    "QUOTA_CODE",
    "ErrorAnswer",
    "as_elevenlabs_error",
    "error_responses",
    "refusal_body",
    "socket_error",
]

logger = naming.logger("errors")

QUOTA_CODE = "insufficient_quota"
"""The code a socket's error object carries for a request refused by a monthly budget (``auth.limits.
QuotaExceededError``), which the socket names ``quota_exceeded`` (``gateway/elevenlabs/socket_wire.py``)."""
NEEDS_AUTHORIZATION = "Neither authorization header nor xi-api-key received, please provide one."
# The speech domain's errors on ElevenLabs' sockets, by kind: (``code``, a status; ``error``). A socket names them as
# its first release did, not as the REST routes do (an SDK's socket client reads ``message`` alone); a request refused
# as it is is a 400 named by its kind, a limit of the domain's own a 429 named by its kind.
_SOCKET_KINDS: Mapping[str, tuple[int, str]] = {
    "model_not_found": (HTTP_404_NOT_FOUND, "model_not_found"),
    "model_not_allowed": (HTTP_403_FORBIDDEN, "model_not_allowed"),
    "voice_not_found": (HTTP_404_NOT_FOUND, "voice_not_found"),
    "voice_not_offered": (HTTP_400_BAD_REQUEST, "invalid_value"),
    "pronunciation_dictionary_not_found": (HTTP_404_NOT_FOUND, "pronunciation_dictionary_not_found"),
    "job_not_found": (HTTP_404_NOT_FOUND, "not_found"),
    "conflict": (HTTP_409_CONFLICT, "conflict"),
}
# The speech domain's errors on the REST routes, by kind: (status code, ``detail.status``), as on the sockets but for a
# built-in voice the model does not offer: not found, as ElevenLabs says of any voice it does not know. A request
# refused as it is is a 400 named by its kind, a limit of the domain's own a 429 named by its kind (its concurrency
# limit as ElevenLabs names its own).
_SPEECH_KINDS: Mapping[str, tuple[int, str]] = {
    **_SOCKET_KINDS,
    "voice_not_offered": (HTTP_404_NOT_FOUND, "voice_not_found"),
}
_LIMIT_STATUSES: Mapping[str, str] = {"concurrency_limit_exceeded": "too_many_concurrent_requests"}
# The HTTP guards' refusals by kind: the status code (the kind is ``detail.status``).
_GUARD_KINDS: Mapping[str, int] = {
    "not_found": HTTP_404_NOT_FOUND,
    "too_many_failed_authentications": HTTP_429_TOO_MANY_REQUESTS,
    "rate_limit_exceeded": HTTP_429_TOO_MANY_REQUESTS,
    "unsupported_media_type": HTTP_415_UNSUPPORTED_MEDIA_TYPE,
    "json_too_deep": HTTP_400_BAD_REQUEST,
    "client_closed_request": CLIENT_CLOSED_REQUEST,
}
# For an error without a kind of its own (Litestar's HTTP errors).
_BY_HTTP_STATUS: Mapping[int, str] = {
    400: "invalid_request",
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    429: "rate_limit_exceeded",
    503: "service_unavailable",
}


class ErrorAnswer:
    """What an ElevenLabs client is answered for an error: a status code, ``detail`` (an object, or the validation
    problems) and headers."""

    def __init__(
        self, status_code: int, detail: ElevenLabsErrorDetail | list[ValidationProblem], headers: dict[str, str]
    ) -> None:
        self.status_code = status_code
        self.detail = detail
        self.headers = headers

    @property
    def code(self) -> str:
        """What the access log notes as the error's code."""
        return self.detail.status if isinstance(self.detail, ElevenLabsErrorDetail) else "validation_error"

    def body(self) -> dict[str, Any]:
        if isinstance(self.detail, ElevenLabsErrorDetail):
            return ElevenLabsErrorResponse(detail=self.detail).model_dump()
        return ElevenLabsValidationError(detail=self.detail).model_dump()


def as_elevenlabs_error(exc: Exception, headers: Mapping[str, str]) -> ErrorAnswer:
    """The ElevenLabs error ``exc`` becomes, for a request with ``headers`` (whether it presented a credential): the
    table's entry for its most specific class; a 401 to a request without any credential is ``needs_authorization``,
    as ElevenLabs says."""
    if isinstance(exc, OpenAIError) and exc.source is not None:  # carried by a socket's refusal: what it renders
        exc = exc.source
    answer = _answer(exc)
    if (
        answer.status_code == HTTP_401_UNAUTHORIZED
        and answer.code != "quota_exceeded"
        and presented_authorization(headers) is None
    ):
        answer.detail = ElevenLabsErrorDetail(status="needs_authorization", message=NEEDS_AUTHORIZATION)
    return answer


def _answer(exc: Exception) -> ErrorAnswer:
    convert = next((_ANSWERS[cls] for cls in type(exc).__mro__ if cls in _ANSWERS), _unexpected)
    return convert(exc)


def _detail(status_code: int, status: str, message: str, headers: Mapping[str, str] | None = None) -> ErrorAnswer:
    return ErrorAnswer(status_code, ElevenLabsErrorDetail(status=status, message=message), dict(headers or {}))


def _retry_after(retry_after_s: int | None) -> dict[str, str]:
    return {} if retry_after_s is None else {"Retry-After": str(retry_after_s)}


def _speech_error(exc: SpeechError) -> ErrorAnswer:
    """A speech domain error in ElevenLabs' words, from :data:`_SPEECH_KINDS`."""
    message = exc.message
    if isinstance(exc, UnknownVoiceError):
        message = f"A voice with the voice_id '{exc.voice_id}' was not found."
    retry_after_s = None
    if isinstance(exc, InvalidSpeechRequestError):
        status_code, status = HTTP_400_BAD_REQUEST, exc.kind
    elif isinstance(exc, OverLimitError):
        status_code, status = HTTP_429_TOO_MANY_REQUESTS, _LIMIT_STATUSES.get(exc.kind, exc.kind)
        retry_after_s = exc.retry_after_s
    else:
        status_code, status = _SPEECH_KINDS.get(exc.kind, (HTTP_500_INTERNAL_SERVER_ERROR, "internal_error"))
    return _detail(status_code, status, message, _retry_after(retry_after_s))


def _failover_exhausted(exc: FailoverExhaustedError) -> ErrorAnswer:
    """What the engine said, and the retries the request took (as a success tells them)."""
    answer = _answer(exc.error)
    answer.headers = {**answer.headers, "x-retries": str(exc.retries)}
    return answer


def _validation_error(exc: ValidationException) -> ErrorAnswer:
    return ErrorAnswer(HTTP_422_UNPROCESSABLE_ENTITY, _problems(exc), {})


def _model_validation_error(exc: ValidationError) -> ErrorAnswer:  # a model a handler validated itself
    return ErrorAnswer(HTTP_422_UNPROCESSABLE_ENTITY, _pydantic_problems(exc, "body"), {})


def _client_error(exc: ClientException) -> ErrorAnswer:
    if isinstance(exc.__cause__, SerializationException):  # a body that is not JSON, as FastAPI reports it
        problem = ValidationProblem(loc=["body"], msg="JSON decode error", type="json_invalid")
        return ErrorAnswer(HTTP_422_UNPROCESSABLE_ENTITY, [problem], dict(exc.headers or {}))
    return _http_error(exc)


def _http_error(exc: HTTPException) -> ErrorAnswer:
    if (gone := refusals.client_closed(exc)) is not None:
        return _guard_refusal(gone)
    status = _BY_HTTP_STATUS.get(exc.status_code, "internal_error")
    return _detail(exc.status_code, status, exc.detail, exc.headers)


def _unavailable(status: str, message: str, retry_after_s: int) -> ErrorAnswer:
    return _detail(HTTP_503_SERVICE_UNAVAILABLE, status, message, _retry_after(retry_after_s))


def _overloaded(exc: EngineOverloadedError) -> ErrorAnswer:
    """The engine's queue full: ElevenLabs' ``system_busy``, which it sends as a 429 (its other 429 being
    ``too_many_concurrent_requests``), retried after ``Retry-After``."""
    return _detail(HTTP_429_TOO_MANY_REQUESTS, "system_busy", str(exc), _retry_after(exc.retry_after_s))


def _backend_down(exc: Exception) -> ErrorAnswer:
    logger.warning("a shared backend is unreachable: %s", exc)
    return _unavailable("backend_unavailable", refusals.BACKEND_UNAVAILABLE, 1)


def _rate_limited(exc: RateLimitExceededError) -> ErrorAnswer:
    """A tenant's limit: per minute (``rate_limit_exceeded``) or at once (``too_many_concurrent_requests``, as
    ElevenLabs names its concurrency limit)."""
    per_minute = exc.reason in {"requests", "characters"}
    status = "rate_limit_exceeded" if per_minute else "too_many_concurrent_requests"
    return _detail(HTTP_429_TOO_MANY_REQUESTS, status, refusals.limit_message(exc), refusal_headers(exc))


def _quota_exceeded(exc: QuotaExceededError) -> ErrorAnswer:
    """A monthly budget spent: ElevenLabs says 401 ``quota_exceeded``. Nothing but the month's end helps, so a client
    that honours ``x-should-retry`` is told not to retry."""
    return _detail(HTTP_401_UNAUTHORIZED, "quota_exceeded", refusals.quota_message(exc), refusal_headers(exc))


def _too_many_uploads(exc: TooManyUploadsError) -> ErrorAnswer:
    message = f"{exc} Retry after {exc.retry_after_s} s."
    return _detail(HTTP_429_TOO_MANY_REQUESTS, "too_many_concurrent_requests", message, _retry_after(exc.retry_after_s))


def _guard_refusal(exc: refusals.GuardRefusalError) -> ErrorAnswer:
    """An HTTP guard's refusal: its kind as ``detail.status``; a throttled address is told when to retry."""
    if (status_code := _GUARD_KINDS.get(exc.kind)) is None:
        return _unexpected(exc)
    retry_after_s = exc.retry_after_s if isinstance(exc, refusals.AddressThrottledError) else None
    return _detail(status_code, exc.kind, exc.message, _retry_after(retry_after_s))


def _protocol_refusal(exc: refusals.ProtocolRefusalError) -> ErrorAnswer:
    """A refusal of the HTTP protocol's (a head too large or too late, too many connections...): no word of
    ElevenLabs' own, so the gateway's kind with its status, and when to retry where waiting helps."""
    return _detail(exc.status_code, exc.kind, exc.message, _retry_after(exc.retry_after_s))


def _refused_before_body(exc: refusals.RefusedBeforeBodyError) -> ErrorAnswer:
    """The refusal, closing the connection: its announced body is not read, so it cannot carry another request."""
    answer = _answer(exc.refused)
    answer.headers = {**answer.headers, "connection": "close"}
    return answer


def _openai_error(exc: OpenAIError) -> ErrorAnswer:
    """An error a shared route raised in OpenAI's shape itself: its status, and its code as ``detail.status``."""
    status = exc.code or _BY_HTTP_STATUS.get(exc.status_code, "internal_error")
    return _detail(exc.status_code, status, exc.message, exc.headers)


def _unexpected(_: Exception) -> ErrorAnswer:
    return _detail(HTTP_500_INTERNAL_SERVER_ERROR, "internal_error", "The server had an error processing your request.")


_ANSWERS: dict[type[Exception], Callable[[Any], ErrorAnswer]] = {
    OpenAIError: _openai_error,
    SpeechError: _speech_error,
    FailoverExhaustedError: _failover_exhausted,
    ValidationException: _validation_error,
    ValidationError: _model_validation_error,
    ClientException: _client_error,
    HTTPException: _http_error,
    EngineNotReadyError: lambda exc: _unavailable("engine_not_ready", str(exc), 5),
    EngineOverloadedError: _overloaded,
    SynthesisFailedError: lambda exc: _unavailable("engine_failed", f"The engine failed: {exc}", 1),
    UploadsBusyError: lambda exc: _unavailable("uploads_busy", str(exc), exc.retry_after_s),
    InvalidSynthesisRequestError: lambda exc: _detail(HTTP_400_BAD_REQUEST, "invalid_value", str(exc)),
    MarkupError: lambda exc: _detail(HTTP_400_BAD_REQUEST, "invalid_ssml", str(exc)),
    InvalidCredentialsError: lambda exc: _detail(HTTP_401_UNAUTHORIZED, "invalid_api_key", str(exc)),
    UnknownTenantError: lambda exc: _detail(HTTP_403_FORBIDDEN, "unknown_tenant", str(exc)),
    RateLimitExceededError: _rate_limited,
    QuotaExceededError: _quota_exceeded,
    TooManyUploadsError: _too_many_uploads,
    refusals.GuardRefusalError: _guard_refusal,
    refusals.ProtocolRefusalError: _protocol_refusal,
    refusals.RefusedBeforeBodyError: _refused_before_body,
    **dict.fromkeys(refusals.BACKEND_ERRORS, _backend_down),
}


def socket_error(exc: BaseException) -> OpenAIError:
    """What an ElevenLabs socket says of ``exc`` (``{"message", "error", "code"}``, ``gateway/elevenlabs/session.py``),
    in the error object the sockets carry (``gateway/sessions/serving.py``): the speech domain's errors from
    :data:`_SOCKET_KINDS`; others as the gateway decides them for every API family. The error keeps ``exc`` as its
    source, so that a refused handshake is answered in the REST routes' words (:func:`as_elevenlabs_error`)."""
    if isinstance(exc, FailoverExhaustedError):  # what the engine said
        exc = exc.error
    if not isinstance(exc, SpeechError):
        return as_openai_error(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
    if isinstance(exc, InvalidSpeechRequestError):
        status_code, code = HTTP_400_BAD_REQUEST, exc.kind
    elif isinstance(exc, OverLimitError):
        status_code, code = HTTP_429_TOO_MANY_REQUESTS, exc.kind
    elif (known := _SOCKET_KINDS.get(exc.kind)) is not None:
        status_code, code = known
    else:
        return as_openai_error(exc)
    error = OpenAIError(status_code, exc.message, param=exc.param, code=code)
    error.source = exc
    return error


def _problems(exc: ValidationException) -> list[ValidationProblem]:
    """Where and why: pydantic's own errors for a body (exact locations and types, which Litestar keeps on the cause
    it raises from), else Litestar's own list (query and path parameters)."""
    errors = getattr(exc.__cause__, "errors", None)
    found = errors() if callable(errors) else errors
    if isinstance(found, list) and found and all(isinstance(error, dict) for error in found):
        return [_problem(["body", *error.get("loc", ())], error) for error in found]
    problems: list[ValidationProblem] = []
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if not isinstance(item, dict):
            continue
        source = str(getattr(item.get("source"), "value", item.get("source")) or "body")
        key = str(item.get("key") or "")
        if source == "body" and key == "data":  # no body at all
            problems.append(ValidationProblem(loc=["body"], msg="Field required", type="missing"))
            continue
        loc: list[str | int] = [source, *(int(part) if part.isdigit() else part for part in key.split(".") if part)]
        problems.append(ValidationProblem(loc=loc, msg=str(item.get("message", "")), type="value_error"))
    return problems or [ValidationProblem(loc=["body"], msg=exc.detail, type="value_error")]


def _pydantic_problems(exc: ValidationError, source: str) -> list[ValidationProblem]:
    return [_problem([source, *error["loc"]], dict(error)) for error in exc.errors()]


def _problem(loc: list[Any], error: dict[str, Any]) -> ValidationProblem:
    where: list[str | int] = [part if isinstance(part, int) else str(part) for part in loc]
    return ValidationProblem(loc=where, msg=str(error.get("msg", "")), type=str(error.get("type", "value_error")))


def refusal_body(exc: Exception) -> dict[str, Any]:
    """The body of the ElevenLabs error ``exc`` becomes: what the HTTP protocol sends for a refusal of a request to
    one of these routes, where no response object is made (``gateway/http/connection_refusals.py``)."""
    return as_elevenlabs_error(exc, {}).body()


def error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """The response an exception on an ElevenLabs route becomes (the handler of :data:`EXCEPTION_HANDLERS`)."""
    error = as_elevenlabs_error(exc, request.headers)
    note_error(request, exc, error.status_code, error.code)
    return Response(error.body(), status_code=error.status_code, headers=error.headers, media_type=MediaType.JSON)


EXCEPTION_HANDLERS: ExceptionHandlersMap = dict.fromkeys([*_ANSWERS, *OPENAI_EXCEPTION_HANDLERS], error_response)
"""Every exception of this table, answered in ElevenLabs' shape; with the OpenAI table's keys too (the app's), so that
none of its entries is more specific than this table's on these routes."""

_DESCRIPTIONS = {
    400: "Invalid request (a custom voice of another model, a request the engine refuses).",
    401: "`needs_authorization` (no `xi-api-key` nor `Authorization`) or `invalid_api_key`.",
    403: "The tenant may not use this model, or the token names an unknown tenant.",
    404: "`voice_not_found` or `model_not_found`.",
    413: "Request body over the size limit.",
    422: "The request failed validation: where and why, as ElevenLabs' server reports it.",
    429: "Over a tenant limit (`rate_limit_exceeded`, `too_many_concurrent_requests`), or the engines busy "
    "(`system_busy`); see Retry-After.",
    503: "Not ready, engine failure before the first byte, or a backend unreachable; see Retry-After.",
}


def error_responses(*status_codes: int) -> dict[int, ResponseSpec]:
    """The OpenAPI declaration of the ElevenLabs-shaped errors a route can answer with."""
    return {
        code: ResponseSpec(
            ElevenLabsValidationError if code == HTTP_422_UNPROCESSABLE_ENTITY else ElevenLabsErrorResponse,
            description=_DESCRIPTIONS[code],
            generate_examples=False,
        )
        for code in status_codes
    }
