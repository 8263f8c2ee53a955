"""The baseline worker: a bare workflow with one trivial activity, in a process of its
own, importing nothing but temporalio (no hubjobs, no database, no pydantic).

    python bench/bare_worker.py --address 127.0.0.1:7233 --task-queue bare
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

WORKFLOW = "BareJob"


@activity.defn(name="bare_noop")
async def bare_noop(value: str) -> str:
    return value


@workflow.defn(name=WORKFLOW)
class BareJob:
    @workflow.run
    async def run(self, value: str) -> str:
        result: str = await workflow.execute_activity(
            "bare_noop", value, start_to_close_timeout=timedelta(seconds=60)
        )
        return result


async def serve(address: str, task_queue: str) -> None:
    client = await Client.connect(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Worker(client, task_queue=task_queue, workflows=[BareJob], activities=[bare_noop]):
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.task_queue))
    os._exit(0)
