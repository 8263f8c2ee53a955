"""The console's overview and workers: a workspace's queue at a glance, and who works
the job task queue. Any member may read both."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from hubjobs.readmodel.overview import Overview, Window
from hubjobs.temporal.pollers import Workers
from starter.api.auth import Jobs
from starter.api.errors import ERRORS
from starter.api.resources import WORKSPACE_ROUTES

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["overview"], responses=ERRORS)


@router.get(
    "/overview",
    response_model=Overview,
    summary="Per kind: jobs queued, running and stuck now, ended within the window; the "
    "oldest queued job; throughput in buckets (a minute over the hour, 15 minutes over the day)",
)
async def get_overview(
    jobs: Jobs,
    window: Annotated[Window, Query(description="The last hour or the last day")] = Window.hour,
) -> Overview:
    return await jobs.overview(window)


@router.get(
    "/workers",
    response_model=Workers,
    summary="The workers polling the job task queue (shared by every workspace): identity, "
    "build, last seen, slots in use, live or gone, and this workspace's jobs each runs",
)
async def get_workers(jobs: Jobs) -> Workers:
    return await jobs.workers()
