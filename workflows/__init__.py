"""Deterministic workflow code: one workflow per job kind, on a shared lifecycle, and
the scheduled maintenance workflows."""

from workflows.backup import BackupWorkflow
from workflows.course_tagging import CourseTaggingWorkflow
from workflows.maintenance import ReconcilerWorkflow, RetentionSweepWorkflow

WORKFLOWS = [CourseTaggingWorkflow, BackupWorkflow, RetentionSweepWorkflow, ReconcilerWorkflow]
