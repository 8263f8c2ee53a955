"""What Temporal's per-namespace rate limit does to a flood of signals, and to the
namespace's own work beside it.

Each scenario starts a dev server of its own (the embedded stack's dynamic config plus
the scenario's) and a hubjobs worker process, on the stack's PostgreSQL. A course-tagging
job runs a page every 0.1 s; once it moves, FLOOD_SENDERS senders send it bad signals
(unknown names), each its next as soon as the last was answered, for --seconds. The probe
measures the signals taken a second, those refused by the rate limit, and the job's pages
a second during the flood against before it (the worker's own polls, heartbeats and
completions go through the same limit).

Scenarios: ``open`` (no limit, the dev server's default) and ``rps-N``
(``frontend.namespaceRPS=N``, with ``frontend.namespaceBurstRatio`` 1).

    .venv/bin/python bench/flood_probe.py [--seconds 20] [--scenarios open,rps-200,rps-50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import Stack, free_port, seed_course
from harness import Process, poll_until, say
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from hubjobs.devstack.embedded import EmbeddedTemporal
from hubjobs.settings import Settings
from hubjobs.temporal.client import connect
from starter.client import HubJobsClient

FLOOD_SENDERS = 25
HUBJOBS = str(Path(sys.executable).parent / "hubjobs")


@dataclass
class Result:
    scenario: str
    taken_per_second: float
    refused: int
    pages_before: float
    pages_during: float


def limits(scenario: str) -> dict[str, str]:
    if scenario == "open":
        return {}
    rps = scenario.removeprefix("rps-")
    return {"frontend.namespaceRPS": rps, "frontend.namespaceBurstRatio": "1"}


async def flood(client: Client, workflow_id: str, seconds: float) -> tuple[int, int]:
    handle = client.get_workflow_handle(workflow_id)
    taken = refused = 0
    until = time.monotonic() + seconds

    async def sender() -> None:
        nonlocal taken, refused
        while time.monotonic() < until:
            try:
                await handle.signal("no-such-signal")
                taken += 1
            except RPCError as err:
                if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                    raise
                refused += 1

    await asyncio.gather(*(sender() for _ in range(FLOOD_SENDERS)))
    return taken, refused


async def scenario(stack: Stack, name: str, seconds: float) -> Result:
    home = stack.home / f"flood-{name}"
    server = EmbeddedTemporal(home, persistent=False)
    port = free_port([stack.pg_port])
    server.start(port, free_port([stack.pg_port, port]), dynamic_config=limits(name))
    address = f"127.0.0.1:{port}"
    url = stack.database(f"flood_{name.replace('-', '_')}")
    settings = Settings(
        home=home,
        database_url=url,
        temporal_address=address,
        task_queue=f"flood-{name}",
        maintenance=False,
        metrics_port=free_port(),
    )
    named = (
        "home",
        "database_url",
        "temporal_address",
        "task_queue",
        "maintenance",
        "metrics_port",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env |= {f"HUBJOBS_{k.upper()}": str(getattr(settings, k)) for k in named}
    # The tagging kind's own settings: one page a batch, paced.
    env |= {"HUBJOBS_TAGGING_BATCH_SIZE": "1", "HUBJOBS_TAGGING_BATCH_PAUSE_SECONDS": "0.1"}
    worker = Process(f"worker-{name}", [HUBJOBS, "worker"], env=env, logs=home)
    try:
        async with await HubJobsClient.connect(settings) as hub:
            course = await seed_course(hub.engine, 5000)
            jobs = hub.scope(course.workspace_id, course.actor_id)
            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "flood"}
            )

            async def moving() -> bool:
                return (await jobs.get(job.id)).processed >= 5

            try:
                await poll_until(moving, interval=0.2, timeout=120, what="the job moving")
            except TimeoutError:
                sys.stderr.write(worker.log_path.read_text()[-3000:])
                raise

            async def rate(over: float) -> float:
                first = (await jobs.get(job.id)).processed
                await asyncio.sleep(over)
                return ((await jobs.get(job.id)).processed - first) / over

            before = await rate(seconds / 2)
            client = await connect(settings)
            start = (await jobs.get(job.id)).processed
            taken, refused = await flood(client, job.workflow_id, seconds)
            during = ((await jobs.get(job.id)).processed - start) / seconds
            await jobs.cancel(job.id)
        return Result(name, taken / seconds, refused, before, during)
    finally:
        worker.stop()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--scenarios", default="open,rps-200,rps-50")
    args = parser.parse_args()
    results = []
    with Stack() as stack:
        for name in args.scenarios.split(","):
            result = await scenario(stack, name, args.seconds)
            say(
                f"{name}: {result.taken_per_second:.0f} signals taken a second, "
                f"{result.refused} refused; the job {result.pages_before:.1f} pages a "
                f"second before, {result.pages_during:.1f} during"
            )
            results.append(result)
    print(f"{'scenario':<10} {'taken/s':>8} {'refused':>8} {'pages/s before':>15} {'during':>8}")
    for r in results:
        print(
            f"{r.scenario:<10} {r.taken_per_second:>8.0f} {r.refused:>8} "
            f"{r.pages_before:>15.1f} {r.pages_during:>8.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
