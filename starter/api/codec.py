"""Temporal's remote codec protocol (``POST /codec/encode``, ``/codec/decode``: the protobuf
JSON of ``Payloads``) for the Temporal UI and ``temporal --codec-endpoint``; served only
with the codec on. Callers send the API's bearer tokens (of HUBJOBS_CODEC_ACTORS, when
set); CORS answers the UI's origins. HUBJOBS_CODEC_TRUST_UI_ORIGIN lets the embedded UI,
which sends no token, in from an allowed origin, and only on loopback, where whoever
reaches the API reaches the unauthenticated dev server anyway."""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.api.common.v1 import Payload

from hubjobs.errors import ConfigurationError, Forbidden, InvalidInput
from hubjobs.settings import Settings
from hubjobs.temporal.codec import AesGcmCodec, CodecKeys
from starter.api.auth import BearerHeader
from starter.api.operator_page import is_loopback
from starter.api.tokens import TokenVerifier

log = logging.getLogger(__name__)
PREFIX = "/codec"


class CodecPayload(BaseModel):
    metadata: dict[str, str] = Field(
        default_factory=dict, description="Metadata values, base64 (protobuf JSON)"
    )
    data: str = Field(default="", description="The payload's bytes, base64")


class CodecPayloads(BaseModel):
    payloads: list[CodecPayload] = Field(default_factory=list)


def _bytes(text: str, where: str) -> bytes:
    """Base64 as protobuf JSON writes it (standard or URL-safe, padding optional)."""
    normal = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(normal + "=" * (-len(normal) % 4), validate=True)
    except (binascii.Error, ValueError):
        message = f"invalid request: {where} is not base64"
        raise InvalidInput(message, code="invalid_request") from None


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode()


def to_payloads(body: CodecPayloads) -> list[Payload]:
    return [
        Payload(
            metadata={
                key: _bytes(value, f"payloads[{i}].metadata")
                for key, value in payload.metadata.items()
            },
            data=_bytes(payload.data, f"payloads[{i}].data"),
        )
        for i, payload in enumerate(body.payloads)
    ]


def from_payloads(payloads: list[Payload]) -> CodecPayloads:
    return CodecPayloads(
        payloads=[
            CodecPayload(
                metadata={key: _text(value) for key, value in p.metadata.items()},
                data=_text(p.data),
            )
            for p in payloads
        ]
    )


def payloads_route(
    name: str, run: Callable[[list[Payload]], Awaitable[list[Payload]]]
) -> Callable[[CodecPayloads], Awaitable[CodecPayloads]]:
    async def route(body: CodecPayloads) -> CodecPayloads:
        return from_payloads(await run(to_payloads(body)))

    route.__name__ = name  # the operation's id in the OpenAPI document
    return route


def allowed_origins(settings: Settings) -> list[str]:
    """The configured origins, and the embedded stack's UI as a browser names it (by
    address and as localhost)."""
    origins = list(settings.codec_cors_origins)
    ui = settings.recorded_ui_url()
    if ui:
        origins += [ui, ui.replace("//127.0.0.1:", "//localhost:")]
    return sorted(set(origins))


def listens_on_loopback(host: str) -> bool:
    return host == "localhost" or is_loopback(host)


class CodecCors:
    """CORS for the codec routes only (the job routes are for services, not browsers)."""

    def __init__(self, app: ASGIApp, origins: list[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=["POST"],
            allow_headers=["Content-Type", "X-Namespace", "Authorization"],
            # The UI's "include cross-origin credentials" needs this to read answers;
            # no cookie authenticates anything here.
            allow_credentials=True,
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(PREFIX + "/"):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class CodecGate:
    """Who may use the codec: a valid bearer token (of an allowed actor), or, only when
    trusting the UI's origin, a call from an allowed origin without a token."""

    def __init__(self, settings: Settings, verifier: TokenVerifier, origins: list[str]) -> None:
        if settings.codec_trust_ui_origin and not listens_on_loopback(settings.api_host):
            raise ConfigurationError(
                "HUBJOBS_CODEC_TRUST_UI_ORIGIN is only for an API on loopback "
                "(HUBJOBS_API_HOST=127.0.0.1): elsewhere callers must send tokens"
            )
        self.verifier = verifier
        self.actors = frozenset(settings.codec_actors)
        self.trusted = frozenset(origins) if settings.codec_trust_ui_origin else frozenset()

    def check(self, authorization: str | None, origin: str | None) -> uuid.UUID | None:
        """The actor calling (None for the trusted UI); raises Unauthorized or Forbidden."""
        if not authorization and origin in self.trusted:
            return None
        actor = self.verifier.actor_of(authorization)
        if self.actors and actor not in self.actors:
            raise Forbidden("this actor may not use the codec", code="codec_not_allowed")
        return actor


def codec_router(
    settings: Settings, verifier: TokenVerifier, responses: dict[int | str, dict[str, Any]]
) -> tuple[APIRouter, list[str]]:
    """The codec routes and the origins they answer CORS for. Raises ConfigurationError
    when the keys are missing or bad: the API does not start half configured."""
    codec = AesGcmCodec(CodecKeys.of(settings))
    origins = allowed_origins(settings)
    gate = CodecGate(settings, verifier, origins)

    def caller(request: Request, authorization: BearerHeader) -> uuid.UUID | None:
        """(A plain function: FastAPI runs it in a thread, where fetching an identity
        provider's keys may block.)"""
        return gate.check(authorization, request.headers.get("origin"))

    router = APIRouter(prefix=PREFIX, tags=["codec"], dependencies=[Depends(caller)])

    for name, run, summary in (
        ("encode", codec.encode, "Encrypt payloads with the current key (Temporal's remote codec)"),
        ("decode", codec.decode, "Decrypt payloads by their key id; others come back as they are"),
    ):
        router.post(f"/{name}", responses={**responses}, summary=summary)(payloads_route(name, run))

    return router, origins
