"""A third kind, added the way any kind is: this one module and one registration line
(at the bottom). It echoes a message, can be told to fail its first attempts, and
records its expire hook's calls, so tests can drive the whole shared lifecycle."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity, workflow

from hubjobs.domain.access import require_administrator
from hubjobs.kinds import JobKind, NewJob, Prepared, register
from hubjobs.readmodel.store import JobView
from hubjobs.temporal.messages import Counters, JobInput, JobOutcome
from workflows.lifecycle import JobWorkflow, WorkResult, work_retry_policy

NAME = "toy_echo"
EXPIRED: list[JobView] = []
ATTEMPTS: list[tuple[int, Any]] = []


class EchoPayload(BaseModel):
    message: str
    fail_attempts: int = 0
    fail_expire: bool = False


async def prepare(conn: AsyncConnection, job: NewJob, payload: EchoPayload) -> Prepared:
    await require_administrator(conn, job.workspace_id, job.actor_id)
    return Prepared(total=1, summary=f"Echo {payload.message!r}")


def build_result(
    payload: EchoPayload, counters: Counters, output: dict[str, Any] | None
) -> dict[str, Any]:
    return {"echo": payload.message}


async def expire(job: JobView) -> None:
    if job.payload.get("fail_expire"):
        raise OSError("the archive store is down")
    EXPIRED.append(job)


@activity.defn(name="toy_echo_work")
async def echo(payload: EchoPayload) -> None:
    info = activity.info()
    ATTEMPTS.append((info.attempt, info.current_attempt_scheduled_time))
    if info.attempt <= payload.fail_attempts:
        raise RuntimeError(f"transient failure {info.attempt}")


@workflow.defn(name="ToyEcho")
class ToyEchoWorkflow(JobWorkflow):
    kind = NAME

    @workflow.run
    async def run(self, job: dict[str, Any]) -> JobOutcome:
        return await self.run_job(job)

    async def execute(self, job: JobInput) -> WorkResult:
        await workflow.execute_activity(
            echo,
            EchoPayload.model_validate(job.payload),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=work_retry_policy(job.options.max_attempts),
        )
        return "succeeded"


TOY = register(
    JobKind(
        name=NAME,
        payload_model=EchoPayload,
        workflow="ToyEcho",
        prepare=prepare,
        build_result=build_result,
        expire=expire,
        retention=timedelta(hours=24),
    )
)
