"""Multipart uploads (OpenAI's consent recordings and voice samples), read by the handler itself, and their OpenAPI
declaration.

Handlers take the raw request rather than a ``data`` parameter for two reasons: Litestar reads a declared body before
it resolves dependencies, so a 10 MiB upload would be received before its credentials are checked; and one route
(``POST /v1/audio/voices``) takes JSON or a form on the same path, which one declared body type cannot say. The
fields are then validated with the same pydantic models the OpenAPI document is generated from.
"""

from __future__ import annotations

import re
from contextlib import ExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

import anyio
import anyio.to_thread
from litestar.datastructures import UploadFile
from litestar.exceptions import ClientException, ValidationException
from litestar.openapi.spec import Encoding, OpenAPIMediaType, OpenAPIType, Schema
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    HTTP_415_UNSUPPORTED_MEDIA_TYPE,
)

from gateway.audio.samples import DecodedRecording, RecordingError
from gateway.http.errors import OpenAIError
from gateway.uploads import TooManyUploadsError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    from litestar import Request
    from litestar.datastructures import FormMultiDict
    from pydantic import BaseModel

    from auth import Tenant
    from gateway.speech.admission import AdmissionControl
    from gateway.uploads import Uploads

__all__ = [
    "FORM",
    "JSON",
    "FormFiles",
    "content_type_of",
    "decode_upload",
    "form_body",
    "in_audio_thread",
    "json_body",
    "open_form",
]

FORM = "multipart/form-data"
JSON = "application/json"
Arg = TypeVar("Arg")
Result = TypeVar("Result")

_AUDIO_THREADS = 4
_AUDIO_LIMITER = anyio.CapacityLimiter(_AUDIO_THREADS)  # one per process, bound to its event loop on first use

_AUDIO_TYPES = "audio/mpeg, audio/wav, audio/x-wav, audio/ogg, audio/aac, audio/flac, audio/webm, audio/mp4"
_RECORDING_CODES = {
    "not_audio": "invalid_audio",
    "unsupported": "invalid_audio",
    "decoder_failed": "invalid_audio",
    "too_large": "file_too_large",
    "too_short": "audio_too_short",
    "too_long": "audio_too_long",
}
# The multipart parser's words (the ``multipart`` package, under Litestar) for a form past Litestar's count of parts,
# which Litestar reports as "Request Entity Too Large"; its other limits are on a part's headers.
_TOO_MANY_PARTS = "Maximum segment count exceeded"
_NESTED_ONE = frozenset({"items", "additional_properties", "schema_not"})
_NESTED_MANY = frozenset({"any_of", "all_of", "one_of"})


def content_type_of(request: Request[Any, Any, Any]) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


@asynccontextmanager
async def open_form(
    request: Request[Any, Any, Any],
    files: Mapping[str, str],
    *,
    uploads: Uploads,
    tenant: Tenant,
    admission: AdmissionControl,
) -> AsyncIterator[tuple[dict[str, str], FormFiles]]:
    """The text fields of a ``multipart/form-data`` body, for the caller's model to validate, and its files, open
    until the block ends (Litestar spools each to a temporary file beyond 1 MiB: they are never read into memory
    whole). The upload holds its place among ``tenant``'s and the replica's (:meth:`Uploads.admit`) from before its
    body is read until the block ends.

    Args:
        request: The request, whose body has not been read.
        files: The file fields it may have, each with what it is (for the error when one is missing).
        uploads: The replica's uploads.
        tenant: Whose upload it is.
        admission: Where a refusal for the tenant's uploads in flight is counted (its usage and metrics).

    Raises:
        OpenAIError: not a form (415), a file where text belongs or text where a file does, undecodable text (400).
        TooManyUploadsError, UploadsBusyError: no place for one more upload (429, 503).
    """
    if content_type_of(request) != FORM:
        raise _not_a_form(request)
    with ExitStack() as held:
        try:
            held.enter_context(uploads.admit(tenant.name, _body_bytes(request)))
        except TooManyUploadsError:
            admission.record_rejection(tenant, "uploads")
            raise
        async with _parsed_form(request, files) as parsed:
            yield parsed


def _body_bytes(request: Request[Any, Any, Any]) -> int:
    """What the body will hold at most: its declared length, or the route's largest body when it declares none."""
    largest = request.route_handler.resolve_request_max_body_size() or 0
    declared = request.content_length
    return largest if declared is None else min(declared, largest)


@asynccontextmanager
async def _parsed_form(
    request: Request[Any, Any, Any], files: Mapping[str, str]
) -> AsyncIterator[tuple[dict[str, str], FormFiles]]:
    form = await _read_form(request)
    try:
        texts = {key: value for key, value in form.items() if isinstance(value, str)}
        uploads = {key: value for key, value in form.items() if isinstance(value, UploadFile)}
        if stray := next((key for key in uploads if key not in files), None):
            raise _wrong_kind(stray, "a text field")
        if misplaced := next((key for key in texts if key in files), None):
            raise _wrong_kind(misplaced, "a file")
        yield texts, FormFiles(uploads, files)
    finally:
        for upload in form.values():
            if isinstance(upload, UploadFile):
                await upload.close()


async def _read_form(request: Request[Any, Any, Any]) -> FormMultiDict:
    """The form, or OpenAI's error saying what is wrong with it: Litestar's own refusals carry no code, and call a
    form of too many parts "Request Entity Too Large"."""
    try:
        return await request.form()
    except (UnicodeDecodeError, LookupError):  # a text part in a charset it is not in, or one Python does not know
        raise _malformed_form("A text field of the form is not valid text.") from None
    except ValidationException:  # Litestar's one here: the Content-Type has no boundary to split the body at
        raise _malformed_form("The Content-Type multipart/form-data names no boundary.") from None
    except ClientException as exc:  # a body over the route's size, or the multipart parser's refusal
        raise _form_refusal(request, exc) from None


def _form_refusal(request: Request[Any, Any, Any], exc: ClientException) -> OpenAIError:
    if exc.status_code == HTTP_413_REQUEST_ENTITY_TOO_LARGE:
        return _body_too_large(request)
    reason = exc.__cause__ or exc.__context__
    words = str(reason.args[0]) if reason is not None and reason.args else exc.detail
    if words == _TOO_MANY_PARTS:
        limit = request.app.multipart_form_part_limit
        return OpenAIError(
            HTTP_400_BAD_REQUEST, f"The form has more than {limit} parts, the most it may have.", code="too_many_parts"
        )
    return _malformed_form(f"The body is not valid multipart/form-data: {words.rstrip('.')}.")


def _malformed_form(message: str) -> OpenAIError:
    return OpenAIError(HTTP_400_BAD_REQUEST, message, code="invalid_multipart")


def _body_too_large(request: Request[Any, Any, Any]) -> OpenAIError:
    largest = request.route_handler.resolve_request_max_body_size()
    return OpenAIError(
        HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        f"The body is over {largest} bytes, the most an upload's form may have.",
        code="body_too_large",
    )


def _wrong_kind(field: str, kind: str) -> OpenAIError:
    return OpenAIError(HTTP_400_BAD_REQUEST, f"'{field}' must be {kind}.", param=field, code="invalid_type")


class FormFiles:
    """The files of a form, by field name."""

    def __init__(self, uploads: dict[str, UploadFile], described: Mapping[str, str]) -> None:
        self._uploads = uploads
        self._described = described

    def required(self, name: str) -> BinaryIO:
        """The file of field ``name`` (a seekable file, open while the form is).

        Raises:
            OpenAIError: 400 when the form has no such file.
        """
        if (upload := self._uploads.get(name)) is None:
            raise OpenAIError(
                HTTP_400_BAD_REQUEST,
                f"Missing required parameter: '{name}' ({self._described[name]}).",
                param=name,
                code="missing_required_parameter",
            )
        return cast("BinaryIO", upload.file)


async def in_audio_thread(work: Callable[[Arg], Result], arg: Arg) -> Result:
    """``work(arg)`` on the gateway's own audio (the audit copy of a recording already decoded) in a worker thread, a
    few at a time per process: encoding is CPU-bound (more at once than cores only queues)."""
    return await anyio.to_thread.run_sync(work, arg, limiter=_AUDIO_LIMITER)


async def decode_upload(uploads: Uploads, file: BinaryIO, param: str) -> DecodedRecording:
    """An uploaded recording as 24 kHz mono PCM, decoded in a decoder process (:meth:`Uploads.decode`).

    Raises:
        OpenAIError: 400 naming ``param``: not audio, unsupported, over 10 MiB, too short or too long, or a decoding
            that crashed or ran out of memory or time (``invalid_audio``, the message says which).
        UploadsBusyError: no decoder was free in time (503).
    """
    try:
        return await uploads.decode(file)
    except RecordingError as exc:
        raise OpenAIError(HTTP_400_BAD_REQUEST, str(exc), param=param, code=_RECORDING_CODES[exc.problem]) from None


def _not_a_form(request: Request[Any, Any, Any]) -> OpenAIError:
    content_type = request.headers.get("content-type", "")
    return OpenAIError(
        HTTP_415_UNSUPPORTED_MEDIA_TYPE,
        f"Unsupported content type {content_type or '(none)'!r}: send multipart/form-data.",
        code="unsupported_media_type",
    )


def json_body(model: type[BaseModel]) -> OpenAPIMediaType:
    """The OpenAPI media type of a JSON body validated by ``model``."""
    return OpenAPIMediaType(schema=_schema(model.model_json_schema()))


def form_body(model: type[BaseModel], files: Mapping[str, str]) -> OpenAPIMediaType:
    """The OpenAPI media type of a form: ``model``'s text fields and the required audio ``files`` (name: what)."""
    schema = _schema(model.model_json_schema())
    file_schemas = {
        name: Schema(type=OpenAPIType.STRING, format=cast("Any", "binary"), description=f"{what} ({_AUDIO_TYPES})")
        for name, what in files.items()
    }
    schema.properties = {**file_schemas, **(schema.properties or {})}
    schema.required = [*files, *(schema.required or [])]
    encoding = {name: Encoding(content_type=_AUDIO_TYPES.replace(" ", "")) for name in files}
    return OpenAPIMediaType(schema=schema, encoding=encoding)


def _schema(json_schema: Mapping[str, Any]) -> Schema:
    """Litestar's OpenAPI schema object for a pydantic JSON schema (flat models: no ``$defs``)."""
    fields: dict[str, Any] = {}
    for key, value in json_schema.items():
        name = _snake(key)
        if name == "properties":
            fields[name] = {prop: _schema(sub) for prop, sub in value.items()}
        elif name in _NESTED_MANY:
            fields[name] = [_schema(sub) for sub in value]
        elif name in _NESTED_ONE and isinstance(value, dict):
            fields[name] = _schema(value)
        elif name == "type":
            fields[name] = OpenAPIType(value)
        else:
            fields[name] = value
    return Schema(**fields)


def _snake(key: str) -> str:
    return {"not": "schema_not"}.get(key) or re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
