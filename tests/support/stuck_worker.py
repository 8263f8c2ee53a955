"""``python -m tests.support.stuck_worker``: the worker process (worker.py's ``main``)
serving one more workflow, ``StuckWorkflow``, whose first task blocks in workflow code
for good: past the SDK's deadlock detector its thread cannot be stopped, and the
worker's shutdown waits for it."""

from __future__ import annotations

import threading
from typing import Any

from temporalio import workflow

import worker


@workflow.defn(name="StuckWorkflow", sandboxed=False)
class StuckWorkflow:
    @workflow.run
    async def run(self) -> None:
        workflow.logger.warning("stuck in workflow code")
        threading.Event().wait()


def main() -> None:
    build = worker.build_worker

    def with_stuck(*args: Any, **kwargs: Any) -> Any:
        kwargs["workflow_classes"] = [*worker.workflows(versioned=False), StuckWorkflow]
        return build(*args, **kwargs)

    worker.build_worker = with_stuck
    worker.main()


if __name__ == "__main__":
    main()
