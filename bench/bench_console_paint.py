"""The operator page's first paint at scale: headless Chromium opens the jobs list and the
overview (its default window, the last hour) of the largest workspace of a 1,000,000-row
read model, served by ``hubjobs api`` (uvicorn, as `make run` serves it), and reads the
page's own marks (``hubjobs:jobs-painted``, ``hubjobs:overview-painted``) from the
navigation's start; against the same views of an empty workspace on the same server (the
page's own cost without data).

Each load is a new tab of one browser context: its HTTP cache as a returning user's (the
page's files are served ``no-cache``: each load asks for them again) and the tab's token
in its sessionStorage, as after signing in. The rows are bench/console_data.py's.

    python bench/bench_console_paint.py [--rows 1000000] [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
from bench_events import api_process
from common import Stack
from console_data import console_hub, members
from harness import Figure, Outcome, Target, median, percentile, ratio_of, rotate, say
from standalone import main_for

NAME = "console_paint"
TITLE = "Console first paint at 1,000,000 job rows"
TARGET_MS = 300.0
EMPTY = uuid.UUID(int=0xC0501E0000FF)
VIEWS = {"jobs list": ("jobs", "/jobs?"), "overview (hour)": ("overview", "/overview?")}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# What one load tells: its mark, the document's scripts run (DOMContentLoaded's end), and
# each request the page made that has ended (a stream never ends: not listed).
ENTRIES = """(mark) => ({
    at: performance.getEntriesByName(mark, "mark")[0].startTime,
    ready: performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd,
    requests: performance.getEntriesByType("resource").map((r) => ({
        name: r.name, start: r.startTime, end: r.responseEnd,
    })),
})"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1_000_000, help="job rows (default 1000000)")
    parser.add_argument("--runs", type=int, default=40, help="loads of each view (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="loads first, not counted")
    parser.add_argument(
        "--chromium", type=Path, default=Path("/usr/bin/chromium"), help="the browser"
    )


def add_empty_workspace(url: str) -> None:
    """A workspace with no jobs, the measured workspace's administrator its administrator
    too (one token opens both)."""
    actor = members()[0][1]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workspaces (id, name) VALUES (%s, 'Empty') ON CONFLICT DO NOTHING",
            (EMPTY,),
        )
        conn.execute(
            "INSERT INTO workspace_memberships (workspace_id, user_id, role) "
            "VALUES (%s, %s, 'administrator') ON CONFLICT DO NOTHING",
            (EMPTY, actor),
        )


def phases(load: dict[str, Any], data_path: str) -> dict[str, float]:
    """Where a load's time went (ms from the navigation's start): the page's scripts run,
    the view's data asked for and answered, and the mark."""
    asked = [r for r in load["requests"] if data_path in r["name"]]
    if not asked:
        raise RuntimeError(f"no request for {data_path} before the mark: {load['requests']}")
    return {
        "scripts run": load["ready"],
        "data asked": asked[0]["start"],
        "data answered": asked[0]["end"],
        "painted": load["at"],
    }


async def measure(
    base: str, token: str, chromium: Path, runs: int, warmup: int
) -> dict[tuple[str, str], list[dict[str, float]]]:
    """Each view of each workspace loaded ``warmup + runs`` times, in turn, a new tab each."""
    from playwright.async_api import async_playwright

    spaces = {"data": members()[0][0], "empty": EMPTY}
    combos = [(view, space) for view in VIEWS for space in spaces]
    found: dict[tuple[str, str], list[dict[str, float]]] = {c: [] for c in combos}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            for n in range(warmup + runs):
                for view, space in rotate(combos, n):
                    route, data_path = VIEWS[view]
                    ws = spaces[space]
                    mark = f"hubjobs:{route}-painted"
                    page = await context.new_page()
                    # As the tab holds it once signed in: set before the page's script runs.
                    await page.add_init_script(
                        f"sessionStorage.setItem('hubjobs.token', {json.dumps(token)});"
                        f"sessionStorage.setItem('hubjobs.workspace', '{ws}');"
                    )
                    await page.goto(f"{base}/operator/#/w/{ws}/{route}", wait_until="commit")
                    await page.wait_for_function(
                        "(m) => performance.getEntriesByName(m, 'mark').length > 0",
                        arg=mark,
                        timeout=60_000,
                    )
                    load = await page.evaluate(ENTRIES, mark)
                    await page.close()
                    if n >= warmup:
                        found[(view, space)].append(phases(load, data_path))
        finally:
            await context.close()
            await browser.close()
    return found


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await console_hub(stack, args.rows)
    add_empty_workspace(hub.url)
    base, _, headers = await api_process(stack, hub, members()[0][1])
    token = headers["Authorization"].removeprefix("Bearer ")
    say(f"paint: {args.runs} loads of each view in Chromium, {args.warmup} first to warm")
    found = await measure(base, token, args.chromium, args.runs, args.warmup)
    painted = {c: [load["painted"] for load in loads] for c, loads in found.items()}
    figures = []
    for view in VIEWS:
        for q in (50, 95):
            ours, empty = (percentile(painted[(view, s)], q) for s in ("data", "empty"))
            figures.append(
                Figure(
                    NAME,
                    f"p{q} {view} first paint",
                    "ms",
                    ours,
                    empty,
                    f"empty workspace, p{q}",
                    ratio_of(ours, empty),
                    Target("<=", TARGET_MS, on="value", unit="ms") if q == 95 else None,
                )
            )
    with psycopg.connect(hub.url) as conn:
        largest = conn.execute(
            "SELECT count(*) FROM jobs WHERE workspace_id = %s", (members()[0][0],)
        ).fetchone()
    medians = {
        f"{view}, {space}": {k: median([load[k] for load in loads]) for k in loads[0]}
        for (view, space), loads in found.items()
    }
    notes = [
        f"console_paint: {args.rows:,} job rows, {largest[0] if largest else 0:,} in the "
        f"workspace measured; {args.runs} loads of each view after {args.warmup} to warm, a "
        "new tab each, views and workspaces in turn"
    ]
    notes += [
        f"{label}, median ms from the navigation's start: "
        + ", ".join(f"{k} {v:.0f}" for k, v in phase.items())
        for label, phase in medians.items()
    ]
    series = {
        "rows": args.rows,
        "p50_ms": {f"{v}, {s}": percentile(ms, 50) for (v, s), ms in painted.items()},
        "p95_ms": {f"{v}, {s}": percentile(ms, 95) for (v, s), ms in painted.items()},
        "median_phases_ms": medians,
    }
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
