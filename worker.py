"""The hubjobs worker: runs every kind's workflows and activities on one task queue.

Run as many as you like, on as many hosts: Temporal hands each activity to one worker,
and a worker that dies stops heartbeating, so its activity goes to another after the
heartbeat timeout. ``python worker.py`` or ``hubjobs worker``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.worker import Worker

from activities.backup import BackupActivities
from activities.course_tagging import BeforeWrite, TaggingActivities
from activities.jobs import JobActivities
from activities.maintenance import MaintenanceActivities
from hubjobs.db import async_engine
from hubjobs.logs import LogContextInterceptor, setup_logging
from hubjobs.process import run_and_exit
from hubjobs.schedules import ensure_schedules
from hubjobs.settings import Settings
from hubjobs.telemetry import JobMetrics, metrics_runtime, refresh_queue_state, setup_tracing
from hubjobs.temporal import connect
from workflows import WORKFLOWS

log = logging.getLogger("hubjobs.worker")


def build_worker(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    *,
    task_queue: str | None = None,
    before_write: BeforeWrite | None = None,
    extra_workflows: Sequence[type] = (),
    extra_activities: Sequence[Callable[..., Any]] = (),
) -> Worker:
    """``before_write`` runs between reading and writing each batch of pages (tests use
    it to act as a concurrent editor); ``extra_*`` add the workflows and activities of
    kinds registered outside this package."""
    metrics = metrics_of(client)
    jobs = JobActivities(
        engine, default_retention=timedelta(hours=settings.retention_hours), metrics=metrics
    )
    tagging = TaggingActivities(
        engine,
        batch_size=settings.tagging_batch_size,
        batch_pause=settings.tagging_batch_pause_seconds,
        before_write=before_write,
        metrics=metrics,
    )
    maintenance = MaintenanceActivities(engine, client, settings, metrics)
    backup = BackupActivities(engine, settings)
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[*WORKFLOWS, *extra_workflows],
        activities=[
            jobs.open_job,
            jobs.record_cancel_request,
            jobs.finish_job,
            tagging.tag_course_chunk,
            backup.create_backup,
            maintenance.sweep_expired,
            maintenance.reconcile,
            *extra_activities,
        ],
        max_concurrent_activities=settings.max_concurrent_activities,
        max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
        # Heartbeats (and with them cancellations) reach the server within a second,
        # whatever the heartbeat timeout.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
        graceful_shutdown_timeout=timedelta(seconds=10),
        interceptors=[LogContextInterceptor()],
    )


def metrics_of(client: Client) -> JobMetrics:
    """Our instruments on the client's runtime: exported when it serves metrics."""
    runtime = client.service_client.config.runtime or Runtime.default()
    return JobMetrics(runtime.metric_meter)


async def run(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Runs until SIGINT/SIGTERM (or ``stop``), then drains: in-flight activities get
    the graceful-shutdown period to finish, and what does not is retried elsewhere."""
    stop = stop or asyncio.Event()
    setup_tracing(settings)
    client = await connect(settings, runtime=metrics_runtime(settings))
    engine = async_engine(
        settings.resolved_database_url(), pool_size=max(5, settings.max_concurrent_activities)
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if settings.maintenance_schedules:
        await ensure_schedules(client, settings)
    worker = build_worker(client, engine, settings)
    queue = asyncio.create_task(refresh_queue_state(engine, metrics_of(client), stop))
    log.info("worker started on task queue %s", worker.task_queue)
    try:
        async with worker:
            await stop.wait()
        log.info("worker stopped")
    finally:
        # However the worker ended: a fatal error of the SDK's (it retries an unreachable
        # server for as long as it takes, but gives up on what it deems fatal) must end
        # the process, not leave it waiting on the queue refresher without pollers.
        stop.set()
        await queue
        await engine.dispose()


def main() -> None:
    settings = Settings()
    setup_logging(json_lines=settings.log_json, level=settings.log_level)
    run_and_exit(lambda: asyncio.run(run(settings)))


if __name__ == "__main__":
    main()
