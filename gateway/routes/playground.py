"""The playground: a page at ``/`` and ``/playground`` to try the speech API from a browser.

Plain HTML, CSS and JavaScript under ``gateway/static/playground/`` (no build step, nothing from a CDN). The page is
public and left out of the API document; the API calls it makes carry the key the user pastes, and only to this
gateway (its Content-Security-Policy allows no other origin).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from litestar import Controller, MediaType, Response, get
from litestar.datastructures import CacheControlHeader
from litestar.static_files import create_static_files_router

if TYPE_CHECKING:
    from litestar.types import ControllerRouterHandler

__all__ = ["PlaygroundController", "playground_handlers"]

STATIC_DIR = Path(__file__).parent.parent / "static" / "playground"
ASSETS_PATH = "/playground/static"

_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self' blob:; media-src 'self' blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


@cache
def _page() -> str:
    return (STATIC_DIR / "index.html").read_text(encoding="utf-8")


class PlaygroundController(Controller):
    """``GET /`` and ``GET /playground``: the page. Public, and not part of the OpenAPI document."""

    include_in_schema = False

    @get(["/", "/playground"], media_type=MediaType.HTML, cache_control=CacheControlHeader(no_cache=True))
    async def page(self) -> Response[str]:
        return Response(_page(), media_type=MediaType.HTML, headers=_SECURITY_HEADERS)


def playground_handlers() -> list[ControllerRouterHandler]:
    """The page and its assets (``/playground/static/...``), for ``create_app`` to register when enabled."""
    assets = create_static_files_router(
        ASSETS_PATH,
        directories=[STATIC_DIR],
        name="playground-static",
        include_in_schema=False,
        cache_control=CacheControlHeader(no_cache=True),
    )
    return [PlaygroundController, assets]
