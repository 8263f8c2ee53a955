"""A worker's peak memory over idle by page size: hubs of the same size (``--megabytes``
of pages) whose pages are 0.1, 1 and 5 MB of random hex markdown (TOAST cannot shrink
it), each backed up and then exported (1,000 pages a file) by a fresh worker process of
its own. Its peak resident memory (``VmHWM``, reset before each job through
``/proc/<pid>/clear_refs``) over its idle RSS is the figure, side by side for the three
sizes: flat when memory does not grow with the pages.

    python bench/bench_memory.py [--megabytes 150] [--sizes 0.1,1,5]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg
from common import FINAL, Stack, seed_course
from harness import Figure, Outcome, Target, memory_mb, ratio_of, say
from standalone import main_for

NAME = "memory"
TITLE = "Worker memory by page size"
# What a job may add to a worker's resident memory, whatever the pages.
OVER_IDLE_MB = 64.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--megabytes", type=int, default=150, help="pages per hub (150)")
    parser.add_argument(
        "--sizes", default="0.1,1,5", help="page sizes in MB, comma-separated (0.1,1,5)"
    )


def fill(url: str, workspace: Any, pages: int, page_bytes: int) -> None:
    """``pages`` pages of ``page_bytes`` of random hex in the workspace."""
    with psycopg.connect(url, autocommit=True) as conn:
        batch = max(1, 20_000_000 // page_bytes)
        for first in range(1, pages + 1, batch):
            conn.execute(
                """
                INSERT INTO pages (id, workspace_id, title, markdown)
                SELECT gen_random_uuid(), %(ws)s, 'Page ' || g,
                       (SELECT string_agg(md5(g::text || ':' || i::text || random()::text), '')
                          FROM generate_series(1, %(digests)s::int) i)
                  FROM generate_series(%(first)s::int, %(last)s::int) g
                """,
                {
                    "ws": workspace,
                    "digests": page_bytes // 32,
                    "first": first,
                    "last": min(first + batch - 1, pages),
                },
            )
        conn.execute("VACUUM ANALYZE")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


async def peak_of(stack: Stack, size_mb: float, megabytes: int) -> dict[str, float]:
    """The worker's idle RSS, and its peak over idle during a backup and an export."""
    page_bytes = int(size_mb * 1_000_000) // 32 * 32
    pages = max(1, megabytes * 1_000_000 // page_bytes)
    hub = await stack.hub(f"memory{str(size_mb).replace('.', '_')}", worker=False)
    async with hub.engine() as engine:
        course = await seed_course(engine, 1)
    say(f"filling {pages:,} pages of {size_mb:g} MB")
    await asyncio.to_thread(fill, hub.url, course.workspace_id, pages, page_bytes)
    await hub.ensure_worker()
    assert hub.worker is not None
    pid = hub.worker.pid
    await asyncio.sleep(2)  # settled after its start
    found = {"idle": memory_mb(pid)["VmRSS"], "pages": float(pages)}
    async with hub.client() as client:
        jobs = client.scope(course.workspace_id, course.actor_id)
        for kind in ("backup", "page_export"):
            reset_peak(pid)
            started = time.perf_counter()
            job = await (
                jobs.start("backup", {}) if kind == "backup" else jobs.start("page_export", {})
            )
            while job.status not in FINAL:
                await asyncio.sleep(0.2)
                job = await jobs.get(job.id)
            if job.status != "succeeded":
                raise RuntimeError(f"the {kind} ended {job.status}: {job.error_message}")
            found[kind] = memory_mb(pid)["VmHWM"] - found["idle"]
            say(
                f"{size_mb:g} MB pages: {kind} in {time.perf_counter() - started:.1f} s, "
                f"peak +{found[kind]:.0f} MB over {found['idle']:.0f} MB idle"
            )
    return found


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    sizes = [float(size) for size in args.sizes.split(",")]
    peaks = {size: await peak_of(stack, size, args.megabytes) for size in sizes}
    smallest = peaks[sizes[0]]
    figures = [
        Figure(
            NAME,
            f"{kind}, {size:g} MB pages: worker peak RSS over idle (ratio: over "
            f"{sizes[0]:g} MB pages')",
            "MB",
            peaks[size][kind],
            smallest[kind],
            f"{sizes[0]:g} MB pages",
            ratio_of(peaks[size][kind], smallest[kind]),
            Target("<=", OVER_IDLE_MB, on="value", unit="MB"),
        )
        for kind in ("backup", "page_export")
        for size in sizes
    ]
    side_by_side = " | ".join(
        f"{size:g} MB ({int(peaks[size]['pages']):,} pages): backup +{peaks[size]['backup']:.0f}"
        f", export +{peaks[size]['page_export']:.0f} over {peaks[size]['idle']:.0f} MB idle"
        for size in sizes
    )
    notes = [
        f"memory: {args.megabytes} MB of random-hex pages a hub, a fresh worker each; "
        f"peak RSS over idle in MB: {side_by_side}"
    ]
    return Outcome(figures, {}, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
