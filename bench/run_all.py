"""Every benchmark side by side on one set of servers, one table, the plots.

    python bench/run_all.py                       # what `make bench` runs (~10 minutes)
    python bench/run_all.py --only tagging,api    # some of them
    python bench/run_all.py --tagging "--sizes 1000,10000,100000 --rounds 3 --seed-seconds 0"

Each benchmark's own flags go in one quoted string after ``--<name>`` (the flags are
those of ``python bench/bench_<name>.py --help``). Benchmarks share servers and data
where they can: the hub of the job benchmarks, the filled hub of backup and restore,
the million-row read model of readmodel and retention. One that fails is reported in
the table and the others still run. The table goes to stdout; the plots and a JSON
of every figure to bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
import traceback
from types import ModuleType

import bench_api
import bench_backup
import bench_burst
import bench_cli
import bench_job_latency
import bench_readmodel
import bench_restore
import bench_retention
import bench_tagging
from common import Stack
from harness import (
    RESULTS,
    Clock,
    Figure,
    Outcome,
    exit_now,
    fmt,
    parser_for,
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
    bench_cli,
    bench_api,
    bench_tagging,
    bench_backup,
    bench_restore,
    bench_readmodel,
    bench_retention,
]


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
    args = parser.parse_args()
    chosen = set(args.only.split(",")) if args.only else set(names)
    chosen -= set(args.skip.split(",")) if args.skip else set()
    unknown = chosen - set(names)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")

    outcomes: dict[str, Outcome] = {}
    clock = Clock()
    with Stack() as stack:
        for module in MODULES:
            if module.NAME not in chosen:
                continue
            flags = parser_for(module).parse_args(shlex.split(getattr(args, module.NAME)))
            say(f"== {module.NAME}: {module.TITLE}")
            stack.checkpoint()
            started = Clock()
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
            outcomes[module.NAME] = outcome
            say(f"== {module.NAME} done in {outcome.seconds:.0f} s")

    figures = [f for o in outcomes.values() for f in o.figures]
    print()
    print(f"hubjobs benchmarks, {time.strftime('%Y-%m-%d %H:%M')}, {clock.elapsed:.0f} s in all")
    print()
    print(table(figures))
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
        },
    )
    print()
    for path in [*written, RESULTS / "results.json"]:
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
