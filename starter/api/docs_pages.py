"""/docs (Swagger UI) and /redoc served offline: their scripts and styles come from the
fastapi-offline package's static files, mounted at /docs-static, instead of a CDN (as
FastAPI documents for self-hosting them), so the pages render without internet."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(fastapi_offline.__file__).parent / "static"
STATIC_URL = "/docs-static"


def install_docs(app: FastAPI) -> None:
    """Mounts the assets and the two pages (which the app was made without)."""
    app.mount(STATIC_URL, StaticFiles(directory=STATIC), name="docs-static")
    openapi_url = app.openapi_url or "/openapi.json"
    router = APIRouter(include_in_schema=False)

    @router.get("/docs")
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_js_url=f"{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_URL}/favicon.png",
        )

    @router.get("/docs/oauth2-redirect")
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @router.get("/redoc")
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{STATIC_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{STATIC_URL}/favicon.png",
            with_google_fonts=False,
        )

    app.include_router(router)
