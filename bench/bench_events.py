"""Open job event streams (``GET …/jobs/{id}/events``, Server-Sent Events) against
polling, on one ``hubjobs api`` process: N streams (``--streams``, 1,000 by default)
spread over 20 jobs held while those jobs run, then N clients each polling its job's
``GET`` once a second while 20 more run. For each: how long after the row became final
(its ``finished_at``) each client knew (every stream within 1 s is the target), the
API process's CPU (/proc) and the database's transaction rate (pg_stat_database's
commits: one per read of an autocommit connection, one per worker write).

    python bench/bench_events.py [--streams 1000] [--jobs 20] [--pages 400] [--pause 1.0]

By default each job runs about 40 s (40 batches of 10 pages, 1 s apart).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import psycopg
from common import HUBJOBS, DemoCourse, Hub, Stack, free_port, seed_courses
from harness import Figure, Outcome, Target, cpu_seconds, percentile, say, timed_run
from standalone import main_for

NAME = "events"
# A backend reports its counts to pg_stat_database within this long (10 s when idle).
STATS_FLUSH_SECONDS = 11
CLIENTS_PER_POOL = 25
TITLE = "Job event streams against polling"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--streams", type=int, default=1000, help="clients (default 1000)")
    parser.add_argument("--jobs", type=int, default=20, help="jobs run at once (default 20)")
    parser.add_argument("--pages", type=int, default=400, help="pages a job (default 400)")
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds between a job's batches (1.0)"
    )


@dataclass
class Run:
    """What one way of following (streams or polling) measured."""

    cpu: float = 0.0
    seconds: float = 0.0
    commits: int = 0
    lags: list[float] = field(default_factory=list)
    events: int = 0
    errors: int = 0

    def describe(self) -> str:
        lag = max(self.lags, default=float("nan"))
        return (
            f"{self.seconds:.1f} s, API CPU {self.cpu:.2f} s, {self.commits} commits, "
            f"{self.events} events or answers, {self.errors} retried, final lag max {lag:.3f} s"
        )


def commits(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def finished_at(url: str, job_ids: list[uuid.UUID]) -> dict[uuid.UUID, float]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, finished_at FROM jobs WHERE id = ANY(%s)", (job_ids,)
        ).fetchall()
    return {row[0]: row[1].timestamp() for row in rows if isinstance(row[1], datetime)}


async def stream_until_final(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], opened: asyncio.Event, run: Run
) -> float:
    """Reads the stream until its final event: when it came (wall clock)."""
    async with client.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"GET {url}: {response.status_code}")
        opened.set()
        kind = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                kind = line.partition(":")[2].strip()
                run.events += 1
            elif line == "" and kind == "final":
                return time.time()
    raise RuntimeError(f"{url}: the stream ended without a final event")


async def poll_until_final(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], opened: asyncio.Event, run: Run
) -> float:
    """GETs the job once a second until it is final: when it knew (wall clock)."""
    opened.set()
    while True:
        try:
            answer = await client.get(url, headers=headers)
        except httpx.TransportError:
            # The server closed an idle keep-alive connection as this poll went out:
            # a poller tries again, as any would.
            run.errors += 1
            continue
        run.events += 1
        if answer.status_code != 202:
            return time.time()
        await asyncio.sleep(1)


Follower = Callable[
    [httpx.AsyncClient, str, dict[str, str], asyncio.Event, Run], Coroutine[Any, Any, float]
]


async def follow(
    hub: Hub,
    api: tuple[str, int, dict[str, str]],
    courses: list[DemoCourse],
    args: argparse.Namespace,
    follower: Follower,
    suffix: str,
) -> Run:
    """Starts the jobs, has ``args.streams`` clients follow them with ``follower``."""
    base, pid, headers = api
    run = Run()
    # httpx looks through its pool at each request: a pool per few dozen clients keeps the
    # clients' side from being what is measured.
    limits = httpx.Limits(max_connections=CLIENTS_PER_POOL, max_keepalive_connections=None)
    pools = [
        httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(120), limits=limits)
        for _ in range(0, args.streams, CLIENTS_PER_POOL)
    ]
    async with hub.client() as hubjobs:
        jobs = hubjobs.scope(courses[0].workspace_id, courses[0].actor_id)
        started = [
            await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": f"ev-{suffix}"}
            )
            for course in courses[: args.jobs]
        ]
        path = f"/workspaces/{courses[0].workspace_id}/jobs"
        events = "/events" if follower is stream_until_final else ""
        flags = [asyncio.Event() for _ in range(args.streams)]
        tasks = [
            asyncio.create_task(
                follower(
                    pools[n // CLIENTS_PER_POOL],
                    f"{path}/{started[n % len(started)].id}{events}",
                    headers,
                    f,
                    run,
                )
            )
            for n, f in enumerate(flags)
        ]
        # Measured from when every client follows (not the opening: a GET's worth each).
        await asyncio.gather(*(flag.wait() for flag in flags))
        await asyncio.sleep(STATS_FLUSH_SECONDS)
        cpu0, commits0, t0 = cpu_seconds(pid), commits(hub.url), time.monotonic()
        seen = await asyncio.gather(*tasks)
        run.seconds = time.monotonic() - t0
        run.cpu = cpu_seconds(pid) - cpu0
        await asyncio.sleep(STATS_FLUSH_SECONDS)
        run.commits = commits(hub.url) - commits0
    for pool in pools:
        await pool.aclose()
    final = finished_at(hub.url, [job.id for job in started])
    run.lags = [max(0.0, at - final[started[n % len(started)].id]) for n, at in enumerate(seen)]
    return run


async def api_process(stack: Stack, hub: Hub, actor: uuid.UUID) -> tuple[str, int, dict[str, str]]:
    secret = secrets.token_hex(32)
    port = free_port()
    env = hub.env(api_jwt_secret=secret, api_port=port, api_host="127.0.0.1")
    _, token = await asyncio.to_thread(
        timed_run, [HUBJOBS, "token", "--actor", str(actor), "--ttl", "86400"], env=env
    )
    server = stack.spawn("api-events", [HUBJOBS, "api"], env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient() as probe:
        while True:
            try:
                if (await probe.get(f"{base}/health", timeout=2)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            server.require_alive()
            if time.monotonic() > deadline:
                raise TimeoutError("the API did not answer /health")
            await asyncio.sleep(0.2)
    return base, server.pid, {"Authorization": f"Bearer {token.strip()}"}


def figures_of(streams: Run, polling: Run, args: argparse.Namespace) -> list[Figure]:
    def rate(run: Run) -> float:
        return run.commits / run.seconds if run.seconds else float("nan")

    def cpu(run: Run) -> float:
        return run.cpu / run.seconds * 100 if run.seconds else float("nan")

    n = args.streams
    return [
        Figure(
            NAME,
            f"{n} streams: final event after the row, max",
            "s",
            max(streams.lags),
            max(polling.lags),
            f"{n} clients polling once a second",
            None,
            Target("<=", 1.0, on="value", unit="s"),
        ),
        Figure(
            NAME,
            f"{n} streams: final event after the row, p50",
            "s",
            percentile(streams.lags, 50),
            percentile(polling.lags, 50),
            f"{n} clients polling once a second",
            None,
            None,
        ),
        Figure(
            NAME,
            "API process CPU while following",
            "% of a core",
            cpu(streams),
            cpu(polling),
            f"{n} clients polling once a second",
            cpu(streams) / cpu(polling) if cpu(polling) else None,
            Target("<=", 0.5),
        ),
        Figure(
            NAME,
            "database commits per second while following",
            "/s",
            rate(streams),
            rate(polling),
            f"{n} clients polling once a second",
            rate(streams) / rate(polling) if rate(polling) else None,
            Target("<=", 0.5),
        ),
    ]


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    # A socket a stream on each side of one process: more than the usual 1024 files.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.streams + 256)), hard))
    hub = await stack.hub("events", tagging_batch_size=10, tagging_batch_pause_seconds=args.pause)
    async with hub.engine() as engine:
        courses = await seed_courses(engine, args.jobs, args.pages)
    api = await api_process(stack, hub, courses[0].actor_id)
    say(f"events: {args.streams} streams over {args.jobs} jobs")
    streams = await follow(hub, api, courses, args, stream_until_final, "sse")
    say(f"events: streams {streams.describe()}")
    say(f"events: {args.streams} clients polling over {args.jobs} jobs")
    polling = await follow(hub, api, courses, args, poll_until_final, "poll")
    say(f"events: polling {polling.describe()}")
    figures = figures_of(streams, polling, args)
    extra = {
        "streams": {
            "cpu_s": streams.cpu,
            "seconds": streams.seconds,
            "commits": streams.commits,
            "events": streams.events,
        },
        "polling": {
            "cpu_s": polling.cpu,
            "seconds": polling.seconds,
            "commits": polling.commits,
            "requests": polling.events,
        },
    }
    say("events: " + json.dumps(extra))
    notes = [
        f"events: {args.streams} clients over {args.jobs} course-tagging jobs of {args.pages} "
        f"pages (batches of 10, {args.pause} s apart), one API process; streams "
        f"{streams.seconds:.1f} s, polling {polling.seconds:.1f} s; commits include the "
        "worker's writes, the same in both",
    ]
    return Outcome(figures, extra, notes)


if __name__ == "__main__":
    main_for(sys.modules[__name__])
