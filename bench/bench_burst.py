"""A burst: one-page tagging jobs started at once (200, then 2,000), jobs per second from
the first start call until every final row is committed, against the floor's
``BareDbJob`` (the same writes, bench/onepage.py) started at once, and, for
information, bare no-database workflows until all have returned. Rounds alternate.

hubjobs' jobs are courses of one workspace, started concurrently through one
``HubJobsClient``; the floor's are started concurrently from one Temporal client,
each after its row and item (its own transaction). The end of each job is its final
row's commit, seen by LISTEN (bench/pg.py).

Then starts alone (issue 22, item 6): ``--starts`` (2,000) one-page jobs started at once
from one ``HubJobsClient`` (its own 5 + 5 connections) on a task queue nobody polls,
until every start call returned: how many started (all must: the target), and starts/s
against the floor's same number of rows and workflow starts from one Temporal client.

    python bench/bench_burst.py [--jobs 200,2000] [--rounds 2] [--starts 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import onepage
import psycopg
from common import Floor, Hub, HubJobsClient, Stack, seed_courses, seed_onepage
from harness import Figure, Outcome, Target, median, ratio_of, rotate, say
from pg import FinalWatcher
from standalone import main_for

NAME = "burst"
TITLE = "200 one-page jobs at once"
CONTENDERS = ("hubjobs", "floor", "bare")
# Long polls for the bare workflows' results at once (bare_burst).
RESULT_WAITS = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[200, 2000],
        help="jobs started at once, each size a burst of its own (default 200,2000)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each (default 2)")
    parser.add_argument(
        "--starts", type=int, default=2000, help="starts at once, no worker (default 2000; 0: none)"
    )


async def hubjobs_burst(hub: Hub, count: int) -> tuple[float, float]:
    """Seconds until every start call returned, and until every row was final."""
    async with hub.engine() as engine:
        courses = await seed_courses(engine, count, 1)
    workspace, actor = courses[0].workspace_id, courses[0].actor_id
    async with hub.client() as client, FinalWatcher(hub.url) as watcher:
        jobs = client.scope(workspace, actor)
        started = time.perf_counter()
        made = await asyncio.gather(
            *(
                jobs.start("course_tagging", {"root_page_id": c.root_page_id, "tag": "burst"})
                for c in courses
            )
        )
        returned = time.perf_counter() - started
        seen = await watcher.wait([str(j.id) for j in made], timeout=1800)
        seconds = max(seen.values()) - started
    async with await psycopg.AsyncConnection.connect(hub.url) as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) FILTER (WHERE status <> 'succeeded') FROM jobs WHERE id = ANY(%s)",
                ([j.id for j in made],),
            )
        ).fetchone()
    if row is None or row[0]:
        raise RuntimeError(f"{row and row[0]} burst jobs did not succeed")
    return returned, seconds


async def floor_burst(temporal: Any, floor: Floor, count: int) -> tuple[float, float]:
    """The floor's burst: rows and starts concurrently (a pool of 10 connections for the
    rows, hubjobs' client has 5 + 5), until every final row is committed."""
    pages = [
        onepage.Page(str(c.workspace_id), str(c.actor_id), str(c.root_page_id))
        for c in await seed_onepage(floor.url, count)
    ]
    pool = onepage.open_pool(floor.url, 10)
    await pool.open(wait=True)
    try:
        async with FinalWatcher(floor.url) as watcher:

            async def one(page: onepage.Page) -> str:
                async with pool.connection() as conn:
                    job_id = await onepage.start_row(conn, page, "floor")
                await temporal.start_workflow(
                    "BareDbJob", job_id, id=f"floor-{job_id}", task_queue=floor.task_queue
                )
                return job_id

            started = time.perf_counter()
            ids = await asyncio.gather(*(one(p) for p in pages))
            returned = time.perf_counter() - started
            seen = await watcher.wait(ids, timeout=1800)
            return returned, max(seen.values()) - started
    finally:
        await pool.close()


async def hubjobs_starts(hub: Hub, count: int) -> tuple[int, float]:
    """``count`` starts at once from one client on a queue nobody polls: how many
    returned their job, and the seconds until every call returned."""
    async with hub.engine() as engine:
        courses = await seed_courses(engine, count, 1)
    quiet = hub.settings_object().model_copy(update={"task_queue": f"nobody-{uuid.uuid4().hex}"})
    async with await HubJobsClient.connect(quiet) as client:
        await client.temporal_client()
        jobs = client.scope(courses[0].workspace_id, courses[0].actor_id)
        started = time.perf_counter()
        answers = await asyncio.gather(
            *(
                jobs.start("course_tagging", {"root_page_id": c.root_page_id, "tag": "starts"})
                for c in courses
            ),
            return_exceptions=True,
        )
        seconds = time.perf_counter() - started
    failed = [a for a in answers if isinstance(a, BaseException)]
    if failed:
        say(f"burst starts: {len(failed)} of {count} failed, the first: {failed[0]!r}")
    return count - len(failed), seconds


async def floor_starts(temporal: Any, floor: Floor, count: int) -> tuple[int, float]:
    """The floor's rows and workflow starts, ``count`` at once, on a queue nobody polls:
    how many started, and the seconds until every one returned."""
    pages = [
        onepage.Page(str(c.workspace_id), str(c.actor_id), str(c.root_page_id))
        for c in await seed_onepage(floor.url, count)
    ]
    quiet = f"nobody-{uuid.uuid4().hex}"
    pool = onepage.open_pool(floor.url, 10)
    await pool.open(wait=True)
    try:

        async def one(page: onepage.Page) -> None:
            async with pool.connection() as conn:
                job_id = await onepage.start_row(conn, page, "floor")
            await temporal.start_workflow(
                "BareDbJob", job_id, id=f"floor-{job_id}", task_queue=quiet
            )

        started = time.perf_counter()
        answers = await asyncio.gather(*(one(p) for p in pages), return_exceptions=True)
        seconds = time.perf_counter() - started
    finally:
        await pool.close()
    failed = [a for a in answers if isinstance(a, BaseException)]
    if failed:
        say(f"burst starts: floor {len(failed)} of {count} failed, the first: {failed[0]!r}")
    return count - len(failed), seconds


async def bare_burst(temporal: Any, task_queue: str, count: int) -> tuple[float, float]:
    started = time.perf_counter()
    handles = await asyncio.gather(
        *(
            temporal.start_workflow(
                "BareJob", "x", id=f"bare-{uuid.uuid4()}", task_queue=task_queue
            )
            for _ in range(count)
        )
    )
    returned = time.perf_counter() - started
    # At most RESULT_WAITS long polls at once: 2,000 on one connection were cut off by
    # the server ("operation was canceled"). One finished by its turn answers at once.
    waits = asyncio.Semaphore(RESULT_WAITS)

    async def finished(handle: Any) -> None:
        async with waits:
            await handle.result()

    await asyncio.gather(*(finished(h) for h in handles))
    return returned, time.perf_counter() - started


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await stack.hub("jobs")
    floor = await stack.floor()
    bare_queue = await stack.bare_worker()
    temporal = await stack.temporal_client()
    rates: dict[int, dict[str, list[float]]] = {}
    starts: dict[int, dict[str, list[float]]] = {}
    for size in args.jobs:
        rates[size] = {c: [] for c in CONTENDERS}
        starts[size] = {c: [] for c in CONTENDERS}
        for n in range(args.rounds):
            for who in rotate(CONTENDERS, n):
                if who == "hubjobs":
                    returned, seconds = await hubjobs_burst(hub, size)
                elif who == "floor":
                    returned, seconds = await floor_burst(temporal, floor, size)
                else:
                    returned, seconds = await bare_burst(temporal, bare_queue, size)
                rates[size][who].append(size / seconds)
                starts[size][who].append(returned)
                say(f"burst of {size}, round {n + 1}: {who} {size / seconds:.1f} jobs/s")
                await asyncio.sleep(1)
    started_all: tuple[int, float] | None = None
    floor_all = (0, float("nan"))
    if args.starts:
        started_all = await hubjobs_starts(hub, args.starts)
        say(f"burst starts: hubjobs {started_all[0]}/{args.starts} in {started_all[1]:.1f} s")
        floor_all = await floor_starts(temporal, floor, args.starts)
        say(f"burst starts: floor {floor_all[0]}/{args.starts} in {floor_all[1]:.1f} s")
    figures: list[Figure] = []
    for size, by_contender in rates.items():
        med = {c: median(by_contender[c]) for c in CONTENDERS}
        figures += [
            Figure(
                NAME,
                f"{size} one-page jobs at once",
                "jobs/s",
                med["hubjobs"],
                med["floor"],
                "floor workflows, same writes",
                ratio_of(med["hubjobs"], med["floor"]),
                Target(">=", 1.0),
            ),
            Figure(
                NAME,
                f"{size} one-page jobs at once (info)",
                "jobs/s",
                med["hubjobs"],
                med["bare"],
                "bare workflows, no database",
                ratio_of(med["hubjobs"], med["bare"]),
                None,
            ),
        ]
    if started_all is not None:
        done, seconds = started_all
        figures += [
            Figure(
                NAME,
                f"{args.starts} starts at once from one client: started",
                "",
                done,
                args.starts,
                "called",
                done / args.starts,
                Target(">=", 1.0),
            ),
            Figure(
                NAME,
                f"{args.starts} starts at once from one client (info)",
                "starts/s",
                done / seconds,
                floor_all[0] / floor_all[1],
                f"floor rows + workflow starts ({floor_all[0]} of {args.starts} started)",
                ratio_of(done / seconds, floor_all[0] / floor_all[1]),
                None,
            ),
        ]
    notes = [
        f"burst: medians of {args.rounds} rounds; the floor's and the bare worker have the "
        "SDK's defaults; every start call had returned after "
        + "; ".join(
            f"{size} jobs: " + ", ".join(f"{median(by[c]):.1f} s ({c})" for c in CONTENDERS)
            for size, by in starts.items()
        )
    ]
    return Outcome(figures, {"rates": rates, "starts_returned_s": starts}, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
