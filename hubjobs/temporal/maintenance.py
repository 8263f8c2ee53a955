"""Starting maintenance: one long-lived ``Maintenance`` workflow per task queue, started
or updated by every worker as it starts. The two Schedules of earlier versions (a run a
minute each, burying the jobs in the UI's list) are removed when found."""

from __future__ import annotations

import logging

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.settings import Settings
from hubjobs.temporal.messages import MaintenancePlan, MaintenanceState

log = logging.getLogger(__name__)

# The workflow types (workflows/maintenance.py declares them with these).
MAINTENANCE_WORKFLOW = "Maintenance"
RETENTION_SWEEP_WORKFLOW = "RetentionSweep"
RECONCILER_WORKFLOW = "Reconciler"
MAINTENANCE_PLAN_SIGNAL = "set_plan"
# The Schedules of earlier versions, removed when found.
RETIRED_SCHEDULES = ("hubjobs-retention", "hubjobs-reconciler")


def maintenance_workflow_id(task_queue: str) -> str:
    """One maintenance workflow per task queue: ``hubjobs-maintenance`` for the default."""
    return f"{task_queue}-maintenance"


def plan_of(settings: Settings) -> MaintenancePlan:
    return MaintenancePlan(
        sweep_seconds=settings.retention_sweep_seconds,
        reconcile_seconds=settings.reconcile_seconds,
        reconcile_grace_seconds=settings.reconcile_grace_seconds,
    )


async def ensure_maintenance(client: Client, settings: Settings) -> str:
    """Starts the task queue's maintenance workflow, or hands the running one this
    deployment's plan (signal-with-start: idempotent, whichever worker comes first);
    returns its workflow id."""
    workflow_id = maintenance_workflow_id(settings.task_queue)
    plan = plan_of(settings)
    await client.start_workflow(
        MAINTENANCE_WORKFLOW,
        MaintenanceState(plan=plan),
        id=workflow_id,
        task_queue=settings.task_queue,
        start_signal=MAINTENANCE_PLAN_SIGNAL,
        start_signal_args=[plan],
        static_summary="hubjobs maintenance: retention sweep and reconciler",
    )
    for schedule_id in RETIRED_SCHEDULES:
        try:
            await client.get_schedule_handle(schedule_id).delete()
            log.info("removed the retired schedule %s", schedule_id)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
    return workflow_id
