"""``GET /health``: whether PostgreSQL and Temporal answer."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from hubjobs.db.deadline import deadline
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
    """Both servers, asked at once, each within its deadline (the database's read budget,
    Temporal's connect and call timeouts): a server that hangs is ``unavailable``."""

    async def database() -> str:
        try:
            with deadline(hub.settings.db_read_timeout_seconds):
                async with hub.engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        except Exception as err:
            log.warning("health: database unreachable: %s", type(err).__name__)
            return "unavailable"
        return "ok"

    async def temporal() -> str:
        try:
            client = await hub.temporal_client()
            timeout = timedelta(seconds=hub.settings.temporal_rpc_timeout_seconds)
            await client.service_client.check_health(timeout=timeout)
        except Exception as err:
            log.warning("health: Temporal unreachable: %s", type(err).__name__)
            return "unavailable"
        return "ok"

    db_state, temporal_state = await asyncio.gather(database(), temporal())
    return Health(
        status="ok" if db_state == temporal_state == "ok" else "unavailable",
        database=db_state,
        temporal=temporal_state,
    )
