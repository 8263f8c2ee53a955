"""A workspace's jobs as they change, as Server-Sent Events: one stream for a whole list,
from the process's workspace feeds. A ``reset`` (read the list now) first and whenever
changes may have been missed, then a ``job`` event per change, the newest a few times a
second at most. No ``Last-Event-ID``: a client that reconnects gets a ``reset``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from sse_starlette import ServerSentEvent

from hubjobs.readmodel.workspace_feeds import WorkspaceChange
from starter.api.auth import Jobs
from starter.api.errors import ERRORS
from starter.api.events import error_event, event_stream
from starter.api.resources import WORKSPACE_ROUTES, JobResource

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["jobs"], responses=ERRORS)


def change_events(change: WorkspaceChange) -> list[ServerSentEvent]:
    events = [ServerSentEvent(data="{}", event="reset")] if change.reset else []
    return events + [
        ServerSentEvent(data=JobResource.of(job).model_dump_json(), event="job")
        for job in change.jobs
    ]


async def list_events(
    first: WorkspaceChange, changes: AsyncIterator[WorkspaceChange]
) -> AsyncIterator[ServerSentEvent]:
    try:
        for event in change_events(first):
            yield event
        async for change in changes:
            for event in change_events(change):
                yield event
    except Exception as err:
        yield error_event(err)


@router.get(
    "/jobs/events",
    responses={
        200: {
            "description": "A stream of Server-Sent Events: `reset` first (read the list "
            "now), then `job` (a job as the list shows it) each time one of the "
            "workspace's jobs changes, `reset` again when changes may have been missed; "
            "`: ping` comments while nothing changes; `error` (`{error: {code, "
            "message}}`) if the stream cannot go on",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
    },
    response_class=Response,
    summary="The workspace's jobs as they change (Server-Sent Events): one stream a list",
)
async def job_list_events(request: Request, jobs: Jobs) -> Response:
    changes = jobs.changes()
    # The authorisation (a list's), before the answer starts: a refusal is its status.
    first = await anext(changes)
    return event_stream(request, list_events(first, changes))
