"""``hubjobs status JOB --workspace W --actor A --json`` wall time, as a process, against
a Python process that connects with psycopg and runs one select (the job's row).
Runs alternate; medians.

hubjobs' own modules are compiled to bytecode first, as installing the package does
(``pip install .``, the image): this checkout is an editable install, and with
PYTHONDONTWRITEBYTECODE set (as here, and in the image) every command would otherwise
compile them again.

    python bench/bench_cli.py [--runs 7]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys

from common import HUBJOBS, REPO, Stack, finished_job
from harness import Figure, Outcome, Target, median, ratio_of, rotate, say, timed_run
from standalone import main_for

NAME = "cli"
TITLE = "hubjobs status wall time"
BASELINE = (
    "import sys, psycopg\n"
    "with psycopg.connect(sys.argv[1]) as conn:\n"
    "    print(conn.execute('SELECT * FROM jobs WHERE id = %s', (sys.argv[2],)).fetchone())\n"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=7, help="runs of each (default 7)")


def compile_sources() -> None:
    """Bytecode for hubjobs' packages, as an install writes it (into __pycache__)."""
    sources = [str(REPO / name) for name in ("hubjobs", "starter", "activities", "workflows")]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *sources, str(REPO / "worker.py")],
        check=True,
    )


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    await asyncio.to_thread(compile_sources)
    hub = await stack.hub("jobs")
    workspace, actor, job = await finished_job(hub)
    env = hub.env()
    commands = {
        "hubjobs": [
            HUBJOBS,
            "status",
            str(job),
            "--workspace",
            str(workspace),
            "--actor",
            str(actor),
            "--json",
        ],
        "psycopg": [sys.executable, "-c", BASELINE, hub.url, str(job)],
    }
    times: dict[str, list[float]] = {"hubjobs": [], "psycopg": []}
    for n in range(args.runs + 1):  # the first round warms the page cache
        for who in rotate(tuple(commands), n):
            seconds, out = await asyncio.to_thread(timed_run, commands[who], env=env)
            if str(job) not in out:
                raise RuntimeError(f"{who} did not print the job: {out[:300]}")
            if n:
                times[who].append(seconds * 1000)
    ours, base = median(times["hubjobs"]), median(times["psycopg"])
    say(f"cli: hubjobs status {ours:.0f} ms, psycopg one-select {base:.0f} ms")
    figures = [
        Figure(
            NAME,
            "hubjobs status --json (process wall time)",
            "ms",
            ours,
            base,
            "psycopg connect + select",
            ratio_of(ours, base),
            Target("<=", 250, on="value", unit="ms"),
        )
    ]
    return Outcome(figures, {"ms": times}, [f"cli: medians of {args.runs} runs each"])


if __name__ == "__main__":
    main_for(sys.modules[__name__])
