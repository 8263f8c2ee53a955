"""Every benchmark side by side on one set of servers, one table, the plots.

    python bench/run_all.py                       # what `make bench` runs (~25 minutes)
    python bench/run_all.py --quick               # small sizes, for development (~6 minutes)
    python bench/run_all.py --only tagging,api    # some of them
    python bench/run_all.py --tagging "--sizes 1000,10000,100000 --rounds 3 --seed-seconds 0"
    python bench/run_all.py --temporal-store file --sqlite-pragma journal_mode=WAL

Each benchmark's own flags go in one quoted string after ``--<name>`` (the flags are
those of ``python bench/bench_<name>.py --help``). Benchmarks share servers and data
where they can: the hub of the job benchmarks, the filled hub of backup and restore,
the million-row read model of readmodel and retention. One that fails is reported in
the table and the others still run. The table goes to stdout; the plots and a JSON
of every figure to bench/results/, from which bench/report.py (`make bench` runs it
next) writes docs/benchmarks.md and the README's table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
import traceback
from types import ModuleType

import bench_api
import bench_backup
import bench_burst
import bench_capacity
import bench_console
import bench_console_paint
import bench_costs
import bench_devstore
import bench_job_latency
import bench_peers
import bench_readmodel
import bench_restore
import bench_retention
import bench_sandbox
import bench_search
import bench_tagging
from common import FILE, MEMORY, Stack
from harness import (
    RESULTS,
    Clock,
    Figure,
    Outcome,
    exit_now,
    fmt,
    load_now,
    load_range,
    machine,
    parser_for,
    revision,
    say,
    table,
    write_json,
)
from plots import render

# The idle-server measurements first, then the heavy ones; retention after readmodel
# (it deletes from the same table), restore after backup (it restores its archives).
MODULES: list[ModuleType] = [
    bench_job_latency,
    bench_burst,
    bench_costs,
    bench_sandbox,
    bench_api,
    bench_peers,
    bench_devstore,
    bench_capacity,
    bench_tagging,
    bench_backup,
    bench_restore,
    bench_readmodel,
    bench_search,
    bench_retention,
    bench_console,
    bench_console_paint,
]


# --quick: each benchmark at a small size (for development: the figures are noisier and
# the targets are the full sizes'); flags given for a benchmark replace its quick ones.
QUICK: dict[str, str] = {
    "job_latency": "--runs 10 --warmup 2",
    "burst": "--jobs 100 --rounds 1 --starts 500",
    "costs": "--jobs 5 --big-jobs 1",
    "sandbox": "--runs 50 --rounds 1",
    "api": "--requests 100 --rounds 1",
    "peers": "--runs 5 --warmup 1 --bursts 200",
    "devstore": "--jobs 100 --rounds 1 --stores memory,file,wal-normal",
    "capacity": "--rates 5,15,30 --seconds 4",
    "tagging": "--sizes 1000,10000 --rounds 1 --seed-seconds 1",
    "backup": "--megabytes 30 --rounds 1",
    "restore": "--megabytes 30 --rounds 1",
    "readmodel": "--rows 50000 --runs 100",
    "search": "--rows 50000 --runs 50",
    "console": "--rows 50000 --runs 30",
    "console_paint": "--rows 50000 --runs 10",
    "retention": "--rows 50000 --runs 2 --backlog 2000 --floor-batch 2000 --floor-runs 1",
}


def main() -> int:
    names = [m.NAME for m in MODULES]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help=f"comma-separated, of: {', '.join(names)}")
    parser.add_argument("--skip", help="comma-separated benchmarks to leave out")
    for module in MODULES:
        parser.add_argument(
            f"--{module.NAME.replace('_', '-')}",
            default="",
            metavar="FLAGS",
            help=f"flags for bench_{module.NAME}.py (one quoted string)",
        )
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument(
        "--temporal-store",
        choices=(MEMORY, FILE),
        default=MEMORY,
        help="the stack's dev server store (file: the SQLite file `make run` uses)",
    )
    parser.add_argument(
        "--sqlite-pragma",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="with --temporal-store file, a --sqlite-pragma of the dev server (repeatable; "
        "default: `make run`'s, journal_mode=WAL synchronous=NORMAL)",
    )
    args = parser.parse_args()
    chosen = set(args.only.split(",")) if args.only else set(names)
    chosen -= set(args.skip.split(",")) if args.skip else set()
    unknown = chosen - set(names)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")

    outcomes: dict[str, Outcome] = {}
    clock = Clock()
    load_at_start = os.getloadavg()
    with Stack(args.temporal_store, args.sqlite_pragma) as stack:
        for module in MODULES:
            if module.NAME not in chosen:
                continue
            given = getattr(args, module.NAME)
            if not given and args.quick:
                given = QUICK.get(module.NAME, "")
            flags = parser_for(module).parse_args(shlex.split(given))
            say(f"== {module.NAME}: {module.TITLE}")
            stack.checkpoint()
            started, load_before = Clock(), load_now()
            try:
                outcome: Outcome = asyncio.run(module.run(stack, flags))
            except Exception as err:
                traceback.print_exc()
                outcome = Outcome(
                    [
                        Figure(
                            module.NAME,
                            f"{module.NAME}: FAILED ({type(err).__name__})",
                            "",
                            None,
                            None,
                            "",
                            None,
                            None,
                        )
                    ],
                    notes=[f"{module.NAME}: {err}"],
                )
            outcome.seconds = started.elapsed
            outcome.load = (load_before, load_now())
            outcomes[module.NAME] = outcome
            say(
                f"== {module.NAME} done in {outcome.seconds:.0f} s, load {load_range(outcome.load)}"
            )

    figures = [f for o in outcomes.values() for f in o.figures]
    load_at_end = os.getloadavg()
    print()
    store = " ".join([args.temporal_store, *stack.sqlite_pragmas])
    print(
        f"hubjobs benchmarks, {time.strftime('%Y-%m-%d %H:%M')}, {clock.elapsed:.0f} s in all"
        f"{' (--quick)' if args.quick else ''}; load average at start "
        f"{load_at_start[0]:.1f}, at the end {load_at_end[0]:.1f}; "
        f"Temporal dev server store: {store}"
    )
    print()
    print(table(figures, {name: o.load for name, o in outcomes.items()}))
    print()
    for name, outcome in outcomes.items():
        for note in outcome.notes:
            print(f"  {note}")
        print(f"  ({name}: {fmt(outcome.seconds)} s)")
    written = render(outcomes, RESULTS)
    write_json(
        RESULTS / "results.json",
        outcomes,
        {
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "seconds": clock.elapsed,
            "argv": sys.argv[1:],
            "load_average_at_start": load_at_start,
            "load_average_at_end": load_at_end,
            "temporal_store": [args.temporal_store, *stack.sqlite_pragmas],
            "machine": machine(),
            "commit": revision(),
        },
        written,
    )
    print()
    for path in [*written.values(), RESULTS / "results.json"]:
        print(f"wrote {path}")
    missed = [f for f in figures if f.met is False]
    print(f"{len(figures) - len(missed)} of {len(figures)} figures meet their target or have none")
    return 0


if __name__ == "__main__":
    code = 1
    try:
        code = main()
    finally:
        exit_now(code)
