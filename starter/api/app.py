"""The app factory: one FastAPI app of the routers, the request guard and the error
handlers; with a client given it uses that one, otherwise it connects at start-up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline

from hubjobs.kinds import load_kinds
from hubjobs.settings import Settings
from starter.api import (
    audit,
    bulk_cancel,
    bulk_retry,
    contract,
    events,
    health,
    items,
    jobs,
    kinds,
    list_events,
    members,
    overview,
    schedules,
)
from starter.api.codec import CodecCors, codec_router
from starter.api.errors import CODEC_ERRORS, install_error_handlers
from starter.api.guard import RequestGuard
from starter.api.kind_schemas import install_kind_schemas
from starter.api.operator_page import page_router
from starter.api.tokens import TokenVerifier
from starter.client import HubJobsClient


def operation_id(route: APIRoute) -> str:
    """An operation's OpenAPI id is its route function's name (``start_job``): what a
    generated client names its methods."""
    return route.name


def create_app(settings: Settings | None = None, client: HubJobsClient | None = None) -> FastAPI:
    settings = settings or Settings()
    load_kinds(settings.kind_modules)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if client is not None:
            yield
            return
        app.state.client = await HubJobsClient.connect(settings)
        try:
            yield
        finally:
            await app.state.client.close()

    # /docs and /redoc with their scripts served here, not from a CDN: they render offline.
    app = FastAPIOffline(
        title="hubjobs",
        version="1",
        summary="Durable background jobs for the knowledge hub (FHIR bulk-data style).",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        static_url="/docs-static",
    )
    app.state.settings = settings
    app.state.verifier = TokenVerifier(settings)
    if client is not None:
        app.state.client = client
    # The workspace-wide routes first: their paths (…/jobs/events, …/jobs/cancel) would
    # otherwise match a job's (…/jobs/{job_id}) or a kind's start (…/jobs/{kind}).
    for router in (
        list_events.router,
        bulk_cancel.router,
        bulk_retry.router,
        jobs.router,
        events.router,
        items.router,
        members.router,
        schedules.router,
        overview.router,
        audit.router,
        health.router,
        contract.router,
        kinds.router,
    ):
        app.include_router(router)
    if settings.payload_codec:
        # Temporal's codec endpoint, for the UI and the CLI (see starter/api/codec.py).
        codec, origins = codec_router(settings, app.state.verifier, CODEC_ERRORS)
        app.include_router(codec)
        app.add_middleware(CodecCors, origins=origins)
    app.include_router(page_router(settings))
    install_kind_schemas(app)
    app.add_middleware(RequestGuard, budget=settings.api_request_timeout_seconds)
    install_error_handlers(app)
    return app
