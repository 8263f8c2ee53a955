"""Retention: how many expirations a day the sweep can sustain, on the read model of
bench_readmodel (1,000,000 rows).

Before each run, the next ``--backlog`` rows to expire are made to have expired a
minute ago (on top of whatever expired meanwhile), so that every run, ours and the
floor's, finds work: what is measured is how fast expired rows go, not how fast the
bench's rows happen to expire.

hubjobs: what the retention Schedule would start (its workflow and arguments, read
from the product's own Schedule definition, which is not created), run by a hubjobs
worker process: rows removed over the run's time is its rate. A day holds one run an
interval, each removing at most the run's limit, so the Schedule sustains
``min(limit, rate × interval)`` rows an interval. The floor: one
``DELETE … WHERE id IN (SELECT … ORDER BY expires_at LIMIT 10000)`` a run (and of
those jobs' items), its rows over its time, all day long. Runs alternate.

    python bench/bench_retention.py [--rows 1000000] [--runs 4] [--backlog 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import psycopg
from bench_readmodel import jobs_table
from common import Stack, retention_schedule
from harness import Figure, Outcome, Target, median, ratio_of, rotate, say
from standalone import main_for

NAME = "retention"
TITLE = "Retention sweep"
DAY = 86_400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1_000_000, help="job rows (default 1000000)")
    parser.add_argument("--runs", type=int, default=4, help="sweep runs (default 4)")
    parser.add_argument(
        "--backlog", type=int, default=10_000, help="rows expired before each run (default 10000)"
    )
    parser.add_argument("--floor-batch", type=int, default=10_000, help="rows a floor DELETE")
    parser.add_argument("--floor-runs", type=int, default=3, help="floor DELETEs (default 3)")


def count_jobs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM jobs").fetchone()
    assert row is not None
    return int(row[0])


def backlog(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM jobs WHERE expires_at <= now()").fetchone()
    assert row is not None
    return int(row[0])


def expire_next(url: str, rows: int) -> int:
    """Makes the next ``rows`` jobs to expire have expired a minute ago; returns the
    backlog then (every row expired)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET expires_at = now() - interval '1 minute' WHERE id IN (SELECT id "
            "FROM jobs WHERE expires_at > now() ORDER BY expires_at LIMIT %s)",
            (rows,),
        )
        row = conn.execute("SELECT count(*) FROM jobs WHERE expires_at <= now()").fetchone()
    assert row is not None
    return int(row[0])


def floor_once(url: str, batch: int) -> tuple[int, float]:
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        # The jobs and their items (the product's sweep deletes both: no foreign key
        # cascades from jobs to job_items).
        found = conn.execute(
            "WITH gone AS (DELETE FROM jobs WHERE id IN (SELECT id FROM jobs "
            "WHERE expires_at <= now() ORDER BY expires_at LIMIT %s) RETURNING id), "
            "items AS (DELETE FROM job_items WHERE job_id IN (SELECT id FROM gone)) "
            "SELECT count(*) FROM gone",
            (batch,),
        ).fetchone()
        assert found is not None
        removed = int(found[0])
        return removed, time.perf_counter() - started


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    table = await jobs_table(stack, args.rows)
    hub = table.hub
    await hub.ensure_worker()
    workflow, workflow_args, interval = retention_schedule(hub.settings_object())
    limit = int(workflow_args[0])
    expired = await asyncio.to_thread(backlog, hub.url)
    floor_batch = min(args.floor_batch, args.backlog)
    sweeps: list[tuple[int, float]] = []
    floors: list[tuple[int, float]] = []
    async with hub.client() as client:
        n_floor = 0
        for n in range(max(args.runs, args.floor_runs)):
            for who in rotate(("hubjobs", "floor"), n):
                if who == "hubjobs" and n < args.runs:
                    await asyncio.to_thread(expire_next, hub.url, args.backlog)
                    before = await asyncio.to_thread(count_jobs, hub.url)
                    started = time.perf_counter()
                    await client.temporal.execute_workflow(
                        workflow,
                        args=workflow_args,
                        id=f"bench-sweep-{uuid.uuid4()}",
                        task_queue=hub.task_queue,
                    )
                    seconds = time.perf_counter() - started
                    removed = before - await asyncio.to_thread(count_jobs, hub.url)
                    sweeps.append((removed, seconds))
                    say(f"retention: sweep removed {removed} in {seconds * 1000:.0f} ms")
                elif who == "floor" and n_floor < args.floor_runs:
                    n_floor += 1
                    await asyncio.to_thread(expire_next, hub.url, args.backlog)
                    removed, seconds = await asyncio.to_thread(floor_once, hub.url, floor_batch)
                    floors.append((removed, seconds))
                    say(f"retention: floor removed {removed} in {seconds * 1000:.0f} ms")
    rate = median([r / s for r, s in sweeps])  # rows a second while a run works
    per_interval = min(limit, rate * interval)
    ours = per_interval * DAY / interval
    work_bound = rate * DAY
    floor = median([r / s for r, s in floors]) * DAY
    figures = [
        Figure(
            NAME,
            "retention: expirations a day, sustained",
            "/day",
            ours,
            floor,
            f"DELETE of {floor_batch:,}",
            ratio_of(ours, floor),
            Target(">=", 1_000_000, on="value", unit="/day"),
        )
    ]
    per_run = median([r for r, _ in sweeps])
    run_seconds = median([s for _, s in sweeps])
    notes = [
        f"retention: the Schedule runs {workflow}{tuple(workflow_args)} every {interval:g} s; "
        f"a run removed {per_run:,.0f} rows in {run_seconds:.1f} s (median of {len(sweeps)}; "
        f"{rate:,.0f} rows/s), so a run takes {limit:,} rows in {limit / rate:.0f} s "
        f"(interval {interval:g} s), {per_interval:,.0f} an interval; back to back "
        f"{work_bound:,.0f} a day; expired at the start: {expired:,} rows, "
        f"{args.backlog:,} more expired before each run"
    ]
    series = {"sweeps": sweeps, "floors": floors, "interval": interval}
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
