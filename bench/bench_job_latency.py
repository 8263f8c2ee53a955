"""Per-job cost: a one-page tagging job from the start call until its final row is
durable, on an idle server with a pause between runs, against the floor that does the
same writes, on the same Temporal server. Runs alternate.

* hubjobs: ``WorkspaceJobs.start("course_tagging", …)`` (the start call: its row and the
  workflow's start; the snapshot is the first attempt's) run by a ``hubjobs worker`` process;
* the floor: ``BareDbJob`` (bench/bare_workflows.py, importing only temporalio, in the
  default sandbox) whose one activity does a one-page job's writes in one transaction
  -- read the page's version, the ETag-guarded update, its revision, the item's
  outcome, the final row (bench/onepage.py) -- its worker a process of its own
  (bench/bare_worker.py), its starter inserting the row and item first in one
  transaction, as hubjobs' start does, each contender on a database of its own;
* for information, the bare workflow: one trivial activity, no database, timed to its
  result.

The end of hubjobs' job and of the floor's is the same event: a trigger on ``jobs``
NOTIFYs when the row turns final, delivered at its commit (bench/pg.py); nobody polls.

    python bench/bench_job_latency.py [--runs 30] [--pause 0.3] [--warmup 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import onepage
import psycopg
from common import Floor, Stack, WorkspaceJobs, seed_course, seed_onepage
from harness import (
    Figure,
    Outcome,
    Target,
    describe_phases,
    median_phases,
    percentile,
    ratio_of,
    rotate,
    say,
)
from pg import FinalWatcher
from standalone import main_for

NAME = "job_latency"
TITLE = "Per-job cost, 1-page job"
CONTENDERS = ("hubjobs", "floor", "bare")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=30, help="measured runs of each (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured runs first (default 3)")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between runs")


async def hubjobs_once(
    jobs: WorkspaceJobs, watcher: FinalWatcher, root: uuid.UUID
) -> tuple[float, dict[str, float]]:
    """Seconds from the start call to the final row's commit seen, and where they went."""
    t0, started = time.time(), time.perf_counter()
    job = await jobs.start("course_tagging", {"root_page_id": root, "tag": "latency"})
    returned = time.perf_counter()
    seen = (await watcher.wait([str(job.id)], timeout=120))[str(job.id)]
    job = await jobs.get(job.id)
    if job.status != "succeeded" or job.started_at is None or job.finished_at is None:
        raise RuntimeError(f"the job ended {job.status}")
    s, f = job.started_at.timestamp(), job.finished_at.timestamp()
    where = {
        "start call": returned - started,
        "start → running": s - (t0 + returned - started),
        "running → final": f - s,
        "final → seen": (t0 + seen - started) - f,
    }
    return seen - started, where


async def floor_once(
    temporal: Any,
    floor: Floor,
    conn: psycopg.AsyncConnection[Any],
    watcher: FinalWatcher,
    page: onepage.Page,
) -> tuple[float, float]:
    """Seconds from the start (row, then workflow) to the final row's commit seen, and
    the start's share."""
    started = time.perf_counter()
    job_id = await onepage.start_row(conn, page, "floor")
    await temporal.start_workflow(
        "BareDbJob", job_id, id=f"floor-{job_id}", task_queue=floor.task_queue
    )
    returned = time.perf_counter()
    seen = (await watcher.wait([job_id], timeout=120))[job_id]
    return seen - started, returned - started


async def bare_once(temporal: Any, task_queue: str) -> float:
    started = time.perf_counter()
    handle = await temporal.start_workflow(
        "BareJob", "x", id=f"bare-{uuid.uuid4()}", task_queue=task_queue
    )
    await handle.result()
    return time.perf_counter() - started


def as_page(course: Any) -> onepage.Page:
    return onepage.Page(str(course.workspace_id), str(course.actor_id), str(course.root_page_id))


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await stack.hub("jobs")
    floor = await stack.floor()
    bare_queue = await stack.bare_worker()
    temporal = await stack.temporal_client()
    total = args.warmup + args.runs
    async with hub.engine() as engine:
        courses = [await seed_course(engine, 1) for _ in range(total)]
    floor_pages = [as_page(c) for c in await seed_onepage(floor.url, total)]
    ms: dict[str, list[float]] = {c: [] for c in CONTENDERS}
    where: list[dict[str, float]] = []
    floor_start: list[float] = []
    async with (
        hub.client() as client,
        FinalWatcher(hub.url) as hub_watch,
        FinalWatcher(floor.url) as floor_watch,
        await psycopg.AsyncConnection.connect(floor.url) as conn,
    ):
        for n, course in enumerate(courses):
            measured = n >= args.warmup
            for who in rotate(CONTENDERS, n):
                if who == "hubjobs":
                    jobs = client.scope(course.workspace_id, course.actor_id)
                    seconds, spent = await hubjobs_once(jobs, hub_watch, course.root_page_id)
                    if measured:
                        where.append(spent)
                elif who == "floor":
                    seconds, start = await floor_once(
                        temporal, floor, conn, floor_watch, floor_pages[n]
                    )
                    if measured:
                        floor_start.append(start)
                else:
                    seconds = await bare_once(temporal, bare_queue)
                if measured:
                    ms[who].append(seconds * 1000)
                await asyncio.sleep(args.pause)
    p50 = {c: percentile(ms[c], 50) for c in CONTENDERS}
    p90 = {c: percentile(ms[c], 90) for c in CONTENDERS}
    say(
        f"per-job p50: hubjobs {p50['hubjobs']:.0f} ms, floor {p50['floor']:.0f} ms, "
        f"bare {p50['bare']:.0f} ms"
    )
    figures = [
        Figure(
            NAME,
            "1-page job start → final, p50",
            "ms",
            p50["hubjobs"],
            p50["floor"],
            "floor: 1 activity, same writes",
            ratio_of(p50["hubjobs"], p50["floor"]),
            Target("<=", 1.0),
        ),
        Figure(
            NAME,
            "1-page job start → final, p90",
            "ms",
            p90["hubjobs"],
            p90["floor"],
            "floor: 1 activity, same writes",
            ratio_of(p90["hubjobs"], p90["floor"]),
            None,
        ),
        Figure(
            NAME,
            "1-page job start → final, p50 (info)",
            "ms",
            p50["hubjobs"],
            p50["bare"],
            "bare workflow, no database",
            ratio_of(p50["hubjobs"], p50["bare"]),
            None,
        ),
    ]
    phases = median_phases(where)
    notes = [
        f"job_latency: {args.runs} runs each after {args.warmup} warm-up, alternating, "
        f"{args.pause:g} s apart; the end is the final row's commit (NOTIFY), for the "
        "bare workflow its result",
        "job_latency: hubjobs, median of each phase: " + describe_phases(phases),
        f"job_latency: floor, start (row + item, then the workflow's start) "
        f"{percentile(floor_start, 50) * 1000:.0f} ms of {p50['floor']:.0f} ms",
    ]
    series = {"ms": ms, "hubjobs_phases": where, "floor_start_s": floor_start}
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
