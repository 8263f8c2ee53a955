"""``GET /health``: whether PostgreSQL and Temporal answer."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from starter.api.resources import Health
from starter.client import HubJobsClient

log = logging.getLogger("starter.api")
router = APIRouter(tags=["health"])


@router.get(
    "/health",
    response_model=Health,
    responses={503: {"model": Health, "description": "A dependency does not answer"}},
    summary="Database and Temporal reachability",
)
async def health(request: Request) -> JSONResponse:
    hub: HubJobsClient = request.app.state.client
    report = await check_health(hub)
    ok = report.database == "ok" and report.temporal == "ok"
    return JSONResponse(report.model_dump(), status_code=200 if ok else 503)


async def check_health(hub: HubJobsClient) -> Health:

    database = temporal = "ok"
    try:
        async with hub.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as err:
        log.warning("health: database unreachable: %s", type(err).__name__)
        database = "unavailable"
    try:
        client = await hub.temporal_client()
        await client.service_client.check_health()
    except Exception as err:
        log.warning("health: Temporal unreachable: %s", type(err).__name__)
        temporal = "unavailable"
    return Health(
        status="ok" if database == temporal == "ok" else "unavailable",
        database=database,
        temporal=temporal,
    )
