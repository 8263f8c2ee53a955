"""A build of the course-tagging workflow with the bug of issue 18 put back: its
``cancel`` handler typed, so a bare signal (no argument) raises inside every workflow
task. tests/integration/test_versioning.py runs it as an old build that wedges a run, and shows
the operator's way out (a versioning override onto a fixed build). Its own module:
the workflow sandbox imports a workflow's module, and a test module is no place for
that."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from hubjobs.temporal.messages import CancelRequest, JobOutcome

from workflows.course_tagging import CourseTaggingWorkflow


@workflow.defn(name="CourseTagging", versioning_behavior=VersioningBehavior.PINNED)
class WedgingCourseTaggingWorkflow(CourseTaggingWorkflow):
    @workflow.signal(name="cancel")
    async def cancel(self, request: CancelRequest) -> None:
        await super().cancel(request.model_dump(mode="json"))

    @workflow.run
    async def run(self, *job: Any) -> JobOutcome:
        return await self.run_job(job)
