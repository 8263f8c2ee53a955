"""Tagging a course, created → finished: pages per second against course size.

Three contenders, each on an identical course of its own (same demo tree, same
database, fsync on), in rotating order round after round:

* hubjobs: ``WorkspaceJobs.start("course_tagging", …)`` (the start call; the snapshot is
  its first attempt's) until the job's read-model row is final, run by a ``hubjobs
  worker`` process with its default batch and chunk sizes;
* the floor: the least SQL doing the same durable work, timed from its first
  statement: the snapshot as the product's first attempt takes it (the job's row, then one
  recursive INSERT … SELECT walking the course by parent and inserting one job_items
  row per page with whether it had the tag, and ``ANALYZE job_items`` from 10,000
  items, as the product does), committed; then in one transaction one UPDATE adding
  the tag to every page with its version bump, one INSERT … SELECT writing one
  revision per changed page, one UPDATE of the job's items and one of the job's row;
* the seed loop: one transaction per page as seed 000 does, a round trip per
  statement (check the job and actor, lock the item, read the page, ETag-guarded
  update, revision, the item's outcome, the job's counters). It is slow, so by
  default it tags for ``--seed-seconds`` and its rate is taken from the pages it did.

For hubjobs it also reports the start call's time and its share of the whole (issue
22: a start returns within 1 s whatever the course's size), and the worker's peak RSS
during each job (sampled every 0.2 s; memory must stay flat as courses grow). With
both 100,000 and 1,000,000 pages measured, the 1M course's pages/s against the 100k's
(cost must grow linearly: ≥0.9x).

    python bench/bench_tagging.py [--sizes 1000,10000,100000] [--rounds 3] [--seed-seconds 5]
    python bench/bench_tagging.py --pages 100000 --rounds 3 --seed-seconds 0   # seed loop in full
    python bench/bench_tagging.py --sizes 1000,10000,100000,1000000 --rounds 1  # the plot to 1M
    python bench/bench_tagging.py --pages 1000000 --rounds 1 --only hubjobs,floor
    python bench/bench_tagging.py --pages 100000 --only hubjobs,floor --settings tagging_lanes=3
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import psycopg
from common import FINAL, DemoCourse, Hub, Stack, WorkspaceJobs, seed_course, snapshot_job
from harness import (
    Figure,
    Outcome,
    Target,
    describe_phases,
    median,
    median_phases,
    memory_mb,
    phases,
    ratio_of,
    rotate,
    say,
)
from standalone import main_for

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
    parser.add_argument("--rounds", type=int, default=3, help="rounds per size (default 3)")
    parser.add_argument(
        "--only",
        type=lambda text: tuple(text.split(",")),
        default=CONTENDERS,
        help=f"contenders, comma-separated (default {','.join(CONTENDERS)})",
    )
    parser.add_argument(
        "--settings",
        default="",
        help="HUBJOBS_* settings of the worker, name=value comma-separated (lower case)",
    )
    parser.add_argument(
        "--seed-seconds",
        type=float,
        default=5.0,
        help="the seed loop stops after this long and its rate is what it did (0: whole course)",
    )


async def peak_rss(pid: int, stop: asyncio.Event, every: float = 0.2) -> float:
    """The highest VmRSS of ``pid`` (MB) until ``stop`` is set."""
    peak = 0.0
    while not stop.is_set():
        peak = max(peak, memory_mb(pid).get("VmRSS", 0.0))
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
    return max(peak, memory_mb(pid).get("VmRSS", 0.0))


async def hubjobs_once(
    jobs: WorkspaceJobs, root: uuid.UUID, pages: int, worker_pid: int
) -> tuple[float, dict[str, float]]:
    """Seconds from the start call to a final row seen, where they went, and the
    worker's peak RSS meanwhile (``peak RSS MB``)."""
    poll = 0.005 if pages <= 1_000 else 0.02 if pages <= 10_000 else 0.1
    stop = asyncio.Event()
    sampler = asyncio.create_task(peak_rss(worker_pid, stop))
    t0, started = time.time(), time.perf_counter()
    job = await jobs.start("course_tagging", {"root_page_id": root, "tag": TAG})
    returned = time.time()
    while job.status not in FINAL:
        await asyncio.sleep(poll)
        job = await jobs.get(job.id)
    seconds, seen = time.perf_counter() - started, time.time()
    stop.set()
    rss = await sampler
    if job.status != "succeeded" or job.succeeded != pages:
        raise RuntimeError(f"hubjobs tagged {job.succeeded}/{pages} ({job.status})")
    return seconds, {**phases(t0, returned, seen, job), "peak RSS MB": rss}


# The snapshot as the product's first attempt takes it (hubjobs.kinds.course_tagging: the
# course walked by parent, one item per page in (depth, title, id) order, whether it had
# the tag under tag_key()), preceded by the job's row.
FLOOR_SNAPSHOT = (
    # As the product's snapshot does: stale statistics right after a bulk import must
    # not turn the walk into a scan of pages per parent; the ordering sort in memory.
    "SELECT set_config('enable_seqscan', 'off', true), set_config('work_mem', '64MB', true)",
    """
    INSERT INTO jobs (id, workflow_id, kind, status, workspace_id, actor_id, correlation_id,
                      payload)
    VALUES (%(job)s, 'floor-' || %(job)s, 'course_tagging', 'running', %(ws)s, %(actor)s,
            'bench', jsonb_build_object('root_page_id', %(root)s::text, 'tag', %(tag)s::text))
    """,
    """
    INSERT INTO job_items (job_id, ordinal, ref, label, done_at_snapshot)
    WITH RECURSIVE course AS (
        SELECT id, 0 AS depth, title, tags FROM pages WHERE id = %(root)s
        UNION ALL
        SELECT p.id, c.depth + 1, p.title, p.tags FROM pages p JOIN course c ON p.parent_id = c.id
         WHERE p.workspace_id IS NOT DISTINCT FROM %(ws)s::uuid AND NOT p.trashed
    )
    SELECT %(job)s, row_number() OVER (ORDER BY c.depth, c.title, c.id)::int, c.id, c.title,
           EXISTS (SELECT 1 FROM unnest(c.tags) t WHERE tag_key(t) = tag_key(%(tag)s))
      FROM course c
    """,
)
ANALYZE_FROM = 10_000

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


def floor_once(url: str, course: DemoCourse, pages: int) -> tuple[float, dict[str, float]]:
    """The floor's seconds, snapshot included, and the snapshot's share."""
    params = {
        "tag": TAG,
        "job": uuid.uuid4(),
        "actor": course.actor_id,
        "ws": course.workspace_id,
        "root": course.root_page_id,
        "summary": f"Course tag {TAG} added",
    }
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        with conn.transaction():
            snapped = [conn.execute(sql, params).rowcount for sql in FLOOR_SNAPSHOT]
        if pages >= ANALYZE_FROM:
            conn.execute("ANALYZE job_items")
            conn.commit()
        snapshot = time.perf_counter() - started
        with conn.transaction():
            counts = [conn.execute(sql, params).rowcount for sql in FLOOR]
        seconds = time.perf_counter() - started
    if snapped[2] != pages or counts[:3] != [pages, pages, pages]:
        raise RuntimeError(f"the floor wrote {snapped} and {counts}, not {pages} of each")
    return seconds, {"snapshot": snapshot, "writes": seconds - snapshot}


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
    """Pages per second of one contender on a fresh course of ``pages`` pages (and where
    its time went). Each starts from a checkpoint: none pays for the dirty buffers of
    the one before."""
    course = await seed_course(engine, pages)
    if who == "hubjobs":
        assert hub.worker is not None
        hub.stack.checkpoint()
        seconds, where = await hubjobs_once(
            jobs_of(course), course.root_page_id, pages, hub.worker.pid
        )
        return pages / seconds, where
    if who == "floor":
        hub.stack.checkpoint()
        seconds, where = await asyncio.to_thread(floor_once, hub.url, course, pages)
        return pages / seconds, where
    job = await snapshot_job(engine, course, TAG)
    hub.stack.checkpoint()
    done, seconds = await asyncio.to_thread(
        seed_loop_once, hub.url, job, course.actor_id, pages, cap
    )
    return done / seconds, {}


HEADLINE = 100_000  # issue 22's target size (≥0.9x the floor, median of 3 rounds)


def speed_figures(sizes: list[int], med: dict[str, dict[int, float]]) -> list[Figure]:
    """hubjobs' pages/s against the floor and the seed loop, size by size; the targets
    at the headline size."""
    headline = HEADLINE if HEADLINE in sizes else max(sizes)
    ours = med.get("hubjobs")
    figures: list[Figure] = []
    for pages in sizes:
        for other, label, target in (
            ("floor", "floor SQL, snapshot timed", Target(">=", 0.9)),
            ("seed loop", "seed loop", Target(">=", 10)),
        ):
            if ours and other in med:
                figures.append(
                    Figure(
                        NAME,
                        f"tagging {pages:,} pages vs {other}",
                        "pages/s",
                        ours[pages],
                        med[other][pages],
                        label,
                        ratio_of(ours[pages], med[other][pages]),
                        target if pages == headline else None,
                    )
                )
    return figures


def hubjobs_figures(
    sizes: list[int], ours: dict[int, float], phases_of: dict[int, dict[str, float]]
) -> list[Figure]:
    """The start call and its share, the worker's peak RSS, and 1M against 100k."""
    figures: list[Figure] = []
    for pages in sizes:
        found = phases_of[pages]
        total = sum(v for k, v in found.items() if "RSS" not in k)
        figures.append(
            Figure(
                NAME,
                f"tagging {pages:,} pages: start call (share of the whole)",
                "s",
                found.get("start call"),
                None,
                "",
                None,
                Target("<=", 1.0, on="value", unit="s"),
                note=f"{found.get('start call', 0) / total:.0%} of {total:.2f} s" if total else "",
            )
        )
    smallest = min(sizes)
    base_rss = phases_of[smallest].get("peak RSS MB")
    for pages in sizes:
        rss = phases_of[pages].get("peak RSS MB")
        figures.append(
            Figure(
                NAME,
                f"tagging {pages:,} pages: worker peak RSS",
                "MB",
                rss,
                base_rss,
                f"at {smallest:,} pages",
                ratio_of(rss, base_rss),
                Target("<=", 1.2) if pages != smallest else None,
            )
        )
    if HEADLINE in sizes and 1_000_000 in sizes:
        figures.append(
            Figure(
                NAME,
                "tagging 1,000,000 pages: pages/s against 100,000 pages'",
                "pages/s",
                ours[1_000_000],
                ours[HEADLINE],
                "hubjobs at 100,000",
                ratio_of(ours[1_000_000], ours[HEADLINE]),
                Target(">=", 0.9),
            )
        )
    return figures


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    sizes: list[int] = [args.pages] if args.pages else list(args.sizes)
    chosen = [c for c in CONTENDERS if c in args.only]
    settings: dict[str, str] = dict(
        item.split("=", 1) for item in args.settings.split(",") if item.strip()
    )
    hub = await stack.hub(
        "jobs" + "".join(f"_{k[:12]}{v}" for k, v in settings.items()), worker=True, **settings
    )
    assert hub.worker is not None
    rates: dict[str, dict[int, list[float]]] = {c: {s: [] for s in sizes} for c in chosen}
    where: dict[str, dict[int, list[dict[str, float]]]] = {
        c: {s: [] for s in sizes} for c in chosen
    }
    async with hub.engine() as engine, hub.client() as client:

        def jobs_of(course: Any) -> WorkspaceJobs:
            return client.scope(course.workspace_id, course.actor_id)

        # A first job warms the worker (its sandbox's imports, the first activity): run
        # alone, the first size's first round would pay for it.
        warm = await seed_course(engine, 1)
        await hubjobs_once(jobs_of(warm), warm.root_page_id, 1, hub.worker.pid)
        for pages in sizes:
            for n in range(args.rounds):
                for who in rotate(chosen, n):
                    rate, spent = await one_round(
                        hub, engine, jobs_of, pages, who, args.seed_seconds
                    )
                    rates[who][pages].append(rate)
                    if spent:
                        where[who][pages].append(spent)
                    say(f"tagging {pages:,} pages, round {n + 1}: {who} {rate:,.0f} pages/s")
    med = {c: {s: median(rates[c][s]) for s in sizes} for c in chosen}
    ours = med.get("hubjobs", {})
    phases_of = {s: median_phases(where["hubjobs"][s]) for s in sizes} if ours else {}
    figures = speed_figures(sizes, med) + (hubjobs_figures(sizes, ours, phases_of) if ours else [])
    notes = [
        f"tagging: medians of {args.rounds} rounds, contenders alternating; hubjobs from "
        "the start call to a final read-model row (the snapshot is the first attempt's); "
        "the floor from its snapshot's first statement to its last commit",
        *(
            f"tagging: hubjobs at {pages:,} pages: "
            + describe_phases({k: v for k, v in phases_of[pages].items() if "RSS" not in k}, "s")
            + f"; worker peak RSS {phases_of[pages].get('peak RSS MB', 0):.0f} MB"
            for pages in sizes
            if ours
        ),
        *(
            f"tagging: floor at {pages:,} pages: "
            + describe_phases(median_phases(where["floor"][pages]), "s")
            for pages in sizes
            if "floor" in where
        ),
    ]
    if args.seed_seconds and "seed loop" in chosen:
        notes.append(
            f"tagging: the seed loop's rate is sampled over its first {args.seed_seconds:g} s "
            "per course (--seed-seconds 0 runs it in full)"
        )
    series = {
        "sizes": sizes,
        "rates": rates,
        "median": med,
        "phases": where,
        "hubjobs_median_phases": {str(k): v for k, v in phases_of.items()},
    }
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
