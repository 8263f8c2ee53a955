"""The worker's sandbox gives a payload of no command the serialization context that
the workflow instance inside the sandbox would give, without entering the sandbox."""

from __future__ import annotations

from temporalio.api.common.v1 import Payloads
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter, WorkflowSerializationContext
from temporalio.worker import WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox._runner import _fake_info, _Instance

from hubjobs.temporal.sandbox import sandbox_runner
from workflows.course_tagging import CourseTaggingWorkflow


async def test_a_payload_of_no_command_gets_the_context_the_sandbox_would_give() -> None:
    runner = sandbox_runner()
    instance = runner.create_instance(
        WorkflowInstanceDetails(
            payload_converter_factory=DataConverter.default._new_payload_converter,
            failure_converter_class=DataConverter.default.failure_converter_class,
            interceptor_classes=[],
            defn=CourseTaggingWorkflow.__temporal_workflow_definition,  # type: ignore[attr-defined]
            info=_fake_info,
            randomness_seed=-1,
            extern_functions={},
            disable_eager_activity_execution=False,
            worker_level_failure_exception_types=[],
            patch_activation_callback=None,
            last_completion_result=Payloads(),
            last_failure=Failure(),
        )
    )
    assert isinstance(instance, _Instance)
    outside = instance.get_serialization_context(None)
    inside = _Instance.get_serialization_context(instance, None)
    assert outside == inside
    assert outside == WorkflowSerializationContext(
        namespace=_fake_info.namespace, workflow_id=_fake_info.workflow_id
    )
