"""A worker whose wall clock is hours off changes no outcome (issue 30): durations that
span attempts or hosts are measured on Temporal's clock, never by comparing two hosts'
wall clocks.

Real worker processes, the second under libfaketime (Debian's ``faketime``: its wall
clock 2 h ahead, or 2 h behind, its monotonic clock untouched, as an NTP step leaves
it), and a real PostgreSQL outage: worker A holds the job when PostgreSQL stops, hands
it over once it has waited ``HUBJOBS_OUTAGE_HANDOVER_SECONDS`` (carrying when the
outage began), and is stopped; the skewed worker B takes the job over while PostgreSQL
is still down and measures the outage A began. The job succeeds exactly, nothing says
``unavailable`` (the maximum outage is the default hour, shorter than the skew), and no
log gives the outage a negative length. Before: at +2 h, B failed the job at once,
``unavailable``; at -2 h, B logged "database answers again after -7190 s".
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.db.engine import async_engine
from hubjobs.settings import Settings
from hubjobs.webhooks.signing import verify
from starter.client import HubJobsClient
from tests.support.faketime import clock_offset, skewed
from tests.support.helpers import (
    assert_every_page_tagged_once,
    until,
    wait_until_final,
    wait_until_processed,
    workflow_closed,
)
from tests.support.own_postgres import OwnPostgres, own_postgres_server
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.servers import seed
from tests.support.sse import serving
from tests.support.webhooks import WEBHOOK_SECRET, Receiver

PAGES = 1500
DONE_BEFORE_STOP = 300
HANDOVER_SECONDS = 2
SKEW_SECONDS = 2 * 3600
# An attempt (not the worker's gauges) that met the outage: waiting, handing over, or
# giving up on it.
MET_OUTAGE = re.compile(r"activities\.outages database (unavailable|out of reach)")
ANSWERS_AGAIN = re.compile(r"database answers again after (-?[0-9.]+) s")


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    with own_postgres_server("hubjobs-clocks-") as server:
        yield server


def outage_lengths(text: str) -> list[float]:
    return [float(seconds) for seconds in ANSWERS_AGAIN.findall(text)]


@pytest.mark.parametrize("offset", ["+2h", "-2h"])
async def test_a_worker_hours_off_takes_over_an_outage_and_changes_no_outcome(
    temporal: Client, settings: Settings, own_postgres: OwnPostgres, tmp_path: Path, offset: str
) -> None:
    starter = settings.model_copy(
        update={
            "database_url": own_postgres.database_url,
            "heartbeat_timeout_seconds": 5,
            "handover_pause_seconds": 0.5,
            "retry_max_seconds": 1,
        }
    )
    env = hubjobs_env(
        starter,
        tmp_path,
        tagging_batch_size=25,
        tagging_batch_pause_seconds=0.05,
        work_slice_seconds=600,
        outage_retry_max_seconds=1,
        outage_handover_seconds=HANDOVER_SECONDS,
    )
    skewed_env = skewed(env, offset)
    sign = 1 if offset.startswith("+") else -1
    assert abs(clock_offset(skewed_env) - sign * SKEW_SECONDS) < 60
    engine = async_engine(starter.resolved_database_url(), pool_size=2)
    a = WorkerProcess("worker-a", env, tmp_path)
    workers = [a]
    try:
        course = await seed(engine, PAGES)
        jobs = HubJobsClient(temporal, engine, starter).scope(course.workspace_id, course.actor_id)
        job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": f"skew{offset}"}
        )
        await wait_until_processed(engine, job.id, DONE_BEFORE_STOP, a, 60)
        await own_postgres.stop()
        stopped = time.monotonic()

        async def handed_over(worker: WorkerProcess) -> bool:
            assert worker.alive(), worker.tail()
            return "handing the work over" in worker.log_text()

        # A began the outage, on its own clock before: it carries on in the next attempt.
        await until("worker A to hand the job over", lambda: handed_over(a), 60)
        b = WorkerProcess("worker-b", skewed_env, tmp_path)
        workers.append(b)

        async def b_started() -> bool:
            assert b.alive(), b.tail()
            return "worker started" in b.log_text()

        await until("worker B to poll", b_started, 60)
        code, _ = a.terminate()
        assert code == 0, a.tail()

        async def b_tried() -> bool:
            assert b.alive(), b.tail()
            return MET_OUTAGE.search(b.log_text()) is not None

        # B took the job over during the outage and measured it.
        await until("worker B to meet the outage", b_tried, 90)
        await own_postgres.start()
        down = time.monotonic() - stopped
        done = await wait_until_final(jobs, job.id, timeout=120)
        logs = {w.name: w.log_text() for w in workers}
        tails = "".join(f"\n--- {name}:\n{text[-3000:]}" for name, text in logs.items())
        assert (done.status, done.error_code) == ("succeeded", None), f"{done}{tails}"
        await assert_every_page_tagged_once(engine, done, course.page_ids, f"skew{offset}")
        await workflow_closed(temporal, done.workflow_id)
        assert done.attempts_failed == 0, done
        assert "longer than" not in logs["worker-b"], tails
        lengths = outage_lengths(logs["worker-b"])
        print(
            f"worker B at {offset}: PostgreSQL down {down:.1f} s, B measured the outage "
            f"{lengths} s, the job {done.status} after {done.attempts} attempts"
        )
        assert lengths, f"worker B never measured the outage{tails}"
        every = [n for text in logs.values() for n in outage_lengths(text)]
        assert all(0 <= n <= down + 30 for n in every), (every, down, tails)
    finally:
        for worker in workers:
            worker.kill()
        await engine.dispose()


@pytest.mark.parametrize("offset", ["+2h", "-2h"])
async def test_a_worker_hours_off_signs_its_webhooks_on_temporals_clock(
    temporal: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path, offset: str
) -> None:
    """The completion webhook's signature carries a timestamp that the receiver checks
    against its own clock (five minutes either way): a worker 2 h off signs with
    Temporal's time, and the receiver takes the delivery. Before: signed 2 h off, and
    every delivery refused by a receiver that verifies."""
    signed = settings.model_copy(update={"webhook_secret": SecretStr(WEBHOOK_SECRET)})
    env = skewed(hubjobs_env(settings, tmp_path, webhook_secret=WEBHOOK_SECRET), offset)
    course = await seed(engine, 10)
    jobs = HubJobsClient(temporal, engine, signed).scope(course.workspace_id, course.actor_id)
    receiver = Receiver()
    worker = WorkerProcess("worker", env, tmp_path)
    try:
        async with serving(receiver.app()) as base:
            job = await jobs.start(
                "course_tagging",
                {"root_page_id": course.root_page_id, "tag": "signed"},
                notify_url=f"{base}/hook",
            )

            async def received() -> bool:
                assert worker.alive(), worker.tail()
                return bool(receiver.received)

            await until("the first delivery", received, timeout=60)
            at = int(time.time())
    finally:
        worker.kill()
    first = receiver.received[0]
    stamped = int(dict(p.split("=", 1) for p in first.signature.split(","))["t"])
    print(f"worker at {offset}: the webhook signed {stamped - at:+d} s from the receiver's clock")
    assert verify(WEBHOOK_SECRET.encode(), first.signature, first.body, now=at), (
        stamped - at,
        worker.tail(),
    )
    assert first.completion["job_id"] == str(job.id)
