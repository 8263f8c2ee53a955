"""Backup memory: the peak RSS of hubjobs' streaming backup against a naive baseline that
loads each table whole into memory, on the same database of (by default) 500 MB.

An embedded PostgreSQL in a temporary folder is filled with pages whose markdown is
random hex (so TOAST cannot shrink it: the database really is that big), one revision
per page, and some attachment files. Then each backup runs in a child process of its
own, which reports ``ru_maxrss`` at its end:

* hubjobs: the real ``create_backup`` activity (``BackupActivities``, which streams
  COPY output and files through the zip writer) run in an activity context
  (``temporalio.testing.ActivityEnvironment``), with a ``jobs`` row for its progress;
* baseline: ``SELECT * FROM t`` fetched whole, serialized to JSON, written to a zip,
  the way a simple implementation would.

    .venv/bin/python bench/bench_backup.py [--megabytes 500]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import psycopg

from hubjobs.archive.format import HUB_TABLES
from hubjobs.db.migrate import upgrade
from hubjobs.devstack.embedded import EmbeddedPostgres

LIMIT_MB = 200.0
# Markdown per page: this many random md5 digests (32 hex characters each).
DIGESTS_PER_PAGE = 1000
ATTACHMENTS = 16
ATTACHMENT_BYTES = 4 << 20


def peak_rss_mb() -> float:
    """This process's peak resident set so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- filling the database ------------------------------------------------------------


def fill(url: str, megabytes: int, attachments_dir: Path) -> tuple[int, int]:
    """Pages of random-hex markdown until the database holds ``megabytes``; returns the
    page count and the database size in bytes."""
    page_bytes = DIGESTS_PER_PAGE * 32
    pages = megabytes * 1_000_000 // page_bytes + 1
    workspace, actor = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO workspaces (id, name) VALUES (%s, 'Bench hub')", (workspace,))
        conn.execute(
            "INSERT INTO user_accounts (id, email, display_name) "
            "VALUES (%s, 'bench@hub.example', 'Bench Admin')",
            (actor,),
        )
        conn.execute(
            "INSERT INTO workspace_memberships (workspace_id, user_id, role) "
            "VALUES (%s, %s, 'administrator')",
            (workspace, actor),
        )
        batch = 2000
        for start in range(0, pages, batch):
            conn.execute(
                """
                INSERT INTO pages (id, workspace_id, title, markdown)
                SELECT gen_random_uuid(), %(ws)s, 'Page ' || g,
                       (SELECT string_agg(md5(g::text || ':' || i::text || random()::text), '')
                          FROM generate_series(1, %(digests)s::int) i)
                  FROM generate_series(%(first)s::int, %(last)s::int) g
                """,
                {
                    "ws": workspace,
                    "digests": DIGESTS_PER_PAGE,
                    "first": start + 1,
                    "last": min(start + batch, pages),
                },
            )
            print(f"\r  filling: {min(start + batch, pages)} / {pages} pages", end="", flush=True)
        print()
        conn.execute(
            "INSERT INTO page_revisions (page_id, version, actor_id, change_summary, title, tags) "
            "SELECT id, 1, %s, 'Page created', title, tags FROM pages",
            (actor,),
        )
        first_page = conn.execute("SELECT id FROM pages ORDER BY id LIMIT 1").fetchone()
        assert first_page is not None
        for i in range(ATTACHMENTS):
            attachment_id = uuid.uuid4()
            relative = f"{attachment_id.hex[:2]}/{attachment_id}"
            content = os.urandom(ATTACHMENT_BYTES)
            (attachments_dir / relative).parent.mkdir(parents=True, exist_ok=True)
            (attachments_dir / relative).write_bytes(content)
            conn.execute(
                "INSERT INTO attachments (id, page_id, file_name, content_type, storage_path, "
                "size_bytes, sha256) VALUES (%s, %s, %s, 'application/octet-stream', %s, %s, %s)",
                (
                    attachment_id,
                    first_page[0],
                    f"file-{i}.bin",
                    relative,
                    len(content),
                    hashlib.sha256(content).hexdigest(),
                ),
            )
        conn.execute("VACUUM ANALYZE")
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert size is not None
    return pages, int(size[0])


# --- the two backups, each run in a child process ------------------------------------------


async def hubjobs_backup(url: str, out: Path, attachments_dir: Path) -> dict[str, Any]:
    from sqlalchemy import text
    from temporalio.testing import ActivityEnvironment

    from activities.backup import BackupActivities
    from hubjobs.db.engine import async_engine
    from hubjobs.readmodel.store import insert_job
    from hubjobs.settings import Settings
    from hubjobs.temporal.messages import BackupRequest

    settings = Settings(
        home=out,
        database_url=url,
        backup_dir=out,
        attachments_dir=attachments_dir,
    )
    engine = async_engine(url, pool_size=2)
    stalls: list[float] = []

    async def watch_loop() -> None:
        """The longest the event loop went without running another task."""
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            stalls.append(time.perf_counter() - before - 0.005)

    try:
        async with engine.begin() as conn:
            row = (
                await conn.execute(
                    text("SELECT workspace_id, user_id FROM workspace_memberships LIMIT 1")
                )
            ).one()
            job_id = uuid.uuid4()
            await insert_job(
                conn,
                job_id=job_id,
                kind="backup",
                workspace_id=row.workspace_id,
                actor_id=row.user_id,
                correlation_id="bench",
                idempotency_key=None,
                payload={},
            )
        heartbeats: list[Any] = []
        env = ActivityEnvironment()
        env.on_heartbeat = lambda *details: heartbeats.append(details)
        before = peak_rss_mb()
        watcher = asyncio.create_task(watch_loop())
        started = time.perf_counter()
        activities = BackupActivities(engine, settings)
        run = await env.run(activities.create_backup, BackupRequest(job_id=job_id))
        seconds = time.perf_counter() - started
        watcher.cancel()
    finally:
        await engine.dispose()
    assert run.archive is not None
    return {
        "seconds": seconds,
        "rss_before_mb": before,
        "archive_bytes": run.archive.size_bytes,
        "heartbeats": len(heartbeats),
        "max_loop_stall_ms": max(stalls, default=0.0) * 1000,
    }


def naive_backup(url: str, out: Path, attachments_dir: Path) -> dict[str, Any]:
    """What a simple implementation does: each table whole, as JSON, into the zip."""
    before = peak_rss_mb()
    started = time.perf_counter()
    archive = out / "naive-backup.zip"
    with (
        psycopg.connect(url) as conn,
        zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf,
    ):
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            for table, key in HUB_TABLES:
                cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {key}")
                columns = [d.name for d in cursor.description or ()]
                rows = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
                zf.writestr(f"tables/{table}.json", json.dumps(rows, default=str))
                del rows
            files = conn.execute("SELECT id, storage_path FROM attachments").fetchall()
        for attachment_id, path in files:
            zf.writestr(f"attachments/{attachment_id}", (attachments_dir / path).read_bytes())
    return {
        "seconds": time.perf_counter() - started,
        "rss_before_mb": before,
        "archive_bytes": archive.stat().st_size,
    }


def child(which: str, url: str, out: Path, attachments_dir: Path) -> None:
    if which == "hubjobs":
        report = asyncio.run(hubjobs_backup(url, out, attachments_dir))
    else:
        report = naive_backup(url, out, attachments_dir)
    report["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(report))


def measure(which: str, url: str, out: Path, attachments_dir: Path) -> dict[str, Any]:
    out.mkdir(parents=True)
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            which,
            "--url",
            url,
            "--out",
            str(out),
            "--attachments",
            str(attachments_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the {which} child failed:\n{done.stdout}\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(out)
    return report


# --- main --------------------------------------------------------------------------------


def main(megabytes: int) -> int:
    home = Path(tempfile.mkdtemp(prefix="hubjobs-bench-backup-"))
    # Only the backups' reads are measured: the server may skip fsync while filling.
    postgres = EmbeddedPostgres(home / "pg", durable=False)
    try:
        url = postgres.ensure_database(postgres.start(0))
        upgrade(url)
        attachments_dir = home / "attachments"
        attachments_dir.mkdir()
        started = time.perf_counter()
        pages, size = fill(url, megabytes, attachments_dir)
        print(
            f"database: {size / 1e6:.0f} MB ({pages} pages of {DIGESTS_PER_PAGE * 32} bytes "
            f"of markdown, one revision each), filled in {time.perf_counter() - started:.0f} s; "
            f"plus {ATTACHMENTS} attachments of {ATTACHMENT_BYTES >> 20} MB"
        )
        if size < megabytes * 1_000_000:
            print(f"warning: the database is smaller than {megabytes} MB")
        ours = measure("hubjobs", url, home / "out-hubjobs", attachments_dir)
        naive = measure("baseline", url, home / "out-baseline", attachments_dir)
    finally:
        postgres.stop()
        shutil.rmtree(home, ignore_errors=True)

    print()
    print(f"{'':34}{'hubjobs':>12}{'baseline':>12}")
    print(f"{'peak RSS (MB)':34}{ours['peak_rss_mb']:12.0f}{naive['peak_rss_mb']:12.0f}")
    print(
        f"{'  of which before the backup (MB)':34}"
        f"{ours['rss_before_mb']:12.0f}{naive['rss_before_mb']:12.0f}"
    )
    print(f"{'wall time (s)':34}{ours['seconds']:12.1f}{naive['seconds']:12.1f}")
    print(
        f"{'archive size (MB)':34}"
        f"{ours['archive_bytes'] / 1e6:12.0f}{naive['archive_bytes'] / 1e6:12.0f}"
    )
    print(f"{'longest event-loop stall (ms)':34}{ours['max_loop_stall_ms']:12.0f}{'-':>12}")
    print()
    ratio = naive["peak_rss_mb"] / ours["peak_rss_mb"]
    print(f"peak RSS ratio, baseline / hubjobs: {ratio:.1f}x")
    under = ours["peak_rss_mb"] < LIMIT_MB
    verdict = "under" if under else "OVER"
    print(f"hubjobs peak RSS {ours['peak_rss_mb']:.0f} MB: {verdict} the {LIMIT_MB:.0f} MB bound")
    return 0 if under else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=int, default=500, help="database size to reach")
    parser.add_argument("--child", choices=["hubjobs", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--attachments", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.out, args.attachments)
    else:
        sys.exit(main(args.megabytes))
