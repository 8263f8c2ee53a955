"""``GET /health``: whether PostgreSQL and Temporal answer, and whether PostgreSQL takes
writes (starter/api/health_check.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from starter.api.health_check import check_health
from starter.api.resources import Health
from starter.client import HubJobsClient

router = APIRouter(tags=["health"])


@router.get(
    "/health",
    response_model=Health,
    responses={
        503: {
            "model": Health,
            "description": "A dependency does not answer, or the database refuses writes",
        }
    },
    summary="Database and Temporal reachability, and whether the database takes writes",
)
async def health(request: Request) -> JSONResponse:
    hub: HubJobsClient = request.app.state.client
    report = await check_health(hub)
    ok = report.database == "ok" and report.temporal == "ok"
    return JSONResponse(report.model_dump(), status_code=200 if ok else 503)
