"""Invariants 3 and 8: rows and runs agree, and nothing is stuck.

3. Every job row final; its workflow's latest run closed, its ``JobStatus`` search
   attribute the row's status and its close status one that status allows (a run
   terminated or timed out in Temporal: the row failed or cancelled, by the
   reconciler); no workflow of the load still open; what a live stream's ``final``
   event said is the row's status. A row without a workflow is a start withdrawn
   because Temporal did not take it: failed, ``unavailable``.
8. No job's workflow task fails or times out once the faults have stopped (after a
   grace for tasks the last fault caught in flight), no row marked stuck, and every
   worker process alive, not stopped, and polling its task queue."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, TaskQueueType, WorkflowTaskFailedCause
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from tests.chaos.checker.facts import Facts, Job, Run
from tests.chaos.checker.verdict import Verdict, verdict

# Close statuses each final row allows, with the search attribute equal to the row's.
AGREEING = {
    "succeeded": {"COMPLETED"},
    "failed": {"FAILED", "COMPLETED"},
    "cancelled": {"CANCELED", "COMPLETED"},
}
# Closed from outside Temporal's workflow code: the reconciler brings the row in line.
CLOSED_OUTSIDE = {"TERMINATED", "TIMED_OUT"}
# A workflow task caught in flight by the last fault (a stopped worker's, a dead
# server's) fails or times out within this of the faults' end: its task timeout, then
# the next task on a live worker.
GRACE_SECONDS = 60.0
FAILED_TASK = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}
# A task failed because a signal came in while it completed the run: the server asks
# for another, at once; not a task that fails again and again.
BENIGN_CAUSES = {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND}
# A worker polls at least this often (a long poll lasts a minute when idle).
POLL_SEEN_SECONDS = 120.0


def rows_and_runs(facts: Facts) -> Verdict:
    result = verdict(3)
    for job in facts.jobs.values():
        result.checked += 1
        if not job.final:
            result.violated(job.id, f"row still {job.status} after the settle bound")
        _agrees(result, job, facts.runs.get(job.id, Run(found=False)))
    finals: Counter[str] = Counter()
    for record in facts.of_type("sse"):
        seen = facts.jobs.get(str(record["job_id"]))
        said = record.get("final_status")
        finals["with final event" if said else "without"] += 1
        if seen is not None and said and said != seen.status:
            result.violated(
                seen.id, f"the live stream's final event said {said}, the row {seen.status}"
            )
    result.notes["sse_streams"] = dict(finals)
    for workflow_id, workflow_type in facts.open_runs:
        result.violated(None, f"run of {workflow_id} ({workflow_type}) still open")
    return result


def _agrees(result: Verdict, job: Job, run: Run) -> None:
    if not run.found:
        if not (job.status == "failed" and job.error_code == "unavailable"):
            result.violated(job.id, f"row {job.status} but Temporal has no workflow")
        return
    if run.status == "RUNNING":
        result.violated(job.id, f"row {job.status}, its run still open")
        return
    if not job.final:
        result.violated(job.id, f"row {job.status}, its run closed {run.status}")
        return
    if run.status in CLOSED_OUTSIDE:
        if job.status == "succeeded":
            result.violated(job.id, f"row succeeded, its run {run.status}")
        return
    if run.job_status != job.status or run.status not in AGREEING[job.status]:
        result.violated(
            job.id,
            f"row {job.status}, its run closed {run.status} with JobStatus {run.job_status}",
        )


async def nothing_stuck(facts: Facts, client: Client, task_queue: str) -> Verdict:
    result = verdict(8)
    since = facts.faults_ended_at + GRACE_SECONDS
    benign = 0
    for job in facts.jobs.values():
        result.checked += 1
        if job.stuck_since is not None:
            result.violated(job.id, f"marked stuck: {job.stuck_reason}")
        run = facts.runs.get(job.id, Run(found=False))
        causes, benign_here = _failed_tasks(run, since)
        benign += benign_here
        if run.task_attempt > 1:
            causes[f"its open run's workflow task on attempt {run.task_attempt}"] += 1
        if causes:
            listed = ", ".join(f"{n}× {cause}" for cause, n in causes.most_common())
            result.violated(job.id, f"workflow tasks failing after the faults stopped: {listed}")
    result.notes["benign_task_failures"] = benign
    result.notes["grace_seconds"] = GRACE_SECONDS
    workers = {r["name"]: r for r in facts.of_type("worker")}
    polling = await _pollers(client, task_queue)
    for name, record in sorted(workers.items()):
        result.checked += 1
        problem = _process_problem(int(record["pid"]))
        if problem is None and not any(i.startswith(record["identity"]) for i in polling):
            problem = "not polling its task queue"
        if problem is not None:
            result.violated(None, f"{name} (pid {record['pid']}): {problem}")
    return result


def _failed_tasks(run: Run, since: float) -> tuple[Counter[str], int]:
    causes: Counter[str] = Counter()
    benign = 0
    for history in run.histories:
        for event in history:
            if event.event_type not in FAILED_TASK or event.event_time.ToSeconds() < since:
                continue
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                causes["timed out"] += 1
                continue
            cause = event.workflow_task_failed_event_attributes.cause
            if cause in BENIGN_CAUSES:
                benign += 1
            else:
                causes[WorkflowTaskFailedCause.Name(cause)] += 1
    return causes, benign


def _process_problem(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "not running"
    state = stat.rsplit(") ", 1)[1][0]
    if state in "Tt":
        return "stopped"
    if state in "ZX":
        return "dead"
    return None


async def _pollers(client: Client, task_queue: str) -> set[str]:
    """The identities that polled the task queue lately, for workflows and activities
    both (a worker that polls only one kind of task is half hung)."""
    seen: dict[str, int] = {}
    now = time.time()
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        answer: Any = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=kind,
            )
        )
        for poller in answer.pollers:
            if now - poller.last_access_time.ToSeconds() < POLL_SEEN_SECONDS:
                seen[poller.identity] = seen.get(poller.identity, 0) + 1
    return {identity for identity, kinds in seen.items() if kinds == 2}
