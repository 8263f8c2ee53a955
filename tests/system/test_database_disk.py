"""PostgreSQL's own disk fills (issue 30): its data directory on a small tmpfs of the
test's own (``small_disk``, tests/system/test_full_disk.py) under a stack of the test's
own (``hubjobs up``, tests/support/stacks.py), filled mid-job by a file written until
the tmpfs has no byte left, while a slowed tagging job runs on a real worker process
and the API serves.

1. While the disk is full the attempt waits: no page is recorded failed, no attempt is
   counted. ``/health`` answers 503 ``refuses_writes`` (database ``full``) and
   ``hubjobs health`` exits 1; a start through the API answers 503 ``database_full``
   and one through the CLI exits 1 ``database_full``, at once, leaving no job. Once the
   file is removed ``/health`` is 200 again and the job succeeds exactly: every page
   tagged once, one revision each. The WAL is switched to a fresh segment before the
   fill, so that the job's failing transactions never need a new WAL file: that, on a
   full disk, is a PANIC, which the second test stands for with a SIGKILL.
2. PostgreSQL SIGKILLed while its disk is full (as a PANIC or an OOM kill ends it): the
   stack's supervisor starts it again, its crash recovery fails for lack of space, and
   it tries again until the file is removed; then PostgreSQL is back by itself, on its
   port with its data, and the job succeeds exactly, without a manual ``hubjobs up``.
3. A bare ``cancel`` signal taken while the disk is full and the job's last batch waits
   on it: the request cannot reach the read model, where the batch looks, so the attempt
   asks the workflow before each try and gives the job back; freed, the job ends
   cancelled, its work done kept. Before (the chaos campaign's seed 101): the batch
   (or the final write) committed once the disk was freed and the job ended succeeded.

Before (main f524399): the batch failed ``DiskFull``, which was not an outage, the
attempt fell back page by page and recorded pages ``page_update_failed`` for good, the
job ended ``succeeded``; ``/health`` said 200 ``ok`` and starts were accepted; a
PostgreSQL that died stayed down until someone ran ``hubjobs up``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import psycopg
from pydantic import SecretStr
from sqlalchemy import text

from hubjobs.devstack import embedded
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.api.tokens import mint
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.helpers import (
    assert_every_page_tagged_once,
    item_counts,
    job_revisions,
    until,
    wait_until_final,
    wait_until_processed,
)
from tests.support.processes import WorkerProcess, api_process, hubjobs_env, run_hubjobs
from tests.support.servers import seed
from tests.support.stacks import OwnStack, kill_postgres, log_tails, own_stack, server_pids
from tests.system.test_faults import failed_job, wait_started
from tests.system.test_full_disk import small_disk

T = TypeVar("T")
# A fresh cluster takes about 41 MB of it, the migrated database and the course a few
# more: the fill writes the rest.
DISK = "128m"
PAGES = 2000
# Pages done before the disk fills: the job is under way, with most of it left.
FULL_AFTER = 300
SECRET = "database-disk-secret-" + "x" * 32
# The stack's settings: a dead server tried again at most 1 s apart.
STACK_ENV = {
    "HUBJOBS_STACK_RESTART_MAX_SECONDS": "1",
    "HUBJOBS_METRICS_PORT": "0",
    "HUBJOBS_MAINTENANCE": "false",
    "HUBJOBS_WORKER_VERSIONING": "false",
}
# The worker's: slow batches (2,000 pages take well over 10 s however fast the machine),
# a database tried again at most 1 s apart while it refuses, an outage allowed for far
# longer than the test keeps the disk full.
WORKER_SETTINGS: dict[str, Any] = {
    "tagging_batch_size": 10,
    "tagging_batch_pause_seconds": 0.05,
    "outage_retry_max_seconds": 1,
    "max_outage_seconds": 300,
    "heartbeat_timeout_seconds": 5,
}
# What the probes of a full disk may take: a start answers at once, not after retries.
API_WITHIN = 5.0
CLI_WITHIN = 15.0
FINISH_TIMEOUT = 120.0


def fill(disk: Path) -> int:
    """Writes to ``<disk>/fill`` until not a byte more fits (1 MB writes, then 4 KB);
    returns the file's size. Called again, it takes whatever was freed since."""
    path = disk / "fill"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 20, 4096):
            block = b"\0" * chunk
            try:
                while True:
                    os.write(descriptor, block)
            except OSError:  # ENOSPC: this size no longer fits
                pass
    finally:
        os.close(descriptor)
    return path.stat().st_size


def free(disk: Path) -> None:
    (disk / "fill").unlink()


@contextmanager
def database_on_small_disk() -> Iterator[tuple[OwnStack, Path]]:
    """A stack of the test's own whose PostgreSQL keeps its data on a small tmpfs."""
    with small_disk(DISK) as disk:
        pgdata = disk / "pgdata"
        pgdata.mkdir()
        with own_stack(extra_env=STACK_ENV, pgdata=pgdata) as stack:
            yield stack, disk


@dataclass
class DiskRun:
    stack: OwnStack
    disk: Path
    settings: Settings
    client: HubJobsClient
    jobs: WorkspaceJobs
    course: DemoCourse
    job: JobView
    worker: WorkerProcess
    api: httpx.AsyncClient
    tag: str

    def supervisor_log(self) -> str:
        path = self.stack.home / "supervisor.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def jobs_recorded(self) -> int:
        async with self.client.engine.connect() as conn:
            return int((await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one())

    async def finish(self) -> JobView:
        """The job, final; it must have succeeded exactly, no attempt counted."""
        done = await wait_until_final(self.jobs, self.job.id, timeout=FINISH_TIMEOUT)
        print(
            f"the job: {done.status}, {done.succeeded} succeeded and {done.failed} failed "
            f"of {done.total}, {done.attempts} attempt(s), {done.attempts_failed} failed"
        )
        assert done.status == "succeeded", failed_job(done, [self.worker])
        await assert_every_page_tagged_once(
            self.client.engine, done, self.course.page_ids, self.tag
        )
        assert done.attempts_failed == 0, done
        return done


@asynccontextmanager
async def disk_run(
    stack: OwnStack,
    disk: Path,
    logs: Path,
    tag: str,
    pages: int = PAGES,
    worker_settings: dict[str, Any] = WORKER_SETTINGS,
) -> AsyncIterator[DiskRun]:
    """Seeds the course, starts a worker process and the API (both reading the stack's
    addresses from its record), and the job."""
    settings = Settings(
        home=stack.home, task_queue=f"disk-{uuid.uuid4().hex[:12]}", maintenance=False
    )
    port = embedded.choose_port(0)
    worker_env = hubjobs_env(settings, stack.home, **worker_settings)
    api_env = hubjobs_env(settings, stack.home, api_port=port, api_jwt_secret=SECRET)
    async with await HubJobsClient.connect(settings) as client:
        course = await seed(client.engine, pages)
        jobs = client.scope(course.workspace_id, course.actor_id)
        worker = WorkerProcess("worker", worker_env, logs)
        token = mint(course.actor_id, Settings(api_jwt_secret=SecretStr(SECRET)))
        headers = {"Authorization": f"Bearer {token}"}
        try:
            with api_process(api_env, logs / "api.log"):
                async with httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60
                ) as api:
                    await wait_started(worker)
                    job = await jobs.start(
                        "course_tagging", {"root_page_id": course.root_page_id, "tag": tag}
                    )
                    yield DiskRun(
                        stack, disk, settings, client, jobs, course, job, worker, api, tag
                    )
        except BaseException:
            print(f"\n--- worker ({worker.log_path}):\n{worker.tail(60)}")
            print(f"--- api:\n{(logs / 'api.log').read_text(errors='replace')[-3000:]}")
            print(log_tails(stack.home, 40))
            raise
        finally:
            worker.kill()


async def fresh_wal_segment(run: DiskRun) -> None:
    """Switches the WAL to a new segment and writes to it, which creates its file: what
    the job writes while the disk is full then fits in it."""
    async with run.client.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("SELECT pg_switch_wal()"))
        await conn.execute(text("SELECT pg_logical_emit_message(true, 'hubjobs-test', 'x')"))


async def health_is(run: DiskRun, status: int, body: dict[str, str]) -> httpx.Response | None:
    answer = await run.api.get("/health")
    return answer if (answer.status_code, answer.json()) == (status, body) else None


FULL = {"status": "refuses_writes", "database": "full", "temporal": "ok"}
OK = {"status": "ok", "database": "ok", "temporal": "ok"}


async def test_a_full_database_disk_pauses_the_job_and_is_said_until_freed(
    tmp_path: Path,
) -> None:
    with database_on_small_disk() as (stack, disk):
        async with disk_run(stack, disk, tmp_path, "disk-full") as run:
            at_fill = await wait_until_processed(
                run.client.engine, run.job.id, FULL_AFTER, run.worker, timeout=60
            )
            await fresh_wal_segment(run)
            recorded = await run.jobs_recorded()
            filled_bytes = fill(disk)
            filled = time.monotonic()
            print(f"\nfilled the disk ({filled_bytes >> 20} MB) with {at_fill} pages done")

            await until("the job's writes to be refused", _refused(stack), timeout=60)
            said = await soon("/health to say full", lambda: health_is(run, 503, FULL))
            said_after = time.monotonic() - filled
            cli_health = await run_hubjobs(run.settings, stack.home, "health", "--json")
            started = time.monotonic()
            post = await run.api.post(
                f"/workspaces/{run.course.workspace_id}/jobs/course_tagging",
                json={"root_page_id": str(run.course.root_page_id), "tag": "while-full"},
            )
            post_took = time.monotonic() - started
            started = time.monotonic()
            cli_start = await run_hubjobs(
                run.settings,
                stack.home,
                "tag-course",
                "--workspace",
                str(run.course.workspace_id),
                "--actor",
                str(run.course.actor_id),
                "--root-page",
                str(run.course.root_page_id),
                "--tag",
                "while-full",
                "--json",
            )
            cli_took = time.monotonic() - started
            during = await item_counts(run.client.engine, run.job.id)
            assert "failed" not in during, (
                f"pages recorded failed while the disk was full: {during}"
            )
            still = await run.jobs.get(run.job.id)
            left = await run.jobs_recorded()

            free(disk)
            freed = time.monotonic()
            await until("/health to be ok again", lambda: health_is(run, 200, OK))
            ok_again = time.monotonic() - freed
            done = await run.finish()
            finished = time.monotonic() - freed
    print(
        f"/health: {said and said.json()} {said_after:.1f} s after the fill; POST "
        f"{post.status_code} in {post_took:.2f} s, `tag-course` exit {cli_start.returncode} "
        f"in {cli_took:.2f} s; "
        f"while full: {during}, job {still.status} {still.processed}/{still.total}; after "
        f"the file was removed /health ok in {ok_again:.1f} s, job {done.status} in "
        f"{finished:.1f} s, {done.attempts} attempt(s)"
    )
    assert still.status == "running" and still.processed < PAGES, still
    assert said is not None, "/health never said the database was full"
    assert cli_health.returncode == 1, cli_health.stderr
    assert json.loads(cli_health.stdout)["database"] == "full"
    assert post.status_code == 503, post.text
    assert post.json()["error"]["code"] == "database_full", post.text
    assert post_took < API_WITHIN, post_took
    assert cli_start.returncode == 1, cli_start.stderr
    assert json.loads(cli_start.stderr)["error"]["code"] == "database_full", cli_start.stderr
    assert "Traceback" not in cli_start.stderr
    assert cli_took < CLI_WITHIN, cli_took
    assert left == recorded, "a refused start left a job behind"


async def soon(
    what: str, probe: Callable[[], Awaitable[T | None]], timeout: float = 30
) -> T | None:
    """``until``'s answer, or None past ``timeout``: for a condition the test reports on
    with the others, rather than stop at."""
    try:
        return await until(what, probe, timeout)
    except AssertionError:
        return None


def _refused(stack: OwnStack) -> Any:
    """PostgreSQL's log says it refused a write for lack of space (the job's)."""

    async def probe() -> bool:
        log = (stack.home / "postgres.log").read_text(errors="replace")
        return "No space left on device" in log

    return probe


def _answers(url: str) -> Any:
    def connect() -> bool:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    return lambda: asyncio.to_thread(connect)


async def test_a_postgres_killed_while_its_disk_is_full_comes_back_once_space_is_freed(
    tmp_path: Path,
) -> None:
    with database_on_small_disk() as (stack, disk):
        async with disk_run(stack, disk, tmp_path, "killed-full") as run:
            await wait_until_processed(
                run.client.engine, run.job.id, FULL_AFTER, run.worker, timeout=60
            )
            fill(disk)
            await until("the job's writes to be refused", _refused(stack), timeout=60)
            postgres_log = stack.home / "postgres.log"
            logged_before = postgres_log.stat().st_size
            killed = kill_postgres(stack.home)
            fill(disk)  # whatever the kill freed
            died = time.monotonic()
            # Tried again and again while the disk stays full: twice at least.
            await soon(
                "the supervisor to fail two restarts",
                _logged(run, "PostgreSQL did not start (try", times=2),
            )
            since_kill = postgres_log.read_bytes()[logged_before:].decode(errors="replace")

            free(disk)
            freed = time.monotonic()
            await until("PostgreSQL to answer again", _answers(stack.database_url), timeout=60)
            back = time.monotonic() - freed
            port = embedded.EmbeddedPostgres(stack.home).running_port()
            pid = server_pids(stack.home)[0]
            done = await run.finish()
            finished = time.monotonic() - freed
            supervisor = run.supervisor_log()
    failed = supervisor.count("PostgreSQL did not start (try")
    print(
        f"\nPostgreSQL SIGKILLed with its disk full: {failed} failed restart(s) over "
        f"{freed - died:.1f} s; back {back:.1f} s after the file was removed (pid {pid}, "
        f"was {killed}), the job {done.status} {finished:.1f} s after it, "
        f"{done.attempts} attempt(s)"
    )
    print("\n".join(line for line in supervisor.splitlines() if "PostgreSQL" in line))
    # Its crash recovery failed for lack of space.
    assert "No space left on device" in since_kill, since_kill
    assert pid != killed and port == urlsplit(stack.database_url).port
    assert failed >= 2 and "PostgreSQL restarted" in supervisor, supervisor


def _logged(run: DiskRun, line: str, times: int = 1) -> Any:
    async def probe() -> bool:
        return run.supervisor_log().count(line) >= times

    return probe


# Two batches on one lane with a long breath between them: the disk fills once the
# first has landed, and the second, the job's last, waits on it.
CANCEL_BATCH = 20
CANCEL_SETTINGS: dict[str, Any] = {
    **WORKER_SETTINGS,
    "tagging_batch_size": CANCEL_BATCH,
    "tagging_lanes": 1,
    "tagging_batch_pause_seconds": 15,
}


async def test_a_cancel_taken_while_the_disk_is_full_ends_the_job_cancelled(
    tmp_path: Path,
) -> None:
    with database_on_small_disk() as (stack, disk):
        async with disk_run(
            stack,
            disk,
            tmp_path,
            "cancel-full",
            pages=2 * CANCEL_BATCH,
            worker_settings=CANCEL_SETTINGS,
        ) as run:
            await wait_until_processed(
                run.client.engine, run.job.id, CANCEL_BATCH, run.worker, timeout=60
            )
            await fresh_wal_segment(run)
            fill(disk)
            before = await run.jobs.get(run.job.id)
            await until("the last batch's write to be refused", _refused(stack), timeout=60)
            # Bare, as `temporal workflow signal --name cancel` sends it: nothing recorded.
            handle = run.client.temporal.get_workflow_handle(before.workflow_id)
            await handle.signal("cancel")
            await until(
                "the attempt to give the job back",
                _worker_logged(run, "job handed back"),
                timeout=60,
            )
            free(disk)
            done = await wait_until_final(run.jobs, run.job.id, timeout=FINISH_TIMEOUT)
            items = await item_counts(run.client.engine, run.job.id)
            revisions = await job_revisions(run.client.engine, run.tag)
    print(f"\nthe job: {done.status}, items {items}, {done.attempts} attempt(s)")
    assert before.status == "running" and before.processed < 2 * CANCEL_BATCH, before
    assert done.status == "cancelled", failed_job(done, [run.worker])
    # The work done is kept, once: a revision for each page its items say it tagged.
    assert "failed" not in items and items.get("succeeded", 0) >= CANCEL_BATCH, items
    assert sorted(revisions.values()) == [1] * items["succeeded"], revisions
    assert done.attempts_failed == 0, done


def _worker_logged(run: DiskRun, line: str) -> Any:
    async def probe() -> bool:
        return line in run.worker.log_text()

    return probe
