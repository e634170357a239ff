"""ElevenLabs' error bodies, and the one table that renders every error of its routes in them.

The routes raise what every route raises (the speech pipeline's and auth's domain errors, Litestar's validation and
HTTP errors); :data:`EXCEPTION_HANDLERS`, scoped to the ElevenLabs routes, answers them as ElevenLabs' server does:

- a request that fails validation: 422 ``{"detail": [{"loc", "msg", "type"}, ...]}`` (FastAPI's shape, which the
  SDK raises as ``UnprocessableEntityError``);
- the speech domain's errors (``gateway/speech/errors.py``): ``{"detail": {"status", "message"}}`` from this
  module's own table, by the error's kind: ``voice_not_found`` (404, whether the voice is an unknown built-in or a
  custom voice the tenant does not have), ``too_many_concurrent_requests``, ``model_not_found``...; an error of
  failover that gave up answers as its engine's error, with ``x-retries``;
- anything else: ``{"detail": {"status", "message"}}`` with the status code the same error gets on the OpenAI routes
  (the gateway's decision, from :func:`gateway.http.errors.as_openai_error`) and its headers (``Retry-After``, the
  rate-limit headers), in ElevenLabs' words where it has its own: ``needs_authorization`` (no credential),
  ``invalid_api_key``, ``too_many_concurrent_requests``, ``system_busy``, ``quota_exceeded`` (401, as ElevenLabs
  answers a spent character quota: a monthly budget); otherwise the gateway's code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import MediaType, Response
from litestar.exceptions import ClientException, SerializationException, ValidationException
from litestar.openapi import ResponseSpec
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_401_UNAUTHORIZED,
    HTTP_403_FORBIDDEN,
    HTTP_404_NOT_FOUND,
    HTTP_409_CONFLICT,
    HTTP_422_UNPROCESSABLE_ENTITY,
    HTTP_429_TOO_MANY_REQUESTS,
    HTTP_500_INTERNAL_SERVER_ERROR,
)
from pydantic import ValidationError

from gateway.elevenlabs.wire import (
    ElevenLabsErrorDetail,
    ElevenLabsErrorResponse,
    ElevenLabsValidationError,
    ValidationProblem,
)
from gateway.http.auth.security import presented_authorization
from gateway.http.errors import EXCEPTION_HANDLERS as OPENAI_EXCEPTION_HANDLERS
from gateway.http.errors import OpenAIError, as_openai_error, note_error
from gateway.speech.errors import (
    FailoverExhaustedError,
    InvalidSpeechRequestError,
    OverLimitError,
    SpeechError,
    UnknownVoiceError,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from litestar import Request
    from litestar.types import ExceptionHandlersMap

__all__ = ["EXCEPTION_HANDLERS", "QUOTA_CODE", "ErrorAnswer", "as_elevenlabs_error", "error_responses", "socket_error"]

QUOTA_CODE = "insufficient_quota"
"""The gateway's code for a request refused by a monthly budget (``auth.limits.QuotaExceededError``)."""
NEEDS_AUTHORIZATION = "Neither authorization header nor xi-api-key received, please provide one."
# The gateway's codes that ElevenLabs names otherwise; any other code is sent as it is.
_STATUSES: Mapping[str, str] = {
    "concurrency_limit_exceeded": "too_many_concurrent_requests",
    "engine_overloaded": "system_busy",
}
# The speech domain's errors by kind: (status code, ``detail.status``); a request refused as it is is a 400 named
# by its kind.
_SPEECH_KINDS: Mapping[str, tuple[int, str]] = {
    "model_not_found": (HTTP_404_NOT_FOUND, "model_not_found"),
    "model_not_allowed": (HTTP_403_FORBIDDEN, "model_not_allowed"),
    "voice_not_found": (HTTP_404_NOT_FOUND, "voice_not_found"),
    "voice_not_offered": (HTTP_404_NOT_FOUND, "voice_not_found"),
    "pronunciation_dictionary_not_found": (HTTP_404_NOT_FOUND, "pronunciation_dictionary_not_found"),
    "job_not_found": (HTTP_404_NOT_FOUND, "not_found"),
    "conflict": (HTTP_409_CONFLICT, "conflict"),
    "rate_limit_exceeded": (HTTP_429_TOO_MANY_REQUESTS, "rate_limit_exceeded"),
    "concurrency_limit_exceeded": (HTTP_429_TOO_MANY_REQUESTS, "too_many_concurrent_requests"),
    "job_too_many_jobs": (HTTP_429_TOO_MANY_REQUESTS, "job_too_many_jobs"),
    "job_storage_quota": (HTTP_429_TOO_MANY_REQUESTS, "job_storage_quota"),
}
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
# For an error without a code of its own (Litestar's HTTP errors).
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
    """The ElevenLabs error ``exc`` becomes, for a request with ``headers`` (whether it presented a credential)."""
    if isinstance(exc, OpenAIError) and isinstance(exc.source, SpeechError):  # carried by a socket's refusal
        exc = exc.source
    if isinstance(exc, SpeechError):
        return _speech_error(exc, headers)
    if isinstance(exc, ValidationException):
        return ErrorAnswer(HTTP_422_UNPROCESSABLE_ENTITY, _problems(exc), {})
    if isinstance(exc, ValidationError):  # a model a handler validated itself
        return ErrorAnswer(HTTP_422_UNPROCESSABLE_ENTITY, _pydantic_problems(exc, "body"), {})
    if isinstance(exc, ClientException) and isinstance(exc.__cause__, SerializationException):
        problem = ValidationProblem(loc=["body"], msg="JSON decode error", type="json_invalid")
        return ErrorAnswer(HTTP_422_UNPROCESSABLE_ENTITY, [problem], dict(exc.headers or {}))
    error = as_openai_error(exc)
    status_code, message = error.status_code, error.message
    status = _STATUSES.get(error.code or "") or error.code or _BY_HTTP_STATUS.get(status_code, "internal_error")
    if error.code == QUOTA_CODE:  # a monthly budget spent: ElevenLabs says 401 for a spent quota
        status_code, status = HTTP_401_UNAUTHORIZED, "quota_exceeded"
    elif status_code == HTTP_401_UNAUTHORIZED and presented_authorization(headers) is None:
        status, message = "needs_authorization", NEEDS_AUTHORIZATION
    return ErrorAnswer(status_code, ElevenLabsErrorDetail(status=status, message=message), dict(error.headers))


def _speech_error(exc: SpeechError, headers: Mapping[str, str]) -> ErrorAnswer:
    """A speech domain error in ElevenLabs' words, from :data:`_SPEECH_KINDS`."""
    if isinstance(exc, FailoverExhaustedError):  # what the engine said, and the retries taken (as on a success)
        answer = as_elevenlabs_error(exc.error, headers)
        answer.headers = {**answer.headers, "x-retries": str(exc.retries)}
        return answer
    message = exc.message
    if isinstance(exc, UnknownVoiceError):
        message = f"A voice with the voice_id '{exc.voice_id}' was not found."
    if isinstance(exc, InvalidSpeechRequestError):
        status_code, status = HTTP_400_BAD_REQUEST, exc.kind
    else:
        status_code, status = _SPEECH_KINDS.get(exc.kind, (HTTP_500_INTERNAL_SERVER_ERROR, "internal_error"))
    retry_after_s = exc.retry_after_s if isinstance(exc, OverLimitError) else None
    answer_headers = {} if retry_after_s is None else {"Retry-After": str(retry_after_s)}
    return ErrorAnswer(status_code, ElevenLabsErrorDetail(status=status, message=message), answer_headers)


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


def error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """The response an exception on an ElevenLabs route becomes (the handler of :data:`EXCEPTION_HANDLERS`)."""
    error = as_elevenlabs_error(exc, request.headers)
    note_error(request, exc, error.status_code, error.code)
    return Response(error.body(), status_code=error.status_code, headers=error.headers, media_type=MediaType.JSON)


EXCEPTION_HANDLERS: ExceptionHandlersMap = dict.fromkeys(
    [*OPENAI_EXCEPTION_HANDLERS, ValidationError, ClientException], error_response
)
"""Every exception the OpenAI table answers (the same keys, so that none of its entries wins on these routes),
answered in ElevenLabs' shape."""

_DESCRIPTIONS = {
    400: "Invalid request (a custom voice of another model, a request the engine refuses).",
    401: "`needs_authorization` (no `xi-api-key` nor `Authorization`) or `invalid_api_key`.",
    403: "The tenant may not use this model, or the token names an unknown tenant.",
    404: "`voice_not_found` or `model_not_found`.",
    413: "Request body over the size limit.",
    422: "The request failed validation: where and why, as ElevenLabs' server reports it.",
    429: "Over a tenant limit (`rate_limit_exceeded`, `too_many_concurrent_requests`); see Retry-After.",
    503: "Overloaded (`system_busy`), not ready, engine failure before the first byte, or a backend unreachable; "
    "see Retry-After.",
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
