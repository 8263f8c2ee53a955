"""Per-job cost: a one-page tagging job from the start call until its read-model row is
final, on an idle server with a pause between runs, against a bare workflow with one
trivial activity (bench/bare_worker.py: a worker process of its own importing only
temporalio) from start to result, on the same Temporal server. Runs alternate.

hubjobs' end is seen by polling ``WorkspaceJobs.get`` every ``--poll`` seconds (each
poll is a round trip too), the bare workflow's by ``handle.result()``.

    python bench/bench_job_latency.py [--runs 30] [--pause 0.3] [--warmup 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from common import FINAL, Stack, WorkspaceJobs, seed_course
from harness import (
    Figure,
    Outcome,
    Target,
    describe_phases,
    main_for,
    median_phases,
    percentile,
    phases,
    ratio_of,
    rotate,
    say,
)

NAME = "job_latency"
TITLE = "Per-job cost, 1-page job"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=30, help="measured runs of each (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured runs first (default 3)")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between runs")
    parser.add_argument("--poll", type=float, default=0.002, help="read-model poll interval (s)")


async def hubjobs_once(
    jobs: WorkspaceJobs, root: uuid.UUID, poll: float
) -> tuple[float, dict[str, float]]:
    t0, started = time.time(), time.perf_counter()
    job = await jobs.start_course_tagging(root_page_id=root, tag="latency")
    returned = time.time()
    while job.status not in FINAL:
        await asyncio.sleep(poll)
        job = await jobs.get(job.id)
    seconds, seen = time.perf_counter() - started, time.time()
    if job.status != "succeeded":
        raise RuntimeError(f"the job ended {job.status}")
    return seconds, phases(t0, returned, seen, job)


async def bare_once(temporal: Any, task_queue: str) -> float:
    started = time.perf_counter()
    handle = await temporal.start_workflow(
        "BareJob", "x", id=f"bare-{uuid.uuid4()}", task_queue=task_queue
    )
    await handle.result()
    return time.perf_counter() - started


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await stack.hub("jobs")
    bare_queue = await stack.bare_worker()
    temporal = await stack.temporal_client()
    total = args.warmup + args.runs
    async with hub.engine() as engine:
        courses = [await seed_course(engine, 1) for _ in range(total)]
    ms: dict[str, list[float]] = {"hubjobs": [], "bare": []}
    where: list[dict[str, float]] = []
    async with hub.client() as client:
        for n, course in enumerate(courses):
            for who in rotate(("hubjobs", "bare"), n):
                if who == "hubjobs":
                    jobs = client.scope(course.workspace_id, course.actor_id)
                    seconds, spent = await hubjobs_once(jobs, course.root_page_id, args.poll)
                    if n >= args.warmup:
                        where.append(spent)
                else:
                    seconds = await bare_once(temporal, bare_queue)
                if n >= args.warmup:
                    ms[who].append(seconds * 1000)
                await asyncio.sleep(args.pause)
    ours, bare = percentile(ms["hubjobs"], 50), percentile(ms["bare"], 50)
    say(f"per-job p50: hubjobs {ours:.0f} ms, bare {bare:.0f} ms")
    figures = [
        Figure(
            NAME,
            "1-page job start → final, p50",
            "ms",
            ours,
            bare,
            "bare workflow",
            ratio_of(ours, bare),
            Target("<=", 1.2),
        ),
        Figure(
            NAME,
            "1-page job start → final, p90",
            "ms",
            percentile(ms["hubjobs"], 90),
            percentile(ms["bare"], 90),
            "bare workflow",
            ratio_of(percentile(ms["hubjobs"], 90), percentile(ms["bare"], 90)),
            None,
        ),
    ]
    notes = [
        f"job_latency: {args.runs} runs each after {args.warmup} warm-up, alternating, "
        f"{args.pause:g} s apart; hubjobs' end polled every {args.poll * 1000:g} ms",
        "job_latency: hubjobs, median of each phase: " + describe_phases(median_phases(where)),
    ]
    return Outcome(figures, {"ms": ms, "hubjobs_phases": where}, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
