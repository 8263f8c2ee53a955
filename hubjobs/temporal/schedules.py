"""The maintenance Schedules, created (or brought up to date) idempotently whenever a
worker starts: ``hubjobs-retention`` runs the retention sweep and ``hubjobs-reconciler``
the reconciler, each on its interval, never two runs at once."""

from __future__ import annotations

import logging
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from hubjobs.settings import Settings
from hubjobs.temporal.messages import ReconcileRequest

log = logging.getLogger(__name__)

RETENTION = "hubjobs-retention"
RECONCILER = "hubjobs-reconciler"
# The workflow types the Schedules start (workflows/maintenance.py declares them with these).
RETENTION_SWEEP_WORKFLOW = "RetentionSweep"
RECONCILER_WORKFLOW = "Reconciler"


def schedules(settings: Settings) -> dict[str, Schedule]:
    def every(seconds: float, workflow: str, arg: object, schedule_id: str) -> Schedule:
        return Schedule(
            action=ScheduleActionStartWorkflow(
                workflow, arg, id=schedule_id, task_queue=settings.task_queue
            ),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=seconds))]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        )

    return {
        RETENTION: every(
            settings.retention_sweep_seconds, RETENTION_SWEEP_WORKFLOW, 100_000, RETENTION
        ),
        RECONCILER: every(
            settings.reconcile_seconds,
            RECONCILER_WORKFLOW,
            ReconcileRequest(grace_seconds=settings.reconcile_grace_seconds),
            RECONCILER,
        ),
    }


async def ensure_schedules(client: Client, settings: Settings) -> None:
    for schedule_id, schedule in schedules(settings).items():
        try:
            await client.create_schedule(schedule_id, schedule)
            log.info("created schedule %s", schedule_id)
        except ScheduleAlreadyRunningError:

            def replace(_: ScheduleUpdateInput, new: Schedule = schedule) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=new)

            await client.get_schedule_handle(schedule_id).update(replace)
