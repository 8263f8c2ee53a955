"""The CourseTagging workflow: attempts of ``tag_course`` until every page has its
outcome; the pages live in PostgreSQL, never in the history."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.course_tagging import CourseTaggingActivities
    from hubjobs.kinds.course_tagging import COURSE_TAGGING

from workflows.job_lifecycle import JOB_VERSIONING, JobWorkflow, kind_workflow


@kind_workflow(COURSE_TAGGING, versioning=JOB_VERSIONING)
class CourseTaggingWorkflow(JobWorkflow):
    work = CourseTaggingActivities.tag_course
