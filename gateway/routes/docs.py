"""``/docs``: the interactive API reference (Swagger UI) over the app's own OpenAPI document, served offline.

The Swagger UI bundle comes from the ``swagger-ui-py`` package (PyPI), served by the gateway under
``/docs/assets/``: nothing is fetched from a CDN, so the page works in air-gapped clusters too.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.static_files import create_static_files_router

if TYPE_CHECKING:
    from litestar.router import Router

__all__ = ["DOCS_ASSETS_PATH", "docs_assets_router", "docs_render_plugin"]

DOCS_ASSETS_PATH = "/docs/assets"


def _swagger_ui_dir() -> Path:
    return Path(str(resources.files("swagger_ui") / "static"))


def docs_render_plugin() -> SwaggerRenderPlugin:
    """Swagger UI at ``/docs`` (the OpenAPI path), its scripts, styles and icon from :data:`DOCS_ASSETS_PATH`."""
    return SwaggerRenderPlugin(
        js_url=f"{DOCS_ASSETS_PATH}/swagger-ui-bundle.js",
        css_url=f"{DOCS_ASSETS_PATH}/swagger-ui.css",
        standalone_preset_js_url=f"{DOCS_ASSETS_PATH}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{DOCS_ASSETS_PATH}/favicon-32x32.png'>",
        path="/",
    )


def docs_assets_router() -> Router:
    """The Swagger UI files, public and left out of the API document."""
    return create_static_files_router(
        DOCS_ASSETS_PATH, directories=[_swagger_ui_dir()], name="docs-assets", include_in_schema=False
    )
