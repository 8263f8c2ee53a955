"""Maintenance: the retention sweep and the reconciler. One long-lived ``Maintenance``
workflow per task queue runs both on their intervals and continues as new now and
then (two Schedules buried the jobs under runs in the UI's list); each worker sends it
the plan by signal-with-start. ``RetentionSweep`` and ``Reconciler`` run one step on
demand.

Deterministic: no I/O here; the activities' module is passed through the sandbox.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.maintenance import MaintenanceActivities
    from hubjobs.temporal.failures import invalid_input
    from hubjobs.temporal.handler_args import Refused, read_argument
    from hubjobs.temporal.maintenance import (
        MAINTENANCE_PLAN_SIGNAL,
        MAINTENANCE_WORKFLOW,
        RECONCILER_WORKFLOW,
        RETENTION_SWEEP_WORKFLOW,
    )
    from hubjobs.temporal.messages import (
        MaintenancePlan,
        MaintenanceState,
        ReconcileRequest,
        ReconcileResult,
        SweepRequest,
        SweepResult,
    )

from workflows.versioning import declare_workflow

RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)
SWEEP_TIMEOUT = timedelta(minutes=30)
RECONCILE_TIMEOUT = timedelta(minutes=5)
HEARTBEAT_TIMEOUT = timedelta(minutes=1)
# Rounds of one run before it continues as new (about 15 events a round): a run's
# history stays well under Temporal's 10,240-event warning.
ROUNDS_PER_RUN = 500
# Auto-upgrade: a run caught by a deploy moves to the new build at its next task, so no
# old build waits for it. A change to its commands still needs ``workflow.patched``.
MAINTENANCE_VERSIONING = VersioningBehavior.AUTO_UPGRADE


async def _sweep(cutoff: datetime, limit: int) -> SweepResult:
    return await workflow.execute_activity_method(
        MaintenanceActivities.sweep_expired,
        SweepRequest(cutoff=cutoff, limit=limit),
        start_to_close_timeout=SWEEP_TIMEOUT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
        summary="Remove expired jobs",
    )


async def _reconcile(request: ReconcileRequest) -> ReconcileResult:
    return await workflow.execute_activity_method(
        MaintenanceActivities.reconcile,
        request,
        start_to_close_timeout=RECONCILE_TIMEOUT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
        summary="Bring the read model into line with Temporal",
    )


@declare_workflow(MAINTENANCE_WORKFLOW, MAINTENANCE_VERSIONING)
class MaintenanceWorkflow:
    """Sweeps and reconciles on the plan's intervals, for as long as the task queue
    lives; a step that fails is logged and tried again at its next time."""

    def __init__(self) -> None:
        self.state = MaintenanceState()
        self.replanned = False

    @workflow.signal(name=MAINTENANCE_PLAN_SIGNAL)
    def set_plan(self, *args: Any) -> None:
        read = read_argument(MaintenancePlan, args)
        if isinstance(read, Refused):
            workflow.logger.warning("maintenance plan refused: %s", read.reason)
            return
        self.state.plan = read.value
        self.replanned = True

    @workflow.query(name="state")
    def current_state(self, *args: Any) -> MaintenanceState:
        return self.state

    @workflow.run
    async def run(self, *args: Any) -> None:
        read = read_argument(MaintenanceState, args, optional=True)
        if isinstance(read, Refused):
            raise invalid_input("maintenance", read.reason)
        if not self.replanned:  # a plan signalled with the start wins over the input's
            self.state.plan = read.value.plan
        state = self.state
        state.next_sweep, state.next_reconcile = read.value.next_sweep, read.value.next_reconcile
        state.swept, state.reconciled = read.value.swept, read.value.reconciled
        for _ in range(ROUNDS_PER_RUN):
            await self._round()
            if workflow.info().is_continue_as_new_suggested():
                break
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self.state)

    async def _round(self) -> None:
        """The steps due now, side by side, then a wait until the next one is due (or a
        new plan arrives: each step is then next due by the new intervals)."""
        state, now = self.state, workflow.now()
        self.replanned = False
        steps = []
        if state.next_sweep is None or now >= state.next_sweep:
            state.next_sweep = now + timedelta(seconds=state.plan.sweep_seconds)
            steps.append(self._step_sweep(now, state.plan))
        if state.next_reconcile is None or now >= state.next_reconcile:
            state.next_reconcile = now + timedelta(seconds=state.plan.reconcile_seconds)
            steps.append(self._step_reconcile(state.plan))
        await asyncio.gather(*steps)
        workflow.set_current_details(
            f"**{state.swept}** expired jobs removed, **{state.reconciled}** jobs brought "
            "into line with Temporal (this run and the ones it continues)"
        )
        wait = min(state.next_sweep, state.next_reconcile) - workflow.now()
        if wait > timedelta(0):
            try:
                await workflow.wait_condition(lambda: self.replanned, timeout=wait)
            except TimeoutError:
                pass
        if self.replanned:
            now, plan = workflow.now(), state.plan
            state.next_sweep = min(state.next_sweep, now + timedelta(seconds=plan.sweep_seconds))
            state.next_reconcile = min(
                state.next_reconcile, now + timedelta(seconds=plan.reconcile_seconds)
            )

    async def _step_sweep(self, cutoff: datetime, plan: MaintenancePlan) -> None:
        try:
            result = await _sweep(cutoff, plan.sweep_limit)
        except ActivityError:
            workflow.logger.warning("retention sweep failed; next at its next time")
            return
        self.state.swept += result.removed

    async def _step_reconcile(self, plan: MaintenancePlan) -> None:
        request = ReconcileRequest(
            grace_seconds=plan.reconcile_grace_seconds, limit=plan.reconcile_limit
        )
        try:
            result = await _reconcile(request)
        except ActivityError:
            workflow.logger.warning("reconciler failed; next at its next time")
            return
        self.state.reconciled += result.finished + result.restarted


@declare_workflow(RETENTION_SWEEP_WORKFLOW, MAINTENANCE_VERSIONING)
class RetentionSweepWorkflow:
    """One sweep now, by the workflow's clock (so time skipping ages jobs), up to
    ``limit`` jobs (the input; default 100,000)."""

    @workflow.run
    async def run(self, *args: Any) -> SweepResult:
        limit = args[0] if len(args) == 1 and args[0] is not None else 100_000
        if len(args) > 1 or not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise invalid_input("sweep", "expects a positive whole number, the limit")
        return await _sweep(workflow.now(), limit)


@declare_workflow(RECONCILER_WORKFLOW, MAINTENANCE_VERSIONING)
class ReconcilerWorkflow:
    """One reconciliation now (input: a ReconcileRequest, or nothing for the defaults)."""

    @workflow.run
    async def run(self, *args: Any) -> ReconcileResult:
        read = read_argument(ReconcileRequest, args, optional=True)
        if isinstance(read, Refused):
            raise invalid_input("reconciler", read.reason)
        return await _reconcile(read.value)


MAINTENANCE_WORKFLOWS = (MaintenanceWorkflow, RetentionSweepWorkflow, ReconcilerWorkflow)
