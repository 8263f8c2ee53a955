"""Fairness and priority on one shared task queue: does one tenant's backlog delay another's
job, and which server settings and worker options change that?

Each scenario starts its own in-memory dev server (``.venv/bin/temporal server start-dev
--headless`` on free loopback ports, with the scenario's ``--dynamic-config-value``s) and
one worker with two activity slots. Tenant A starts 50 workflows of 20 sequential 0.3 s
activities (about 48 activity tasks always waiting); once that backlog stands, tenant B
starts one workflow of one such activity. The probe measures B's workflow from start to
result, the schedule-to-start wait of B's activity (from its history), and how many of A's
activities started while B's waited. Activities inherit the Priority given to
``start_workflow``.

Scenarios (``--scenarios``, default all):

- ``fifo``, ``fifo-noeager``: no fairness (the server's default); eager activity
  execution left on (the SDK's and Server 1.32's default) or turned off on the worker.
- ``fair``, ``fair-noeager``: ``matching.enableFairness=true``, fairness keys A and B.
- ``prio``, ``prio-noeager``: no fairness; A's workflows priority_key=3, B's priority_key=1.
- ``fairness-key-65``: starts workflows with 64- and 65-byte fairness keys (the server's
  limit is 64 bytes) and prints what the server answers.

``--partitions 1`` also sets ``matching.numTaskqueue{Read,Write}Partitions=1``: a task
queue has 4 partitions by default, each ordered on its own (FIFO, fair or by priority),
so with 4 the numbers scatter by which partition B's task lands in and which the polls
reach; with 1 they show the ordering itself.

    .venv/bin/python bench/fairness_probe.py [--repeat 3] [--partitions 1] [--scenarios ...]

Prints one line per run and a table of medians at the end. It only talks to the servers
it starts on 127.0.0.1 and stops them when done.

What it showed on Server 1.32.0 / SDK 1.35 (2 cores; medians of 3 runs, --partitions 1):
B's activity waited 7.9 s behind A's 48 without fairness, 0.22 s with
``matching.enableFairness=true`` and 0.17 s with priority_key 1 over 3; eager activity
execution on or off made no difference (the worker is saturated, so it seldom has a free
slot to take an eager task). With the default 4 partitions (8 runs of each scenario):
without fairness 5.1 s (eager on) and 6.6 s (off), from 2.3 to 18.4 s, at worst with more
of A's activities started meanwhile than had been queued; with fairness 0.5 s and 0.3 s,
but 4 of the 16 runs waited 3.1-6.5 s; with priority 0.8 s, at most 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from common import choose_port, wait_for_port
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import Priority
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

TASK_QUEUE = "fairness-probe"
TEMPORAL = str(Path(sys.executable).parent / "temporal")

# Terminating A's workflows at the end of a run makes the SDK warn about their in-flight
# activities; nothing else of the SDK's logging matters here.
QUIET = Runtime(
    telemetry=TelemetryConfig(
        logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
    )
)

# Activity starts, recorded by the worker: (tenant, monotonic time); BACKLOG_STANDS is set
# at the tenth.
STARTS: list[tuple[str, float]] = []
BACKLOG_STANDS = asyncio.Event()


@activity.defn
async def work(seconds: float) -> None:
    STARTS.append(((activity.info().workflow_id or "").split("-", 1)[0], time.monotonic()))
    if len(STARTS) >= 10:
        BACKLOG_STANDS.set()
    await asyncio.sleep(seconds)


@workflow.defn
class TenantJob:
    @workflow.run
    async def run(self, steps: int, seconds: float) -> int:
        for _ in range(steps):
            await workflow.execute_activity(
                work, seconds, start_to_close_timeout=timedelta(seconds=60)
            )
        return steps


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    dynamic_config: dict[str, str]
    disable_eager: bool
    a_priority: Priority
    b_priority: Priority


NO_FAIRNESS: dict[str, str] = {}
FAIRNESS = {"matching.enableFairness": "true"}
SCENARIOS = {
    s.name: s
    for s in [
        Scenario(
            "fifo", NO_FAIRNESS, False, Priority(fairness_key="A"), Priority(fairness_key="B")
        ),
        Scenario(
            "fifo-noeager",
            NO_FAIRNESS,
            True,
            Priority(fairness_key="A"),
            Priority(fairness_key="B"),
        ),
        Scenario("fair", FAIRNESS, False, Priority(fairness_key="A"), Priority(fairness_key="B")),
        Scenario(
            "fair-noeager", FAIRNESS, True, Priority(fairness_key="A"), Priority(fairness_key="B")
        ),
        Scenario("prio", NO_FAIRNESS, False, Priority(priority_key=3), Priority(priority_key=1)),
        Scenario(
            "prio-noeager", NO_FAIRNESS, True, Priority(priority_key=3), Priority(priority_key=1)
        ),
    ]
}


@dataclasses.dataclass
class Result:
    scenario: str
    b_total: float
    b_wait: float
    a_started_meanwhile: int
    backlog_at_b: int


def start_server(dynamic_config: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """An in-memory dev server on free loopback ports; its gRPC port."""
    port = choose_port(0)
    http_port = choose_port(0, {port})
    metrics_port = choose_port(0, {port, http_port})
    args = [TEMPORAL, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    args += ["--http-port", str(http_port), "--metrics-port", str(metrics_port)]
    args += ["--log-level", "error"]
    for key, value in dynamic_config.items():
        args += ["--dynamic-config-value", f"{key}={value}"]
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for_port(port, 60, "the dev server")
    except BaseException:
        stop_server(process)
        raise
    return process, port


def stop_server(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.asynccontextmanager
async def dev_server(dynamic_config: dict[str, str]) -> AsyncIterator[Client]:
    process, port = start_server(dynamic_config)
    try:
        yield await Client.connect(f"127.0.0.1:{port}", runtime=QUIET)
    finally:
        stop_server(process)


async def activity_backlog(client: Client) -> int:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=TASK_QUEUE),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            report_stats=True,
        )
    )
    return int(response.stats.approximate_backlog_count)


async def schedule_to_start(handle: WorkflowHandle[TenantJob, int]) -> float:
    scheduled = started = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.event_time.ToDatetime()
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.event_time.ToDatetime()
    assert scheduled is not None and started is not None
    return (started - scheduled).total_seconds()


async def run_scenario(
    scenario: Scenario, a_workflows: int, a_steps: int, seconds: float
) -> Result:
    STARTS.clear()
    BACKLOG_STANDS.clear()
    async with dev_server(scenario.dynamic_config) as client:
        worker = Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=[TenantJob],
            activities=[work],
            max_concurrent_activities=2,
            disable_eager_activity_execution=scenario.disable_eager,
            # The probe's module starts servers; nothing here needs the sandbox.
            workflow_runner=UnsandboxedWorkflowRunner(),
        )
        async with worker:
            run_id = uuid.uuid4().hex[:8]
            a_handles = [
                await client.start_workflow(
                    TenantJob.run,
                    args=[a_steps, seconds],
                    id=f"A-{run_id}-{i}",
                    task_queue=TASK_QUEUE,
                    priority=scenario.a_priority,
                )
                for i in range(a_workflows)
            ]
            # Let A's backlog build: every A workflow has scheduled its first activity
            # and the two slots have been busy for a while.
            await BACKLOG_STANDS.wait()
            backlog = await activity_backlog(client)
            b_started = time.monotonic()
            b = await client.start_workflow(
                TenantJob.run,
                args=[1, seconds],
                id=f"B-{run_id}",
                task_queue=TASK_QUEUE,
                priority=scenario.b_priority,
            )
            await asyncio.wait_for(b.result(), timeout=300)
            b_total = time.monotonic() - b_started
            b_activity = next(t for tenant, t in STARTS if tenant == "B")
            meanwhile = sum(
                1 for tenant, t in STARTS if tenant == "A" and b_started < t < b_activity
            )
            b_wait = await schedule_to_start(b)
            for handle in a_handles:
                with contextlib.suppress(RPCError):
                    await handle.terminate("probe done")
    return Result(scenario.name, b_total, b_wait, meanwhile, backlog)


async def fairness_key_limit() -> None:
    async with dev_server(FAIRNESS) as client:
        for length in (64, 65):
            try:
                await client.start_workflow(
                    TenantJob.run,
                    args=[1, 0.0],
                    id=f"key-{length}",
                    task_queue=TASK_QUEUE,
                    priority=Priority(fairness_key="k" * length),
                )
                print(f"fairness_key of {length} bytes: accepted")
            except RPCError as err:
                print(f"fairness_key of {length} bytes: rejected: {err.status.name} {err.message}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--scenarios", nargs="*", default=[*SCENARIOS, "fairness-key-65"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--a-workflows", type=int, default=50)
    parser.add_argument("--a-steps", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="task queue partitions (default: the server's, 4); 1 makes the order exact",
    )
    options = parser.parse_args()
    partitions = (
        {
            "matching.numTaskqueueReadPartitions": str(options.partitions),
            "matching.numTaskqueueWritePartitions": str(options.partitions),
        }
        if options.partitions
        else {}
    )

    results: list[Result] = []
    for round_ in range(options.repeat):
        for name in options.scenarios:
            if name == "fairness-key-65":
                if round_ == 0:
                    await fairness_key_limit()
                continue
            scenario = SCENARIOS[name]
            scenario = dataclasses.replace(
                scenario, dynamic_config={**scenario.dynamic_config, **partitions}
            )
            result = await run_scenario(
                scenario, options.a_workflows, options.a_steps, options.seconds
            )
            results.append(result)
            print(
                f"{result.scenario:13} B start→result {result.b_total:6.2f} s, "
                f"B activity schedule→start {result.b_wait:6.2f} s, "
                f"A activities started meanwhile {result.a_started_meanwhile:3}, "
                f"activity backlog when B started {result.backlog_at_b}",
                flush=True,
            )

    print("\nscenario       runs  B start→result (median)  B schedule→start  A started meanwhile")
    for name in dict.fromkeys(r.scenario for r in results):
        runs = [r for r in results if r.scenario == name]
        print(
            f"{name:13} {len(runs):5}  "
            f"{statistics.median(r.b_total for r in runs):20.2f} s "
            f"{statistics.median(r.b_wait for r in runs):15.2f} s "
            f"{statistics.median(r.a_started_meanwhile for r in runs):20.0f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
