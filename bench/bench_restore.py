"""Restore into an empty database: ``hubjobs restore ARCHIVE --database-url URL`` (the
CLI, as a process: checksums, schema, COPY through its default number of connections,
keys, migrations, ANALYZE, attachment files) against ``pg_restore -d URL`` of the
pg_dump archive of the same hub followed by ``vacuumdb --analyze-only`` (a restored
database without planner statistics walks into the traps the benchmarks found, so the
baseline analyses what it loaded, as hubjobs' restore must), each into a database
created empty for it (fsync on). Median of 5 alternating rounds; the target is ≤0.7×
single-job pg_restore. In each round, for information (notes): ``pg_restore -j 2`` (two
jobs, as many as the machine's cores: it cannot split the one table that holds nearly
all the data), and hubjobs with ``--connections`` 1, 2 and 4, whose speed-up over one
connection is what a bigger server gains (``--connections-series``).

The archives are bench_backup's (made here first when run alone).

    python bench/bench_restore.py [--megabytes 300] [--rounds 5] [--connections-series 1,2,4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys

from bench_backup import backup_hub, hubjobs_backup, pg_dump
from common import HUBJOBS, Stack, pg_bin
from harness import Figure, Outcome, Target, median, ratio_of, rotate, say, timed_run
from standalone import main_for

from hubjobs.ops.restore import default_connections

NAME = "restore"
TITLE = "Restore into an empty database"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--megabytes", type=int, default=300, help="hub size (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    parser.add_argument(
        "--connections-series",
        default="1,2,4",
        help="hubjobs restores with these --connections too, for the speed-up (empty: none)",
    )


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    target = await backup_hub(stack, args.megabytes)
    hub = target.hub
    if target.archive is None:
        target.archive = (await hubjobs_backup(target, []))[1]
    if target.dump is None:
        target.dump = hub.home / "pg_dump.dump"
        await asyncio.to_thread(pg_dump, hub.url, target.dump)
    series = [int(n) for n in args.connections_series.split(",") if n.strip()]
    contenders = ["hubjobs", "pg_restore", "pg_restore -j 2", *(f"hubjobs {n}" for n in series)]
    times: dict[str, list[float]] = {who: [] for who in contenders}
    analyse: list[float] = []
    for n in range(args.rounds):
        for who in rotate(contenders, n):
            name = f"restore_{contenders.index(who)}_{n}"
            url = stack.empty_database(name)
            stack.checkpoint()
            if who.startswith("hubjobs"):
                files = hub.home / f"restored-{n}"
                command = [
                    HUBJOBS,
                    "restore",
                    str(target.archive),
                    "--database-url",
                    url,
                    "--attachments-dir",
                    str(files),
                    "--json",
                ]
                if who != "hubjobs":
                    command += ["--connections", who.split()[1]]
                seconds, _ = await asyncio.to_thread(timed_run, command, env=hub.env())
                shutil.rmtree(files, ignore_errors=True)
            else:
                jobs = ["-j", "2"] if who.endswith("-j 2") else []
                command = [pg_bin("pg_restore"), *jobs, "-d", url, str(target.dump)]
                loaded, _ = await asyncio.to_thread(timed_run, command)
                command = [pg_bin("vacuumdb"), "--analyze-only", "-d", url]
                analysed, _ = await asyncio.to_thread(timed_run, command)
                if not jobs:
                    analyse.append(analysed)
                seconds = loaded + analysed
            stack.drop_database(name)
            times[who].append(seconds)
            say(f"restore round {n + 1}: {who} {seconds:.1f} s")
    ours, theirs = median(times["hubjobs"]), median(times["pg_restore"])
    parallel = median(times["pg_restore -j 2"])
    figures = [
        Figure(
            NAME,
            f"restore of a {target.database_bytes / 1e6:.0f} MB hub into an empty database "
            f"({default_connections()} connections)",
            "s",
            ours,
            theirs,
            "pg_restore + vacuumdb --analyze-only",
            ratio_of(ours, theirs),
            Target("<=", 0.7),
        )
    ]
    notes = [
        f"restore: medians of {args.rounds} rounds; pg_restore single job, no -1, then "
        f"vacuumdb --analyze-only ({median(analyse):.1f} s of the baseline's "
        f"{theirs:.1f} s)",
        f"restore: pg_restore -j 2 + vacuumdb --analyze-only (information, not the target): "
        f"{parallel:.2f} s; hubjobs {ours / parallel:.2f}x that",
    ]
    if series:
        by = {k: median(times[f"hubjobs {k}"]) for k in series}
        speedups = ", ".join(f"{k} {by[k]:.2f} s ({by[series[0]] / by[k]:.2f}x)" for k in series)
        notes.append(
            f"restore: by connections (information; {os.cpu_count()} cores here): {speedups}"
        )
    return Outcome(figures, {"times": times}, notes)


if __name__ == "__main__":
    main_for(sys.modules[__name__])
