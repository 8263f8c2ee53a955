"""Eager activity dispatch, turned off for one activity at a time: the attempt after a
handover must not go back to the worker that just found it cannot reach the database.
The SDK has only a per-worker option, so an interceptor sets the command's
``disable_eager_execution`` inside ``not_eagerly()``; replay does not check the flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio import workflow
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

_EAGER = "_hubjobs_dispatch_eagerly"


@contextmanager
def not_eagerly() -> Iterator[None]:
    """Activities started in the block go through the task queue (to whichever worker
    polls), never eagerly to this worker."""
    instance = workflow.instance()
    setattr(instance, _EAGER, False)
    try:
        yield
    finally:
        setattr(instance, _EAGER, True)


class NoEagerDispatch(Interceptor):
    """The worker's interceptor that honours ``not_eagerly()``."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _Inbound


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if not getattr(workflow.instance(), _EAGER, True):
            input = dataclasses.replace(input, disable_eager_execution=True)
        return super().start_activity(input)
