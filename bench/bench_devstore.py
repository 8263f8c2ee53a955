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

    python bench/bench_devstore.py [--jobs 200] [--rounds 2] [--stores memory,file,wal,...]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from bench_burst import floor_burst
from common import FILE, MEMORY, Stack
from harness import Figure, Outcome, main_for, median, ratio_of, rotate, say

NAME = "devstore"
TITLE = "The embedded Temporal server's store (SQLite pragmas)"

# name: (store, pragmas, what it is)
STORES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "memory": (MEMORY, (), "in memory (lost at exit)"),
    "file": (FILE, (), "SQLite file, defaults (`make run` today)"),
    "wal": (FILE, ("journal_mode=WAL",), "file, journal_mode=WAL"),
    "wal-normal": (FILE, ("journal_mode=WAL", "synchronous=NORMAL"), "file, WAL + sync NORMAL"),
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
    notes = [
        f"devstore: medians of {args.rounds} rounds, settings alternating; each a dev server "
        "of its own on the stack's PostgreSQL; the floor's code (BareDbJob) on each"
    ]
    return Outcome(figures, {"rates": rates, "starts_returned_s": starts}, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
