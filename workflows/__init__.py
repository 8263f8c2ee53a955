"""Deterministic workflow code: one workflow per job kind, on a shared lifecycle."""

from workflows.course_tagging import CourseTaggingWorkflow

WORKFLOWS = [CourseTaggingWorkflow]
