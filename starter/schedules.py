"""A workspace's job schedules through the client (``client.schedules(workspace, actor)``),
each a Temporal Schedule whose every firing is a job (hubjobs.schedules.definition).
Authorised as jobs are: an administrator changes them, a member reads them, and another
workspace's schedule is ``schedule_not_found``, as one that does not exist."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio.client import (
    Client,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.domain.access import require_administrator, require_hub_operator, require_member
from hubjobs.errors import InvalidInput, InvalidPayload, NotFound, Unavailable
from hubjobs.job_rows import audit
from hubjobs.kinds import Registry
from hubjobs.readmodel.status import AuditAction, Surface
from hubjobs.schedules.definition import (
    MEMO_KEY,
    ScheduleDefinition,
    ScheduleView,
    definition_of,
    is_schedule_id,
    new_schedule_id,
    paused_note,
    schedule_of,
    search_attributes_of,
    view_of,
    workspace_query,
)
from hubjobs.schedules.edit import ScheduleEdit, changes
from hubjobs.schedules.timing import invalid_cron, invalid_interval, timing
from hubjobs.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


class Connections(Protocol):
    """What schedules need of the client that made them (HubJobsClient): a protocol, so
    that this module needs nothing of starter.client, which builds it."""

    settings: Settings

    async def db(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T: ...

    async def temporal_client(self) -> Client: ...

    def kinds(self) -> Registry: ...


KEEP_MAX = 1000
# The class of the per-schedule edit locks (two int4 keys: apart from single-key ones).
EDIT_LOCK = int.from_bytes(b"schd", "big")
LOCK_EDIT = text("SELECT pg_advisory_xact_lock(:class, hashtext(CAST(:id AS text)))")


class Unchanged(enum.Enum):
    """An edit's field left as it is (None means something: no time zone, UTC)."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


class Described(NamedTuple):
    """A schedule as Temporal describes it, and as callers see it."""

    description: ScheduleDescription
    view: ScheduleView


def invalid_schedule_id() -> InvalidInput:
    return InvalidInput(
        "a schedule id is <kind>-schedule-<uuid>, as create returned it",
        code="invalid_schedule_id",
    )


def check_schedule_id(value: str) -> str:
    if not is_schedule_id(value):
        raise invalid_schedule_id()
    return value


def check_keep(value: int | None) -> int | None:
    """None (ordinary retention) or 1 to 1000 runs, else ``invalid_keep``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= KEEP_MAX:
        raise InvalidInput(f"keep must be from 1 to {KEEP_MAX} runs", code="invalid_keep")
    return value


def schedule_not_found() -> NotFound:
    return NotFound("no such schedule in this workspace", code="schedule_not_found")


class WorkspaceSchedules:
    """The job schedules of one workspace, as one actor sees them."""

    def __init__(
        self,
        client: Connections,
        workspace_id: uuid.UUID,
        actor_id: uuid.UUID,
        surface: Surface = Surface.python,
    ) -> None:
        self.client = client
        self.workspace_id = workspace_id
        self.actor_id = actor_id
        self.operator = audit.Operator(actor_id, surface)

    async def create(
        self,
        kind_name: str,
        *,
        cron: str | None = None,
        every: str | timedelta | int | None = None,
        time_zone: str | None = None,
        payload: BaseModel | dict[str, Any] | None = None,
        keep: int | None = None,
    ) -> ScheduleView:
        """A schedule of jobs of a registered kind: ``cron`` (five fields, in
        ``time_zone``, UTC by default) or ``every`` (``"5s"``, ``"1h30m"``, a timedelta
        or seconds); ``payload`` is the kind's, checked now and at every firing;
        ``keep`` keeps the newest N successful runs (older ones expire). Refusals:
        ``unknown_kind``, ``invalid_payload``, ``invalid_schedule``, ``invalid_cron``,
        ``invalid_interval``, ``invalid_time_zone``, ``invalid_keep``, then
        ``workspace_not_found`` / ``actor_not_administrator``, and for a payload that
        acts on the whole hub ``hub_operator_required``."""
        kind = self.client.kinds().get(kind_name)
        when = timing(cron=cron, every=every, time_zone=time_zone)
        keep = check_keep(keep)
        raw = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        raw = {} if raw is None else raw
        if not isinstance(raw, dict):
            raise InvalidPayload("the payload must be a JSON object")
        model = kind.validate(raw)
        await self.client.db(self._require_administrator)
        if kind.hub_wide is not None and kind.hub_wide(model):
            # Checked again at every firing, as the start checks are.
            require_hub_operator(self.client.settings.hub_operators, self.actor_id)
        definition = ScheduleDefinition(
            id=new_schedule_id(kind.name),
            kind=kind.name,
            workspace_id=self.workspace_id,
            actor_id=self.actor_id,
            payload=model.model_dump(mode="json"),
            cron=when.cron,
            every_seconds=when.every_seconds,
            time_zone=when.time_zone,
            keep=keep,
            created_at=datetime.now(UTC),
        )
        try:
            temporal = await self.client.temporal_client()
            await temporal.create_schedule(
                definition.id,
                schedule_of(definition, self.client.settings, kind.title),
                memo={MEMO_KEY: definition},
                search_attributes=search_attributes_of(definition),
            )
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                # Temporal's word on the timing (its message may quote it: not passed on).
                raise (invalid_cron() if when.cron is not None else invalid_interval()) from None
            raise _unavailable("creating schedule", err) from None
        log.info("schedule %s created (%s)", definition.id, kind.name)
        timing_of = {"cron": when.cron, "every_seconds": when.every_seconds}
        await self._record(
            AuditAction.schedule_create,
            definition.id,
            {"kind": kind.name, **timing_of, "time_zone": when.time_zone, "keep": keep},
        )
        return await self._describe(definition.id)

    async def list(self) -> list[ScheduleView]:
        """The workspace's schedules, newest first. Found in Temporal's visibility store
        (a new or deleted one shows a moment later), each then described: an edit changes
        what only a describe returns (its action)."""
        await self.client.db(self._require_member)
        try:
            temporal = await self.client.temporal_client()
            listing = await temporal.list_schedules(
                workspace_query(self.workspace_id), page_size=100
            )
            ids = [entry.id async for entry in listing]
            found = await asyncio.gather(*(self._found(temporal, one) for one in ids))
        except RPCError as err:
            raise _unavailable("listing schedules", err) from None
        mine = [v for v in found if v is not None and v.workspace_id == self.workspace_id]
        return sorted(mine, key=lambda v: (v.created_at, v.id), reverse=True)

    @staticmethod
    async def _found(temporal: Client, schedule_id: str) -> ScheduleView | None:
        """A listed schedule as described; None if it was deleted meanwhile."""
        try:
            return await view_of(await temporal.get_schedule_handle(schedule_id).describe())
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    async def get(self, schedule_id: str) -> ScheduleView:
        check_schedule_id(schedule_id)
        await self.client.db(self._require_member)
        return await self._describe(schedule_id)

    async def update(
        self,
        schedule_id: str,
        *,
        cron: str | Unchanged | None = UNCHANGED,
        every: str | timedelta | int | Unchanged | None = UNCHANGED,
        time_zone: str | Unchanged | None = UNCHANGED,
        payload: BaseModel | dict[str, Any] | Unchanged | None = UNCHANGED,
    ) -> ScheduleView:
        """Changes the schedule in place: its timing (a cron and its zone, or an
        interval) and its payload; what is not given stays, a paused schedule stays
        paused, its id, kind and owner stay. Refused with the codes ``create`` uses.
        Answers the schedule as it is after it (an edit that changes nothing records
        nothing)."""
        handle, described = await self._administered(schedule_id)
        kind = self.client.kinds().get(described.view.kind)
        given: dict[str, Any] = {"cron": cron, "every": every, "time_zone": time_zone}
        given = {name: value for name, value in given.items() if value is not UNCHANGED}
        if not isinstance(payload, Unchanged):
            raw = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
            raw = {} if raw is None else raw
            if not isinstance(raw, dict):
                raise InvalidPayload("the payload must be a JSON object")
            model = kind.validate(raw)
            if kind.hub_wide is not None and kind.hub_wide(model):
                require_hub_operator(self.client.settings.hub_operators, self.actor_id)
            given["payload"] = model.model_dump(mode="json")
        edit = ScheduleEdit(**given)
        edit.apply(described.view)  # refused now, before anything is sent
        title = kind.title
        settings = self.client.settings
        seen: list[tuple[ScheduleDefinition, ScheduleDefinition]] = []

        async def updater(current: ScheduleUpdateInput) -> ScheduleUpdate | None:
            # The SDK may call it more than once, each time with the schedule as it is
            # then: the edit applies to that (a field it does not touch keeps whatever
            # another edit put there), its pause kept; the last call's is what is recorded.
            description = current.description
            before = await definition_of(description)
            if before is None or before.workspace_id != self.workspace_id:
                raise schedule_not_found()
            after = edit.apply(before)
            seen[:] = [(before, after)]
            if after == before:
                return None
            schedule = schedule_of(after, settings, title)
            state = description.schedule.state
            schedule.state = dataclasses.replace(state, note=_retold(state.note, before, after))
            return ScheduleUpdate(schedule)

        async def edit_alone(conn: AsyncConnection) -> None:
            # The SDK sends no conflict token: two edits at once would each write over
            # the schedule as they read it. One at a time per schedule, over every API.
            await conn.execute(LOCK_EDIT, {"class": EDIT_LOCK, "id": schedule_id})
            try:
                await handle.update(updater)
            except RPCError as err:
                if err.status == RPCStatusCode.INVALID_ARGUMENT:
                    # Temporal's word on the timing, as at creation (its message not kept).
                    interval = bool(seen) and seen[-1][1].cron is None
                    raise (invalid_interval() if interval else invalid_cron()) from None
                if err.status == RPCStatusCode.NOT_FOUND:
                    raise schedule_not_found() from None
                raise _unavailable(f"updating schedule {schedule_id}", err) from None
            before, after = seen[-1]
            if after != before:
                log.info("schedule %s updated", schedule_id)
                await audit.record(
                    conn,
                    self.workspace_id,
                    self.operator,
                    AuditAction.schedule_update,
                    schedule_id=schedule_id,
                    detail=changes(before, after),
                )

        await self.client.db(edit_alone)
        return await self._describe(schedule_id)

    async def pause(self, schedule_id: str) -> ScheduleView:
        """No firing until unpaused (a run under way goes on); its note says what it does
        still, and who paused it."""
        handle, described = await self._administered(schedule_id)
        note = paused_note(described.view, self.actor_id)
        await self._call(handle, "pausing", lambda: handle.pause(note=note))
        await self._record(AuditAction.schedule_pause, schedule_id)
        return await self._describe(schedule_id)

    async def unpause(self, schedule_id: str) -> ScheduleView:
        handle, described = await self._administered(schedule_id)
        note = described.view.describe()
        await self._call(handle, "unpausing", lambda: handle.unpause(note=note))
        await self._record(AuditAction.schedule_unpause, schedule_id)
        return await self._describe(schedule_id)

    async def trigger(self, schedule_id: str) -> ScheduleView:
        """Fires now, as at a scheduled time: a job with the start checks of now. While a
        run of this schedule is still going the overlap policy would skip the firing:
        refused (``schedule_running``) rather than accepted and silently dropped."""
        handle, described = await self._administered(schedule_id)
        if described.description.info.running_actions:
            raise InvalidInput(
                "a run of this schedule is under way; trigger it again once it has ended",
                code="schedule_running",
            )
        await self._call(handle, "triggering", lambda: handle.trigger())
        await self._record(AuditAction.schedule_trigger, schedule_id)
        return await self._describe(schedule_id)

    async def delete(self, schedule_id: str) -> None:
        """Removes the schedule from Temporal. Its jobs stay (ordinary jobs, with their
        retention); a run under way goes on."""
        handle, _ = await self._administered(schedule_id)
        await self._call(handle, "deleting", lambda: handle.delete())
        log.info("schedule %s deleted", schedule_id)
        await self._record(AuditAction.schedule_delete, schedule_id)

    async def _record(
        self, action: AuditAction, schedule_id: str, detail: dict[str, Any] | None = None
    ) -> None:
        """The audit's event of a change Temporal accepted (nothing of ours to write it
        beside: Temporal holds the schedule)."""

        async def write(conn: AsyncConnection) -> None:
            await audit.record(
                conn,
                self.workspace_id,
                self.operator,
                action,
                schedule_id=schedule_id,
                detail=detail,
            )

        await self.client.db(write)

    async def _require_member(self, conn: AsyncConnection) -> None:
        await require_member(conn, self.workspace_id, self.actor_id)

    async def _require_administrator(self, conn: AsyncConnection) -> None:
        await require_administrator(conn, self.workspace_id, self.actor_id)

    async def _administered(self, schedule_id: str) -> tuple[ScheduleHandle, Described]:
        """The schedule's handle, for an administrator, and the schedule (one describe)."""
        check_schedule_id(schedule_id)
        await self.client.db(self._require_administrator)
        handle = (await self.client.temporal_client()).get_schedule_handle(schedule_id)
        return handle, await self._described(handle)

    async def _describe(self, schedule_id: str) -> ScheduleView:
        handle = (await self.client.temporal_client()).get_schedule_handle(schedule_id)
        return (await self._described(handle)).view

    async def _described(self, handle: ScheduleHandle) -> Described:
        """The schedule, if it is one of this workspace's; ``schedule_not_found``
        otherwise (another workspace's answers as one that does not exist)."""
        description = await self._call(handle, "describing", handle.describe)
        view = await view_of(description)
        if view is None or view.workspace_id != self.workspace_id:
            raise schedule_not_found()
        return Described(description, view)

    @staticmethod
    async def _call(handle: ScheduleHandle, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise schedule_not_found() from None
            raise _unavailable(f"{what} schedule {handle.id}", err) from None


def _retold(note: str | None, before: ScheduleDefinition, after: ScheduleDefinition) -> str:
    """The schedule's note after an edit: what it does now, and who paused it if paused
    (a note not ours, set in Temporal's UI, is left as it is)."""
    if note is None or note == before.describe():
        return after.describe()
    if note.startswith(before.describe() + "; "):
        return after.describe() + note[len(before.describe()) :]
    return note


def _unavailable(what: str, err: RPCError) -> Unavailable:
    log.warning("%s failed: %s", what, err.status.name)
    return Unavailable("Temporal did not answer; try again")
