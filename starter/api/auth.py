"""Who calls: the bearer token's actor, scoped to the workspace in the path; every route
but /health and /contract depends on it."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import Depends, Header, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from hubjobs.readmodel.status import Surface
from hubjobs.schedules.definition import SCHEDULE_ID_MAX_LENGTH, SCHEDULE_ID_PATTERN
from starter.api.tokens import TokenVerifier
from starter.client import HubJobsClient, WorkspaceJobs
from starter.schedules import WorkspaceSchedules

# The OpenAPI security scheme (HTTP bearer, a JWT): a generated client sends the header.
# auto_error off: the token is checked by the verifier, with the API's own codes and
# messages (401 unauthorized, "a bearer token is required"), not FastAPI's 403.
BEARER = HTTPBearer(
    auto_error=False, bearerFormat="JWT", description="A JWT whose `sub` is the actor's id"
)


async def bearer_header(
    request: Request,
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
) -> str | None:
    """The Authorization header as sent. Async, as every dependency here: FastAPI runs a
    plain function in a thread, a costly hop on every request."""
    return request.headers.get("authorization")


BearerHeader = Annotated[str | None, Depends(bearer_header)]

# The surfaces a caller of the API may name for the audit trail (the Python client's own,
# ``python``, is not one: a call through the API is from the API or a client of it).
SURFACE_HEADER = "X-Hubjobs-Surface"
ApiSurface = Literal["api", "cli", "console"]


async def jobs_for(
    request: Request,
    workspace_id: Annotated[uuid.UUID, Path(description="The workspace")],
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    x_hubjobs_surface: Annotated[
        ApiSurface,
        Header(
            description="Where the call comes from, for the audit trail: `cli` (the hubjobs "
            "CLI sends it), `console` (the operator page), else `api` (422 invalid_surface "
            "for another value)"
        ),
    ] = "api",
) -> WorkspaceJobs:
    """The workspace's jobs as the token's actor sees them. A token is checked on the loop,
    unless its keys may need fetching (JWKS), which may block: then in a thread. The header
    is read here, not through ``bearer_header``: each level of dependencies costs a request."""
    authorization = request.headers.get("authorization")
    hub: HubJobsClient = request.app.state.client
    verifier: TokenVerifier = request.app.state.verifier
    if verifier.key_set is None:
        actor = verifier.actor_of(authorization)
    else:
        actor = await run_in_threadpool(verifier.actor_of, authorization)
    return hub.scope(workspace_id, actor, Surface(x_hubjobs_surface))


Jobs = Annotated[WorkspaceJobs, Depends(jobs_for)]


async def schedules_for(jobs: Jobs) -> WorkspaceSchedules:
    """The workspace's schedules, for the same actor, authorised like its jobs."""
    return jobs.schedules


Schedules = Annotated[WorkspaceSchedules, Depends(schedules_for)]


ScheduleId = Annotated[
    str,
    Path(
        description="The schedule's id, <kind>-schedule-<uuid>",
        max_length=SCHEDULE_ID_MAX_LENGTH,
        pattern=SCHEDULE_ID_PATTERN,
    ),
]
