"""Tagging throughput: hubjobs' batched, ETag-guarded writes against the per-page
baseline of seed 000 (one page, one transaction, one round trip per statement).

Both run the same CourseTagger code on the same embedded PostgreSQL (fsync on), on
identical courses, alternating rounds so that neither gets a warmer server. Prints
pages per second for each and the ratio.

    .venv/bin/python bench/bench_tagging.py [--pages 5000] [--rounds 3] [--batch 200]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from activities.course_tagging import CourseTagger
from hubjobs.db.engine import async_engine
from hubjobs.db.migrate import upgrade
from hubjobs.devstack.demo_data import seed_demo
from hubjobs.devstack.embedded import EmbeddedPostgres
from hubjobs.kinds import get_kind
from hubjobs.readmodel.lifecycle import create_job


async def tag_once(url: str, pages: int, batch: int) -> float:
    """Seconds to tag a fresh course of ``pages`` pages in batches of ``batch``."""
    engine = async_engine(url, pool_size=2)
    try:
        async with engine.begin() as conn:
            course = await seed_demo(conn, pages)
            job_id = uuid.uuid4()
            await create_job(
                conn,
                get_kind("course_tagging"),
                job_id=job_id,
                workspace_id=course.workspace_id,
                actor_id=course.actor_id,
                correlation_id="bench",
                payload={"root_page_id": str(course.root_page_id), "tag": "bench"},
            )
        tagger = CourseTagger(engine)
        job = await tagger.load_job(job_id)
        after, processed, started = 0, 0, time.perf_counter()
        while True:
            result = await tagger.process_batch(job, after, batch)
            if result.empty:
                break
            after, processed = result.last_ordinal, result.counters.processed
        elapsed = time.perf_counter() - started
        assert processed == pages, (processed, pages)
        return elapsed
    finally:
        await engine.dispose()


async def main(pages: int, rounds: int, batch: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="hubjobs-bench-"))
    postgres = EmbeddedPostgres(home, durable=True)
    try:
        url = postgres.ensure_database(postgres.start(0))
        upgrade(url)
        baseline: list[float] = []
        batched: list[float] = []
        for _ in range(rounds):
            baseline.append(await tag_once(url, pages, 1))
            batched.append(await tag_once(url, pages, batch))
        b, c = statistics.median(baseline), statistics.median(batched)
        print(f"pages per course: {pages}, rounds: {rounds} (median)")
        print(f"baseline, one page per transaction : {b:7.2f} s  {pages / b:9.0f} pages/s")
        print(f"hubjobs, {batch} pages per batch     : {c:7.2f} s  {pages / c:9.0f} pages/s")
        print(f"speed-up: {b / c:.1f}x")
    finally:
        postgres.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.pages, args.rounds, args.batch))
