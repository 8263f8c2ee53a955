"""The console's API at scale: p50 and p95 of ``GET …/overview`` (hour and day) and of
``GET …/jobs`` (the first page, and failed jobs only) through the API app in process
(httpx, ASGI: the routes, the token, the client's read pool, JSON), on a jobs table of
1,000,000 rows, against ``GET …/jobs/{id}`` of one job through the same app. The rows
are bench/console_data.py's.

    python bench/bench_console.py [--rows 1000000] [--runs 300]
"""

from __future__ import annotations

import argparse
import time

import httpx
import psycopg
from common import Stack
from console_data import console_hub, members
from harness import Figure, Outcome, Target, percentile, ratio_of
from pydantic import SecretStr
from standalone import main_for

from hubjobs.settings import Settings
from starter.api import create_app
from starter.api.tokens import mint
from starter.client import HubJobsClient

NAME = "console"
TITLE = "Console API at 1,000,000 job rows"
TARGET_MS = 50.0
SECRET = "bench-console-secret-" + "x" * 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1_000_000, help="job rows (default 1000000)")
    parser.add_argument("--runs", type=int, default=300, help="calls of each (default 300)")


async def timed(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    answer = await client.get(url, headers=headers)
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status_code != 200:
        raise RuntimeError(f"{url}: {answer.status_code} {answer.text[:200]}")
    return elapsed


async def measure(settings: Settings, runs: int) -> dict[str, list[float]]:
    """Milliseconds of each call, interleaved run by run, the largest workspace's."""
    workspace, actor = members()[0]
    hub = HubJobsClient(settings=settings)
    app = create_app(settings, client=hub)
    headers = {"Authorization": f"Bearer {mint(actor, settings)}"}
    base = f"/workspaces/{workspace}"
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://hubjobs"
        ) as client:
            # Succeeded: a job running answers 202, a failed one its error.
            listed = await client.get(
                f"{base}/jobs", params={"limit": 200, "status": "succeeded"}, headers=headers
            )
            ids = [job["id"] for job in listed.json()["jobs"]]
            calls = {
                "overview (hour)": f"{base}/overview",
                "overview (day)": f"{base}/overview?window=day",
                "jobs list": f"{base}/jobs",
                "jobs list (failed)": f"{base}/jobs?status=failed",
                # A bulk retry's count, asked first: the page reads up to 1,000 rows.
                "retry count": f"{base}/jobs?to_retry=true&limit=1000",
            }
            for url in calls.values():  # warm: the pool's connections, the plans
                for _ in range(5):
                    await timed(client, url, headers)
            ms: dict[str, list[float]] = {label: [] for label in [*calls, "one job"]}
            for n in range(runs):
                for label, url in calls.items():
                    ms[label].append(await timed(client, url, headers))
                ms["one job"].append(
                    await timed(client, f"{base}/jobs/{ids[n % len(ids)]}", headers)
                )
    finally:
        await hub.close()
    return ms


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await console_hub(stack, args.rows)
    settings = hub.settings_object().model_copy(update={"api_jwt_secret": SecretStr(SECRET)})
    ms = await measure(settings, args.runs)
    baseline = percentile(ms.pop("one job"), 95)
    figures = [
        Figure(
            NAME,
            f"p95 {label}",
            "ms",
            percentile(values, 95),
            baseline,
            "GET one job, p95",
            ratio_of(percentile(values, 95), baseline),
            Target("<=", TARGET_MS, on="value", unit="ms"),
        )
        for label, values in ms.items()
    ]
    with psycopg.connect(hub.url) as conn:
        largest = conn.execute(
            "SELECT count(*) FROM jobs WHERE workspace_id = %s", (members()[0][0],)
        ).fetchone()
    series = {
        "rows": args.rows,
        "p50_ms": {label: percentile(values, 50) for label, values in ms.items()},
        "p95_ms": {label: percentile(values, 95) for label, values in ms.items()},
        "one_job_p95_ms": baseline,
    }
    notes = [
        f"console: {args.rows:,} job rows, {largest[0] if largest else 0:,} in the workspace "
        f"measured; {args.runs} calls each, p50 "
        + ", ".join(f"{label} {percentile(values, 50):.1f} ms" for label, values in ms.items())
    ]
    return Outcome(figures, series, notes)


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
