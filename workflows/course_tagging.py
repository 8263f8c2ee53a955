"""The CourseTagging workflow: attempts of ``tag_course`` until every page of the course
has its outcome. The pages live in Postgres, never in the history: a 100,000-page
course is a handful of attempts (each a time slice), and the workflow continues as new
when Temporal suggests it."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.course_tagging import CourseTaggingActivities
    from hubjobs.kinds.course_tagging import COURSE_TAGGING
    from hubjobs.temporal.messages import JobOutcome

from workflows.job_lifecycle import JOB_VERSIONING, JobWorkflow, kind_workflow


# Pinned (JOB_VERSIONING): a course is attempts over minutes or hours, each picking up
# from the last one's cursor; the whole job replays on the code that recorded it.
@kind_workflow(COURSE_TAGGING, versioning=JOB_VERSIONING)
class CourseTaggingWorkflow(JobWorkflow):
    work = CourseTaggingActivities.tag_course

    @workflow.run
    async def run(self, *job: Any) -> JobOutcome:
        return await self.run_job(job)
