"""The embedded Temporal server's store: the same floor code (``BareDbJob``, its rows
in PostgreSQL) against dev servers keeping their state in memory, in a SQLite file as
`make run` keeps it (``--db-filename``, SQLite's defaults), and in the file with
``--sqlite-pragma`` settings. For each: the time 200 concurrent starts take to return
(each its row, then the workflow's start) and the burst's jobs/s until every final row
is committed. Each setting has a dev server of its own on the stack's PostgreSQL;
rounds alternate the settings.

What each setting risks (SQLite's documentation; a dev server's process being killed
is not a power loss: the OS keeps what was written):

* file, defaults (rollback journal, synchronous=FULL): every commit fsynced twice;
  survives a power loss.
* journal_mode=WAL (synchronous stays FULL): one fsync a commit (the WAL); survives a
  power loss.
* journal_mode=WAL + synchronous=NORMAL: no fsync at commit, only at checkpoints; a
  killed process loses nothing, a power loss or OS crash may lose the last
  transactions since the checkpoint, never corrupts the file.
* synchronous=OFF: no fsync at all; a killed process loses nothing, a power loss or OS
  crash may corrupt the database.

The crash check (``--crash-jobs``, default 50): on each file store, that many workflows
started on a task queue nobody polls, the dev server killed (SIGKILL, as a crash of
its process, not of the machine), started again on the same file: every workflow must
still be there, running (what `make run` promises: running jobs survive a restart).

    python bench/bench_devstore.py [--jobs 200] [--rounds 2] [--stores memory,file,wal,...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import uuid
from typing import Any

from bench_burst import floor_burst
from common import DEV_STORE_PRAGMAS, FILE, MEMORY, Stack
from harness import (
    Figure,
    Outcome,
    Target,
    median,
    poll_until,
    ratio_of,
    rotate,
    say,
)
from standalone import main_for
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import WorkflowExecutionStatus

NAME = "devstore"
TITLE = "The embedded Temporal server's store (SQLite pragmas)"

# name: (store, pragmas, what it is)
STORES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "memory": (MEMORY, (), "in memory (lost at exit)"),
    "file": (FILE, (), "SQLite file, defaults (`make run` before issue 22)"),
    "wal": (FILE, ("journal_mode=WAL",), "file, journal_mode=WAL"),
    "wal-normal": (FILE, DEV_STORE_PRAGMAS, "file, WAL + sync NORMAL (`make run`)"),
    "sync-off": (FILE, ("synchronous=OFF",), "file, synchronous=OFF"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=200, help="jobs started at once (default 200)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each (default 2)")
    parser.add_argument(
        "--stores",
        default=",".join(STORES),
        help=f"comma-separated, of: {', '.join(STORES)} (default all)",
    )
    parser.add_argument(
        "--crash-jobs",
        type=int,
        default=50,
        help="workflows that must survive a killed file-store server (0: no check)",
    )


async def crash_check(stack: Stack, key: str, count: int) -> tuple[int, int]:
    """Workflows started, then the server killed and started again on its file: how
    many were found running afterwards, of ``count``."""
    address = stack.extra_temporal(key, *STORES[key][:2])
    server = stack.extra_server(key)
    client = await stack.temporal_client(address)
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    ids = [f"crash-{uuid.uuid4()}" for _ in range(count)]
    await asyncio.gather(
        *(client.start_workflow("BareJob", "x", id=i, task_queue=queue) for i in ids)
    )
    pid = server.running_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    async def gone() -> bool:
        return server.running_pid() is None

    await poll_until(gone, interval=0.05, timeout=10, what="the killed dev server still runs")
    port, ui = stack.extra_ports[key]
    server.start(port, ui)
    client = None
    for _ in range(60):  # listening is not answering yet: it reads its file first
        try:
            client = await stack.temporal_client(address)
            await client.workflow_service.get_system_info(GetSystemInfoRequest())
            break
        except RuntimeError:
            await asyncio.sleep(0.5)
    assert client is not None, "the restarted dev server did not answer"
    found = 0
    for i in ids:
        described = await client.get_workflow_handle(i).describe()
        found += described.status == WorkflowExecutionStatus.RUNNING
        await client.get_workflow_handle(i).terminate("bench: crash check")
    return found, count


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    chosen = [s for s in args.stores.split(",") if s]
    unknown = set(chosen) - set(STORES)
    if unknown:
        raise SystemExit(f"unknown store(s): {', '.join(sorted(unknown))}")
    floors: dict[str, Any] = {}
    clients: dict[str, Any] = {}
    for key in chosen:
        store, pragmas, _ = STORES[key]
        address = stack.extra_temporal(key, store, pragmas)
        floors[key] = await stack.floor(f"store_{key.replace('-', '_')}", address)
        clients[key] = await stack.temporal_client(address)
    rates: dict[str, list[float]] = {k: [] for k in chosen}
    starts: dict[str, list[float]] = {k: [] for k in chosen}
    survived: dict[str, tuple[int, int]] = {}
    try:
        for n in range(args.rounds):
            for key in rotate(chosen, n):
                returned, seconds = await floor_burst(clients[key], floors[key], args.jobs)
                rates[key].append(args.jobs / seconds)
                starts[key].append(returned)
                say(
                    f"devstore round {n + 1}: {key} {args.jobs / seconds:.1f} jobs/s, "
                    f"starts returned in {returned:.2f} s"
                )
                await asyncio.sleep(1)
        for key in chosen:
            if args.crash_jobs and STORES[key][0] == FILE:
                survived[key] = await crash_check(stack, key, args.crash_jobs)
                say(f"devstore crash check {key}: {survived[key][0]}/{survived[key][1]} running")
    finally:
        for key in chosen:
            floors[key].process.stop()
            stack.stop_extra_temporal(key)
    base = "memory" if "memory" in chosen else chosen[0]
    figures: list[Figure] = []
    for key in chosen:
        rate, start = median(rates[key]), median(starts[key])
        label = STORES[key][2]
        figures.append(
            Figure(
                NAME,
                f"dev server {label}: {args.jobs} floor jobs at once",
                "jobs/s",
                rate,
                median(rates[base]),
                STORES[base][2],
                ratio_of(rate, median(rates[base])),
                None,
            )
        )
        figures.append(
            Figure(
                NAME,
                f"dev server {label}: {args.jobs} starts returned",
                "s",
                start,
                median(starts[base]),
                STORES[base][2],
                ratio_of(start, median(starts[base])),
                None,
            )
        )
    for key, (found, count) in survived.items():
        figures.append(
            Figure(
                NAME,
                f"dev server {STORES[key][2]}: workflows running after a SIGKILL",
                "",
                found,
                count,
                "started",
                found / count,
                Target(">=", 1.0),
            )
        )
    notes = [
        f"devstore: medians of {args.rounds} rounds, settings alternating; each a dev server "
        "of its own on the stack's PostgreSQL; the floor's code (BareDbJob) on each",
        "devstore: a SIGKILL is a crash of the server's process: what the OS had been handed "
        "survives it; synchronous=NORMAL/OFF risk the last commits (OFF: the file) only on a "
        "power loss or OS crash, which this check cannot make",
    ]
    series = {"rates": rates, "starts_returned_s": starts, "survived": survived}
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
