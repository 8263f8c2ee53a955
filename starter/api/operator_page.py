"""The operator page (``starter/api/page/``) at ``/operator/``: static files under a strict
Content-Security-Policy, calling the JSON API with the bearer token it keeps in the tab's
sessionStorage, so it shows only what that token may see.

``POST /operator/login`` trades a sign-in link's code (``hubjobs up`` prints one) for a
token of the stack's demo actor, once per code, and exists only while the API checks
tokens with the stack's development secret alone: only from loopback, to a loopback name
(no DNS rebinding), from the page's own origin. Nothing gives a token without a code."""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import uuid
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from hubjobs.devstack.login_codes import CODE_MAX_LENGTH, LOGIN_CODE_SECONDS, redeem
from hubjobs.errors import Forbidden, NotFound
from hubjobs.home import PROFILE_FILE, recorded
from hubjobs.settings import Settings
from starter.api.tokens import Unauthorized, mint

PREFIX = "/operator"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "app.css": ("app.css", "text/css; charset=utf-8"),
    "favicon.svg": ("favicon.svg", "image/svg+xml"),
    # uPlot (MIT, vendored as released: vendor/uPlot.LICENSE.txt), the overview's charts.
    "vendor/uPlot.iife.min.js": ("vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    "vendor/uPlot.min.css": ("vendor/uPlot.min.css", "text/css; charset=utf-8"),
}
# How long the token a sign-in link gives holds (a working day).
SESSION_SECONDS = 8 * 3600
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


class LoginCode(BaseModel):
    """The code of a sign-in link."""

    code: str = Field(min_length=1, max_length=CODE_MAX_LENGTH)


def page_file(name: str) -> bytes:
    return resources.files("starter.api").joinpath("page", name).read_bytes()


def is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name of a Host header, its port left out (``[::1]:8080`` → ``[::1]``)."""
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def serve(router: APIRouter, path: str, body: bytes, media: str) -> None:
    """One of the page's files, held in memory. no-cache asks again each load; its tag
    lets that be a 304, so a returning browser runs its cached (and compiled) copy."""
    tag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = HEADERS | {"ETag": tag}

    async def page_asset(request: Request) -> Response:
        if tag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=media, headers=headers)

    router.add_api_route(f"{PREFIX}/{path}", page_asset, methods=["GET"], name=f"page {path}")


def page_router(settings: Settings) -> APIRouter:
    """The page's routes (none in the OpenAPI document: they are not the API)."""
    router = APIRouter(include_in_schema=False)
    served = {path: (page_file(name), media) for path, (name, media) in FILES.items()}
    login_links = settings.uses_dev_token_secret

    @router.get(PREFIX)
    async def operator_page_root() -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=308)

    for path, (body, media) in served.items():
        serve(router, path, body, media)

    @router.get(f"{PREFIX}/config")
    async def operator_page_config() -> JSONResponse:
        """What the page needs beyond the API: where the Temporal UI is, and whether
        sign-in links are taken (the embedded stack's)."""
        config: dict[str, Any] = {
            "temporal_ui_url": settings.resolved_ui_url(),
            "namespace": settings.temporal_namespace,
            "login_links": login_links,
        }
        return JSONResponse(config, headers={"Cache-Control": "no-store"})

    if login_links:

        @router.post(f"{PREFIX}/login")
        async def operator_page_login(request: Request, body: LoginCode) -> JSONResponse:
            host = host_name(request.headers.get("host", ""))
            origin = request.headers.get("origin")
            client = request.client.host if request.client else None
            if not is_loopback(client) or host not in LOOPBACK_NAMES:
                raise Forbidden("sign-in links work only on this machine's loopback")
            if origin is not None and origin != f"{request.url.scheme}://{request.headers['host']}":
                raise Forbidden("sign-in links work only on the operator page itself")
            profile = recorded(settings.home, PROFILE_FILE)
            actor, workspace = profile.get("actor_id"), profile.get("workspace_id")
            if not actor or not workspace:
                raise NotFound("no demo actor: run `hubjobs demo` first", code="not_found")
            if not await asyncio.to_thread(redeem, settings.home, body.code):
                raise Unauthorized(
                    "this sign-in link is used or expired (each works once, for "
                    f"{LOGIN_CODE_SECONDS / 60:.0f} minutes): `hubjobs up` prints a new one"
                )
            lasts = min(SESSION_SECONDS, int(settings.api_jwt_max_lifetime_seconds))
            token = mint(uuid.UUID(str(actor)), settings, ttl_seconds=lasts)
            return JSONResponse(
                {"token": token, "actor_id": actor, "workspace_id": workspace},
                headers={"Cache-Control": "no-store"},
            )

    return router
