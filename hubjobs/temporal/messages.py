"""The messages every job workflow and its activities exchange, whatever the kind, and
the maintenance workflows': plain pydantic models, no I/O, safe in the workflow sandbox.
A kind's own messages live in its kind module."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from hubjobs.domain.bounded import Code, Message, Reason
from hubjobs.domain.text import KEY_MAX_LENGTH, KEY_PATTERN
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters
from hubjobs.temporal.handler_args import uuid_or_none

# Bounds of the ids and names a message holds (every text field is bounded, so that no
# message nears Temporal's 2 MB payload limit).
KIND_MAX_LENGTH = 64
URL_MAX_LENGTH = 2000
# Temporal's own bound on a workflow id (the server's limit.maxIDLength).
WORKFLOW_ID_MAX_LENGTH = 1000
SCHEDULE_ID_MAX_LENGTH = 128


class JobOptions(BaseModel):
    """How a job's work runs; chosen by the starter and fixed for the job's life, so that
    workflow code reads no configuration."""

    model_config = ConfigDict(extra="forbid")

    heartbeat_timeout_seconds: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="How long an attempt may go without a heartbeat before Temporal hands "
        "the job to another worker (the lease).",
    )
    max_attempts: int = Field(
        5, ge=1, le=100, description="Attempts in a row without progress before the job fails."
    )
    retry_initial_seconds: float = Field(
        2.0, ge=0, le=3600, description="The wait after the first attempt without progress."
    )
    retry_coefficient: float = Field(
        5.0, ge=1, le=100, description="Each further wait is the last one times this."
    )
    retry_max_seconds: float = Field(
        30.0, ge=0, le=86400, description="No wait between attempts is longer than this."
    )
    fairness: bool = Field(
        True,
        description="Whether the job's attempts carry its workspace as Temporal fairness "
        "key, so that one workspace's flood never starves another's job.",
    )
    handover_pause_seconds: float = Field(
        2.0,
        ge=0,
        le=3600,
        description="After an attempt handed over because its worker could not reach the "
        "database: the pause before the next attempt (it grows with handovers in a row, "
        "so that a worker that keeps handing over cannot spin the history).",
    )
    lifecycle_local_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="How long a lifecycle step (finishing, reading progress, recording a "
        "cancellation) may run on the workflow's own worker before any worker takes it.",
    )
    run_signal_budget: int = Field(
        500,
        ge=10,
        le=5000,
        description="Signals a run takes (the job's own progress reports included) before "
        "it continues as new: Temporal refuses a run's signals past 10,000, and a flood "
        "may land a few thousand more before the new run takes over.",
    )
    workflow_task_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=120,
        description="How long a worker may take over one workflow task of the job's runs "
        "before Temporal gives it to another: long enough to replay the fullest run a "
        "loaded worker may have to (Temporal's default is 10 s).",
    )
    webhook_retry_initial_seconds: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="The completion webhook's first wait after a failed delivery (each "
        "further one doubles, up to webhook_retry_max_seconds).",
    )
    webhook_retry_max_seconds: float = Field(
        3600.0, gt=0, le=86400, description="No wait between deliveries is longer than this."
    )
    webhook_deadline_seconds: float = Field(
        86400.0,
        gt=0,
        le=30 * 86400,
        description="How long the completion webhook is tried in all before its delivery "
        "is recorded failed.",
    )


class Checkpoint(BaseModel):
    """Where a run that continued as new picks up."""

    cursor: dict[str, Any] | None = None
    progress: int = 0
    attempts: int = 0
    attempts_failed: int = 0
    stalls: int = 0
    outage_since: datetime | None = None
    handovers: int = 0
    refused_signals: int = 0
    # The progress last reported, for the query until the new run's first report.
    counters: Counters | None = None
    message: Message | None = None


class JobInput(BaseModel):
    """The input of every job workflow, whatever its kind, once read (``StartInput``
    below is what may be sent): every field known."""

    job_id: uuid.UUID
    kind: str = Field(max_length=KIND_MAX_LENGTH)
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str = Field(max_length=KEY_MAX_LENGTH)
    payload: dict[str, Any]
    options: JobOptions = Field(default_factory=JobOptions)
    checkpoint: Checkpoint | None = None
    # Where a direct start's completion webhook goes, for its first attempt to check and
    # record on the row (where it then lives); a client's start has it on the row only.
    notify_url: str | None = Field(None, max_length=URL_MAX_LENGTH)
    # A direct start's idempotency key, for its first attempt to record on the row (a
    # client's start has it on the row only).
    idempotency_key: str | None = Field(None, max_length=KEY_MAX_LENGTH)


class StartInput(BaseModel):
    """The input of every job workflow as another service may send it: the published
    contract (docs/contract/job-input.schema.json, generated from this model). Our own
    client sends every field; the workflow fills in what a direct start leaves out."""

    model_config = ConfigDict(
        extra="forbid",
        title="JobInput",
        json_schema_extra={
            "description": "The input of a hubjobs job workflow (workflow type: the kind's "
            "name in PascalCase, e.g. CourseTagging; workflow id: <kind>-<job id>). "
            "Unknown fields are refused."
        },
    )

    job_id: uuid.UUID | None = Field(
        None,
        description="The job's id. Default: the UUID at the end of the workflow id "
        "(<kind>-<uuid>), or else one derived from the whole workflow id.",
    )
    kind: str | None = Field(
        None,
        max_length=KIND_MAX_LENGTH,
        description="The job's kind (course_tagging, backup, page_export). Default: "
        "the kind whose workflow type was started; another kind is refused.",
    )
    workspace_id: uuid.UUID = Field(description="The workspace the job works in.")
    actor_id: uuid.UUID = Field(
        description="Who starts it: an enabled administrator of the workspace."
    )
    correlation_id: str | None = Field(
        None,
        pattern=KEY_PATTERN,
        max_length=KEY_MAX_LENGTH,
        description="Carried into logs and traces. Default: the workflow id.",
    )
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The kind's payload (docs/contract/<kind>.payload.schema.json).",
    )
    options: JobOptions = Field(default_factory=JobOptions)
    notify_url: str | None = Field(
        None,
        min_length=1,
        max_length=URL_MAX_LENGTH,
        description="An http(s) URL POSTed a signed completion webhook when the job is "
        "final (see the 'From another service' guide). Its host must be one the "
        "deployment allows; else the job fails with invalid_notify_url (or "
        "webhooks_not_configured without a signing secret).",
    )
    idempotency_key: str | None = Field(
        None,
        pattern=KEY_PATTERN,
        max_length=KEY_MAX_LENGTH,
        description="A key naming this start's request in the workspace, recorded on the "
        "job's row as a start through the API records its Idempotency-Key. A key that "
        "names another job already (started through the API or under another workflow "
        "id, whatever its payload) fails this job with idempotency_key_reused, its "
        "message naming that job; resending under the same workflow id is the same job.",
    )
    # Written by the workflow itself when it continues as new; not for callers.
    checkpoint: SkipJsonSchema[Checkpoint | None] = None


def job_id_from_workflow_id(workflow_id: str, kind: str) -> uuid.UUID:
    """A direct start's job id when it names none: the UUID of ``<kind>-<uuid>``, or one
    derived from the whole workflow id (the same id every time: a retried start is
    one job)."""
    prefix = f"{kind}-"
    named = uuid_or_none(workflow_id[len(prefix) :]) if workflow_id.startswith(prefix) else None
    return named or uuid.uuid5(uuid.NAMESPACE_URL, f"hubjobs:workflow:{workflow_id}")


class WorkRequest(BaseModel):
    """One attempt of a job's work: carry on from ``cursor`` (kind-defined; None at the
    start). ``attempt`` and ``attempts_failed`` go to the read model."""

    job: JobInput
    cursor: dict[str, Any] | None = None
    attempt: int = 1
    attempts_failed: int = 0
    # Since when the database has not answered the attempts before (they handed over),
    # on Temporal's clock: never one host's wall clock against another's.
    outage_since: datetime | None = None
    # A small job's first attempt, run by the workflow as a local activity: the job done
    # whole in one transaction, or left as it was (see KindActivities.attempt).
    whole: bool = False


class Beat(BaseModel):
    """How far a work attempt got (its heartbeats' and failures' details). ``progress``
    counts durable work and only ever grows: an attempt that moved it made progress."""

    cursor: dict[str, Any] | None = None
    progress: int = 0


class JobOutcome(BaseModel):
    """The final row: what a job workflow returns. ``result`` is the kind's carried one
    (``JobKind.carried``), bounded whatever the job's size, unlike the stored one."""

    job_id: uuid.UUID
    status: JobStatus
    counters: Counters
    result: dict[str, Any] | None = None
    error_code: Code | None = None
    error_message: Message | None = None
    # The row holds a completion webhook to deliver (its notify_url): the run starts
    # its delivery.
    notify: bool = False


class WorkResult(BaseModel):
    """What an attempt hands back: the job's outcome once it finished the row, else where
    to carry on (its time slice ran out, its worker is stopping, or since
    ``outage_since`` its worker could not reach the database)."""

    outcome: JobOutcome | None = None
    beat: Beat = Field(default_factory=Beat)
    counters: Counters = Field(default_factory=Counters)
    message: Message | None = None
    outage_since: datetime | None = None


class FinishJob(BaseModel):
    job_id: uuid.UUID
    status: JobStatus
    error_code: Code | None = None
    error_message: Message | None = None
    # The workflow's count of attempts, for the row's last word on them.
    attempts: int = 0
    attempts_failed: int = 0


# The names every job workflow answers to, whatever its kind: declared by the lifecycle
# (workflows/job_lifecycle.py), sent by the client and by attempts. Other services send
# them too: they are part of the contract and never change.
CANCEL_SIGNAL = "cancel"
PROGRESS_SIGNAL = "report_progress"
PROGRESS_QUERY = "progress"


class CancelRequest(BaseModel):
    """The ``cancel`` signal: who asked, and why."""

    actor_id: uuid.UUID | None = None
    reason: Reason | None = None


class JobProgress(BaseModel):
    """What the ``progress`` query returns: the read model's counters and message as of
    the last report."""

    status: JobStatus
    counters: Counters
    message: Message | None = None
    cancel_requested: bool = False
    attempts: int = 0
    attempts_failed: int = 0
    # Signals whose argument did not validate: refused, logged with the job's ids.
    refused_signals: int = 0


class JobProgressReport(BaseModel):
    """The ``report_progress`` signal: how far a running attempt got, for the progress
    query and the UI's details between its start and its end."""

    counters: Counters
    message: Message


class RefusedStart(BaseModel):
    """A direct start whose input does not validate, but whose job id and workspace
    could be read: it gets a failed row saying why."""

    job_id: uuid.UUID
    kind: str
    workspace_id: uuid.UUID
    actor_id: uuid.UUID | None
    correlation_id: str
    workflow_id: str
    payload: dict[str, Any]
    error_code: Code
    error_message: Message


# --- completion webhooks ---------------------------------------------------------------

# The workflow type of a job's completion delivery (workflows/completion_delivery.py),
# started by the job's workflow as its child.
COMPLETION_DELIVERY_WORKFLOW = "CompletionDelivery"


def completion_workflow_id(kind: str, job_id: uuid.UUID) -> str:
    """The delivery's workflow id, ``<kind>-<job id>-notify``: beside its job's own id in
    the Temporal UI, and from the job id (one delivery a job), not the workflow id."""
    return f"{kind}-{job_id}-notify"


class CompletionRequest(BaseModel):
    """Deliver the completion webhook of a final job: what is sent is read from its row
    (so that every try sends the same); the schedule comes from the job's options."""

    job_id: uuid.UUID
    retry_initial_seconds: float = 1.0
    retry_max_seconds: float = 3600.0
    deadline_seconds: float = 86400.0


class DeliveryReport(BaseModel):
    """How a completion delivery ended (the child workflow's result)."""

    job_id: uuid.UUID
    state: Code
    attempts: int = 0


class DeliveryGaveUp(BaseModel):
    job_id: uuid.UUID
    error: Message


# --- maintenance ---------------------------------------------------------------------


class SweepRequest(BaseModel):
    """Remove jobs whose ``expires_at`` is at or before ``cutoff`` (the workflow's clock),
    ``batch`` at a time, at most ``limit`` in this run."""

    cutoff: datetime
    batch: int = 100
    limit: int = 100_000


class SweepResult(BaseModel):
    removed: int
    # Rows whose kind's expire hook failed: kept for a later sweep.
    kept: int
    # Audit events older than the jobs' retention, removed.
    audit_removed: int = 0
    # The overview's minutes of ended jobs older than its longest window, removed.
    minutes_removed: int = 0
    # Whether rows expired by the cutoff may be left (the run stopped at its limit).
    more: bool = False


class ReconcileRequest(BaseModel):
    # Unfinished rows younger than this are left alone (their start may be under way).
    grace_seconds: float = 30.0
    limit: int = 500


class ReconcileResult(BaseModel):
    checked: int
    # Rows brought into line with a closed workflow.
    finished: int
    # Rows whose workflow had never started, started now.
    restarted: int
    # Stuck runs of jobs final or asked to stop, terminated (and those jobs cancelled).
    ended: int = 0


class MaintenancePlan(BaseModel):
    """What the long-lived maintenance workflow runs, and how often: sent by every worker
    as it starts (signal-with-start), so a deployment's settings reach the running
    workflow without a new run."""

    model_config = ConfigDict(extra="forbid")

    sweep_seconds: float = Field(60.0, gt=0)
    sweep_limit: int = Field(100_000, ge=1)
    reconcile_seconds: float = Field(60.0, gt=0)
    reconcile_grace_seconds: float = Field(30.0, ge=0)
    reconcile_limit: int = Field(500, ge=1)


class MaintenanceState(BaseModel):
    """The maintenance workflow's input, and what it carries across continue-as-new."""

    model_config = ConfigDict(extra="forbid")

    plan: MaintenancePlan = Field(default_factory=MaintenancePlan)
    next_sweep: datetime | None = None
    next_reconcile: datetime | None = None
    swept: int = 0
    reconciled: int = 0


# --- job schedules ------------------------------------------------------------------


class JobStart(BaseModel):
    """Everything it takes to start a job's workflow for its row, built once
    (hubjobs.temporal.launch.job_start): the starter starts it through the client, a
    schedule's firing as its child workflow."""

    workflow_type: str = Field(max_length=KIND_MAX_LENGTH)
    workflow_id: str = Field(max_length=WORKFLOW_ID_MAX_LENGTH)
    input: JobInput
    # The Temporal UI's summary and details of the run: cut to their bounds (a summary
    # holds a page's title, which the hub does not bound).
    summary: Message | None = None
    details: Message
    priority_key: int
    # The workspace as fairness key (HUBJOBS_FAIRNESS); absent in starts recorded
    # before the setting, which all had it.
    fairness: bool = True
    schedule_id: str | None = Field(None, max_length=SCHEDULE_ID_MAX_LENGTH)


class ScheduledJob(BaseModel):
    """What a job schedule's Temporal Schedule starts at every firing (the same input
    each time): the job to create, with the start checks of that moment."""

    schedule_id: str = Field(max_length=SCHEDULE_ID_MAX_LENGTH)
    kind: str = Field(max_length=KIND_MAX_LENGTH)
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    payload: dict[str, Any]
    # Keep the newest N successful runs; older ones expire (None: ordinary retention).
    keep: int | None = None


class FiringStart(BaseModel):
    """The firing's job, as its row now is: ``start`` to run it, or None when the row is
    final already (the start checks refused it: ``error_code`` says why; or an earlier
    run of the same firing saw it through)."""

    job_id: uuid.UUID
    status: JobStatus
    error_code: Code | None = None
    error_message: Message | None = None
    start: JobStart | None = None


class KeepNewest(BaseModel):
    schedule_id: str = Field(max_length=SCHEDULE_ID_MAX_LENGTH)
    keep: int


class FiringOutcome(BaseModel):
    """What a firing returns: its job, how it ended, and how many older runs its
    ``keep`` expired."""

    job_id: uuid.UUID
    status: JobStatus
    expired: int = 0
