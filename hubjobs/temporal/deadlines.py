"""A deadline on every Temporal call a hubjobs client makes: the SDK otherwise waits as
long as a hung server takes. Every call that names no ``rpc_timeout`` gets
HUBJOBS_TEMPORAL_RPC_TIMEOUT_SECONDS (then ``RPCError``, which callers turn into
``unavailable``); long polls for a workflow's next event are left alone.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import (
    CancelWorkflowInput,
    CountWorkflowsInput,
    CreateScheduleInput,
    DeleteScheduleInput,
    DescribeScheduleInput,
    DescribeWorkflowInput,
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    ListSchedulesInput,
    ListWorkflowsInput,
    OutboundInterceptor,
    PauseScheduleInput,
    QueryWorkflowInput,
    ScheduleAsyncIterator,
    ScheduleHandle,
    SignalWorkflowInput,
    StartWorkflowInput,
    TerminateWorkflowInput,
    TriggerScheduleInput,
    UnpauseScheduleInput,
    UpdateScheduleInput,
    WorkflowExecutionAsyncIterator,
    WorkflowHandle,
    WorkflowHistoryEventAsyncIterator,
)

In = TypeVar("In")


class RpcDeadlines(Interceptor):
    def __init__(self, seconds: float) -> None:
        self.timeout = timedelta(seconds=seconds)

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Bounded(next, self.timeout)


class _Bounded(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, timeout: timedelta) -> None:
        super().__init__(next)
        self.timeout = timeout

    def _bound(self, input: In) -> In:
        if getattr(input, "rpc_timeout", None) is not None:
            return input
        return dataclasses.replace(input, rpc_timeout=self.timeout)  # type: ignore[type-var]

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        return await super().start_workflow(self._bound(input))

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
        await super().cancel_workflow(self._bound(input))

    async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
        return await super().describe_workflow(self._bound(input))

    def fetch_workflow_history_events(
        self, input: FetchWorkflowHistoryEventsInput
    ) -> WorkflowHistoryEventAsyncIterator:
        if not input.wait_new_event:  # a long poll waits for the workflow
            input = self._bound(input)
        return super().fetch_workflow_history_events(input)

    def list_workflows(self, input: ListWorkflowsInput) -> WorkflowExecutionAsyncIterator:
        return super().list_workflows(self._bound(input))

    async def count_workflows(self, input: CountWorkflowsInput) -> Any:
        return await super().count_workflows(self._bound(input))

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        return await super().query_workflow(self._bound(input))

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await super().signal_workflow(self._bound(input))

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        await super().terminate_workflow(self._bound(input))

    async def create_schedule(self, input: CreateScheduleInput) -> ScheduleHandle:
        return await super().create_schedule(self._bound(input))

    def list_schedules(self, input: ListSchedulesInput) -> ScheduleAsyncIterator:
        return super().list_schedules(self._bound(input))

    async def delete_schedule(self, input: DeleteScheduleInput) -> None:
        await super().delete_schedule(self._bound(input))

    async def describe_schedule(self, input: DescribeScheduleInput) -> Any:
        return await super().describe_schedule(self._bound(input))

    async def pause_schedule(self, input: PauseScheduleInput) -> None:
        await super().pause_schedule(self._bound(input))

    async def trigger_schedule(self, input: TriggerScheduleInput) -> None:
        await super().trigger_schedule(self._bound(input))

    async def unpause_schedule(self, input: UnpauseScheduleInput) -> None:
        await super().unpause_schedule(self._bound(input))

    async def update_schedule(self, input: UpdateScheduleInput) -> None:
        await super().update_schedule(self._bound(input))
