"""The floors' workflows: this module imports nothing but temporalio, so the workflow
sandbox has nothing else to load (hubjobs' workflows run in the same sandbox).

``BareJob``: one trivial activity, no database (for information). ``BareDbJob``: one
activity doing a one-page job's work in one transaction (bench/onepage.py), the floor
that hubjobs' one-page job is held to.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

BARE = "BareJob"
BARE_DB = "BareDbJob"


@workflow.defn(name=BARE)
class BareJob:
    @workflow.run
    async def run(self, value: str) -> str:
        result: str = await workflow.execute_activity(
            "bare_noop", value, start_to_close_timeout=timedelta(seconds=60)
        )
        return result


@workflow.defn(name=BARE_DB)
class BareDbJob:
    @workflow.run
    async def run(self, job_id: str) -> str:
        result: str = await workflow.execute_activity(
            "bare_onepage", job_id, start_to_close_timeout=timedelta(seconds=60)
        )
        return result
