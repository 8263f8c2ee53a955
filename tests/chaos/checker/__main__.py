"""``python -m tests.chaos.checker``: every invariant checked against the stack the
campaign leaves (its state folder's ``stack.json`` says where PostgreSQL and Temporal
are) and the campaign's ledger; the verdicts as JSON. Exit 1 on any violation.

The webhook signing secret comes in ``CHAOS_WEBHOOK_SECRET`` (not on the command line)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg
from temporalio.client import Client

from tests.chaos.checker.backups import backups_restore
from tests.chaos.checker.cancels import cancels_honoured
from tests.chaos.checker.facts import Facts, gather
from tests.chaos.checker.items import counters_equal_items, each_effect_once
from tests.chaos.checker.keys import one_job_per_key
from tests.chaos.checker.runs import nothing_stuck, rows_and_runs
from tests.chaos.checker.verdict import Verdict, verdict
from tests.chaos.checker.webhooks import webhooks_delivered


def jobs_by_kind(facts: Facts) -> dict[str, dict[str, int]]:
    """kind -> outcome -> jobs; a job that succeeded with items failed is its own
    outcome, as the product shows it."""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for job in facts.jobs.values():
        outcome = job.status
        if job.status == "succeeded" and job.failed:
            outcome = "succeeded with failed items"
        elif job.status == "failed" and job.error_code:
            outcome = f"failed {job.error_code}"
        table[job.kind][outcome] += 1
    return {kind: dict(sorted(c.items())) for kind, c in sorted(table.items())}


def jobs_by_origin(facts: Facts) -> dict[str, int]:
    """How the jobs came: fired by a schedule, a retry of another's failed items, a
    start (with an idempotency key or without)."""
    origins: Counter[str] = Counter()
    for job in facts.jobs.values():
        if job.schedule_id is not None:
            origins["scheduled"] += 1
        elif job.source_job_id is not None:
            origins["retry"] += 1
        elif job.idempotency_key is not None:
            origins["started with a key"] += 1
        else:
            origins["started"] += 1
    return dict(sorted(origins.items()))


async def check(
    home: Path,
    ledger: Path,
    faults_ended_at: float,
    *,
    task_queue: str,
    hubjobs: Path,
    secret: bytes,
    restores: bool = True,
) -> dict[str, Any]:
    """Every verdict; ``restores=False`` leaves the backups unrestored (the checker's
    own test, where one case in ten is about backups)."""
    facts = await gather(home, ledger, faults_ended_at, task_queue)
    async with await psycopg.AsyncConnection.connect(
        facts.addresses.database_url, autocommit=True, connect_timeout=10
    ) as conn:
        first = await each_effect_once(conn, facts)
    client = await Client.connect(facts.addresses.temporal_address)
    verdicts: list[Verdict] = [
        first,
        await counters_equal_items(facts),
        rows_and_runs(facts),
        cancels_honoured(facts),
        await backups_restore(facts, hubjobs) if restores else verdict(5),
        webhooks_delivered(facts, secret),
        one_job_per_key(facts),
        await nothing_stuck(facts, client, task_queue),
    ]
    return {
        "jobs": jobs_by_kind(facts),
        "jobs_by_origin": jobs_by_origin(facts),
        "job_count": len(facts.jobs),
        "invariants": [v.as_json() for v in verdicts],
        "violations": sum(len(v.violations) for v in verdicts),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.checker")
    parser.add_argument("--home", type=Path, required=True, help="the stack's state folder")
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--faults-ended-at", type=float, required=True, help="epoch seconds")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task-queue", default="hubjobs")
    parser.add_argument("--hubjobs", type=Path, default=Path(sys.executable).parent / "hubjobs")
    args = parser.parse_args(argv)
    secret = os.environ.get("CHAOS_WEBHOOK_SECRET", "").encode()
    report = asyncio.run(
        check(
            args.home,
            args.ledger,
            args.faults_ended_at,
            task_queue=args.task_queue,
            hubjobs=args.hubjobs,
            secret=secret,
        )
    )
    args.out.write_text(json.dumps(report, indent=2, default=str))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
