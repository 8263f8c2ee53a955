"""The client other services import: start, read, cancel, wait for and schedule jobs
(``jobs.schedules``), each call scoped to a workspace and an actor (``client.scope``) and
refused as a ``HubJobsError`` with a stable code.

Nothing connects or is imported before a call needs it: a read is one statement on a plain
psycopg connection; Temporal, SQLAlchemy and the kinds come with the first start or cancel.
Every call has a deadline and waits in line in its process (hubjobs.db.turns), past either
``unavailable``. A start Temporal did not take is withdrawn (failed ``unavailable``), or with
an idempotency key left for the same key to start; a withdrawal jumps the line and finishes
even when its caller gave up."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python
from typing_extensions import Unpack

from hubjobs.db.deadline import deadline
from hubjobs.db.errors import (
    DATABASE_FULL,
    DATABASE_READ_ONLY,
    is_data_error,
    is_outage,
    is_timeout,
    refused_writes,
)
from hubjobs.db.limits import ConnectOptions, Purpose, budget
from hubjobs.db.pool import Connection, ReadPool
from hubjobs.db.turns import NoTurn, Turns
from hubjobs.db.writes import WriteCheck
from hubjobs.domain.access import workspace_not_found
from hubjobs.domain.text import (
    check_correlation_id,
    check_idempotency_key,
    check_reason,
    is_kind_name,
)
from hubjobs.errors import (
    DatabaseRefusesWrites,
    HubJobsError,
    InvalidInput,
    InvalidPayload,
    JobNotFound,
    Unavailable,
    UnknownKind,
)
from hubjobs.observability.logs import log_failure
from hubjobs.readmodel import audit as audit_reads
from hubjobs.readmodel import reads
from hubjobs.readmodel.audit import AuditEventView
from hubjobs.readmodel.overview import Overview, Window, overview_as_member
from hubjobs.readmodel.search import JobSearch, JobSort
from hubjobs.readmodel.search import retry_key as retry_key  # the client's name for it too
from hubjobs.readmodel.status import (
    UNFINISHED_STATUSES,
    AuditAction,
    ItemState,
    JobStatus,
    Surface,
)
from hubjobs.readmodel.views import ItemPage, JobView
from hubjobs.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
    from temporalio.client import Client

    from hubjobs.job_rows import CreatedJob
    from hubjobs.job_rows.audit import Operator
    from hubjobs.kinds import Registry
    from hubjobs.readmodel.changes import JobChanges
    from hubjobs.readmodel.feeds import JobFeeds
    from hubjobs.readmodel.workspace_feeds import WorkspaceChange, WorkspaceFeeds
    from hubjobs.temporal.pollers import Workers
    from starter.schedules import WorkspaceSchedules

log = logging.getLogger(__name__)
T = TypeVar("T")


class CancelOutcome(NamedTuple):
    """One job of a bulk cancel: the job as it is after (None when it failed), or the
    error its own cancel would have met."""

    job_id: uuid.UUID
    job: JobView | None
    error: HubJobsError | None


class RetryOutcome(NamedTuple):
    """One job of a bulk retry: its retry (``created``: a new one; else the one an
    earlier retry started), or the error its own retry would have met."""

    job_id: uuid.UUID
    retry: JobView | None
    created: bool
    error: HubJobsError | None


class JobFilters(TypedDict, total=False):
    """A list's filters, as ``WorkspaceJobs.list`` takes them: what a bulk action over
    "everything this search matches" reads, the same way."""

    status: JobStatus | Sequence[JobStatus] | None
    kind: str | None
    schedule_id: str | None
    actor_id: uuid.UUID | None
    id_prefix: str | None
    since: datetime | None
    until: datetime | None
    fields: Sequence[str]


# A bulk action: the most jobs at once (a cancel's or a retry's), how many cancel signals
# go to Temporal at a time, and how many retries start at a time.
MAX_BULK_CANCEL = 1000
BULK_CANCEL_SIGNALS = 16
BULK_RETRY_STARTS = 8


class JobFile(NamedTuple):
    """A file a finished job serves: where it is, and its media type."""

    path: Path
    media_type: str


# Item listings: the largest page, and the largest ordinal (job_items.ordinal is int4).
MAX_ITEMS_PAGE = 1000
MAX_ORDINAL = 2**31 - 1
# What a start withdrawn because Temporal did not take it says, on its row.
NOT_STARTED = "The job was not started: Temporal did not answer in time."


def json_payload(payload: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """A start's payload as JSON values (a model's fields, or a dict's: a UUID or a
    datetime as its text), or ``invalid_payload``."""
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    if not isinstance(payload, dict):
        raise InvalidPayload("the payload must be a JSON object")
    try:
        raw: dict[str, Any] = to_jsonable_python(payload)
    except (PydanticSerializationError, UnicodeError):  # a lone surrogate, say
        raise InvalidPayload("the payload is not JSON") from None
    return raw


def require_uuid(name: str, value: object, *, optional: bool = False) -> None:
    """``value`` must be a ``uuid.UUID`` (or None when ``optional``): a string id would
    be compared with ids as text and find nothing, a refusal that hides the mistake."""
    if value is None and optional:
        return
    if not isinstance(value, uuid.UUID):
        wanted = "uuid.UUID or None" if optional else "uuid.UUID"
        raise TypeError(f"{name} must be a {wanted}, not {type(value).__name__}")


class HubJobsClient:
    """One per process: a pool for reads, and, from the first call that needs them, the
    Temporal client and a SQLAlchemy engine for writes. Either may be handed in."""

    def __init__(
        self,
        temporal: Client | None = None,
        engine: AsyncEngine | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self._temporal = temporal
        self._engine = engine
        self._reads: ReadPool | None = None
        self._changes: JobChanges | None = None
        self._feeds: JobFeeds | None = None
        self._workspace_feeds: WorkspaceFeeds | None = None
        self._turns: Turns | None = None
        self._starts = Turns(self.settings.starts_in_flight)
        self._connecting = asyncio.Lock()
        self.writes = WriteCheck(self.settings.write_probe_seconds)

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> HubJobsClient:
        """A client for ``settings``; it connects to each server on first need."""
        return cls(settings=settings or Settings())

    def kinds(self) -> Registry:
        """The registered kinds, with those of HUBJOBS_KIND_MODULES loaded."""
        from hubjobs.kinds import REGISTRY, load_kinds

        load_kinds(self.settings.kind_modules)
        return REGISTRY

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine of writes (made on first use)."""
        if self._engine is None:
            from hubjobs.db.engine import async_engine

            self._engine = async_engine(
                self.settings.resolved_database_url(),
                pool_size=5,
                options=ConnectOptions.of(self.settings, Purpose.READ, Purpose.LIFECYCLE),
            )
        return self._engine

    @property
    def turns(self) -> Turns:
        """Turns at the engine's connections, as many as its pool has (made on first use)."""
        if self._turns is None:
            from hubjobs.db.engine import capacity

            self._turns = Turns(capacity(self.engine))
        return self._turns

    @asynccontextmanager
    async def start_turn(self) -> AsyncIterator[float]:
        """One of the process's HUBJOBS_STARTS_IN_FLIGHT starts, for the block; it yields
        the moment (``time.monotonic``) by which its connection must be had too."""
        until = time.monotonic() + self.settings.db_queue_timeout_seconds
        async with _queued(self._starts.turn(self.settings.db_queue_timeout_seconds)):
            yield until

    @property
    def reads(self) -> ReadPool:
        """Plain psycopg connections for the reads, to the engine's database when one was
        handed in, else to the settings' (made on first use)."""
        if self._reads is None:
            from hubjobs.db.engine import plain_url

            url = (
                self._engine.url.render_as_string(hide_password=False)
                if self._engine is not None
                else self.settings.resolved_database_url()
            )
            self._reads = ReadPool(
                plain_url(url),
                size=5,
                options=ConnectOptions.of(self.settings, Purpose.READ),
                timeout=self.settings.db_read_timeout_seconds,
            )
        return self._reads

    @property
    def changes(self) -> JobChanges:
        """The process's one listening connection for the read model's change
        notifications (made on first use; it connects while someone follows)."""
        if self._changes is None:
            from hubjobs.readmodel.changes import JobChanges

            self._changes = JobChanges(self.reads.url)
        return self._changes

    @property
    def feeds(self) -> JobFeeds:
        """The process's job feeds: one read per change of a followed job (made on
        first use)."""
        if self._feeds is None:
            from hubjobs.readmodel.feeds import JobFeeds

            self._feeds = JobFeeds(self.changes, self._job_by_id)
        return self._feeds

    @property
    def workspace_feeds(self) -> WorkspaceFeeds:
        """The process's workspace feeds: one read per batch of changes, whatever the
        workspaces followed (made on first use)."""
        if self._workspace_feeds is None:
            from hubjobs.readmodel.workspace_feeds import WorkspaceFeeds

            self._workspace_feeds = WorkspaceFeeds(self.changes, self._jobs_of_workspaces)
        return self._workspace_feeds

    async def _job_by_id(self, job_id: uuid.UUID) -> JobView | None:
        return await self.read(lambda conn: reads.job_by_id(conn, job_id))

    async def _jobs_of_workspaces(
        self, workspace_ids: Sequence[uuid.UUID], job_ids: Sequence[uuid.UUID]
    ) -> list[JobView]:
        return await self.read(lambda conn: reads.jobs_of_workspaces(conn, workspace_ids, job_ids))

    async def temporal_client(self) -> Client:
        """The Temporal client, connected on first use (``unavailable`` when the server
        does not answer; the next call tries again)."""
        if self._temporal is None:
            async with self._connecting:
                if self._temporal is None:
                    from hubjobs.temporal.client import connect

                    self._temporal = await connect(self.settings)
        return self._temporal

    @property
    def temporal(self) -> Client:
        """The Temporal client once connected (handed in, or by ``temporal_client()``)."""
        if self._temporal is None:
            raise RuntimeError("Temporal is not connected yet: await temporal_client()")
        return self._temporal

    async def close(self) -> None:
        if self._workspace_feeds is not None:
            await self._workspace_feeds.close()
        if self._feeds is not None:
            await self._feeds.close()
        if self._changes is not None:
            await self._changes.close()
        if self._reads is not None:
            await self._reads.close()
        if self._engine is not None:
            await self._engine.dispose()

    async def __aenter__(self) -> HubJobsClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def scope(
        self, workspace_id: uuid.UUID, actor_id: uuid.UUID, surface: Surface = Surface.python
    ) -> WorkspaceJobs:
        """The workspace's jobs as the actor sees them; its actions are audited as from
        ``surface`` (the API passes its own)."""
        require_uuid("workspace_id", workspace_id)
        require_uuid("actor_id", actor_id)
        return WorkspaceJobs(self, workspace_id, actor_id, Surface(surface))

    def schedules(
        self, workspace_id: uuid.UUID, actor_id: uuid.UUID, surface: Surface = Surface.python
    ) -> WorkspaceSchedules:
        """The workspace's job schedules, as the actor sees them (starter/schedules.py)."""
        from starter.schedules import WorkspaceSchedules

        require_uuid("workspace_id", workspace_id)
        require_uuid("actor_id", actor_id)
        return WorkspaceSchedules(self, workspace_id, actor_id, Surface(surface))

    async def db(
        self,
        work: Callable[[AsyncConnection], Awaitable[T]],
        *,
        purpose: Purpose = Purpose.LIFECYCLE,
        urgent: bool = False,
        queued_until: float | None = None,
    ) -> T:
        """Runs ``work`` in one transaction, within its purpose's deadline (a start, a
        cancel: HUBJOBS_DB_LIFECYCLE_TIMEOUT_SECONDS). A database that does not answer
        is ``Unavailable`` (try again); a value the database refuses is ``InvalidInput``
        (``invalid_data``: trying again changes nothing); anything else is an
        ``internal_error``. The log gets the error's type, SQLSTATE and frames, never its
        message (which may quote the values sent). It waits for one of the engine's
        connections first, in line (ahead of the others when ``urgent``), until
        ``queued_until`` or for HUBJOBS_DB_QUEUE_TIMEOUT_SECONDS; the deadline runs from
        when it has one."""
        queue = self.settings.db_queue_timeout_seconds
        if queued_until is not None:
            queue = max(0.0, queued_until - time.monotonic())
        async with _queued(self.turns.turn(queue, urgent=urgent)):
            try:
                with deadline(budget(self.settings, purpose).seconds):
                    async with self.engine.begin() as conn:
                        return await work(conn)
            except HubJobsError:
                raise
            except Exception as err:
                error = _database_error(err)
                if isinstance(error, DatabaseRefusesWrites):
                    self.writes.refused(error.code)
                raise error from None

    async def refused_writes(self) -> str | None:
        """Whether the database refuses writes (``database_full``,
        ``database_read_only``) or takes them (None), as this process last found (a
        write probe at most every HUBJOBS_WRITE_PROBE_SECONDS, hubjobs.db.writes; a
        refusal its own writes met). A database that does not answer is
        ``Unavailable``."""
        from hubjobs.db.writes import probe_writes

        known = self.writes.known()
        if known is not None:
            return known.refusal
        async with self.writes.probing:
            known = self.writes.known()
            if known is not None:
                return known.refusal
            try:
                await self.db(probe_writes, purpose=Purpose.READ)
            except DatabaseRefusesWrites as refused:
                return refused.code  # noted by ``db``
            except Unavailable:
                raise
            except HubJobsError as err:
                # The probe itself was refused (no TEMP privilege): it cannot tell.
                log.warning("write probe failed (%s): taken as writable", err.code)
            self.writes.taken()
            return None

    async def require_writes(self) -> None:
        """Refuses at once (``DatabaseRefusesWrites``) while the database refuses writes,
        as ``refused_writes`` knows it."""
        refusal = await self.refused_writes()
        if refusal is not None:
            raise DatabaseRefusesWrites(REFUSED_WRITES[refusal], code=refusal)

    async def read(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Runs ``work`` (statements of ``hubjobs.readmodel.reads``) on a connection of
        the read pool, each statement on its own; errors as ``db``."""
        try:
            return await self.reads.run(work)
        except HubJobsError:
            raise
        except Exception as err:
            raise _database_error(err) from None


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Marks the error of a start that settled after its caller gave up as seen (its
    outcome is on the row; asyncio would otherwise log it as never retrieved)."""
    if not task.cancelled():
        task.exception()


@asynccontextmanager
async def _queued(turn: AbstractAsyncContextManager[None]) -> AsyncIterator[None]:
    """``turn``, a wait in line that ends as ``Unavailable`` (nothing done) past its bound."""
    try:
        async with turn:
            yield
    except NoTurn as err:
        log.warning("a call waited in line too long in this process: %s", err)
        raise Unavailable(
            "too many calls are waiting for the job database in this process; try again"
        ) from None


# What a caller hears while the database refuses writes (hubjobs.db.errors).
REFUSED_WRITES = {
    DATABASE_FULL: "the job database is full (out of disk space, or memory) and refuses "
    "writes; nothing was written: try again once it has room",
    DATABASE_READ_ONLY: "the job database is read-only and refuses writes; nothing was "
    "written: try again once it takes writes",
}


def _database_error(err: Exception) -> HubJobsError:
    """What a caller hears of a database error; the log gets its type and SQLSTATE."""
    refusal = refused_writes(err)
    if refusal is not None:
        log_failure(log, "database call refused (no writes)", err, level=logging.WARNING)
        return DatabaseRefusesWrites(REFUSED_WRITES[refusal], code=refusal)
    if is_outage(err):
        log_failure(log, "database call failed (outage)", err, level=logging.WARNING)
        if is_timeout(err):
            return Unavailable("the job database did not answer in time")
        return Unavailable("the job database does not answer")
    if is_data_error(err):
        log_failure(log, "database refused a value", err, level=logging.INFO)
        return InvalidInput("the database refused a value of the request", code="invalid_data")
    log_failure(log, "database call failed", err)
    return HubJobsError("internal error; the detail is in the server log", code="internal_error")


def _item_state(state: ItemState | str | None) -> ItemState | None:
    if state is None or isinstance(state, ItemState):
        return state
    try:
        return ItemState(state)
    except ValueError:
        states = ", ".join(s.value for s in ItemState)
        raise InvalidInput(f"unknown item state: one of {states}", code="invalid_state") from None


def invalid_action() -> InvalidInput:
    actions = ", ".join(a.value for a in AuditAction)
    return InvalidInput(f"unknown action: one of {actions}", code="invalid_action")


def _audit_action(action: AuditAction | str | None) -> AuditAction | None:
    if action is None or isinstance(action, AuditAction):
        return action
    try:
        return AuditAction(action)
    except ValueError:
        raise invalid_action() from None


def _check_filter(kind: str | None, schedule_id: str | None) -> None:
    if kind is not None and not is_kind_name(kind):
        raise UnknownKind()
    if schedule_id is not None:
        from starter.schedules import check_schedule_id

        check_schedule_id(schedule_id)


def _recorded(filters: JobFilters) -> dict[str, Any]:
    """A bulk action's filter as its audit event keeps it: the status (one, or a list
    of several), kind and schedule always, the search's other filters when given."""
    status = filters.get("status")
    statuses = (
        []
        if status is None
        else [str(status)]
        if isinstance(status, str)
        else [str(s) for s in status]
    )
    kept: dict[str, Any] = {
        "status": statuses[0] if len(statuses) == 1 else statuses or None,
        "kind": filters.get("kind"),
        "schedule_id": filters.get("schedule_id"),
    }
    actor_id, since, until = filters.get("actor_id"), filters.get("since"), filters.get("until")
    extra = {
        "actor_id": None if actor_id is None else str(actor_id),
        "id": filters.get("id_prefix"),
        "since": None if since is None else since.isoformat(),
        "until": None if until is None else until.isoformat(),
        "field": list(filters.get("fields") or ()) or None,
    }
    return kept | {name: value for name, value in extra.items() if value is not None}


class _Event(NamedTuple):
    job_ids: list[uuid.UUID]
    detail: dict[str, Any]


def _bulk_retry_event(
    outcomes: Sequence[RetryOutcome],
    named: int,
    matching: dict[str, Any] | None,
    more: bool,
    finished: bool,
) -> _Event:
    """A bulk retry's one audit event: every job it found and every retry it answered,
    the filter, the counts and the refusals by code (``interrupted`` when cut short)."""
    codes = Counter(o.error.code for o in outcomes if o.error is not None)
    not_found = codes.pop(JobNotFound.code, 0)
    counts = {
        "named": named,
        "retried": sum(o.created for o in outcomes),
        "already_retried": sum(o.retry is not None and not o.created for o in outcomes),
        "refused": sum(codes.values()),
        "not_found": not_found,
    }
    touched = [o.job_id for o in outcomes if o.error is None or o.error.code != JobNotFound.code]
    touched += [o.retry.id for o in outcomes if o.retry is not None]
    detail = {"filter": matching, "counts": counts, "refused": dict(codes), "more": more}
    if not finished:
        detail["interrupted"] = True
    return _Event(list(dict.fromkeys(touched)), detail)


def _aware(at: datetime | None) -> datetime | None:
    """A time without a zone, read as UTC (as the API's own are)."""
    return at if at is None or at.tzinfo is not None else at.replace(tzinfo=UTC)


class WorkspaceJobs:
    """The jobs of one workspace, as one actor sees them."""

    def __init__(
        self,
        client: HubJobsClient,
        workspace_id: uuid.UUID,
        actor_id: uuid.UUID,
        surface: Surface = Surface.python,
    ) -> None:
        self.client = client
        self.workspace_id = workspace_id
        self.actor_id = actor_id
        self.surface = surface

    @property
    def schedules(self) -> WorkspaceSchedules:
        """The same workspace's job schedules, as the same actor sees them."""
        return self.client.schedules(self.workspace_id, self.actor_id, self.surface)

    @property
    def operator(self) -> Operator:
        """Who acts, and from where, as the audit trail records it."""
        from hubjobs.job_rows.audit import Operator

        return Operator(self.actor_id, self.surface)

    # --- starting ---------------------------------------------------------------

    async def start(
        self,
        kind_name: str,
        payload: BaseModel | dict[str, Any],
        *,
        correlation_id: str | None = None,
        idempotency_key: str | None = None,
        notify_url: str | None = None,
    ) -> JobView:
        """Starts a job of any registered kind. Refused starts raise and leave nothing;
        the same idempotency key and request (kind, payload as its kind validates it,
        ``notify_url``) gives the same job (and repairs one whose workflow never
        started); the key with another request raises ``IdempotencyKeyReused``, its
        ``job_id`` the job the key names. The idempotency key and correlation id are
        1–128 characters of ``A–Z a–z 0–9 . _ ~ : / @ + = -`` (``hubjobs.domain.text``). With
        ``notify_url``, a signed completion webhook is POSTed there when the job is
        final: refused ``invalid_notify_url`` for a host the deployment does not allow,
        ``webhooks_not_configured`` without a signing secret."""
        from hubjobs.webhooks.policy import checked

        kind = self.client.kinds().get(kind_name)
        idempotency_key = check_idempotency_key(idempotency_key)
        correlation_id = check_correlation_id(correlation_id) or uuid.uuid4().hex
        raw = json_payload(payload)
        notify_url = await checked(self.client.settings, notify_url)
        job_id = uuid.uuid4()
        from hubjobs.job_rows import JobRow, admit
        from hubjobs.observability.telemetry import job_span

        row = JobRow(
            job_id=job_id,
            kind=kind.name,
            workspace_id=self.workspace_id,
            actor_id=self.actor_id,
            correlation_id=correlation_id,
            payload=raw,
            idempotency_key=idempotency_key,
            notify_url=notify_url,
        )

        from hubjobs.job_rows import audit

        operators = self.client.settings.hub_operators

        async def create(conn: AsyncConnection) -> CreatedJob:
            created = await admit(conn, row, operators=operators)
            if created.created:  # a start its key named before was recorded then
                await audit.record(
                    conn, self.workspace_id, self.operator, AuditAction.start, job_ids=[job_id]
                )
            return created

        # One trace from here through the workflow and its activities, with the
        # correlation id in its baggage.
        with job_span(
            "hubjobs.start",
            job_id=str(job_id),
            kind=kind.name,
            workspace_id=str(self.workspace_id),
            correlation_id=correlation_id,
        ):
            return await self._create_and_launch(create, keyed=idempotency_key is not None)

    async def _create_and_launch(
        self, create: Callable[[AsyncConnection], Awaitable[CreatedJob]], *, keyed: bool
    ) -> JobView:
        """Records the job (or finds the one its key names) and starts its workflow unless
        started; Temporal is connected first, so a server that does not answer records nothing."""
        await self.client.temporal_client()
        # A database that refuses writes would take the row, perhaps, and run nothing.
        await self.client.require_writes()
        async with self.client.start_turn() as queued_until:
            created = await self.client.db(create, queued_until=queued_until)
            job = created.job
            if job.status != JobStatus.queued:
                return job
            # The row exists: a caller that gives up now (the API's request budget) stops
            # neither the workflow's start nor the withdrawal, which end on their own
            # within their bounds rather than leave the row for the reconciler.
            settle = asyncio.ensure_future(
                self._start_workflow(job, withdraw=created.created and not keyed)
            )
            settle.add_done_callback(_retrieved)
            return await asyncio.shield(settle)

    async def retry(self, job_id: uuid.UUID, *, correlation_id: str | None = None) -> JobView:
        """A new job of the same kind and payload over the failed items of a finished
        job, linked to it (``source_job_id``). The start checks are a start's (an
        enabled administrator; the kind keeps only the items still there, e.g. pages
        not trashed since). Refused as ``not_retryable`` for a kind whose items cannot
        be retried, ``job_not_finished`` while the job runs, ``nothing_to_retry`` when
        no failed item is left (out of the trash). Idempotent per source job: retrying
        it again returns the same retry, unless that one took no item (its pages were
        trashed by the time it ran): the next retry is then a new job."""
        retry, _ = await self._retry(job_id, correlation_id=correlation_id, audited=True)
        return retry

    async def _retry(
        self, job_id: uuid.UUID, *, correlation_id: str | None, audited: bool
    ) -> tuple[JobView, bool]:
        """``retry``, and whether it started a new job (False: the retry an earlier one
        started); its own audit event only when ``audited`` (a bulk retry has one)."""
        from hubjobs import job_rows
        from hubjobs.domain.access import require_administrator
        from hubjobs.job_rows import JobRow, admit, audit, release_empty_retry
        from hubjobs.observability.telemetry import job_span

        require_uuid("job_id", job_id)
        correlation_id = check_correlation_id(correlation_id) or uuid.uuid4().hex
        new_id = uuid.uuid4()
        started: list[bool] = []  # the last transaction's word (it may run again)

        async def create(conn: AsyncConnection) -> CreatedJob:
            # First: one who may not start jobs here learns nothing about the job.
            await require_administrator(conn, self.workspace_id, self.actor_id)
            source = await job_rows.get_job(conn, job_id, self.workspace_id)
            if source is None:
                raise JobNotFound("no such job in this workspace")
            kind = self.client.kinds().find(source.kind)
            if kind is None or not kind.retryable_items:
                raise InvalidInput("jobs of this kind cannot be retried", code="not_retryable")
            if not source.is_final:
                raise InvalidInput(
                    "the job has not finished; retry it once it has", code="job_not_finished"
                )
            row = JobRow(
                job_id=new_id,
                kind=kind.name,
                workspace_id=self.workspace_id,
                actor_id=self.actor_id,
                correlation_id=correlation_id,
                payload=source.payload,
                idempotency_key=retry_key(source.id),
                source_job_id=source.id,
            )
            await release_empty_retry(conn, row)
            created = await admit(conn, row, operators=self.client.settings.hub_operators)
            started.append(created.created)
            if created.created and audited:
                await audit.record(
                    conn,
                    self.workspace_id,
                    self.operator,
                    AuditAction.retry,
                    job_ids=[source.id, created.job.id],
                    detail={"source_job_id": source.id, "retry_job_id": created.job.id},
                )
            return created

        with job_span(
            "hubjobs.retry",
            job_id=str(new_id),
            source_job_id=str(job_id),
            workspace_id=str(self.workspace_id),
            correlation_id=correlation_id,
        ):
            # Keyed by its source: retrying the same job again starts it.
            job = await self._create_and_launch(create, keyed=True)
            return job, started[-1]

    async def _start_workflow(self, job: JobView, *, withdraw: bool) -> JobView:
        """Starts the job's workflow. One Temporal did not take stays queued for its key, or
        without one is withdrawn, unless its row moved on (the start went through after all)."""
        from temporalio.service import RPCError

        from hubjobs import job_rows
        from hubjobs.temporal.launch import launch

        temporal = await self.client.temporal_client()
        try:
            await launch(temporal, job, self.client.settings)
            return job
        except RPCError as err:
            log.warning("starting workflow %s failed: %s", job.workflow_id, err.status.name)
        if not withdraw:
            raise Unavailable(
                "the job was recorded but Temporal did not take it in time; "
                "start it again with the same idempotency key"
            )
        retention = timedelta(hours=self.client.settings.retention_hours)

        async def take_back(conn: AsyncConnection) -> bool:
            return await job_rows.withdraw(
                conn, job.id, code=Unavailable.code, message=NOT_STARTED, retention=retention
            )

        # A one-row write within a read's budget, so the whole start stays within the API's;
        # urgent, ahead of every call waiting for a connection, so that a burst of starts
        # never leaves the row behind.
        if await self.client.db(take_back, purpose=Purpose.READ, urgent=True):
            raise Unavailable("Temporal did not answer in time; nothing was started: try again")
        return await self.get(job.id)

    # --- reading ------------------------------------------------------------------

    async def get(self, job_id: uuid.UUID) -> JobView:
        """The job, in one statement that checks the actor's membership too."""
        require_uuid("job_id", job_id)

        async def read(conn: Connection) -> tuple[str | None, JobView | None]:
            return await reads.job_as_member(conn, self.workspace_id, self.actor_id, job_id)

        role, job = await self.client.read(read)
        if role is None:
            raise workspace_not_found()
        if job is None:
            raise JobNotFound("no such job in this workspace")
        return job

    async def retry_of(self, job_id: uuid.UUID) -> JobView | None:
        """The job's retry (what ``retry`` started: one per job), None while there is none."""
        require_uuid("job_id", job_id)

        async def read(conn: Connection) -> tuple[str | None, JobView | None]:
            return await reads.job_by_key_as_member(
                conn, self.workspace_id, self.actor_id, retry_key(job_id)
            )

        role, retry = await self.client.read(read)
        if role is None:
            raise workspace_not_found()
        return retry

    async def role(self) -> str:
        """The actor's role in the workspace (``reader``, ``editor``, ``administrator``):
        what a console may offer it; ``workspace_not_found`` when not an enabled member."""
        from hubjobs.domain.access import require_member

        async def read(conn: AsyncConnection) -> str:
            return await require_member(conn, self.workspace_id, self.actor_id)

        return await self.client.db(read, purpose=Purpose.READ)

    def _search(
        self,
        *,
        status: JobStatus | Sequence[JobStatus] | None = None,
        kind: str | None = None,
        schedule_id: str | None = None,
        actor_id: uuid.UUID | None = None,
        id_prefix: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        fields: Sequence[str] = (),
        sort: JobSort = JobSort.created_desc,
        to_retry: bool = False,
    ) -> JobSearch:
        """A list's filters, checked and typed: the one reading of them, for the list
        and for the bulk actions that act on what it finds."""
        _check_filter(kind, schedule_id)
        from hubjobs.kinds.fields import containment
        from hubjobs.readmodel.search import id_range

        given = (status,) if status is None or isinstance(status, str) else tuple(status)
        try:
            statuses = tuple(JobStatus(s) for s in dict.fromkeys(given) if s is not None)
        except ValueError:
            raise InvalidInput("unknown status", code="invalid_status") from None
        try:
            order = JobSort(sort)
        except ValueError:
            raise InvalidInput("unknown sort", code="invalid_argument") from None
        matching = containment(None if kind is None else self.client.kinds().get(kind), [*fields])
        return JobSearch(
            statuses=statuses,
            kind=kind,
            schedule_id=schedule_id,
            actor_id=actor_id,
            ids=None if id_prefix is None else id_range(id_prefix),
            since=_aware(since),
            until=_aware(until),
            payload=matching.payload,
            result=matching.result,
            to_retry=to_retry,
            sort=order,
        )

    async def list(
        self,
        *,
        status: JobStatus | Sequence[JobStatus] | None = None,
        kind: str | None = None,
        schedule_id: str | None = None,
        actor_id: uuid.UUID | None = None,
        id_prefix: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        fields: Sequence[str] = (),
        sort: JobSort = JobSort.created_desc,
        limit: int = 50,
        before: tuple[datetime, uuid.UUID] | None = None,
        to_retry: bool = False,
    ) -> list[JobView]:
        """The workspace's jobs, newest first or in ``sort``'s order, filtered: in a status
        (or any of several), of a kind (which must be registered), a schedule's runs,
        started by an actor, whose id starts with ``id_prefix``, created from ``since``
        and before ``until``, whose payload or result holds each of ``fields``
        (``payload.tag=exam``: with a kind, a field its schemas declare); with
        ``to_retry``, only finished jobs with failed items no retry has taken yet (what
        ``retry_matching`` retries); with ``before`` (the time and id of a previous page's
        last job), the next page."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("the limit must be from 1 to 1000", code="invalid_limit")
        search = self._search(
            status=status,
            kind=kind,
            schedule_id=schedule_id,
            actor_id=actor_id,
            id_prefix=id_prefix,
            since=since,
            until=until,
            fields=fields,
            sort=sort,
            to_retry=to_retry,
        )

        async def read(conn: Connection) -> tuple[str | None, list[JobView]]:
            return await reads.jobs_as_member(
                conn, self.workspace_id, self.actor_id, search, limit=limit, before=before
            )

        role, jobs = await self.client.read(read)
        if role is None:
            raise workspace_not_found()
        return jobs

    async def overview(self, window: Window = Window.hour) -> Overview:
        """The workspace's queue at a glance: per kind, its jobs queued, running and stuck
        now, those that ended within ``window``, its oldest queued job, and the window's
        throughput in buckets (jobs ended, pages done). One statement, membership in it."""

        async def read(conn: Connection) -> tuple[str | None, Overview | None]:
            return await overview_as_member(conn, self.workspace_id, self.actor_id, window)

        role, found = await self.client.read(read)
        if role is None or found is None:
            raise workspace_not_found()
        return found

    async def workers(self) -> Workers:
        """Who works the job task queue (``hubjobs.temporal.pollers``): every worker by
        identity, live or gone, with the jobs of this workspace its activities run (of
        the newest HUBJOBS_WORKERS_RUNNING_JOBS running). Any member may read it."""
        from temporalio.service import RPCError

        from hubjobs.temporal.pollers import Workers, running_on, task_queue_workers

        settings = self.client.settings
        running = await self.list(
            status=JobStatus.running, limit=max(1, settings.workers_running_jobs)
        )
        running = running[: settings.workers_running_jobs]
        temporal = await self.client.temporal_client()
        try:
            found, heartbeats = await task_queue_workers(
                temporal, settings.task_queue, timedelta(seconds=settings.workers_gone_seconds)
            )
            runs = await running_on(temporal, [job.workflow_id for job in running])
        except RPCError as err:
            log.warning("describing the task queue failed: %s", err.status.name)
            raise Unavailable("Temporal did not answer; try again") from None
        jobs_of: dict[str, list[uuid.UUID]] = {}
        for job in running:
            for identity in runs.get(job.workflow_id, ()):
                jobs_of.setdefault(identity, []).append(job.id)
        for worker in found:
            worker.running = jobs_of.get(worker.identity, [])
        return Workers(
            task_queue=settings.task_queue,
            heartbeats=heartbeats,
            gone_after_seconds=settings.workers_gone_seconds,
            workers=found,
        )

    async def audit(
        self,
        *,
        job_id: uuid.UUID | None = None,
        action: AuditAction | str | None = None,
        actor_id: uuid.UUID | None = None,
        limit: int = 50,
        before: tuple[datetime, int] | None = None,
    ) -> Sequence[AuditEventView]:
        """The workspace's operator actions, newest first (any member may read them):
        with ``job_id`` that job's trail (bulk actions that touched it included), with
        ``action`` or ``actor_id`` only those; ``before`` (the at and id of a previous
        page's last event) gives the next page."""
        require_uuid("job_id", job_id, optional=True)
        require_uuid("actor_id", actor_id, optional=True)
        wanted = _audit_action(action)
        if not 1 <= limit <= 1000:
            raise InvalidInput("the limit must be from 1 to 1000", code="invalid_limit")

        async def read(conn: Connection) -> tuple[str | None, list[AuditEventView]]:
            return await audit_reads.audit_as_member(
                conn,
                self.workspace_id,
                self.actor_id,
                job_id=job_id,
                action=wanted,
                by=actor_id,
                limit=limit,
                before=before,
            )

        role, events = await self.client.read(read)
        if role is None:
            raise workspace_not_found()
        return events

    async def items(
        self,
        job_id: uuid.UUID,
        *,
        state: ItemState | str | None = None,
        after: int = 0,
        limit: int = 100,
    ) -> ItemPage:
        """A page of the job's items (a page's id as ``ref``, its title at the snapshot
        as ``label``, its state, error code and message) in their order, from the one
        after ordinal ``after``; ``state`` keeps only those. Pass the answer's ``next``
        as ``after`` for the following page (None: that was the last)."""
        from hubjobs import job_rows
        from hubjobs.domain.access import require_member
        from hubjobs.readmodel import items as job_items

        require_uuid("job_id", job_id)
        wanted = _item_state(state)
        if not 0 <= after <= MAX_ORDINAL:
            raise InvalidInput(
                f"after must be an ordinal from 0 to {MAX_ORDINAL}", code="invalid_cursor"
            )
        if not 1 <= limit <= MAX_ITEMS_PAGE:
            raise InvalidInput(
                f"the limit must be from 1 to {MAX_ITEMS_PAGE}", code="invalid_limit"
            )

        async def read(conn: AsyncConnection) -> ItemPage:
            await require_member(conn, self.workspace_id, self.actor_id)
            if await job_rows.get_job(conn, job_id, self.workspace_id) is None:
                raise JobNotFound("no such job in this workspace")
            # One more than asked: whether another page follows, without a count.
            found = await job_items.list_items(
                conn, job_id, state=wanted, after=after, limit=limit + 1
            )
            page = found[:limit]
            return ItemPage(items=page, next=page[-1].ordinal if len(found) > limit else None)

        return await self.client.db(read, purpose=Purpose.READ)

    async def job_file(self, job_id: uuid.UUID, name: str) -> JobFile:
        """Where the file ``name`` of a finished job is, and its media type, if its
        result lists it (an export's manifest: ``JobKind.file_of``). Anything else (a
        kind without files, a job not finished or not succeeded, a name not listed, a
        file removed at expiry) is ``job_not_found``, as a job of another workspace is."""
        job = await self.get(job_id)
        kind = self.client.kinds().find(job.kind)
        if kind is None or kind.file_of is None:
            raise JobNotFound("no such file of a job in this workspace")
        path = kind.file_of(self.client.settings, job, name)
        if path is None:
            raise JobNotFound("no such file of a job in this workspace")
        return JobFile(path, kind.file_content_type)

    # --- cancelling -----------------------------------------------------------------

    async def cancel(self, job_id: uuid.UUID, *, reason: str | None = None) -> JobView:
        """Records the request in the read model at once, then signals the workflow.
        Cancelling a finished job changes nothing. A reason is free text of at most 500
        characters (``invalid_reason``). A run that takes no more signals (Temporal's
        limit on them) still ends cancelled: its attempt reads the recorded request."""
        require_uuid("job_id", job_id)
        reason = check_reason(reason)
        from hubjobs import job_rows
        from hubjobs.domain.access import require_administrator
        from hubjobs.job_rows import audit

        async def record(conn: AsyncConnection) -> JobView:
            await require_administrator(conn, self.workspace_id, self.actor_id)
            job = await job_rows.get_job(conn, job_id, self.workspace_id)
            if job is None:
                raise JobNotFound("no such job in this workspace")
            if not job.is_final:
                await job_rows.request_cancel(conn, job_id, self.actor_id, reason)
            await audit.record(
                conn,
                self.workspace_id,
                self.operator,
                AuditAction.cancel,
                reason=reason,
                job_ids=[job_id],
                detail={"already_final": job.is_final},
            )
            return job

        job = await self.client.db(record)
        if job.is_final:
            return job
        await self._signal_cancel(job, reason)
        return await self.get(job_id)

    async def cancel_many(
        self, job_ids: Sequence[uuid.UUID], *, reason: str | None = None
    ) -> Sequence[CancelOutcome]:
        """``cancel`` for each job, authorised once and recorded in one transaction, then
        signalled ``BULK_CANCEL_SIGNALS`` at a time (at most ``MAX_BULK_CANCEL``). One
        outcome per id, in order: the job as it is then, or the error its own ``cancel``
        would have met (``job_not_found`` for an id the workspace does not have)."""
        return await self._cancel_many(job_ids, reason=reason)

    async def _cancel_many(
        self,
        job_ids: Sequence[uuid.UUID],
        *,
        reason: str | None,
        matching: dict[str, Any] | None = None,
        more: bool = False,
    ) -> Sequence[CancelOutcome]:
        """``cancel_many``, audited as one event on every job it found, with the filter
        that chose them (``matching``) and the counts."""
        for job_id in job_ids:
            require_uuid("job_id", job_id)
        if len(job_ids) > MAX_BULK_CANCEL:
            raise InvalidInput(f"at most {MAX_BULK_CANCEL} jobs at once", code="invalid_limit")
        reason = check_reason(reason)
        from hubjobs import job_rows
        from hubjobs.domain.access import require_administrator
        from hubjobs.job_rows import audit

        wanted = list(dict.fromkeys(job_ids))

        async def record(conn: AsyncConnection) -> list[JobView]:
            await require_administrator(conn, self.workspace_id, self.actor_id)
            found = await job_rows.request_cancels(
                conn, self.workspace_id, wanted, self.actor_id, reason
            )
            final = sum(job.is_final for job in found)
            counts = {
                "named": len(wanted),
                "requested": len(found) - final,
                "already_final": final,
                "not_found": len(wanted) - len(found),
            }
            await audit.record(
                conn,
                self.workspace_id,
                self.operator,
                AuditAction.bulk_cancel,
                reason=reason,
                job_ids=[job.id for job in found],
                detail={"filter": matching, "counts": counts, "more": more},
            )
            return found

        found = {job.id: job for job in await self.client.db(record)}
        failed: dict[uuid.UUID, HubJobsError] = {}
        gate = asyncio.Semaphore(BULK_CANCEL_SIGNALS)

        async def signal(job: JobView) -> None:
            async with gate:
                try:
                    await self._signal_cancel(job, reason)
                except HubJobsError as err:
                    failed[job.id] = err

        async with asyncio.TaskGroup() as group:
            for job in found.values():
                if not job.is_final:
                    group.create_task(signal(job))
        now = {job.id: job for job in await self._jobs_now(list(found))}
        missing = JobNotFound("no such job in this workspace")
        return [
            CancelOutcome(
                job_id,
                None if job_id in failed else now.get(job_id),
                failed.get(job_id) or (None if job_id in now else missing),
            )
            for job_id in job_ids
        ]

    async def cancel_matching(
        self, *, reason: str | None = None, **filters: Unpack[JobFilters]
    ) -> tuple[Sequence[CancelOutcome], bool]:
        """``cancel_many`` over the workspace's unfinished jobs the list's filters match
        (``list``'s, the same reading: ``status``, ``kind``, ``schedule_id``,
        ``actor_id``, ``id_prefix``, ``since``, ``until``, ``fields``), newest first,
        ``MAX_BULK_CANCEL`` at most; and whether more remained (call again for them)."""
        search = self._search(**filters)
        unfinished = tuple(s for s in search.statuses if not s.is_final)
        ids: Sequence[uuid.UUID] = ()
        more = False
        # A filter of finished statuses only has nothing to cancel: no read, but the
        # call is still authorised and recorded as one that touched nothing.
        if unfinished or not search.statuses:
            chosen = replace(search, statuses=unfinished or tuple(UNFINISHED_STATUSES))
            ids, more = await self._matching(chosen)
        return await self._cancel_many(
            ids, reason=reason, matching=_recorded(filters), more=more
        ), more

    async def _matching(self, search: JobSearch) -> tuple[Sequence[uuid.UUID], bool]:
        """The jobs a bulk action takes (an administrator's only: another member is
        refused before anything is read), newest first as the list shows them, at most
        ``MAX_BULK_CANCEL``; and whether it found more."""
        from hubjobs.domain.access import ADMINISTRATOR, not_administrator

        newest = replace(search, sort=JobSort.created_desc)

        async def read(conn: Connection) -> tuple[str | None, list[JobView]]:
            return await reads.jobs_as_member(
                conn, self.workspace_id, self.actor_id, newest, limit=MAX_BULK_CANCEL + 1
            )

        role, found = await self.client.read(read)
        if role is None:
            raise workspace_not_found()
        if role != ADMINISTRATOR:
            raise not_administrator()
        return [job.id for job in found[:MAX_BULK_CANCEL]], len(found) > MAX_BULK_CANCEL

    # --- retrying many -------------------------------------------------------------

    async def retry_many(
        self, job_ids: Sequence[uuid.UUID], *, reason: str | None = None
    ) -> Sequence[RetryOutcome]:
        """``retry`` for each job (at most ``MAX_BULK_CANCEL``), authorised once first,
        ``BULK_RETRY_STARTS`` at a time, and recorded as one ``bulk_retry`` event (the
        reason, free text of at most 500 characters, kept on it). One outcome per id,
        in order: its retry (new, or the one an earlier retry started), or the error
        its own ``retry`` would have met (``job_not_found``, ``job_not_finished``,
        ``not_retryable``, ``nothing_to_retry``, ...)."""
        return await self._retry_many(job_ids, reason=reason)

    async def retry_matching(
        self, *, reason: str | None = None, **filters: Unpack[JobFilters]
    ) -> tuple[Sequence[RetryOutcome], bool]:
        """``retry_many`` over the finished jobs with failed items no retry has taken
        yet among those the list's filters match (as ``cancel_matching`` reads them),
        newest first, ``MAX_BULK_CANCEL`` at most; and whether more remained (call
        again for them: those retried are no longer among them)."""
        ids, more = await self._matching(self._search(**filters, to_retry=True))
        outcomes = await self._retry_many(
            ids, reason=reason, matching=_recorded(filters), more=more
        )
        return outcomes, more

    async def _retry_many(
        self,
        job_ids: Sequence[uuid.UUID],
        *,
        reason: str | None,
        matching: dict[str, Any] | None = None,
        more: bool = False,
    ) -> Sequence[RetryOutcome]:
        for job_id in job_ids:
            require_uuid("job_id", job_id)
        if len(job_ids) > MAX_BULK_CANCEL:
            raise InvalidInput(f"at most {MAX_BULK_CANCEL} jobs at once", code="invalid_limit")
        reason = check_reason(reason)
        from hubjobs.domain.access import require_administrator
        from hubjobs.job_rows import audit

        # Refused as one retry is, before any start: a reader starts nothing.
        await self.client.db(
            lambda conn: require_administrator(conn, self.workspace_id, self.actor_id),
            purpose=Purpose.READ,
        )
        wanted = list(dict.fromkeys(job_ids))
        done: dict[uuid.UUID, RetryOutcome] = {}
        gate = asyncio.Semaphore(BULK_RETRY_STARTS)

        async def one(job_id: uuid.UUID) -> None:
            async with gate:
                try:
                    job, created = await self._retry(job_id, correlation_id=None, audited=False)
                    done[job_id] = RetryOutcome(job_id, job, created, None)
                except HubJobsError as err:
                    done[job_id] = RetryOutcome(job_id, None, False, err)

        finished = False
        try:
            async with asyncio.TaskGroup() as group:
                for job_id in wanted:
                    group.create_task(one(job_id))
            finished = True
        finally:
            # Kept even when the caller gave up midway (the API's request budget): the
            # retries answered by then are on the trail, the event saying it was cut short.
            outcomes = [done[job_id] for job_id in wanted if job_id in done]
            event = _bulk_retry_event(outcomes, len(wanted), matching, more, finished)
            await asyncio.shield(
                self.client.db(
                    lambda conn: audit.record(
                        conn,
                        self.workspace_id,
                        self.operator,
                        AuditAction.bulk_retry,
                        reason=reason,
                        job_ids=event.job_ids,
                        detail=event.detail,
                    )
                )
            )
        return [done[job_id] for job_id in job_ids]

    async def _jobs_now(self, job_ids: Sequence[uuid.UUID]) -> Sequence[JobView]:
        if not job_ids:
            return []
        return await self.client._jobs_of_workspaces([self.workspace_id], job_ids)

    async def _signal_cancel(self, job: JobView, reason: str | None) -> None:
        """Signals the cancellation recorded on ``job`` (unfinished when read) to its
        workflow; ``Unavailable`` when Temporal did not take it."""
        from temporalio.service import RPCError, RPCStatusCode

        from hubjobs.job_rows import Ending, finish_job
        from hubjobs.temporal.messages import CANCEL_SIGNAL, CancelRequest

        temporal = await self.client.temporal_client()
        handle = temporal.get_workflow_handle(job.workflow_id)
        try:
            await handle.signal(CANCEL_SIGNAL, CancelRequest(actor_id=self.actor_id, reason=reason))
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                log.warning("cancel of %s left to its attempt: %s", job.workflow_id, err.message)
                return
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("cancel signal to %s failed: %s", job.workflow_id, err.status.name)
                raise Unavailable("Temporal did not take the cancellation; try again") from None
            if job.status == JobStatus.queued:
                # Recorded but never started: no workflow will finish the row; do it here.
                # (A running row whose workflow is gone is the reconciler's to settle.)
                retention = timedelta(hours=self.client.settings.retention_hours)
                await self.client.db(
                    lambda conn: finish_job(
                        conn, job, Ending(JobStatus.cancelled), default_retention=retention
                    )
                )

    # --- following ------------------------------------------------------------------

    async def changes(self) -> AsyncGenerator[WorkspaceChange]:
        """The workspace's changes until the caller stops (``client.workspace_feeds``):
        first a ``reset`` (read the list now), then each job that changed, the newest
        row of each, a few times a second at most; a ``reset`` again whenever changes may
        have been missed. Authorised once, as a list is."""
        await self.list(limit=1)
        async for change in self.client.workspace_feeds.follow(self.workspace_id):
            yield change

    # --- waiting ------------------------------------------------------------------------

    async def watch(self, job_id: uuid.UUID, *, interval: float = 0.5) -> AsyncIterator[JobView]:
        """Yields the job each time it changes, until it is finished, at most one change
        per ``interval`` (the newest). Not by polling: the read model notifies each
        change (``client.feeds``: one listening connection per client, one read per
        change, whoever follows). The database, not the API: this client reads the
        database already, and needs neither an API process nor a token."""
        job = await self.get(job_id)  # the authorisation, and the job as it is now
        yield job
        if job.is_final:
            return
        last = job
        async for current in self.client.feeds.follow(job_id):
            if current == last:
                continue
            yield current
            last = current
            if not current.is_final:
                await asyncio.sleep(interval)

    async def wait(
        self, job_id: uuid.UUID, *, timeout: float | None = None, interval: float = 0.5
    ) -> JobView:
        """The finished job; ``HubJobsError(code='wait_timeout')`` if it is not by then."""
        try:
            async with asyncio.timeout(timeout):
                async for job in self.watch(job_id, interval=interval):
                    if job.is_final:
                        return job
        except TimeoutError:
            raise HubJobsError("the job did not finish in time", code="wait_timeout") from None
        raise AssertionError("watch ended before the job finished")
