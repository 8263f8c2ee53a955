"""The workflow sandbox every worker and replayer runs workflows in: the SDK's, with the
modules its runs share passed through, and one cost cut: the serialization context of a
payload tied to no command (a signal's, a query's) is given outside the sandbox, where
the SDK would run code inside it three times a payload (docs/operations/failures.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import temporalio.converter
from temporalio.worker import WorkflowInstance
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance

# Imported once and shared by every run rather than imported again in each; the shared
# lifecycle too (it holds no state): only each kind's workflow module runs afresh.
PASSED_THROUGH = (
    "hubjobs",
    "activities",
    "pydantic",
    "pydantic_core",
    "sqlalchemy",
    "psycopg",
    "workflows.job_lifecycle",
    "workflows.versioning",
    "workflows.dispatch",
)


class _ContextOutside(_Instance):
    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> temporalio.converter.SerializationContext | None:
        # What the workflow instance inside answers for a payload of no command.
        if command_info is None:
            info = self.instance_details.info
            return temporalio.converter.WorkflowSerializationContext(
                namespace=info.namespace, workflow_id=info.workflow_id
            )
        return super().get_serialization_context(command_info)


class SandboxRunner(SandboxedWorkflowRunner):
    def create_instance(self, det: temporalio.worker.WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextOutside(det, self.runner_class, self.restrictions)


def sandbox_runner(passed_through: Sequence[str] = PASSED_THROUGH) -> SandboxRunner:
    return SandboxRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*passed_through)
    )
