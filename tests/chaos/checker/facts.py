"""What the checker reads, once: the stack's addresses as `hubjobs up` recorded them, every
job row and its items' counts (its own SQL), each job's workflow as Temporal describes
it and the histories of all its runs, the runs still open, and the campaign's ledger."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tests.chaos import ledger

FINAL = ("succeeded", "failed", "cancelled")
# Workflows that run for good or on a timer beside the jobs: not the load's runs.
MAINTENANCE_TYPES = frozenset({"Maintenance", "RetentionSweep", "Reconciler"})
# Histories fetched at once.
FETCHES = 8


def epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


@dataclass(frozen=True)
class StackAddresses:
    database_url: str
    temporal_address: str

    @classmethod
    def of(cls, home: Path) -> StackAddresses:
        """From the stack's record (``stack.json``): whatever credentials its URL
        carries, the checker uses."""
        record = json.loads((home / "stack.json").read_text())
        return cls(record["database_url"], record["temporal_address"])


@dataclass
class Job:
    row: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.row[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def id(self) -> str:
        return str(self.row["id"])

    @property
    def final(self) -> bool:
        return self.row["status"] in FINAL

    @property
    def finished(self) -> float | None:
        return epoch(self.row["finished_at"])

    @property
    def cancel_recorded(self) -> float | None:
        return epoch(self.row["cancel_requested_at"])


@dataclass(frozen=True)
class ItemCounts:
    items: int = 0
    processed: int = 0
    succeeded: int = 0
    skipped: int = 0
    failed: int = 0
    pending: int = 0


@dataclass
class Run:
    """A job's workflow as Temporal has it: its latest run's status and ``JobStatus``
    search attribute, and the events of every run (oldest run first)."""

    found: bool
    status: str | None = None
    job_status: str | None = None
    histories: list[list[HistoryEvent]] = field(default_factory=list)
    # The attempt of the open run's workflow task (past the first, the attempts that
    # failed before it are not in the history: Temporal writes only the first).
    task_attempt: int = 0


@dataclass
class Facts:
    home: Path
    addresses: StackAddresses
    jobs: dict[str, Job]
    items: dict[str, ItemCounts]
    runs: dict[str, Run]
    open_runs: list[tuple[str, str]]
    records: list[dict[str, Any]]
    faults_ended_at: float

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return ledger.of_type(self.records, kind)


JOBS = """
SELECT id, workspace_id, kind, status, correlation_id, idempotency_key, payload, total,
       processed, succeeded, skipped, failed, error_code, error_message,
       cancel_requested_at, finished_at, created_at, workflow_id, notify_url, notify_state,
       stuck_since, stuck_reason, result, source_job_id, schedule_id
  FROM jobs
"""
ITEMS = """
SELECT job_id, count(*) AS items,
       count(*) FILTER (WHERE state <> 'pending') AS processed,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'skipped') AS skipped,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       count(*) FILTER (WHERE state = 'pending') AS pending
  FROM job_items GROUP BY job_id
"""


async def read_rows(
    conn: psycopg.AsyncConnection[Any],
) -> tuple[dict[str, Job], dict[str, ItemCounts]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(JOBS)
        jobs = {str(row["id"]): Job(dict(row)) for row in await cur.fetchall()}
        await cur.execute(ITEMS)
        items = {
            str(row.pop("job_id")): ItemCounts(**{k: int(v) for k, v in row.items()})
            for row in await cur.fetchall()
        }
    return jobs, items


async def read_run(client: Client, workflow_id: str) -> Run:
    handle = client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return Run(found=False)
        raise
    job_status = None
    for pair in described.typed_search_attributes:
        if pair.key.name == "JobStatus":
            job_status = str(pair.value)
    status = described.status.name if described.status is not None else None
    runs = [
        execution.run_id
        async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"')
    ]
    histories = []
    # The visibility store lists newest first; each run's history in start order.
    for run_id in reversed(runs):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(list(history.events))
    pending = described.raw_description.pending_workflow_task
    attempt = pending.attempt if described.raw_description.HasField("pending_workflow_task") else 0
    return Run(True, status, job_status, histories, attempt)


async def read_runs(client: Client, jobs: dict[str, Job]) -> dict[str, Run]:
    gate = asyncio.Semaphore(FETCHES)

    async def one(job: Job) -> tuple[str, Run]:
        async with gate:
            return job.id, await read_run(client, str(job.row["workflow_id"]))

    return dict(await asyncio.gather(*(one(job) for job in jobs.values())))


async def open_runs(client: Client, task_queue: str) -> list[tuple[str, str]]:
    """Every run of the task queue still open but maintenance's: (workflow id, type)."""
    found = []
    query = f'ExecutionStatus = "Running" AND TaskQueue = "{task_queue}"'
    async for execution in client.list_workflows(query):
        if execution.workflow_type not in MAINTENANCE_TYPES:
            found.append((execution.id, execution.workflow_type))
    return found


async def gather(home: Path, ledger_path: Path, faults_ended_at: float, task_queue: str) -> Facts:
    addresses = StackAddresses.of(home)
    async with await psycopg.AsyncConnection.connect(
        addresses.database_url, autocommit=True, connect_timeout=10
    ) as conn:
        jobs, items = await read_rows(conn)
    client = await Client.connect(addresses.temporal_address)
    runs = await read_runs(client, jobs)
    still_open = await open_runs(client, task_queue)
    return Facts(
        home=home,
        addresses=addresses,
        jobs=jobs,
        items=items,
        runs=runs,
        open_runs=still_open,
        records=ledger.read(ledger_path),
        faults_ended_at=faults_ended_at,
    )
