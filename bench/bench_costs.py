"""What one job costs, for the sizing page and issue 22's "at most 2 commits per one-page
job after the start's": PostgreSQL commits, rows and bytes written, Temporal history
events and bytes, and CPU seconds of the worker and of the Temporal server, per job,
for hubjobs' one-page job, the floor's (``BareDbJob``, bench/onepage.py) and hubjobs'
1,000-page job.

Each contender has a database of its own; its counters (``pg_stat_database``, the WAL
position) are read settled (bench/pg.py: backends flush statistics within 10 s of
going idle) before and after jobs run one after another, less the background measured
over an idle window first (the worker's queue-gauge refresh). Nobody polls: each job's
end is its final row's NOTIFY. The start's own commits are measured apart: hubjobs'
starts go through a client whose task queue no worker polls (those workflows are
terminated after), the floor's are its row-and-item transaction.

    python bench/bench_costs.py [--jobs 20] [--big-pages 1000] [--big-jobs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict
from typing import Any

import onepage
import psycopg
from common import Hub, Stack, seed_course, seed_onepage
from harness import Figure, Outcome, Target, cpu_seconds, main_for, say
from pg import Counters, FinalWatcher, background_rate, net, settled_counters

NAME = "costs"
TITLE = "Per-job costs (commits, rows, bytes, history, CPU)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=20, help="one-page jobs of each (default 20)")
    parser.add_argument("--big-pages", type=int, default=1000, help="the big job's pages")
    parser.add_argument("--big-jobs", type=int, default=3, help="big jobs (default 3)")


async def history_of(temporal: Any, workflow_ids: list[str]) -> tuple[float, float]:
    """Mean events and bytes (protobuf, as the server stores them) of the histories."""
    events = size = 0
    for wid in workflow_ids:
        history = await temporal.get_workflow_handle(wid).fetch_history()
        events += len(history.events)
        size += sum(e.ByteSize() for e in history.events)
    return events / len(workflow_ids), size / len(workflow_ids)


async def vacuum(stack: Stack, url: str) -> None:
    """Fresh statistics after seeding, so that autovacuum's ANALYZE (its own commits and
    reads) does not fall in a measured window."""
    del stack
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")


async def warm(client: Any, course: Any) -> None:
    """The client's pools connected (a first read) before anything is counted."""
    await client.scope(course.workspace_id, course.actor_id).list(limit=1)


class Meter:
    """Counters of one database and the CPU of the processes serving it, net of their
    idle rate."""

    def __init__(self, stack: Stack, database: str, pids: dict[str, int]) -> None:
        self.admin = stack.url("postgres")
        self.database = database
        self.pids = pids
        self.idle = Counters()
        self.idle_cpu: dict[str, float] = {}

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    async def calibrate(self) -> None:
        cpu0, t0 = self.cpu(), time.perf_counter()
        self.idle = await background_rate(self.admin, self.database)
        cpu1, t1 = self.cpu(), time.perf_counter()
        self.idle_cpu = {k: (cpu1[k] - cpu0[k]) / (t1 - t0) for k in cpu1}

    async def start(self) -> None:
        self._before = await settled_counters(self.admin, self.database)
        self._cpu = self.cpu()

    async def stop(self) -> tuple[Counters, dict[str, float]]:
        cpu = self.cpu()
        after = await settled_counters(self.admin, self.database)
        spent = net(self._before, after, self.idle)
        window = after.seconds - self._before.seconds
        used = {k: cpu[k] - self._cpu[k] - self.idle_cpu.get(k, 0) * window for k in cpu}
        return spent, used


def row_of(
    label: str, count: int, spent: Counters, cpu: dict[str, float], history: tuple[float, float]
) -> dict[str, Any]:
    per = spent.per(count)
    return {
        "job": label,
        "jobs": count,
        "commits": per.xact_commit,
        "rows written": per.tup_inserted + per.tup_updated + per.tup_deleted,
        "rows fetched": per.tup_fetched,
        "WAL bytes": per.wal_bytes,
        "history events": history[0],
        "history bytes": history[1],
        **{f"{k} CPU ms": v / count * 1000 for k, v in cpu.items()},
    }


async def hubjobs_costs(
    stack: Stack, hub: Hub, temporal: Any, count: int, pages: int, meter: Meter
) -> tuple[dict[str, Any], Counters]:
    """hubjobs' jobs of ``pages`` pages: the whole, and the start alone."""
    async with hub.engine() as engine:
        courses = [await seed_course(engine, pages) for _ in range(count * 2)]
    await vacuum(stack, hub.url)
    # The starts alone, on a task queue nobody polls; their workflows are terminated.
    # Clients and listeners connect before the counters are read.
    idle_hub = Hub(stack, f"{hub.name}-nostart", hub.url, {})
    started = []
    async with idle_hub.client() as client:
        await warm(client, courses[0])
        await meter.start()
        for c in courses[:count]:
            jobs = client.scope(c.workspace_id, c.actor_id)
            started.append(await jobs.start_course_tagging(root_page_id=c.root_page_id, tag="c"))
        start_spent, _ = await meter.stop()
    for job in started:
        await temporal.get_workflow_handle(job.workflow_id).terminate("bench: start only")
    # The whole jobs, one after another.
    ids: list[str] = []
    async with hub.client() as client, FinalWatcher(hub.url) as watcher:
        await warm(client, courses[0])
        await meter.start()
        for c in courses[count:]:
            jobs = client.scope(c.workspace_id, c.actor_id)
            job = await jobs.start_course_tagging(root_page_id=c.root_page_id, tag="c")
            await watcher.wait([str(job.id)], timeout=600)
            ids.append(job.workflow_id)
        spent, cpu = await meter.stop()
    for wid in ids:  # the workflow closes a task after the row's final write
        await temporal.get_workflow_handle(wid).result()
    label = "hubjobs 1-page job" if pages == 1 else f"hubjobs {pages:,}-page job"
    row = row_of(label, count, spent, cpu, await history_of(temporal, ids))
    row["start commits"] = start_spent.per(count).xact_commit
    return row, start_spent.per(count)


async def floor_costs(
    stack: Stack, temporal: Any, count: int, meter: Meter
) -> tuple[dict[str, Any], Counters]:
    floor = await stack.floor()
    pages = [
        onepage.Page(str(c.workspace_id), str(c.actor_id), str(c.root_page_id))
        for c in await seed_onepage(floor.url, count)
    ]
    await vacuum(stack, floor.url)
    async with (
        await psycopg.AsyncConnection.connect(floor.url) as conn,
        FinalWatcher(floor.url) as watcher,
    ):
        await meter.start()
        ids = [await onepage.start_row(conn, p, "floor") for p in pages]
        start_spent, _ = await meter.stop()
        await meter.start()
        for job_id in ids:
            await temporal.start_workflow(
                "BareDbJob", job_id, id=f"floor-{job_id}", task_queue=floor.task_queue
            )
            await watcher.wait([job_id], timeout=120)
        spent, cpu = await meter.stop()
    wids = [f"floor-{i}" for i in ids]
    for wid in wids:
        await temporal.get_workflow_handle(wid).result()
    history = await history_of(temporal, wids)
    row = row_of("floor 1-page job", count, spent + start_spent, cpu, history)
    row["start commits"] = start_spent.per(count).xact_commit
    return row, start_spent.per(count)


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    temporal = await stack.temporal_client()
    hub = await stack.hub("costs")
    floor = await stack.floor()
    assert hub.worker is not None
    server = stack.temporal_pid()
    hub_meter = Meter(stack, hub.database, {"worker": hub.worker.pid, "Temporal": server})
    floor_meter = Meter(stack, floor.database, {"worker": floor.process.pid, "Temporal": server})
    say("costs: measuring the idle background of each database (about 25 s)")
    await asyncio.gather(hub_meter.calibrate(), floor_meter.calibrate())
    rows: list[dict[str, Any]] = []
    say(f"costs: {args.jobs} hubjobs one-page jobs")
    one, _ = await hubjobs_costs(stack, hub, temporal, args.jobs, 1, hub_meter)
    rows.append(one)
    say(f"costs: {args.jobs} floor one-page jobs")
    fl, _ = await floor_costs(stack, temporal, args.jobs, floor_meter)
    rows.append(fl)
    if args.big_jobs:
        say(f"costs: {args.big_jobs} hubjobs {args.big_pages:,}-page jobs")
        big, _ = await hubjobs_costs(stack, hub, temporal, args.big_jobs, args.big_pages, hub_meter)
        rows.append(big)
    after_start = one["commits"] - one["start commits"]
    floor_after = fl["commits"] - fl["start commits"]
    figures = [
        Figure(
            NAME,
            "PostgreSQL commits per 1-page job after the start's",
            "",
            after_start,
            floor_after,
            "floor",
            None,
            Target("<=", 2, on="value", unit="commits"),
        ),
        Figure(
            NAME,
            "PostgreSQL commits per 1-page job, start included",
            "",
            one["commits"],
            fl["commits"],
            "floor",
            one["commits"] / fl["commits"] if fl["commits"] else None,
            None,
        ),
    ]
    notes = ["costs: per job (net of each database's idle background):", *cost_table(rows)]
    return Outcome(figures, {"rows": rows, "idle": asdict(hub_meter.idle)}, notes)


def cost_table(rows: list[dict[str, Any]]) -> list[str]:
    """The sizing table, one line per job kind (markdown, to paste)."""
    keys = [k for k in rows[0] if k != "jobs"]
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    for row in rows:
        cells = [
            str(row[k]) if isinstance(row[k], str) else f"{row.get(k, float('nan')):,.1f}"
            for k in keys
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
