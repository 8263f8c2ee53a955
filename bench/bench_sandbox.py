"""What the workflow sandbox costs a run, and a bad signal a replay.

A run: a recorded one-page job's history (tests/histories, the small job done at once)
replayed N times in one process, through the worker's own sandbox (its pass-through
modules) and, beside it, with no sandbox; CPU milliseconds a run each, medians of
alternating rounds. The difference is what every workflow run pays for the sandbox's
determinism checks: its modules run afresh and its class declared again
(``workflow.defn``) for each run.

A bad signal: a job flooded with --signals bad signals (unknown names, malformed
arguments) on the stack's servers, recorded, and replayed beside the same job with none:
the difference over the signal count is what one signal costs each replay of its run
(the worker replays a run whole after a failed task). Through the worker's sandbox, the
SDK's own (every payload's serialization context asked inside it) and no sandbox.

    python bench/bench_sandbox.py [--runs 300] [--rounds 5] [--history NAME] [--signals 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from common import REPO, Stack
from harness import Figure, Outcome, median, poll_until, ratio_of, rotate, say
from standalone import main_for
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, WorkflowRunner

NAME = "sandbox"
TITLE = "Workflow sandbox, CPU per run"
CONTENDERS = ("sandboxed", "unsandboxed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=300, help="replays a round (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    parser.add_argument(
        "--history",
        default="course_tagging_at_once_v5",
        help="a recorded history in tests/histories (default: a small job done at once)",
    )
    parser.add_argument(
        "--signals", type=int, default=2000, help="bad signals the flooded job takes (2000)"
    )


def runners() -> dict[str, WorkflowRunner]:
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from hubjobs.temporal.sandbox import PASSED_THROUGH, sandbox_runner

    sdk = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    return {
        "sandboxed": sandbox_runner(),
        "unsandboxed": UnsandboxedWorkflowRunner(),
        "sdk sandbox": SandboxedWorkflowRunner(restrictions=sdk),
    }


async def cpu_per_run(runner: WorkflowRunner, history: WorkflowHistory, runs: int) -> float:
    """CPU milliseconds a replay of ``history`` takes, over ``runs`` replays (each a run
    of its own, with its own workflow id)."""
    import worker
    from hubjobs.settings import Settings
    from hubjobs.temporal.client import data_converter, header_codec

    settings = Settings()
    replayer = Replayer(
        workflows=worker.workflows(),
        data_converter=data_converter(settings),
        header_codec_behavior=header_codec(settings),
        workflow_runner=runner,
    )

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for n in range(runs):
            yield WorkflowHistory(f"{history.workflow_id}-{n}", history.events)

    started = time.process_time()
    async with replayer.workflow_replay_iterator(histories()) as results:
        async for result in results:
            if result.replay_failure is not None:
                raise RuntimeError(f"the replay failed: {result.replay_failure}")
    return (time.process_time() - started) / runs * 1000


async def recorded_job(stack: Stack, signals: int) -> WorkflowHistory:
    """A course-tagging job that took ``signals`` bad signals (none: the same job
    alone), then was cancelled: its run's history. The job is slow and its budget high,
    so that it all lands in one run."""
    from common import seed_course

    from hubjobs.temporal.messages import PROGRESS_QUERY
    from tests.system.test_signal_limits import BAD_SIGNALS

    hub = await stack.hub(
        "signals",
        tagging_batch_size=1,
        tagging_batch_pause_seconds=1,
        run_signal_budget=5000,
        work_slice_seconds=3600,
        progress_report_seconds=3600,
    )
    async with hub.engine() as engine:
        course = await seed_course(engine, 100)
    async with hub.client() as client:
        jobs = client.scope(course.workspace_id, course.actor_id)
        job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": "t"})
        handle = (await client.temporal_client()).get_workflow_handle(job.workflow_id)
        gate = asyncio.Semaphore(10)

        async def send(n: int) -> None:
            name, args = BAD_SIGNALS[n % len(BAD_SIGNALS)]
            async with gate:
                await handle.signal(name, args=args)

        await asyncio.gather(*(send(n) for n in range(signals)))

        async def all_taken() -> bool:
            return bool((await handle.query(PROGRESS_QUERY))["refused_signals"] >= signals)

        async def closed() -> bool:
            return (await handle.describe()).close_time is not None

        await poll_until(all_taken, interval=0.2, timeout=300, what="the signals taken")
        await jobs.cancel(job.id)
        await poll_until(closed, interval=0.2, timeout=120, what="the run closed")
        return await handle.fetch_history()


async def signal_figure(stack: Stack, args: argparse.Namespace) -> tuple[Figure, dict[str, Any]]:
    """CPU a bad signal costs a replay of its run, by runner."""
    flooded = await recorded_job(stack, args.signals)
    alone = await recorded_job(stack, 0)
    contenders = runners()
    us: dict[str, list[float]] = {who: [] for who in contenders}
    for n in range(args.rounds):
        for who in rotate(tuple(contenders), n):
            cost = await cpu_per_run(contenders[who], flooded, 3)
            base = await cpu_per_run(contenders[who], alone, 3)
            us[who].append((cost - base) / args.signals * 1000)
    ours, bare, sdk = (median(us[w]) for w in ("sandboxed", "unsandboxed", "sdk sandbox"))
    say(f"a bad signal: {ours:.0f} us a replay sandboxed, {bare:.0f} without, SDK's {sdk:.0f}")
    figure = Figure(
        NAME,
        "a bad signal in a replay of its run, CPU",
        "us",
        ours,
        bare,
        "the same replay, no sandbox",
        ratio_of(ours, bare),
        None,
        note=f"{sdk:.0f} us in the SDK's own sandbox",
    )
    return figure, us


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    path = REPO / "tests" / "histories" / f"{args.history}.json"
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    contenders = runners()
    for who in CONTENDERS:  # warm-up: the worker's modules imported, caches filled
        await cpu_per_run(contenders[who], history, max(10, args.runs // 10))
    ms: dict[str, list[float]] = {who: [] for who in CONTENDERS}
    for n in range(args.rounds):
        for who in rotate(CONTENDERS, n):
            ms[who].append(await cpu_per_run(contenders[who], history, args.runs))
    sandboxed, bare = median(ms["sandboxed"]), median(ms["unsandboxed"])
    say(f"sandbox: {sandboxed:.2f} ms a run sandboxed, {bare:.2f} without")
    figures = [
        Figure(
            NAME,
            "workflow sandbox, CPU a run (its cost: the difference)",
            "ms",
            sandboxed,
            bare,
            "the same replay, no sandbox",
            sandboxed / bare if bare else None,
            None,
            note=f"{sandboxed - bare:.2f} ms a run",
        )
    ]
    signal, us = await signal_figure(stack, args)
    figures.append(signal)
    notes = [
        f"sandbox: {args.history} replayed {args.runs} times a round, {args.rounds} "
        "alternating rounds, medians; CPU of this process",
        f"sandbox: a job flooded with {args.signals} bad signals and the same job alone, "
        f"recorded, each replayed 3 times a round; the difference over {args.signals}",
    ]
    return Outcome(figures, {"ms": ms, "us_per_signal": us}, notes)


if __name__ == "__main__":
    main_for(sys.modules[__name__])
