"""The PageExport workflow: attempts of ``export_pages`` until every file is written."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.page_export import PageExportActivities
    from hubjobs.kinds.page_export import PAGE_EXPORT

from workflows.job_lifecycle import JOB_VERSIONING, JobWorkflow, kind_workflow


@kind_workflow(PAGE_EXPORT, versioning=JOB_VERSIONING)
class PageExportWorkflow(JobWorkflow):
    work = PageExportActivities.export_pages
