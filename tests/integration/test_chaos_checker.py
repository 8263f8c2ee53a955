"""The chaos campaign's checker names purpose-made damage (issue 43).

A finished hub, made for real on the session's servers by an in-process worker: a
tagging job started twice with one idempotency key and refused with another payload
under it, a workspace's backup beside another workspace, a long tagging job cancelled
by the client, the campaign's ledger of what was sent. The checker finds it
sound (every invariant checked, none violated). Then, each case on a clone of that
database (and the ledger), one invariant is broken and the checker must name it, with
the job, and no other:

1. a second revision of the job on one of its pages;  2. a counter off by one;
3. a row ``running`` under a closed run, and a row whose status Temporal's does not
agree with;  4. a cancel recorded and not honoured, and a bare cancel signal the
server took before the job ended;  5. a backup archive altered after it was written;
6. a webhook left pending;  7. one idempotency key answered with two jobs, a key
reused with another payload answered with the first job, one refused naming another
job, and the same request refused as another;  8. a job marked stuck, and a
worker process stopped."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from temporalio.client import Client

from hubjobs.db.engine import async_engine
from hubjobs.devstack import embedded
from hubjobs.devstack.demo_data import create_course
from hubjobs.errors import IdempotencyKeyReused
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.chaos.checker.__main__ import check
from tests.support.helpers import until, wait_until_final
from tests.support.servers import TEMPLATE, admin_url, running_worker, seed

HUBJOBS = Path(sys.executable).parent / "hubjobs"
LONG_PAGES = 3000


@dataclass(frozen=True)
class Finished:
    database: str
    database_url: str
    temporal_address: str
    task_queue: str
    records: list[dict[str, Any]]
    tagged: JobView
    backup: JobView
    cancelled: JobView


def _records(
    tagged: JobView, again: JobView, reused: IdempotencyKeyReused, cancelled: JobView, asked: float
) -> list[dict[str, Any]]:
    start: dict[str, Any] = {
        "type": "start",
        "workspace_id": str(tagged.workspace_id),
        "kind": "course_tagging",
        "key": "checked-key",
        "conflict": False,
        "outcome": "accepted",
        "payload": tagged.payload,
    }
    return [
        start | {"job_id": str(tagged.id)},
        start | {"job_id": str(again.id), "repeat_of": 1},
        start
        | {
            "repeat_of": 1,
            "payload": tagged.payload | {"tag": "checked-other"},
            "conflict": True,
            "outcome": "refused",
            "code": reused.code,
            "named_job_id": str(reused.job_id),
            "job_id": None,
        },
        {
            "type": "cancel",
            "method": "client",
            "job_id": str(cancelled.id),
            "accepted": True,
            "sent_at": asked,
            "answered_at": asked + 0.1,
        },
    ]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def finished(
    stack: embedded.StackInfo, temporal: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Finished]:
    name = f"chaos_{uuid.uuid4().hex[:12]}"
    admin = admin_url(stack.database_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    url = stack.database_url.rsplit("/", 1)[0] + f"/{name}"
    settings = Settings(
        home=tmp_path_factory.mktemp("chaos-checker"),
        database_url=url,
        temporal_address=stack.temporal_address,
        task_queue=f"chaos-{uuid.uuid4().hex[:12]}",
        heartbeat_timeout_seconds=5,
        kind_settings={
            "course_tagging": {"tagging_batch_size": 10, "tagging_batch_pause_seconds": 0.05}
        },
        work_slice_seconds=1,
        worker_versioning=False,
    )
    engine = async_engine(url, pool_size=5)
    try:
        course = await seed(engine, 30)
        await seed(engine, 5)  # another workspace, which the backup must not hold
        async with engine.begin() as writing:
            long_pages = await create_course(writing, course.workspace_id, LONG_PAGES, title="Long")
        hub = HubJobsClient(temporal, engine, settings)
        jobs = others = hub.scope(course.workspace_id, course.actor_id)
        async with running_worker(temporal, settings):
            payload = {"root_page_id": course.root_page_id, "tag": "checked"}
            tagged = await jobs.start("course_tagging", payload, idempotency_key="checked-key")
            again = await jobs.start("course_tagging", payload, idempotency_key="checked-key")
            with pytest.raises(IdempotencyKeyReused) as reused:
                other = payload | {"tag": "checked-other"}
                await jobs.start("course_tagging", other, idempotency_key="checked-key")
            backup = await jobs.start("backup", {})
            running = await others.start(
                "course_tagging", {"root_page_id": long_pages[0], "tag": "long"}
            )

            async def under_way() -> bool:
                return (await others.get(running.id)).processed >= 20

            await until("the long job to be under way", under_way)
            asked = time.time()
            await others.cancel(running.id)
            done = [
                await wait_until_final(scope, job.id, timeout=60)
                for scope, job in ((jobs, tagged), (jobs, backup), (others, running))
            ]
        assert [job.status for job in done] == ["succeeded", "succeeded", "cancelled"], done
        await hub.close()
        yield Finished(
            name,
            url,
            stack.temporal_address,
            settings.task_queue,
            _records(tagged, again, reused.value, running, asked),
            *done,
        )
    finally:
        await engine.dispose()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def verdicts(
    finished: Finished,
    folder: Path,
    damage: str | None = None,
    params: dict[str, Any] | None = None,
    records: list[dict[str, Any]] | None = None,
    *,
    restores: bool = False,
) -> dict[int, dict[str, Any]]:
    """The checker's verdicts on a clone of the finished database with ``damage`` (SQL)
    done to it, and the ledger with ``records`` added."""
    clone = f"{finished.database}_{uuid.uuid4().hex[:6]}"
    admin = admin_url(finished.database_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{clone}" TEMPLATE "{finished.database}"')
    url = finished.database_url.rsplit("/", 1)[0] + f"/{clone}"
    try:
        if damage is not None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(damage, params or {})
        home = folder / "home"
        home.mkdir()
        record = {"database_url": url, "temporal_address": finished.temporal_address}
        (home / "stack.json").write_text(json.dumps(record))
        ledger = folder / "ledger.jsonl"
        lines = [json.dumps(r) for r in [*finished.records, *(records or [])]]
        ledger.write_text("\n".join(lines) + "\n")
        found = await check(
            home,
            ledger,
            time.time() - 3600,
            task_queue=finished.task_queue,
            hubjobs=HUBJOBS,
            secret=b"",
            restores=restores,
        )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{clone}" WITH (FORCE)')
    return {v["number"]: v for v in found["invariants"]}


def only(found: dict[int, dict[str, Any]], number: int, job: JobView | None) -> str:
    """Invariant ``number`` names ``job`` (None: no job), and no other is violated; the
    violations' text."""
    others = {n: v["violations"] for n, v in found.items() if n != number and v["violations"]}
    assert others == {}, others
    named = found[number]["violations"]
    assert named, f"invariant {number} found nothing: {found[number]}"
    assert {v["job_id"] for v in named} == {None if job is None else str(job.id)}, named
    return " | ".join(v["what"] for v in named)


async def test_a_sound_hub_passes_every_invariant(finished: Finished, tmp_path: Path) -> None:
    found = await verdicts(finished, tmp_path, restores=True)
    assert {n: v["violations"] for n, v in found.items()} == {n: [] for n in range(1, 9)}
    checked = {n: v["checked"] for n, v in found.items()}
    print(f"\nchecked, by invariant: {checked}")
    assert all(checked[n] > 0 for n in (1, 2, 3, 4, 5, 7, 8)), checked


async def test_a_second_revision_on_a_page(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = """
        INSERT INTO page_revisions (page_id, version, actor_id, change_summary,
                                    correlation_id, title, tags)
        SELECT page_id, version + 100, actor_id, change_summary, correlation_id, title, tags
          FROM page_revisions WHERE correlation_id = %(c)s LIMIT 1
    """
    said = only(await verdicts(finished, tmp_path, damage, {"c": job.correlation_id}), 1, job)
    assert "2 revisions of the job (its item succeeded)" in said, said


async def test_a_counter_off_by_one(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = "UPDATE jobs SET succeeded = succeeded + 1 WHERE id = %(id)s"
    said = only(await verdicts(finished, tmp_path, damage, {"id": job.id}), 2, job)
    assert f"succeeded {job.succeeded + 1} (items say {job.succeeded})" in said, said


async def test_a_row_running_under_a_closed_run(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = "UPDATE jobs SET status = 'running', finished_at = NULL WHERE id = %(id)s"
    said = only(await verdicts(finished, tmp_path, damage, {"id": job.id}), 3, job)
    assert "row still running" in said and "its run closed COMPLETED" in said, said


async def test_a_row_temporal_does_not_agree_with(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = "UPDATE jobs SET status = 'failed' WHERE id = %(id)s"
    said = only(await verdicts(finished, tmp_path, damage, {"id": job.id}), 3, job)
    assert "row failed, its run closed COMPLETED with JobStatus succeeded" in said, said


async def test_a_recorded_cancel_not_honoured(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = (
        "UPDATE jobs SET cancel_requested_at = finished_at - interval '5 seconds' WHERE id = %(id)s"
    )
    said = only(await verdicts(finished, tmp_path, damage, {"id": job.id}), 4, job)
    assert "cancel recorded 5.0 s before the job ended succeeded" in said, said


async def test_a_lost_bare_cancel(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    assert job.finished_at is not None
    sent = job.finished_at.timestamp() - 10
    lost = {
        "type": "cancel",
        "method": "bare",
        "job_id": str(job.id),
        "accepted": True,
        "sent_at": sent,
        "answered_at": sent + 0.5,
    }
    said = only(await verdicts(finished, tmp_path, records=[lost]), 4, job)
    assert "bare cancel signal taken by the server" in said, said


async def test_a_cancelled_job_nobody_cancelled(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = "UPDATE jobs SET status = 'cancelled' WHERE id = %(id)s"
    found = await verdicts(finished, tmp_path, damage, {"id": job.id})
    assert any("never asked" in v["what"] for v in found[4]["violations"]), found[4]


async def test_a_backup_altered_after_it_was_written(finished: Finished, tmp_path: Path) -> None:
    job = finished.backup
    assert job.result is not None
    altered = tmp_path / "altered.zip"
    with zipfile.ZipFile(job.result["archivePath"]) as source, zipfile.ZipFile(altered, "w") as out:
        for member in source.infolist():
            data = source.read(member)
            if member.filename == "tables/pages.copy":
                data = data.replace(b"lesson 1\t", b"lesson X\t", 1)
            out.writestr(member, data)
    damage = (
        "UPDATE jobs SET result = jsonb_set(result, '{archivePath}', to_jsonb(%(path)s::text)) "
        "WHERE id = %(id)s"
    )
    params = {"id": job.id, "path": str(altered)}
    found = await verdicts(finished, tmp_path, damage, params, restores=True)
    said = only(found, 5, job)
    assert "table pages: the archive's member disagrees with its manifest" in said, said
    assert "hubjobs restore exited" in said, said


async def test_a_webhook_left_pending(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = (
        "UPDATE jobs SET notify_url = 'http://127.0.0.1:9/hook', notify_state = 'pending' "
        "WHERE id = %(id)s"
    )
    said = only(await verdicts(finished, tmp_path, damage, {"id": job.id}), 6, job)
    assert "webhook pending after the settle bound" in said, said


async def test_one_key_answered_with_two_jobs(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    other = str(finished.backup.id)
    twice = {
        "type": "start",
        "workspace_id": str(job.workspace_id),
        "kind": "course_tagging",
        "key": "checked-key",
        "conflict": False,
        "outcome": "accepted",
        "job_id": other,
    }
    said = only(await verdicts(finished, tmp_path, records=[twice]), 7, finished.backup)
    assert "key checked-key: answered jobs" in said, said


async def test_a_reused_key_answered_with_the_first_job(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    reused = {
        "type": "start",
        "workspace_id": str(job.workspace_id),
        "kind": "course_tagging",
        "key": "checked-key",
        "repeat_of": 1,
        "payload": job.payload | {"tag": "checked-other"},
        "conflict": True,
        "outcome": "accepted",
        "http_status": 202,
        "job_id": str(job.id),
    }
    said = only(await verdicts(finished, tmp_path, records=[reused]), 7, job)
    assert "sent again with another payload" in said, said


async def test_a_reused_key_refused_naming_another_job(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    other = str(finished.backup.id)
    reused = {
        "type": "start",
        "workspace_id": str(job.workspace_id),
        "kind": "course_tagging",
        "key": "checked-key",
        "repeat_of": 1,
        "payload": job.payload | {"tag": "checked-other"},
        "conflict": True,
        "outcome": "refused",
        "http_status": 409,
        "code": "idempotency_key_reused",
        "named_job_id": other,
    }
    said = only(await verdicts(finished, tmp_path, records=[reused]), 7, finished.backup)
    assert "refused 409 idempotency_key_reused naming" in said, said


async def test_the_same_request_refused_as_another(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    refused = {
        "type": "start",
        "workspace_id": str(job.workspace_id),
        "kind": "course_tagging",
        "key": "checked-key",
        "repeat_of": 1,
        "payload": job.payload,
        "conflict": False,
        "outcome": "refused",
        "http_status": 409,
        "code": "idempotency_key_reused",
        "named_job_id": str(job.id),
    }
    said = only(await verdicts(finished, tmp_path, records=[refused]), 7, job)
    assert "idempotency_key_reused: the same request" in said, said


async def test_a_job_marked_stuck(finished: Finished, tmp_path: Path) -> None:
    job = finished.tagged
    damage = (
        "UPDATE jobs SET stuck_since = now(), stuck_reason = 'NonDeterminism' WHERE id = %(id)s"
    )
    said = only(await verdicts(finished, tmp_path, damage, {"id": job.id}), 8, job)
    assert "marked stuck: NonDeterminism" in said, said


async def test_a_worker_left_stopped(finished: Finished, tmp_path: Path) -> None:
    sleeper = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        hung = {
            "type": "worker",
            "name": "worker-x",
            "pid": sleeper.pid,
            "identity": f"{sleeper.pid}@{os.uname().nodename}",
        }
        said = only(await verdicts(finished, tmp_path, records=[hung]), 8, None)
    finally:
        sleeper.kill()
        await sleeper.wait()
    assert f"worker-x (pid {sleeper.pid}): stopped" in said, said


async def test_the_checker_runs_as_a_process_of_its_own(finished: Finished, tmp_path: Path) -> None:
    """``python -m tests.chaos.checker`` writes its verdicts and exits 0 on a sound hub."""
    home = tmp_path / "home"
    home.mkdir()
    record = {"database_url": finished.database_url, "temporal_address": finished.temporal_address}
    (home / "stack.json").write_text(json.dumps(record))
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("\n".join(json.dumps(r) for r in finished.records) + "\n")
    out = tmp_path / "verdicts.json"
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "tests.chaos.checker",
            "--home",
            str(home),
            "--ledger",
            str(ledger),
            "--faults-ended-at",
            str(time.time() - 3600),
            "--out",
            str(out),
            "--task-queue",
            finished.task_queue,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr + (out.read_text() if out.exists() else "")
    assert json.loads(out.read_text())["violations"] == 0
    shutil.rmtree(home)
