"""The scheduled maintenance workflows: each run is one bounded step, so that a
Schedule (created by the worker at start, see hubjobs.temporal.schedules) paces it."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.maintenance import MaintenanceActivities
    from hubjobs.temporal.messages import (
        ReconcileRequest,
        ReconcileResult,
        SweepRequest,
        SweepResult,
    )
    from hubjobs.temporal.schedules import RECONCILER_WORKFLOW, RETENTION_SWEEP_WORKFLOW

from workflows.versioning import declare_workflow

RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)
# Auto-upgrade: each run is one short step (one activity) that its Schedule starts
# afresh, so it has no long history that a new build might not replay, and a run caught
# by a deploy moves to the new build at its next task: old builds never wait for one
# (drainage counts pinned workflows only).
MAINTENANCE_VERSIONING = VersioningBehavior.AUTO_UPGRADE


@declare_workflow(RETENTION_SWEEP_WORKFLOW, MAINTENANCE_VERSIONING)
class RetentionSweepWorkflow:
    """Removes the jobs expired by the workflow's clock (which is also what lets the
    time-skipping test server age jobs by 24 h), 100 at a time (as seed 004) until none
    is left, up to ``limit`` a run."""

    @workflow.run
    async def run(self, limit: int = 100_000) -> SweepResult:
        return await workflow.execute_activity_method(
            MaintenanceActivities.sweep_expired,
            SweepRequest(cutoff=workflow.now(), limit=limit),
            start_to_close_timeout=timedelta(minutes=30),
            heartbeat_timeout=timedelta(minutes=1),
            retry_policy=RETRY,
            summary="Remove expired jobs",
        )


@declare_workflow(RECONCILER_WORKFLOW, MAINTENANCE_VERSIONING)
class ReconcilerWorkflow:
    @workflow.run
    async def run(self, request: ReconcileRequest) -> ReconcileResult:
        return await workflow.execute_activity_method(
            MaintenanceActivities.reconcile,
            request,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(minutes=1),
            retry_policy=RETRY,
            summary="Bring the read model into line with Temporal",
        )


MAINTENANCE_WORKFLOWS = (RetentionSweepWorkflow, ReconcilerWorkflow)
