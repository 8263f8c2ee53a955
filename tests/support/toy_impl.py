"""The toy kind's workflow and activities (declared in tests/support/toy_kind.py)."""

from __future__ import annotations

from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from activities.attempt import KindActivities
    from activities.context import WorkContext
    from activities.endings import Done, WorkEnd
    from hubjobs.temporal.messages import WorkRequest, WorkResult
    from tests.support.toy_kind import TOY, EchoPayload, EchoSettings

from workflows.job_lifecycle import JOB_VERSIONING, JobWorkflow, kind_workflow

# Each attempt's number and scheduled time, for the backoff test.
ATTEMPTS: list[tuple[int, Any]] = []


class EchoActivities(KindActivities[EchoPayload]):
    kind = TOY

    @activity.defn
    async def echo(self, request: WorkRequest) -> WorkResult:
        return await self.attempt(request, self.work)

    async def work(self, ctx: WorkContext[EchoPayload]) -> WorkEnd:
        ATTEMPTS.append((ctx.request.attempt, activity.info().current_attempt_scheduled_time))
        if ctx.request.attempt <= ctx.payload.fail_attempts:
            raise RuntimeError(f"transient failure {ctx.request.attempt}")
        own = TOY.settings_as(EchoSettings, ctx.settings)
        return Done({"echo": own.echo_prefix + ctx.payload.message})


@kind_workflow(TOY, versioning=JOB_VERSIONING)
class ToyEchoWorkflow(JobWorkflow):
    work = EchoActivities.echo
