"""A job's progress as Server-Sent Events from the process's job feeds: the newest state a
few times a second at most, one ``final`` event, then the end. Each event's id is a digest
of the job's state: a client reconnecting with ``Last-Event-ID`` gets the job at once if
it changed (each event is the whole job), or 204 (stop reconnecting) after the final one."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from hubjobs.errors import HubJobsError
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.api.auth import Jobs
from starter.api.errors import ERRORS, INTERNAL_MESSAGE, log
from starter.api.resources import WORKSPACE_ROUTES, JobResource
from starter.client import HubJobsClient

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["jobs"])


def event_id(job: JobView) -> str:
    """Names the job's state: a digest of all it shows, so an id is seen again only
    when nothing has changed since."""
    state = job.model_dump_json().encode()
    return hashlib.blake2b(state, digest_size=8).hexdigest()


def job_event(job: JobView) -> ServerSentEvent:
    data = JobResource.of(job).model_dump_json()
    return ServerSentEvent(
        data=data, event="final" if job.is_final else "progress", id=event_id(job)
    )


def error_event(err: Exception) -> ServerSentEvent:
    if isinstance(err, HubJobsError):
        code, message = err.code, err.message
    else:
        log.error("job event stream failed: %s", type(err).__name__)
        code, message = "internal_error", INTERNAL_MESSAGE
    return ServerSentEvent(
        data=json.dumps({"error": {"code": code, "message": message}}), event="error"
    )


def event_stream(request: Request, events: AsyncIterator[ServerSentEvent]) -> Response:
    """Events as the API streams them: pinged while quiet, never cached or buffered."""
    settings: Settings = request.app.state.settings
    return EventSourceResponse(
        events,
        ping=settings.api_events_heartbeat_seconds,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def job_events(
    hub: HubJobsClient, first: JobView, last_seen: str | None
) -> AsyncIterator[ServerSentEvent]:
    """The job's events from ``first`` on, skipping the state ``last_seen`` names."""
    try:
        if event_id(first) != last_seen:
            yield job_event(first)
            last_seen = event_id(first)
        if first.is_final:
            return
        async for job in hub.feeds.follow(first.id):
            if event_id(job) != last_seen:
                yield job_event(job)
                last_seen = event_id(job)
    except Exception as err:
        yield error_event(err)


@router.get(
    "/jobs/{job_id}/events",
    responses={
        200: {
            "description": "A stream of Server-Sent Events: `progress` (the job, as a "
            "GET's 202 body) at each change, then one `final`, then the stream ends; "
            "`: ping` comments while nothing changes; `error` (`{error: {code, message}}`) "
            "if the stream cannot go on",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        204: {"description": "Last-Event-ID was the final event's: nothing more will come"},
        **ERRORS,
    },
    response_class=Response,
    summary="The job's progress as it happens (Server-Sent Events)",
)
async def job_events_stream(
    request: Request,
    jobs: Jobs,
    job_id: uuid.UUID,
    last_event_id: Annotated[
        str | None,
        Header(description="Resume after this event (an EventSource sends it)", max_length=128),
    ] = None,
) -> Response:
    first = await jobs.get(job_id)
    if first.is_final and event_id(first) == last_event_id:
        return Response(status_code=204)
    return event_stream(request, job_events(request.app.state.client, first, last_event_id))
