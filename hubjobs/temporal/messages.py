"""The messages every job workflow and its activities exchange, whatever the kind:
workflow input, one attempt of the work and what it hands back, the lifecycle's local
activities, signals and queries, and the maintenance workflows'. Plain pydantic models
with no I/O, safe in the workflow sandbox, carried by the SDK's pydantic converter. A
kind's own messages live in its kind module."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters


class JobOptions(BaseModel):
    """How a job's work runs; chosen by the starter and fixed for the job's life, so that
    workflow code reads no configuration."""

    heartbeat_timeout_seconds: float = 15.0
    # Attempts in a row without progress before the job fails.
    max_attempts: int = 5
    # Waits after an attempt that made no progress: 2 s, 10 s, 30 s, 30 s… (seed 000).
    retry_initial_seconds: float = 2.0
    retry_coefficient: float = 5.0
    retry_max_seconds: float = 30.0
    # After an attempt handed over because its worker could not reach the database: the
    # pause before the next attempt (a worker that keeps handing over cannot spin the
    # history), and how long a lifecycle step may run as a local activity (on the
    # workflow's worker) before it goes to any worker.
    handover_pause_seconds: float = 2.0
    lifecycle_local_seconds: float = 30.0


class Checkpoint(BaseModel):
    """Where a run that continued as new picks up."""

    cursor: dict[str, Any] | None = None
    progress: int = 0
    attempts: int = 0
    attempts_failed: int = 0
    stalls: int = 0
    outage_since: datetime | None = None
    handovers: int = 0


class JobInput(BaseModel):
    """The input of every job workflow, whatever its kind."""

    job_id: uuid.UUID
    kind: str
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str
    payload: dict[str, Any]
    options: JobOptions = Field(default_factory=JobOptions)
    checkpoint: Checkpoint | None = None


class WorkRequest(BaseModel):
    """One attempt of a job's work: carry on from ``cursor`` (kind-defined; None at the
    start). ``attempt`` and ``attempts_failed`` go to the read model."""

    job: JobInput
    cursor: dict[str, Any] | None = None
    attempt: int = 1
    attempts_failed: int = 0
    # Since when the database has not answered the attempts before (they handed over):
    # the outage's length is measured across attempts (HUBJOBS_MAX_OUTAGE_SECONDS).
    outage_since: datetime | None = None


class Beat(BaseModel):
    """Heartbeat details of a work attempt, and the details of its failures: how far it
    got. ``progress`` counts durable work (items recorded, files written) and only ever
    grows; an attempt that moved it made progress. Heartbeat details come back untyped
    and are validated into this."""

    cursor: dict[str, Any] | None = None
    progress: int = 0


class JobOutcome(BaseModel):
    """The final row, as the read model holds it: what a job workflow returns."""

    job_id: uuid.UUID
    status: JobStatus
    counters: Counters
    result: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None


class WorkResult(BaseModel):
    """What an attempt hands back: the job's outcome once the attempt finished the row;
    otherwise where to carry on (the attempt gave its slot back: its time slice ran
    out, its worker is shutting down, or, with ``outage_since``, its worker could not
    reach the database since then)."""

    outcome: JobOutcome | None = None
    beat: Beat = Field(default_factory=Beat)
    counters: Counters = Field(default_factory=Counters)
    message: str | None = None
    outage_since: datetime | None = None


class FinishJob(BaseModel):
    job_id: uuid.UUID
    status: JobStatus
    error_code: str | None = None
    error_message: str | None = None
    # The workflow's count of attempts, for the row's last word on them.
    attempts: int = 0
    attempts_failed: int = 0


# The names every job workflow answers to, whatever its kind: declared by the lifecycle
# (workflows/lifecycle.py), sent by the client and by attempts. Other services send
# them too: they are part of the contract and never change.
CANCEL_SIGNAL = "cancel"
PROGRESS_SIGNAL = "report_progress"
PROGRESS_QUERY = "progress"


class CancelRequest(BaseModel):
    """The ``cancel`` signal: who asked, and why."""

    actor_id: uuid.UUID | None = None
    reason: str | None = None


class JobProgress(BaseModel):
    """What the ``progress`` query returns: the read model's counters and message as of
    the last report."""

    status: JobStatus
    counters: Counters
    message: str | None = None
    cancel_requested: bool = False
    attempts: int = 0
    attempts_failed: int = 0


class JobProgressReport(BaseModel):
    """The ``report_progress`` signal: how far a running attempt got, for the progress
    query and the UI's details between its start and its end."""

    counters: Counters
    message: str


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


# --- job schedules ------------------------------------------------------------------


class JobStart(BaseModel):
    """Everything it takes to start a job's workflow for its row, built once
    (hubjobs.temporal.launch.job_start): the starter starts it through the client, a
    schedule's firing as its child workflow."""

    workflow_type: str
    workflow_id: str
    input: JobInput
    summary: str | None = None
    details: str
    priority_key: int
    # The workspace as fairness key (HUBJOBS_FAIRNESS); absent in starts recorded
    # before the setting, which all had it.
    fairness: bool = True
    schedule_id: str | None = None


class ScheduledJob(BaseModel):
    """What a job schedule's Temporal Schedule starts at every firing (the same input
    each time): the job to create, with the start checks of that moment."""

    schedule_id: str
    kind: str
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
    error_code: str | None = None
    error_message: str | None = None
    start: JobStart | None = None


class KeepNewest(BaseModel):
    schedule_id: str
    keep: int


class FiringOutcome(BaseModel):
    """What a firing returns: its job, how it ended, and how many older runs its
    ``keep`` expired."""

    job_id: uuid.UUID
    status: JobStatus
    expired: int = 0
