"""``GET /workspaces/{workspace_id}/me``: the caller's role there and whether it may act,
so that a console offers only what the API would accept (the API still decides)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from pydantic import BaseModel, Field

from hubjobs.domain.access import ADMINISTRATOR
from starter.api.auth import Jobs
from starter.api.errors import ERRORS
from starter.api.resources import WORKSPACE_ROUTES

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["workspaces"], responses=ERRORS)


class Standing(BaseModel):
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    role: str = Field(description="reader, editor or administrator")
    may_act: bool = Field(
        description="Whether the caller may start, cancel and retry jobs and change "
        "schedules here: a workspace's administrators may (403 actor_not_administrator "
        "otherwise)"
    )


@router.get("/me", response_model=Standing, summary="The caller's role in the workspace")
async def my_standing(jobs: Jobs) -> Standing:
    role = await jobs.role()
    return Standing(
        workspace_id=jobs.workspace_id,
        actor_id=jobs.actor_id,
        role=role,
        may_act=role == ADMINISTRATOR,
    )
