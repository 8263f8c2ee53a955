"""A kind shipped outside this project's folders (its workflow and activities in
tests/support/toy_impl.py), added the way any kind is: one declaration, one registration. It
shows what no real kind can on demand: transient failures of its first attempts (the
retry backoff under the time-skipping server) and an expire hook that fails."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.kinds import JobKind, NewJob, Prepared, Result, register
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings

EXPIRED: list[JobView] = []


class EchoPayload(BaseModel):
    message: str
    fail_attempts: int = 0
    fail_expire: bool = False


class EchoResult(Result):
    echo: str


class EchoSettings(BaseSettings):
    """The toy kind's own settings (HUBJOBS_TOY_ECHO_PREFIX): none in the shared Settings."""

    model_config = SettingsConfigDict(env_prefix="HUBJOBS_TOY_", extra="forbid")

    # Put before every echo.
    echo_prefix: str = ""


async def prepare(conn: AsyncConnection, job: NewJob, payload: EchoPayload) -> Prepared:
    return Prepared(total=1, summary="Echo a message")


def build_result(
    payload: EchoPayload, counters: Counters, output: dict[str, Any] | None
) -> EchoResult:
    return EchoResult(echo=(output or {}).get("echo", payload.message))


async def expire(job: JobView, settings: Settings) -> None:
    if job.payload.get("fail_expire"):
        raise OSError("the archive store is down")
    EXPIRED.append(job)


TOY = register(
    JobKind(
        name="toy_echo",
        title="Echo",
        payload=EchoPayload,
        result=EchoResult,
        prepare=prepare,
        build_result=build_result,
        expire=expire,
        retention=timedelta(hours=24),
        module="tests.support.toy_impl",
        settings=EchoSettings,
    )
)
