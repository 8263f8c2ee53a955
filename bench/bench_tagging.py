"""Tagging a course, created → finished: pages per second against course size.

Three contenders, each on an identical course of its own (same demo tree, same
database, fsync on), in rotating order round after round:

* hubjobs: ``WorkspaceJobs.start_course_tagging`` (the start call, its snapshot
  included) until the job's read-model row is final, run by a ``hubjobs worker``
  process with its default batch and chunk sizes;
* the floor: on a job recorded as a start records it (row and item snapshot, not
  timed), the least SQL doing the same durable work in one transaction: one UPDATE
  adding the tag to every page with its version bump, one INSERT … SELECT writing one
  revision per changed page, one UPDATE of the job's items (and one of the job's row);
* the seed loop: one transaction per page as seed 000 does, a round trip per
  statement (check the job and actor, lock the item, read the page, ETag-guarded
  update, revision, the item's outcome, the job's counters). It is slow, so by
  default it tags for ``--seed-seconds`` and its rate is taken from the pages it did.

    python bench/bench_tagging.py [--sizes 1000,10000,100000] [--rounds 2] [--seed-seconds 5]
    python bench/bench_tagging.py --pages 100000 --rounds 3 --seed-seconds 0   # seed loop in full
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import psycopg
from common import FINAL, Hub, Stack, WorkspaceJobs, seed_course, snapshot_job
from harness import (
    Figure,
    Outcome,
    Target,
    describe_phases,
    main_for,
    median,
    median_phases,
    phases,
    ratio_of,
    rotate,
    say,
)

NAME = "tagging"
TITLE = "Tagging a course, created → finished"
TAG = "bench-tag"
CONTENDERS = ("hubjobs", "floor", "seed loop")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1_000, 10_000, 100_000],
        help="course sizes in pages, comma-separated (default 1000,10000,100000)",
    )
    parser.add_argument("--pages", type=int, help="one size only (overrides --sizes)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per size (default 2)")
    parser.add_argument(
        "--seed-seconds",
        type=float,
        default=5.0,
        help="the seed loop stops after this long and its rate is what it did (0: whole course)",
    )


async def hubjobs_once(
    jobs: WorkspaceJobs, root: uuid.UUID, pages: int
) -> tuple[float, dict[str, float]]:
    """Seconds from the start call to a final row seen, and where they went."""
    poll = 0.005 if pages <= 1_000 else 0.02 if pages <= 10_000 else 0.1
    t0, started = time.time(), time.perf_counter()
    job = await jobs.start_course_tagging(root_page_id=root, tag=TAG)
    returned = time.time()
    while job.status not in FINAL:
        await asyncio.sleep(poll)
        job = await jobs.get(job.id)
    seconds, seen = time.perf_counter() - started, time.time()
    if job.status != "succeeded" or job.succeeded != pages:
        raise RuntimeError(f"hubjobs tagged {job.succeeded}/{pages} ({job.status})")
    return seconds, phases(t0, returned, seen, job)


FLOOR = (
    """
    UPDATE pages p SET tags = array_append(p.tags, %(tag)s), version = p.version + 1,
           updated_at = now()
      FROM job_items i
     WHERE i.job_id = %(job)s AND i.ref = p.id AND NOT i.done_at_snapshot
    """,
    """
    INSERT INTO page_revisions
           (page_id, version, actor_id, change_summary, correlation_id, title, tags)
    SELECT p.id, p.version, %(actor)s, %(summary)s, 'bench', p.title, p.tags
      FROM job_items i JOIN pages p ON p.id = i.ref
     WHERE i.job_id = %(job)s AND NOT i.done_at_snapshot
    """,
    """
    UPDATE job_items
       SET state = CASE WHEN done_at_snapshot THEN 'skipped' ELSE 'succeeded' END,
           processed_at = now()
     WHERE job_id = %(job)s
    """,
    """
    UPDATE jobs SET status = 'succeeded', processed = total, succeeded = total,
           finished_at = now(), updated_at = now()
     WHERE id = %(job)s
    """,
)


def floor_once(url: str, job: uuid.UUID, actor: uuid.UUID, pages: int) -> float:
    params = {"tag": TAG, "job": job, "actor": actor, "summary": f"Course tag {TAG} added"}
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        with conn.transaction():
            counts = [conn.execute(sql, params).rowcount for sql in FLOOR]
        seconds = time.perf_counter() - started
    if counts[:3] != [pages, pages, pages]:
        raise RuntimeError(f"the floor wrote {counts}, not {pages} of each")
    return seconds


def seed_loop_once(
    url: str, job: uuid.UUID, actor: uuid.UUID, pages: int, cap: float
) -> tuple[int, float]:
    """One transaction per page; returns the pages done and the seconds taken."""
    done = 0
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        for ordinal in range(1, pages + 1):
            with conn.transaction():
                check = conn.execute(
                    "SELECT j.cancel_requested_at IS NULL, EXISTS (SELECT 1 FROM "
                    "workspace_memberships m JOIN user_accounts u ON u.id = m.user_id "
                    "WHERE m.workspace_id = j.workspace_id AND m.user_id = j.actor_id "
                    "AND u.enabled AND m.role = 'administrator') FROM jobs j WHERE j.id = %s",
                    (job,),
                ).fetchone()
                assert check is not None and all(check)
                item = conn.execute(
                    "SELECT ref FROM job_items WHERE job_id = %s AND ordinal = %s "
                    "AND state = 'pending' FOR UPDATE",
                    (job, ordinal),
                ).fetchone()
                assert item is not None
                page = conn.execute(
                    "SELECT version, title FROM pages WHERE id = %s", (item[0],)
                ).fetchone()
                assert page is not None
                updated = conn.execute(
                    "UPDATE pages SET tags = array_append(tags, %s), version = version + 1, "
                    "updated_at = now() WHERE id = %s AND version = %s RETURNING tags",
                    (TAG, item[0], page[0]),
                ).fetchone()
                assert updated is not None
                conn.execute(
                    "INSERT INTO page_revisions (page_id, version, actor_id, change_summary, "
                    "correlation_id, title, tags) VALUES (%s, %s, %s, %s, 'bench', %s, %s)",
                    (item[0], page[0] + 1, actor, f"Course tag {TAG} added", page[1], updated[0]),
                )
                conn.execute(
                    "UPDATE job_items SET state = 'succeeded', processed_at = now() "
                    "WHERE job_id = %s AND ordinal = %s",
                    (job, ordinal),
                )
                conn.execute(
                    "UPDATE jobs SET processed = processed + 1, succeeded = succeeded + 1, "
                    "updated_at = now() WHERE id = %s",
                    (job,),
                )
            done += 1
            if cap and time.perf_counter() - started >= cap:
                break
        return done, time.perf_counter() - started


async def one_round(
    hub: Hub, engine: Any, jobs_of: Any, pages: int, who: str, cap: float
) -> tuple[float, dict[str, float]]:
    """Pages per second of one contender on a fresh course of ``pages`` pages (and, for
    hubjobs, where its time went). Each starts from a checkpoint: none pays for the
    dirty buffers of the one before."""
    course = await seed_course(engine, pages)
    job = None if who == "hubjobs" else await snapshot_job(engine, course, TAG)
    hub.stack.checkpoint()
    if job is None:
        seconds, where = await hubjobs_once(jobs_of(course), course.root_page_id, pages)
        return pages / seconds, where
    if who == "floor":
        seconds = await asyncio.to_thread(floor_once, hub.url, job, course.actor_id, pages)
        return pages / seconds, {}
    done, seconds = await asyncio.to_thread(
        seed_loop_once, hub.url, job, course.actor_id, pages, cap
    )
    return done / seconds, {}


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    sizes: list[int] = [args.pages] if args.pages else list(args.sizes)
    hub = await stack.hub("jobs")
    rates: dict[str, dict[int, list[float]]] = {c: {s: [] for s in sizes} for c in CONTENDERS}
    where: dict[int, list[dict[str, float]]] = {s: [] for s in sizes}
    async with hub.engine() as engine, hub.client() as client:

        def jobs_of(course: Any) -> WorkspaceJobs:
            return client.scope(course.workspace_id, course.actor_id)

        for pages in sizes:
            for n in range(args.rounds):
                for who in rotate(CONTENDERS, n):
                    rate, spent = await one_round(
                        hub, engine, jobs_of, pages, who, args.seed_seconds
                    )
                    rates[who][pages].append(rate)
                    if spent:
                        where[pages].append(spent)
                    say(f"tagging {pages:,} pages, round {n + 1}: {who} {rate:,.0f} pages/s")
    med = {c: {s: median(rates[c][s]) for s in sizes} for c in CONTENDERS}
    headline = max(sizes)
    figures: list[Figure] = []
    for pages in sizes:
        ours = med["hubjobs"][pages]
        main = pages == headline
        figures.append(
            Figure(
                NAME,
                f"tagging {pages:,} pages vs floor",
                "pages/s",
                ours,
                med["floor"][pages],
                "floor SQL",
                ratio_of(ours, med["floor"][pages]),
                Target(">=", 0.8) if main else None,
            )
        )
        figures.append(
            Figure(
                NAME,
                f"tagging {pages:,} pages vs seed loop",
                "pages/s",
                ours,
                med["seed loop"][pages],
                "seed loop",
                ratio_of(ours, med["seed loop"][pages]),
                Target(">=", 10) if main else None,
            )
        )
    notes = [
        f"tagging: medians of {args.rounds} rounds; hubjobs from the start call (snapshot "
        "included) to a final read-model row; the floor's snapshot is not timed",
        *(
            f"tagging: hubjobs at {pages:,} pages: "
            + describe_phases(median_phases(where[pages]), "s")
            for pages in sizes
        ),
    ]
    if args.seed_seconds:
        notes.append(
            f"tagging: the seed loop's rate is sampled over its first {args.seed_seconds:g} s "
            "per course (--seed-seconds 0 runs it in full)"
        )
    series = {"sizes": sizes, "rates": rates, "median": med, "hubjobs_phases": where}
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
