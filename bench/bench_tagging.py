"""Tagging a course, created → finished: pages per second against course size, for
hubjobs beside two floors: the same-schema floor (the least SQL doing the same durable
work into ``job_items`` as the product has it; target ≥0.95× at 100,000 pages) and the
physical floor (the same work into a bare items table with its primary key alone: no
foreign key, no other index). The gap between the two floors is what the ``job_items``
design costs.

Four contenders, each on an identical course of its own (same demo tree, same database,
fsync on) and after fresh statistics (ANALYZE) of the tables it reads, in rotating order
round after round:

* hubjobs: ``WorkspaceJobs.start("course_tagging", …)`` (the start call; the snapshot is
  its first attempt's) until the job's read-model row is final, run by a ``hubjobs
  worker`` process with its default batch and chunk sizes;
* the floor: timed from its first statement: the snapshot as the product's first
  attempt takes it (the job's row, then one recursive INSERT … SELECT walking the course
  by parent and inserting one job_items row per page with whether it had the tag, and
  ``ANALYZE job_items`` from 10,000 items, as the product does), committed; then in one
  transaction one UPDATE adding the tag to every page with its version bump, one INSERT
  … SELECT writing one revision per changed page, one UPDATE of the job's items and one
  of the job's row (bench/tagging_floors.py);
* the physical floor (``physical``): the same statements, the items (job, ordinal,
  page, whether it had the tag, the outcome) in a table with only its primary key;
* the seed loop: one transaction per page as seed 000 does, a round trip per
  statement (check the job and actor, lock the item, read the page, ETag-guarded
  update, revision, the item's outcome, the job's counters). It is slow, so by
  default it tags for ``--seed-seconds`` and its rate is taken from the pages it did.

``--only`` may also name floor variants, ``floor:SPEC``: the floor into a copy of the
items table as it was designed, less or changed by SPEC (``nostate``, ``nofk``, ``ff90``,
…; bench/tagging_floors.py), each reported against the floor in the same rounds.

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
    python bench/bench_tagging.py --pages 100000 --rounds 3 --only hubjobs,floor,physical
    python bench/bench_tagging.py --pages 100000 --only floor,floor:nostate,floor:nofk,floor:ff90
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
    median,
    median_phases,
    memory_mb,
    phases,
    ratio_of,
    rotate,
    say,
)
from standalone import main_for
from tagging_floors import (
    CPU,
    CPU_OF,
    ITEMS_INSERT,
    ITEMS_UPDATE,
    TAG,
    WAL,
    analyze,
    create_tables,
    floor_once,
    items_table,
)

NAME = "tagging"
TITLE = "Tagging a course, created → finished"
# floor:SPEC contenders (tagging_floors.variant) may be named in --only besides these.
CONTENDERS = ("hubjobs", "floor", "physical", "seed loop")


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
    its time went). Each starts with fresh statistics for the tables it reads and from a
    checkpoint: none pays for the dirty buffers of the one before."""
    course = await seed_course(engine, pages)
    table = items_table(who)
    job = await snapshot_job(engine, course, TAG) if who == "seed loop" else None
    await asyncio.to_thread(analyze, hub.url, table)
    hub.stack.checkpoint()
    if who == "hubjobs":
        assert hub.worker is not None
        seconds, where = await hubjobs_once(
            jobs_of(course), course.root_page_id, pages, hub.worker.pid
        )
        return pages / seconds, where
    if job is None:  # the floor, the physical floor, a floor variant
        seconds, where = await asyncio.to_thread(floor_once, hub.url, course, pages, table)
        return pages / seconds, where
    done, seconds = await asyncio.to_thread(
        seed_loop_once, hub.url, job, course.actor_id, pages, cap
    )
    return done / seconds, {}


HEADLINE = 100_000  # issue 32's target size (≥0.95x the floor, median of 3 rounds)


def speed_figures(sizes: list[int], med: dict[str, dict[int, float]]) -> list[Figure]:
    """hubjobs' pages/s against the floor, the physical floor and the seed loop, size by
    size; the targets at the headline size."""
    headline = HEADLINE if HEADLINE in sizes else max(sizes)
    ours = med.get("hubjobs")
    figures: list[Figure] = []
    for pages in sizes:
        for other, label, target in (
            ("floor", "floor SQL, snapshot timed", Target(">=", 0.95)),
            ("physical", "physical floor: bare items table", None),
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


def against(found: dict[str, float], base: dict[str, float], key: str, unit: str) -> str:
    """``found[key]`` and, with a ``base``, its ratio to the base's."""
    digits = 0 if unit in ("pages/s", "MB") else 2
    text = f"{found[key]:,.{digits}f} {unit}"
    return text + (f" ({found[key] / base[key]:.2f}×)" if base and base[key] else "")


def floor_notes(
    sizes: list[int],
    med: dict[str, dict[int, float]],
    costs: dict[str, dict[int, dict[str, float]]],
) -> list[str]:
    """Each floor's rate, phases, statements on the items, backend CPU and WAL against
    the floor's (a variant's against the floor as the product has it), and what the
    items design costs: the floor against the physical floor."""
    notes: list[str] = []
    for pages in sizes:
        of = {who: {**costs[who][pages], "rate": med[who][pages]} for who in costs}
        floor = of.get("floor", {})
        for who, found in of.items():
            base = floor if who != "floor" else {}
            notes.append(
                f"tagging: {who} at {pages:,} pages: {against(found, base, 'rate', 'pages/s')}"
                f", snapshot {against(found, base, 'snapshot', 's')}, writes "
                f"{against(found, base, 'writes', 's')}; items insert "
                f"{against(found, base, ITEMS_INSERT, 's')}, CPU "
                f"{against(found, base, ITEMS_INSERT + CPU_OF, 's')}; items update "
                f"{against(found, base, ITEMS_UPDATE, 's')}, CPU "
                f"{against(found, base, ITEMS_UPDATE + CPU_OF, 's')}; backend CPU "
                f"{against(found, base, CPU, 's')}, WAL {against(found, base, WAL, 'MB')}"
            )
        physical = of.get("physical")
        if floor and physical:
            notes.append(
                f"tagging: what the job_items design costs at {pages:,} pages: the floor "
                f"does {floor['rate'] / physical['rate']:.2f}× the physical floor's rate, "
                f"with {floor[CPU] / physical[CPU]:.2f}× its backend CPU and "
                f"{floor[WAL] / physical[WAL]:.2f}× its WAL"
            )
    return notes


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
    chosen += [c for c in args.only if c.startswith("floor:")]
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
    await asyncio.to_thread(create_tables, hub.url, [items_table(c) for c in chosen])
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
        "the floors from their snapshot's first statement to their last commit; each "
        "contender after fresh statistics (ANALYZE) of the tables it reads",
        *(
            f"tagging: hubjobs at {pages:,} pages: "
            + describe_phases({k: v for k, v in phases_of[pages].items() if "RSS" not in k}, "s")
            + f"; worker peak RSS {phases_of[pages].get('peak RSS MB', 0):.0f} MB"
            for pages in sizes
            if ours
        ),
    ]
    floors = {c: where[c] for c in chosen if c not in ("hubjobs", "seed loop")}
    notes += floor_notes(
        sizes, med, {c: {s: median_phases(runs[s]) for s in sizes} for c, runs in floors.items()}
    )
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
