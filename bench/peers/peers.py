# The peers' packages live in the peers' venv, not in the one mypy runs in: their
# imports are unresolved there, and their decorators untyped.
# mypy: disallow-untyped-decorators=False
"""The peers a user might pick instead of hubjobs, each running the same one-page job
(bench/onepage.py: one transaction -- the page's version read, the ETag-guarded update,
its revision, the item's outcome, the final row) on a database of its own. Runs in the
peers' venv (bench/.peers-venv, Python 3.12: oban needs it), never imports hubjobs.

    python bench/peers/peers.py install --peer oban --url URL
    python bench/peers/peers.py worker  --peer oban --url URL [--concurrency 10]
    python bench/peers/peers.py latency --peer oban --url URL --runs 30 --warmup 3 --pause 0.3
    python bench/peers/peers.py burst   --peer oban --url URL --jobs 200

``latency`` and ``burst`` print one JSON object on stdout. Each starts a job as the
Temporal floor's starter does: the job's row and item in one transaction, then the
peer's enqueue; a job's end is its final row's commit (NOTIFY, bench/pg.py).

The configuration of each, from its documentation, for its lowest latency while
staying a durable queue (nothing in memory only):

* procrastinate: ``run_worker_async(concurrency=10, listen_notify=True)`` (wake on the
  insert's NOTIFY; ``fetch_job_polling_interval`` only the safety net, left at 5 s).
* pgqueuer: the ``QueueManager`` on a psycopg connection (LISTEN/NOTIFY on the
  insert), entrypoint ``concurrency_limit=10``, ``batch_size=10``, ``max_concurrent_tasks=20``
  (the floor of two batches it requires) and the default 30 s ``dequeue_timeout``
  (the poll is the safety net; notifications wake it).
* oban: ``queues={"bench": 10}`` with the PostgreSQL notifier (insert notifications
  wake the producer), the default 5 ms dispatch debounce and 1 s stager.
* dbos: ``register_queue("bench", worker_concurrency=10, polling_interval_sec=0.05)``:
  DBOS queues are polled (its default is 1 s, its docs say lower it for latency; 50 ms
  is the sane bottom for a poll of the system database); the workflow has one step
  running the job.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import onepage
import psycopg
from pg import FinalWatcher

QUEUE = "bench"


def lib(name: str) -> Any:
    """A peer's module, imported when its peer runs (only the peers' venv has them)."""
    return importlib.import_module(name)


Enqueue = Callable[[str], Awaitable[None]]
run_onepage = onepage.run_worker_job


# --- procrastinate ------------------------------------------------------------------


def procrastinate_app(url: str) -> Any:
    procrastinate = lib("procrastinate")

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="onepage", queue=QUEUE)
    async def onepage_task(job_id: str) -> None:
        await run_onepage(job_id)

    return app


async def procrastinate_install(url: str) -> None:
    app = procrastinate_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def procrastinate_serve(url: str, concurrency: int, stop: asyncio.Event) -> None:
    app = procrastinate_app(url)
    async with app.open_async():
        worker = asyncio.create_task(
            app.run_worker_async(
                queues=[QUEUE],
                concurrency=concurrency,
                listen_notify=True,
                install_signal_handlers=False,
            )
        )
        await stop.wait()
        worker.cancel()


async def procrastinate_client(url: str) -> tuple[Enqueue, Callable[[], Awaitable[None]]]:
    app = procrastinate_app(url)
    await app.open_async()
    task = app.tasks["onepage"]

    async def enqueue(job_id: str) -> None:
        await task.defer_async(job_id=job_id)

    return enqueue, app.close_async


# --- pgqueuer -----------------------------------------------------------------------


async def pgqueuer_install(url: str) -> None:
    pgqueuer = lib("pgqueuer")
    PsycopgDriver, Queries = pgqueuer.PsycopgDriver, pgqueuer.Queries

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queries = Queries(PsycopgDriver(conn))
        if not await queries.schema_is_installed():
            await queries.install()


async def pgqueuer_serve(url: str, concurrency: int, stop: asyncio.Event) -> None:
    asyncpg, pgqueuer = lib("asyncpg"), lib("pgqueuer")

    # asyncpg, pgqueuer's first driver: its LISTEN is a callback. On one psycopg
    # connection the driver's wait for notifications holds the connection, and every
    # dequeue and status write waited for it (about 1 s each: 5 jobs/s in a burst).
    conn = await asyncpg.connect(url)
    manager = pgqueuer.QueueManager(pgqueuer.Queries(pgqueuer.AsyncpgDriver(conn)))

    @manager.entrypoint("onepage")
    async def onepage_job(job: Any) -> None:
        assert job.payload is not None
        await run_onepage(job.payload.decode())

    # The worker's cap is max_concurrent_tasks, which must be at least two batches.
    runner = asyncio.create_task(
        manager.run(batch_size=max(1, concurrency // 2), max_concurrent_tasks=concurrency)
    )
    await stop.wait()
    manager.shutdown.set()
    await asyncio.wait_for(runner, 30)


async def pgqueuer_client(url: str) -> tuple[Enqueue, Callable[[], Awaitable[None]]]:
    asyncpg, pgqueuer = lib("asyncpg"), lib("pgqueuer")

    pool = await asyncpg.create_pool(url, min_size=2, max_size=10)
    queries = pgqueuer.Queries(pgqueuer.AsyncpgPoolDriver(pool))

    async def enqueue(job_id: str) -> None:
        await queries.enqueue("onepage", job_id.encode())

    return enqueue, pool.close


# --- oban ---------------------------------------------------------------------------


def oban_worker() -> Any:
    import oban_job

    return oban_job.OnePage


async def oban_install(url: str) -> None:
    Oban, install = lib("oban").Oban, lib("oban.schema").install

    pool = await Oban.create_pool(url, min_size=1, max_size=2)
    try:
        async with pool.connection() as conn:
            found = await (
                await conn.execute("SELECT to_regclass('public.oban_jobs') IS NOT NULL")
            ).fetchone()
        if not (found and found[0]):
            await install(pool)
    finally:
        await pool.close()


async def oban_serve(url: str, concurrency: int, stop: asyncio.Event) -> None:
    Oban = lib("oban").Oban

    oban_worker()
    pool = await Oban.create_pool(url, min_size=2, max_size=concurrency + 5)
    async with Oban(pool=pool, queues={QUEUE: concurrency}):
        await stop.wait()
    await pool.close()


async def oban_client(url: str) -> tuple[Enqueue, Callable[[], Awaitable[None]]]:
    Oban = lib("oban").Oban

    worker = oban_worker()
    pool = await Oban.create_pool(url, min_size=2, max_size=10)
    instance = await Oban(pool=pool).start()

    async def enqueue(job_id: str) -> None:
        await instance.enqueue(worker.new({"job_id": job_id}))

    async def close() -> None:
        await instance.stop()
        await pool.close()

    return enqueue, close


# --- dbos ---------------------------------------------------------------------------


def dbos_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


async def dbos_install(url: str) -> None:
    """DBOS migrates its system database on launch: nothing to do before."""


async def dbos_serve(url: str, concurrency: int, stop: asyncio.Event) -> None:
    DBOS = lib("dbos").DBOS

    DBOS(
        config={
            "name": "bench",
            "system_database_url": dbos_url(url),
            "executor_id": f"bench-{os.getpid()}",
            "log_level": "WARNING",
        }
    )

    @DBOS.step(name="onepage_step")
    async def onepage_step(job_id: str) -> str:
        return await run_onepage(job_id)

    @DBOS.workflow(name="onepage")
    async def onepage_workflow(job_id: str) -> str:
        done: str = await onepage_step(job_id)
        return done

    await asyncio.to_thread(DBOS.launch)
    await DBOS.register_queue_async(
        QUEUE, worker_concurrency=concurrency, polling_interval_sec=0.05
    )
    await stop.wait()
    await asyncio.to_thread(DBOS.destroy)


async def dbos_client(url: str) -> tuple[Enqueue, Callable[[], Awaitable[None]]]:
    DBOSClient = lib("dbos").DBOSClient

    client = DBOSClient(system_database_url=dbos_url(url))

    async def enqueue(job_id: str) -> None:
        await client.enqueue_async({"queue_name": QUEUE, "workflow_name": "onepage"}, job_id)

    async def close() -> None:
        client.destroy()

    return enqueue, close


PEERS: dict[str, dict[str, Any]] = {
    "procrastinate": {
        "install": procrastinate_install,
        "serve": procrastinate_serve,
        "client": procrastinate_client,
    },
    "pgqueuer": {"install": pgqueuer_install, "serve": pgqueuer_serve, "client": pgqueuer_client},
    "oban": {"install": oban_install, "serve": oban_serve, "client": oban_client},
    "dbos": {"install": dbos_install, "serve": dbos_serve, "client": dbos_client},
}


# --- the measurements ---------------------------------------------------------------


async def latency(peer: str, url: str, runs: int, warmup: int, pause: float) -> dict[str, Any]:
    pages = onepage.pages_of(url, runs + warmup)
    enqueue, close = await PEERS[peer]["client"](url)
    ms: list[float] = []
    try:
        async with (
            await psycopg.AsyncConnection.connect(url) as conn,
            FinalWatcher(url) as watcher,
        ):
            for n, page in enumerate(pages):
                started = time.perf_counter()
                job_id = await onepage.start_row(conn, page, peer)
                await enqueue(job_id)
                seen = (await watcher.wait([job_id], timeout=120))[job_id]
                if n >= warmup:
                    ms.append((seen - started) * 1000)
                await asyncio.sleep(pause)
    finally:
        await close()
    return {"peer": peer, "ms": ms, "p50_ms": statistics.median(ms)}


async def burst(peer: str, url: str, jobs: int) -> dict[str, Any]:
    pages = onepage.pages_of(url, jobs)
    if len(pages) < jobs:
        raise SystemExit(f"{peer}: {len(pages)} pages seeded, {jobs} wanted")
    enqueue, close = await PEERS[peer]["client"](url)
    pool = onepage.open_pool(url, 10)
    await pool.open(wait=True)
    try:
        async with FinalWatcher(url) as watcher:

            async def one(page: onepage.Page) -> str:
                async with pool.connection() as conn:
                    job_id = await onepage.start_row(conn, page, peer, str(uuid.uuid4()))
                await enqueue(job_id)
                return job_id

            started = time.perf_counter()
            ids = await asyncio.gather(*(one(p) for p in pages))
            returned = time.perf_counter() - started
            seen = await watcher.wait(ids, timeout=1800)
            seconds = max(seen.values()) - started
    finally:
        await pool.close()
        await close()
    return {"peer": peer, "jobs": jobs, "seconds": seconds, "starts_returned_s": returned}


async def serve(peer: str, url: str, concurrency: int) -> None:
    await onepage.open_worker_pool(url, concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"{peer} worker serving (concurrency {concurrency})", flush=True)
    await PEERS[peer]["serve"](url, concurrency, stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("install", "worker", "latency", "burst"))
    parser.add_argument("--peer", required=True, choices=sorted(PEERS))
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.3)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    if args.command == "install":
        asyncio.run(PEERS[args.peer]["install"](args.url))
    elif args.command == "worker":
        asyncio.run(serve(args.peer, args.url, args.concurrency))
    elif args.command == "latency":
        found = asyncio.run(latency(args.peer, args.url, args.runs, args.warmup, args.pause))
        print(json.dumps(found))
    else:
        print(json.dumps(asyncio.run(burst(args.peer, args.url, args.jobs))))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
