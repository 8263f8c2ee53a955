# mypy: disallow-untyped-decorators=False
"""oban's worker for the one-page job, in a module of its own: oban records a job's
worker by its import path, so the enqueuing process and the worker must import it
under the same name."""

from __future__ import annotations

import importlib
from typing import Any

from onepage import run_worker_job

worker = importlib.import_module("oban").worker


@worker(queue="bench")
class OnePage:
    async def process(self, job: Any) -> None:
        await run_worker_job(job.args["job_id"])
