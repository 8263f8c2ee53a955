"""The scheduled maintenance workflows: each run is one bounded step, so that a
Schedule (created by the worker at start, see hubjobs.schedules) paces the work."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from hubjobs.temporal.messages import (
        ReconcileRequest,
        ReconcileResult,
        SweepRequest,
        SweepResult,
    )

RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)


@workflow.defn(name="RetentionSweep")
class RetentionSweepWorkflow:
    """Removes one batch (100, as in seed 004) of jobs expired by the workflow's clock,
    which is also what lets the time-skipping test server age jobs by 24 h."""

    @workflow.run
    async def run(self, limit: int = 100) -> SweepResult:
        result: SweepResult = await workflow.execute_activity(
            "sweep_expired",
            SweepRequest(cutoff=workflow.now(), limit=limit),
            result_type=SweepResult,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RETRY,
            summary=f"Remove up to {limit} expired jobs",
        )
        return result


@workflow.defn(name="Reconciler")
class ReconcilerWorkflow:
    @workflow.run
    async def run(self, request: ReconcileRequest) -> ReconcileResult:
        result: ReconcileResult = await workflow.execute_activity(
            "reconcile",
            request,
            result_type=ReconcileResult,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(minutes=1),
            retry_policy=RETRY,
            summary="Bring the read model into line with Temporal",
        )
        return result
