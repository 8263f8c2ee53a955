"""Log context of an activity, apart from ``logs`` so that a command line that logs does
not import the Temporal SDK."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from hubjobs.observability.logs import bind


class LogContextInterceptor(Interceptor):
    """Every activity logs with its name, its attempt and, when its argument names a
    job, the job id; activities add the rest of the job with ``bind_job``."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityLogContext(next)


class _ActivityLogContext(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        first = input.args[0] if input.args else None
        job_id = first if isinstance(first, uuid.UUID) else getattr(first, "job_id", None)
        # Bound for the rest of the activity's own task (each activity runs in one), so
        # the SDK's lines after it returned or failed carry the context too.
        bind(activity=info.activity_type, attempt=info.attempt, job_id=job_id)
        return await super().execute_activity(input)
