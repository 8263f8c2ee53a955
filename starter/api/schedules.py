"""A workspace's job schedules: create, list, show, edit, pause, unpause, trigger, delete."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from hubjobs.schedules.definition import ScheduleView
from starter.api.auth import ScheduleId, Schedules
from starter.api.bodies import no_duplicate_keys
from starter.api.errors import ERRORS
from starter.api.resources import (
    WORKSPACE_ROUTES,
    ScheduleChange,
    ScheduleRequest,
    ScheduleResource,
    schedule_url,
)
from starter.schedules import WorkspaceSchedules

ScheduleAction = Callable[[WorkspaceSchedules, str], Awaitable[ScheduleView]]

router = APIRouter(prefix=WORKSPACE_ROUTES, tags=["schedules"], responses=ERRORS)


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleResource,
    summary="Create a schedule of jobs of a kind (cron or interval)",
    dependencies=[Depends(no_duplicate_keys)],
)
async def create_schedule(schedules: Schedules, body: ScheduleRequest) -> JSONResponse:
    view = await schedules.create(
        body.kind,
        cron=body.cron,
        every=body.every,
        time_zone=body.time_zone,
        payload=body.payload,
        keep=body.keep,
    )
    return JSONResponse(
        ScheduleResource.of(view).model_dump(mode="json"),
        status_code=201,
        headers={"Location": schedule_url(view)},
    )


@router.get(
    "/schedules",
    response_model=list[ScheduleResource],
    summary="The workspace's schedules, newest first",
)
async def list_schedules(schedules: Schedules) -> list[ScheduleResource]:
    return [ScheduleResource.of(view) for view in await schedules.list()]


@router.get(
    "/schedules/{schedule_id}",
    response_model=ScheduleResource,
    summary="One schedule: its definition, next firings and recent runs",
)
async def get_schedule(schedules: Schedules, schedule_id: ScheduleId) -> ScheduleResource:
    return ScheduleResource.of(await schedules.get(schedule_id))


@router.patch(
    "/schedules/{schedule_id}",
    response_model=ScheduleResource,
    summary="Edit a schedule in place: its cron and time zone, its interval, its payload",
    dependencies=[Depends(no_duplicate_keys)],
)
async def update_schedule(
    schedules: Schedules, schedule_id: ScheduleId, body: ScheduleChange
) -> ScheduleResource:
    given = body.model_dump(include=body.model_fields_set)
    return ScheduleResource.of(await schedules.update(schedule_id, **given))


# One schedule moved by one call, answered with the schedule as it is after it.
SCHEDULE_ACTIONS: tuple[tuple[str, ScheduleAction, int, str], ...] = (
    ("pause", WorkspaceSchedules.pause, 200, "Pause the schedule (a run under way goes on)"),
    ("unpause", WorkspaceSchedules.unpause, 200, "Let a paused schedule fire again"),
    (
        "trigger",
        WorkspaceSchedules.trigger,
        202,
        "Fire now (422 schedule_running while a run of the schedule is still going)",
    ),
)


def _route_action(verb: str, action: ScheduleAction, status: int, summary: str) -> None:
    async def on_schedule(schedules: Schedules, schedule_id: ScheduleId) -> ScheduleResource:
        return ScheduleResource.of(await action(schedules, schedule_id))

    on_schedule.__name__ = f"{verb}_schedule"  # the operation's id in the OpenAPI document
    router.post(
        f"/schedules/{{schedule_id}}/{verb}",
        status_code=status,
        response_model=ScheduleResource,
        summary=summary,
    )(on_schedule)


for _verb, _action, _status, _summary in SCHEDULE_ACTIONS:
    _route_action(_verb, _action, _status, _summary)


@router.delete(
    "/schedules/{schedule_id}",
    status_code=204,
    response_class=Response,
    summary="Delete the schedule from Temporal (its jobs stay)",
)
async def delete_schedule(schedules: Schedules, schedule_id: ScheduleId) -> Response:
    await schedules.delete(schedule_id)
    return Response(status_code=204)
