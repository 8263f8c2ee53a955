"""The CourseTagging workflow: tags a course chunk by chunk, each chunk one activity
that heartbeats its cursor. The pages live in Postgres, never in the history: a
100,000-page course is some fifty activity calls, and the workflow continues as new
when Temporal suggests it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from hubjobs.temporal.messages import (
        CancelRequest,
        JobInput,
        JobOutcome,
        TagChunk,
        TagChunkResult,
    )

from workflows.lifecycle import JobWorkflow, WorkResult, work_retry_policy

CHUNK_TIMEOUT = timedelta(minutes=30)


@workflow.defn(name="CourseTagging")
class CourseTaggingWorkflow(JobWorkflow):
    kind = "course_tagging"

    @workflow.run
    async def run(self, job: dict[str, Any]) -> JobOutcome:
        return await self.run_job(job)

    async def execute(self, job: JobInput) -> WorkResult:
        after = int((job.checkpoint or {}).get("after_ordinal", 0))
        while True:
            if self.cancel_request is not None or self.cancelled_in_temporal:
                return "cancelled"
            handle = workflow.start_activity(
                "tag_course_chunk",
                TagChunk(job_id=job.job_id, after_ordinal=after, limit=job.options.chunk_size),
                result_type=TagChunkResult,
                start_to_close_timeout=CHUNK_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=job.options.heartbeat_timeout_seconds),
                retry_policy=work_retry_policy(job.options.max_attempts),
                # The row is finished only after the activity stopped writing to it.
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"Tag pages after #{after} (up to {job.options.chunk_size})",
            )
            if not await self.unless_cancelled(handle):
                return "cancelled"
            chunk = handle.result()
            self.report(chunk.counters, "Tagging pages")
            if chunk.cancel_requested:
                self.cancel_request = self.cancel_request or CancelRequest()
                return "cancelled"
            if chunk.done:
                return "succeeded"
            after = chunk.last_ordinal
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    job.model_copy(update={"checkpoint": {"after_ordinal": after}})
                )
