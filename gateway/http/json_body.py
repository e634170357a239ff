"""Bodies that must say they are JSON, refused (415) before they are parsed (``POST
/v1/audio/speech``, the speech jobs, an engine node's route)."""

from __future__ import annotations

from typing import Any

from litestar import Request  # noqa: TC002 - a before_request hook's hint, read by Litestar at runtime

from gateway.http.refusals import UnsupportedMediaTypeError

__all__ = ["require_json"]


async def require_json(request: Request[Any, Any, Any]) -> None:
    """Reject bodies that do not say they are JSON, as OpenAI does, before they are parsed.

    A ``before_request`` hook rather than a guard: Litestar copies the route handler for every guard it calls and
    runs a synchronous one in a worker thread, costs paid on every request.
    """
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaTypeError(content_type)
