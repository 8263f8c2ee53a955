"""A burst: 200 one-page tagging jobs started at once, jobs per second until all are
final in the read model, against 200 bare one-activity workflows (bench/bare_worker.py)
started at once until all have returned. Rounds alternate which goes first.

hubjobs' jobs are 200 courses of one workspace, started concurrently through one
``HubJobsClient``; their end is seen by listing the workspace's jobs every 50 ms.

    python bench/bench_burst.py [--jobs 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from common import FINAL, Hub, Stack, seed_courses
from harness import Figure, Outcome, Target, main_for, median, ratio_of, rotate, say

NAME = "burst"
TITLE = "200 one-page jobs at once"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=200, help="jobs started at once (default 200)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each (default 2)")


async def hubjobs_burst(hub: Hub, engine: Any, count: int) -> tuple[float, float]:
    """Seconds until every start call returned, and until every row was final."""
    courses = await seed_courses(engine, count, 1)
    workspace, actor = courses[0].workspace_id, courses[0].actor_id
    async with hub.client() as client:
        jobs = client.scope(workspace, actor)
        started = time.perf_counter()
        await asyncio.gather(
            *(jobs.start_course_tagging(root_page_id=c.root_page_id, tag="burst") for c in courses)
        )
        returned = time.perf_counter() - started
        while True:
            listed = await jobs.list(limit=count + 10)
            if len(listed) >= count and all(j.status in FINAL for j in listed):
                break
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - started
    failed = [j for j in listed if j.status != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} burst jobs did not succeed")
    return returned, seconds


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
    await asyncio.gather(*(h.result() for h in handles))
    return returned, time.perf_counter() - started


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await stack.hub("jobs")
    bare_queue = await stack.bare_worker()
    temporal = await stack.temporal_client()
    rates: dict[str, list[float]] = {"hubjobs": [], "bare": []}
    starts: dict[str, list[float]] = {"hubjobs": [], "bare": []}
    async with hub.engine() as engine:
        for n in range(args.rounds):
            for who in rotate(("hubjobs", "bare"), n):
                if who == "hubjobs":
                    returned, seconds = await hubjobs_burst(hub, engine, args.jobs)
                else:
                    returned, seconds = await bare_burst(temporal, bare_queue, args.jobs)
                rates[who].append(args.jobs / seconds)
                starts[who].append(returned)
                say(f"burst round {n + 1}: {who} {args.jobs / seconds:.1f} jobs/s")
                await asyncio.sleep(1)
    ours, bare = median(rates["hubjobs"]), median(rates["bare"])
    figures = [
        Figure(
            NAME,
            f"{args.jobs} one-page jobs at once",
            "jobs/s",
            ours,
            bare,
            "bare workflows",
            ratio_of(ours, bare),
            Target(">=", 0.9),
        )
    ]
    notes = [
        f"burst: medians of {args.rounds} rounds; the bare worker has the SDK's defaults; "
        f"every start call had returned after {median(starts['hubjobs']):.1f} s (hubjobs) "
        f"and {median(starts['bare']):.1f} s (bare)"
    ]
    return Outcome(figures, {"rates": rates, "starts_returned_s": starts}, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
