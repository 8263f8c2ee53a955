"""What one job costs, for the sizing page and issue 22's "at most 2 commits per one-page
job after the start's": PostgreSQL commits, rows and bytes written, Temporal history
events and bytes, and CPU seconds of the worker and of the Temporal server, per job,
for hubjobs' one-page job, the floor's (``BareDbJob``, bench/onepage.py) and hubjobs'
1,000-page job.

Each contender has a database of its own; its counters (``pg_stat_database``, the WAL
position) are read settled (bench/pg.py: backends flush statistics within 10 s of
going idle) before and after jobs run one after another, less the background measured
over an idle window first (the worker's queue-gauge refresh). Nobody polls the
database: each job is awaited by its workflow's result. The start's own commits are
measured apart: hubjobs' starts go through a client whose task queue no worker polls
(those workflows are terminated after), the floor's are its row-and-item transaction.

    python bench/bench_costs.py [--jobs 20] [--big-pages 1000] [--big-jobs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onepage
import psycopg
from common import Floor, Hub, Stack, seed_course, seed_onepage
from harness import Figure, Outcome, Target, cpu_seconds, median, say
from pg import Counters, background_rate, net, settled_counters
from standalone import main_for
from temporalio.api.enums.v1 import EventType

NAME = "costs"
TITLE = "Per-job costs (commits, rows, bytes, history, CPU)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=30, help="one-page jobs of each (default 30)")
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


WARMUP = 12  # more than any worker's pool holds connections (10)
LOGGED = 3  # jobs of each run with every statement logged


async def warm_up(
    hub: Hub, floor: Floor, temporal: Any, courses: list[Any], pages: list[onepage.Page]
) -> None:
    """Unmeasured jobs of each contender, started at once (so that they spread over the
    pools' connections)."""
    async with hub.client() as client:
        jobs = [
            client.scope(c.workspace_id, c.actor_id).start(
                "course_tagging", {"root_page_id": c.root_page_id, "tag": "w"}
            )
            for c in courses
        ]
        for job in await asyncio.gather(*jobs):
            await temporal.get_workflow_handle(job.workflow_id).result()
    async with await psycopg.AsyncConnection.connect(floor.url) as conn:
        ids = [await onepage.start_row(conn, p, "floor") for p in pages]
    handles = await asyncio.gather(
        *(
            temporal.start_workflow("BareDbJob", i, id=f"floor-{i}", task_queue=floor.task_queue)
            for i in ids
        )
    )
    await asyncio.gather(*(h.result() for h in handles))


async def vacuum(url: str) -> None:
    """Fresh statistics after seeding, so that autovacuum's ANALYZE (its own commits and
    reads) does not fall in a measured window."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")


async def warm(client: Any, course: Any) -> None:
    """The client's pools connected (a first read) before anything is counted."""
    await client.scope(course.workspace_id, course.actor_id).list(limit=1)


def timings(history: Any) -> dict[str, float]:
    """Where a one-activity workflow's time went, from its history's event times (ms):
    until its first workflow task completed, the activity's wait in the queue and its
    run, and from the activity's end to the workflow's close."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for event in history.events:
        at = event.event_time.ToMicroseconds() / 1000
        first.setdefault(event.event_type, at)
        last[event.event_type] = at
    e = EventType
    found = {
        "start → first WFT done": (
            e.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
            True,
            e.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
            True,
        ),
        "activity queued": (
            e.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            True,
            e.EVENT_TYPE_ACTIVITY_TASK_STARTED,
            True,
        ),
        "activity ran": (
            e.EVENT_TYPE_ACTIVITY_TASK_STARTED,
            True,
            e.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            True,
        ),
        "activity done → closed": (
            e.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            False,
            e.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
            True,
        ),
        "start → closed": (
            e.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
            True,
            e.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
            True,
        ),
    }
    out: dict[str, float] = {}
    for label, (a, a_first, b, b_first) in found.items():
        t0 = (first if a_first else last).get(a)
        t1 = (first if b_first else last).get(b)
        if t0 is not None and t1 is not None:
            out[label] = t1 - t0
    return out


def read_from(path: Path, offset: int) -> str:
    with open(path, errors="replace") as text:
        text.seek(offset)
        return text.read()


@dataclass
class Sessions:
    """What the log shows a set of jobs sent, by side: ``worker`` (sessions named
    ``hub-*``/``floor-*``, PGAPPNAME) or ``client`` (the starting process)."""

    statements: dict[str, dict[str, float]] = field(default_factory=dict)
    transactions: dict[str, float] = field(default_factory=dict)
    writing: dict[str, float] = field(default_factory=dict)
    # Each distinct statement (its first 160 characters) and how many a job sent.
    texts: dict[str, dict[str, float]] = field(default_factory=dict)


WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def log_entries(lines: list[str]) -> list[str]:
    """Log lines joined into entries: a statement's continuation lines (no timestamp)
    belong to the line before."""
    entries: list[str] = []
    for line in lines:
        if line[:2] == "20" or not entries:
            entries.append(line)
        else:
            entries[-1] += " " + line.strip()
    return entries


def parse_log(lines: list[str], database: str, jobs: int) -> Sessions:
    """Statements by first word, and transactions (an explicit BEGIN … COMMIT, or one
    statement outside a block) and those of them that wrote (each a WAL flush at its
    commit), per job and side, from ``log_statement = all`` lines prefixed
    ``%m [%p] db=%d app=%a``."""
    found = Sessions()
    block: dict[str, bool] = {}  # pid -> the open block has written
    for entry in log_entries(lines):
        mark = next((m for m in ("LOG:  statement: ", "LOG:  execute ") if m in entry), None)
        if f"db={database} " not in entry or mark is None:
            continue
        pid = entry.split("[", 1)[1].split("]", 1)[0]
        app = entry.split(" app=", 1)[1].split(" ", 1)[0]
        side = "worker" if app.startswith(("hub-", "floor-")) else "client"
        sql = entry.split(mark, 1)[1]
        if mark.endswith("execute "):
            sql = sql.split(": ", 1)[-1]
        text = " ".join(sql.split())[:160]
        word = (text.split(None, 1) or ["?"])[0].upper().rstrip(";") or text[:12]
        seen = found.texts.setdefault(side, {})
        seen[text] = seen.get(text, 0) + 1 / jobs
        by_word = found.statements.setdefault(side, {})
        by_word[word] = by_word.get(word, 0) + 1 / jobs
        writes = word in ("INSERT", "UPDATE", "DELETE", "WITH") and bool(WRITES.search(sql))
        ended: bool | None = None  # a transaction ended: did it write?
        if word in ("BEGIN", "START"):
            block[pid] = False
        elif word in ("COMMIT", "END"):
            ended = block.pop(pid, False)
        elif word == "ROLLBACK":
            block.pop(pid, None)
        elif pid in block:
            block[pid] = block[pid] or writes
        else:
            ended = writes
        if ended is not None:
            found.transactions[side] = found.transactions.get(side, 0) + 1 / jobs
            if ended:
                found.writing[side] = found.writing.get(side, 0) + 1 / jobs
    return found


async def logged_jobs(
    stack: Stack, database: str, run_jobs: Callable[[], Awaitable[int]]
) -> Sessions:
    """``run_jobs`` (returning how many it ran) with every statement logged
    (``log_statement = all``, reset after), parsed."""
    log = stack.home / "pg" / "postgres.log"
    stack.admin("ALTER SYSTEM SET log_statement = 'all'")
    stack.admin("ALTER SYSTEM SET log_line_prefix = '%m [%p] db=%d app=%a '")
    stack.admin("SELECT pg_reload_conf()")
    await asyncio.sleep(1)
    offset = log.stat().st_size
    try:
        count = await run_jobs()
        await asyncio.sleep(1)
    finally:
        stack.admin("ALTER SYSTEM RESET log_statement")
        stack.admin("ALTER SYSTEM RESET log_line_prefix")
        stack.admin("SELECT pg_reload_conf()")
    lines = (await asyncio.to_thread(read_from, log, offset)).splitlines()
    return parse_log(lines, database, count)


async def hubjobs_logged(stack: Stack, hub: Hub, temporal: Any, courses: list[Any]) -> Sessions:
    async with hub.client() as client:
        await warm(client, courses[0])

        async def run_jobs() -> int:
            for c in courses:
                jobs = client.scope(c.workspace_id, c.actor_id)
                job = await jobs.start(
                    "course_tagging", {"root_page_id": c.root_page_id, "tag": "s"}
                )
                await temporal.get_workflow_handle(job.workflow_id).result()
            return len(courses)

        return await logged_jobs(stack, hub.database, run_jobs)


async def floor_logged(
    stack: Stack, floor: Floor, temporal: Any, pages: list[onepage.Page]
) -> Sessions:
    async with await psycopg.AsyncConnection.connect(floor.url) as conn:

        async def run_jobs() -> int:
            for page in pages:
                job_id = await onepage.start_row(conn, page, "floor")
                handle = await temporal.start_workflow(
                    "BareDbJob", job_id, id=f"floor-{job_id}", task_queue=floor.task_queue
                )
                await handle.result()
            return len(pages)

        return await logged_jobs(stack, floor.database, run_jobs)


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
        self._cpu, self._cpu_at = self.cpu(), time.perf_counter()

    async def stop(self) -> tuple[Counters, dict[str, float]]:
        """The counters' net change (their window includes the settling) and the CPU
        used between start and stop (net of the idle rate over that window only)."""
        cpu, window = self.cpu(), time.perf_counter() - self._cpu_at
        after = await settled_counters(self.admin, self.database)
        spent = net(self._before, after, self.idle)
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
    stack: Stack, hub: Hub, temporal: Any, courses: list[Any], pages: int, meter: Meter
) -> dict[str, Any]:
    """hubjobs' jobs of ``pages`` pages (half the courses: their starts alone, on a task
    queue nobody polls, those workflows then terminated; the other half whole, one
    after another, each awaited by its workflow's result)."""
    count = len(courses) // 2
    idle_hub = Hub(stack, f"{hub.name}-nostart", hub.url, {})
    started = []
    async with idle_hub.client() as client:
        await warm(client, courses[0])  # the pools connect before anything is counted
        await meter.start()
        for c in courses[:count]:
            jobs = client.scope(c.workspace_id, c.actor_id)
            started.append(
                await jobs.start("course_tagging", {"root_page_id": c.root_page_id, "tag": "c"})
            )
        start_spent, _ = await meter.stop()
    for job in started:
        await temporal.get_workflow_handle(job.workflow_id).terminate("bench: start only")
    ids: list[str] = []
    async with hub.client() as client:
        await warm(client, courses[0])
        await meter.start()
        for c in courses[count:]:
            jobs = client.scope(c.workspace_id, c.actor_id)
            job = await jobs.start("course_tagging", {"root_page_id": c.root_page_id, "tag": "c"})
            await temporal.get_workflow_handle(job.workflow_id).result()
            ids.append(job.workflow_id)
        spent, cpu = await meter.stop()
    label = "hubjobs 1-page job" if pages == 1 else f"hubjobs {pages:,}-page job"
    row = row_of(label, count, spent, cpu, await history_of(temporal, ids))
    row["start commits"] = start_spent.per(count).xact_commit
    row["timings_ms"] = await median_timings(temporal, ids)
    return row


async def floor_costs(
    floor: Floor, temporal: Any, pages: list[onepage.Page], meter: Meter
) -> dict[str, Any]:
    """The floor's jobs: the rows and items first (the start's commits), then the
    workflows one after another, each awaited by its result."""
    async with await psycopg.AsyncConnection.connect(floor.url) as conn:
        await meter.start()
        ids = [await onepage.start_row(conn, p, "floor") for p in pages]
        start_spent, _ = await meter.stop()
    await meter.start()
    for job_id in ids:
        handle = await temporal.start_workflow(
            "BareDbJob", job_id, id=f"floor-{job_id}", task_queue=floor.task_queue
        )
        await handle.result()
    spent, cpu = await meter.stop()
    wids = [f"floor-{i}" for i in ids]
    history = await history_of(temporal, wids)
    row = row_of("floor 1-page job", len(ids), spent + start_spent, cpu, history)
    row["start commits"] = start_spent.per(len(ids)).xact_commit
    row["timings_ms"] = await median_timings(temporal, wids)
    return row


async def median_timings(temporal: Any, workflow_ids: list[str]) -> dict[str, float]:
    found = [timings(await temporal.get_workflow_handle(w).fetch_history()) for w in workflow_ids]
    return {k: median([f[k] for f in found if k in f]) for k in found[0]}


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    temporal = await stack.temporal_client()
    hub = await stack.hub("costs")
    floor = await stack.floor("costs")
    assert hub.worker is not None
    # Everything seeded and analysed first: autovacuum then has nothing to do in the
    # windows, and the idle background is measured on the databases as they will be.
    async with hub.engine() as engine:
        small = [await seed_course(engine, 1) for _ in range(2 * args.jobs)]
        logged = [await seed_course(engine, 1) for _ in range(LOGGED)]
        warmups = [await seed_course(engine, 1) for _ in range(WARMUP)]
        big = [await seed_course(engine, args.big_pages) for _ in range(2 * args.big_jobs)]
    pages = [
        onepage.Page(str(c.workspace_id), str(c.actor_id), str(c.root_page_id))
        for c in await seed_onepage(floor.url, args.jobs + WARMUP + LOGGED)
    ]
    # Every connection of the workers' pools used once before anything is counted: a
    # backend's first statements read the catalogs (hundreds of rows "fetched").
    await warm_up(hub, floor, temporal, warmups, pages[args.jobs : args.jobs + WARMUP])
    pages, floor_logged_pages = pages[: args.jobs], pages[args.jobs + WARMUP :]
    await vacuum(hub.url)
    await vacuum(floor.url)
    # Autovacuum's workers visit every database about once a minute, a few commits of
    # that database's each visit: noise of a commit or two a job in a 12 s window.
    # Off while measuring (the databases were just analysed), back on after.
    stack.admin("ALTER SYSTEM SET autovacuum = off")
    stack.admin("SELECT pg_reload_conf()")
    try:
        return await measure(
            stack, args, hub, floor, temporal, small, big, (logged, floor_logged_pages), pages
        )
    finally:
        stack.admin("ALTER SYSTEM RESET autovacuum")
        stack.admin("SELECT pg_reload_conf()")


async def measure(
    stack: Stack,
    args: argparse.Namespace,
    hub: Hub,
    floor: Floor,
    temporal: Any,
    small: list[Any],
    big: list[Any],
    logged: tuple[list[Any], list[onepage.Page]],
    pages: list[onepage.Page],
) -> Outcome:
    assert hub.worker is not None
    server = stack.temporal_pid()
    hub_meter = Meter(stack, hub.database, {"worker": hub.worker.pid, "Temporal": server})
    floor_meter = Meter(stack, floor.database, {"worker": floor.process.pid, "Temporal": server})
    say("costs: measuring the idle background of each database (about 25 s)")
    await asyncio.gather(hub_meter.calibrate(), floor_meter.calibrate())
    rows: list[dict[str, Any]] = []
    say(f"costs: {args.jobs} hubjobs one-page jobs")
    one = await hubjobs_costs(stack, hub, temporal, small, 1, hub_meter)
    rows.append(one)
    say(f"costs: {args.jobs} floor one-page jobs")
    fl = await floor_costs(floor, temporal, pages, floor_meter)
    rows.append(fl)
    if args.big_jobs:
        say(f"costs: {args.big_jobs} hubjobs {args.big_pages:,}-page jobs")
        rows.append(await hubjobs_costs(stack, hub, temporal, big, args.big_pages, hub_meter))
    say(f"costs: the statements of {LOGGED} one-page jobs of each (log_statement = all)")
    ours = await hubjobs_logged(stack, hub, temporal, logged[0])
    theirs = await floor_logged(stack, floor, temporal, logged[1])
    figures = [
        Figure(
            NAME,
            "PostgreSQL commits per 1-page job after the start's (statement log)",
            "",
            ours.transactions.get("worker", 0),
            theirs.transactions.get("worker", 0),
            "floor",
            None,
            Target("<=", 2, on="value", unit="commits"),
        ),
        Figure(
            NAME,
            "PostgreSQL commits per 1-page job after the start's (pg_stat_database)",
            "",
            one["commits"] - one["start commits"],
            fl["commits"] - fl["start commits"],
            "floor",
            None,
            None,
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
    notes = [
        "costs: per job, net of each database's idle background (the worker's queue-gauge "
        "refresh); each job awaited by its workflow's result (a LISTEN on the database "
        "would count a commit a notification: PostgreSQL reads the queue in a transaction)",
        *cost_table(rows),
        *(
            f"costs: {who} 1-page job, {side}: {found.transactions.get(side, 0):.1f} "
            f"transactions ({found.writing.get(side, 0):.1f} writing), statements: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(words.items(), key=lambda i: -i[1]))
            for who, found in (("hubjobs", ours), ("floor", theirs))
            for side, words in sorted(found.statements.items())
        ),
        *(
            f"costs: {row['job']}, median ms: "
            + ", ".join(f"{k} {v:.0f}" for k, v in row["timings_ms"].items())
            for row in rows
        ),
    ]
    series = {
        "rows": rows,
        "idle": asdict(hub_meter.idle),
        "logged": {"hubjobs": asdict(ours), "floor": asdict(theirs)},
    }
    return Outcome(figures, series, notes)


def cost_table(rows: list[dict[str, Any]]) -> list[str]:
    """The sizing table, one line per job kind (markdown, to paste)."""
    keys = [k for k in rows[0] if k not in ("jobs", "timings_ms")]
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
