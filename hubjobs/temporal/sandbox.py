"""The workflow sandbox every worker and replayer runs workflows in: the SDK's, with
the modules its runs share passed through, and one cost cut.

The SDK asks the sandbox for the serialization context of every payload it decodes,
three times a payload and each time by executing code inside the sandbox: for a payload
tied to no command (a signal's, a query's) the context is only the workflow's namespace
and id, so it is given here, outside. A flood of signals then costs a run about half as
much, in each task and each replay of it (docs/operations/failures.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import temporalio.converter
from temporalio.worker import WorkflowInstance
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance

# Imported once by the worker and shared by every workflow run: the sandbox would
# otherwise import them again for each run. The shared lifecycle too: it holds no state
# of its own, only each kind's tiny workflow module is run afresh in each run's sandbox.
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
