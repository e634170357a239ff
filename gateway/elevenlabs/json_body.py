"""JSON bodies read as ElevenLabs' server reads them, whatever their ``Content-Type`` says.

That server is FastAPI, which parses a body as JSON when the request has no ``Content-Type`` or a JSON one
(``application/json``, ``application/*+json``, with any parameters) and hands any other body to validation as bytes,
which no model takes: a 422 whose one problem is the whole body (``model_attributes_type``, "Input should be a valid
dictionary or object to extract fields from"). An empty body is no body at all, whatever its type: the route's own
"Field required". Litestar parses a body as JSON whatever its type says, so a route that wants FastAPI's answer runs
:func:`require_fastapi_json` before it.
"""

from __future__ import annotations

from typing import Any

from litestar import Request  # noqa: TC002 - a before_request hook's hint, read by Litestar at runtime
from pydantic import BaseModel

__all__ = ["require_fastapi_json"]


class _AnyModel(BaseModel):
    """What FastAPI validates a body against, as far as bytes go: every model refuses them with the same error."""


async def require_fastapi_json(request: Request[Any, Any, Any]) -> None:
    """Refuse, as FastAPI does, a body whose ``Content-Type`` is not JSON (a ``before_request`` hook).

    Raises:
        pydantic.ValidationError: FastAPI's problem for the bytes (the ElevenLabs table answers it 422, at ``body``).
    """
    if _read_as_json(request.headers.get("content-type", "")):
        return
    if body := await request.body():
        # FastAPI validates the unparsed body as it would the parsed one: with from_attributes, hence its words.
        _AnyModel.model_validate(body, from_attributes=True)


def _read_as_json(content_type: str) -> bool:
    media_type = content_type.split(";", maxsplit=1)[0].strip().lower()
    kind, _, subtype = media_type.partition("/")
    return not media_type or (kind == "application" and (subtype == "json" or subtype.endswith("+json")))
