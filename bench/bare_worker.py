"""The floors' worker, in a process of its own: temporalio, and psycopg for the one-page
activity (no hubjobs, no pydantic, no SQLAlchemy). Its workflows (bench/bare_workflows.py)
import only temporalio and run in the default sandbox, as hubjobs' do.

    python bench/bare_worker.py --address 127.0.0.1:7233 --task-queue bare \
        [--database-url postgresql://…]   # serves BareDbJob too
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onepage
from bare_workflows import BareDbJob, BareJob


@activity.defn(name="bare_noop")
async def bare_noop(value: str) -> str:
    return value


@activity.defn(name="bare_onepage")
async def bare_onepage(job_id: str) -> str:
    return await onepage.run_worker_job(job_id)


async def serve(address: str, task_queue: str, database_url: str | None) -> None:
    client = await Client.connect(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    workflows: list[type] = [BareJob]
    activities: list[Any] = [bare_noop]
    if database_url:
        # As many connections as the SDK's default activity slots could use at once
        # would be 100; hubjobs' worker runs 8 activities, the peers 10: 10 here.
        await onepage.open_worker_pool(database_url, 10)
        workflows.append(BareDbJob)
        activities.append(bare_onepage)
    async with Worker(client, task_queue=task_queue, workflows=workflows, activities=activities):
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--database-url", help="serve BareDbJob, writing this database")
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.task_queue, args.database_url))
    os._exit(0)
