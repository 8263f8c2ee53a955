"""What the workflow sandbox costs a run: a recorded one-page job's history
(tests/histories, the small job done at once) replayed N times in one process, through
the worker's own sandbox (its pass-through modules) and, beside it, with no sandbox;
CPU milliseconds a run each, medians of alternating rounds. The difference is what
every workflow run pays for the sandbox's determinism checks: its modules run afresh
and its class declared again (``workflow.defn``) for each run.

    python bench/bench_sandbox.py [--runs 300] [--rounds 5] [--history NAME]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator

from common import REPO, Stack
from harness import Figure, Outcome, median, rotate, say
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


def runners() -> dict[str, WorkflowRunner]:
    from hubjobs.temporal.sandbox import sandbox_runner

    return {
        "sandboxed": sandbox_runner(),
        "unsandboxed": UnsandboxedWorkflowRunner(),
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


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    del stack  # replays need no server
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
    notes = [
        f"sandbox: {args.history} replayed {args.runs} times a round, {args.rounds} "
        "alternating rounds, medians; CPU of this process"
    ]
    return Outcome(figures, {"ms": ms}, notes)


if __name__ == "__main__":
    main_for(sys.modules[__name__])
