"""Running one benchmark module on its own (``python bench/bench_x.py [flags]``): its
own servers, its table, plots and JSON. Above harness, common and plots, which know
nothing of it."""

from __future__ import annotations

import argparse
import asyncio
from types import ModuleType
from typing import Protocol

from common import Stack
from harness import (
    RESULTS,
    Clock,
    Outcome,
    exit_now,
    load_now,
    parser_for,
    pg_settings,
    table,
    write_json,
)


class BenchModule(Protocol):
    NAME: str
    TITLE: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    async def run(self, stack: Stack, args: argparse.Namespace) -> Outcome: ...


def main_for(module: ModuleType) -> None:
    """``python bench/bench_x.py [flags]``: the benchmark alone, on servers of its own."""
    from plots import render  # matplotlib (the bench extra): only when it draws

    args = parser_for(module).parse_args()
    code = 0
    try:
        with Stack(pg_settings=pg_settings(args.pg_setting)) as stack:
            clock, load_at_start = Clock(), load_now()
            outcome: Outcome = asyncio.run(module.run(stack, args))
            outcome.seconds = clock.elapsed
            outcome.load = (load_at_start, load_now())
        print(table(outcome.figures, {module.NAME: outcome.load}))
        for note in outcome.notes:
            print(f"  note: {note}")
        written = render({module.NAME: outcome}, RESULTS)
        for path in written.values():
            print(f"plot: {path}")
        write_json(RESULTS / f"{module.NAME}.json", {module.NAME: outcome}, {}, written)
    except BaseException as err:  # report, then leave as a failure
        import traceback

        traceback.print_exception(err)
        code = 1
    exit_now(code)
