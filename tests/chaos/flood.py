"""``python -m tests.chaos.flood``: the flood of bad signals that wedged a run (issue 42's
shape): ``--senders`` concurrent senders sending ``--signals`` malformed or unknown
signals by workflow id (so that each lands in the job's current run), while the job's
``progress`` query is asked ``--queries-per-second`` times a second. A process of its
own, so that its CPU is not the campaign's; its figures as JSON on stdout."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from hubjobs.temporal.messages import PROGRESS_QUERY
from tests.system.test_signal_limits import BAD_SIGNALS

RPC_TIMEOUT = timedelta(seconds=10)
QUERY_TIMEOUT = timedelta(seconds=5)


class Flood:
    def __init__(self, handle: WorkflowHandle[Any, Any], signals: int) -> None:
        self.handle = handle
        self.signals = signals
        self.numbers = itertools.count()
        self.sent: Counter[str] = Counter()
        self.queries: Counter[str] = Counter()
        self.latencies: list[float] = []

    async def sender(self) -> None:
        while (number := next(self.numbers)) < self.signals:
            name, args = BAD_SIGNALS[number % len(BAD_SIGNALS)]
            try:
                await self.handle.signal(name, args=args, rpc_timeout=RPC_TIMEOUT)
                self.sent["taken"] += 1
            except RPCError as err:
                self.sent[f"refused {err.status.name}"] += 1
            except Exception as err:  # what the SDK raises is counted, never fatal
                self.sent[type(err).__name__] += 1

    async def query(self) -> None:
        started = time.monotonic()
        try:
            await self.handle.query(PROGRESS_QUERY, rpc_timeout=QUERY_TIMEOUT)
            self.queries["answered"] += 1
            self.latencies.append(time.monotonic() - started)
        except RPCError as err:
            self.queries[f"refused {err.status.name}"] += 1
        except Exception as err:
            self.queries[type(err).__name__] += 1

    async def querier(self, per_second: int, done: asyncio.Event) -> None:
        asked: set[asyncio.Task[None]] = set()
        while not done.is_set() and per_second > 0:
            task = asyncio.create_task(self.query())
            asked.add(task)
            task.add_done_callback(asked.discard)
            await asyncio.sleep(1 / per_second)
        await asyncio.gather(*asked, return_exceptions=True)


async def flood(
    address: str, workflow_id: str, signals: int, senders: int, per_second: int
) -> dict[str, Any]:
    client = await Client.connect(address)
    run = Flood(client.get_workflow_handle(workflow_id), signals)
    done = asyncio.Event()
    started = time.monotonic()
    querying = asyncio.create_task(run.querier(per_second, done))
    await asyncio.gather(*(run.sender() for _ in range(senders)))
    done.set()
    await querying
    took = time.monotonic() - started
    return {
        "seconds": round(took, 1),
        "signals": dict(run.sent),
        "signals_per_second": round(sum(run.sent.values()) / took, 1) if took else None,
        "queries": dict(run.queries),
        "query_p50_seconds": round(statistics.median(run.latencies), 3) if run.latencies else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.flood")
    parser.add_argument("--address", required=True)
    parser.add_argument("--workflow-id", required=True)
    parser.add_argument("--signals", type=int, default=20_000)
    parser.add_argument("--senders", type=int, default=25)
    parser.add_argument("--queries-per-second", type=int, default=100)
    args = parser.parse_args()
    figures = asyncio.run(
        flood(args.address, args.workflow_id, args.signals, args.senders, args.queries_per_second)
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
