"""API server CPU per ``GET /workspaces/{ws}/jobs/{id}``: a running ``hubjobs api``
process (uvicorn; a finished job, so the 200 answer with its result), its CPU time
read from /proc/<pid>/stat over N requests sent one after another from this process
on one keep-alive connection, against bench/bare_api.py: FastAPI under uvicorn doing
one query per GET. Rounds alternate; CPU time is summed over the rounds.

    python bench/bench_api.py [--requests 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from pathlib import Path

import httpx
from common import HUBJOBS, Stack, finished_job, free_port
from harness import (
    Figure,
    Outcome,
    Target,
    cpu_seconds,
    percentile,
    ratio_of,
    rotate,
    say,
    timed_run,
)
from standalone import main_for

NAME = "api"
TITLE = "API CPU per GET"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=300, help="requests a round (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each (default 3)")


def wait_healthy(base: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{base} did not answer /health")


def hammer(client: httpx.Client, url: str, headers: dict[str, str], count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        answer = client.get(url, headers=headers)
        latencies.append((time.perf_counter() - started) * 1000)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {url}: {answer.status_code} {answer.text[:200]}")
    return latencies


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    hub = await stack.hub("jobs")
    workspace, actor, job = await finished_job(hub)
    secret = secrets.token_hex(32)
    ports = {"hubjobs": free_port(), "bare": 0}
    ports["bare"] = free_port([ports["hubjobs"]])
    env = hub.env(api_jwt_secret=secret, api_port=ports["hubjobs"], api_host="127.0.0.1")
    _, token = await asyncio.to_thread(
        timed_run, [HUBJOBS, "token", "--actor", str(actor), "--ttl", "86400"], env=env
    )
    servers = {
        "hubjobs": stack.spawn("api-hubjobs", [HUBJOBS, "api"], env),
        "bare": stack.spawn(
            "api-bare",
            [
                sys.executable,
                str(Path(__file__).with_name("bare_api.py")),
                "--port",
                str(ports["bare"]),
                "--database-url",
                hub.url,
            ],
            env,
        ),
    }
    path = f"/workspaces/{workspace}/jobs/{job}"
    headers = {"Authorization": f"Bearer {token.strip()}"}
    cpu = {"hubjobs": 0.0, "bare": 0.0}
    latency: dict[str, list[float]] = {"hubjobs": [], "bare": []}
    try:
        clients = {}
        for who, server in servers.items():
            base = f"http://127.0.0.1:{ports[who]}"
            try:
                await asyncio.to_thread(wait_healthy, base)
            except TimeoutError:
                server.require_alive()
                raise
            clients[who] = httpx.Client(base_url=base, timeout=10)
            await asyncio.to_thread(hammer, clients[who], path, headers, 50)  # warm-up
        for n in range(args.rounds):
            for who in rotate(tuple(servers), n):
                before = cpu_seconds(servers[who].pid)
                latency[who] += await asyncio.to_thread(
                    hammer, clients[who], path, headers, args.requests
                )
                cpu[who] += cpu_seconds(servers[who].pid) - before
        for c in clients.values():
            c.close()
    finally:
        for server in servers.values():
            server.stop()
    total = args.requests * args.rounds
    ours, bare = cpu["hubjobs"] / total * 1000, cpu["bare"] / total * 1000
    say(f"api: {ours:.2f} ms CPU a GET, bare {bare:.2f} ms")
    figures = [
        Figure(
            NAME,
            "API server CPU per GET job",
            "ms",
            ours,
            bare,
            "FastAPI, one query",
            ratio_of(ours, bare),
            Target("<=", 1.2),
        ),
        Figure(
            NAME,
            "API GET job latency p50 (client side)",
            "ms",
            percentile(latency["hubjobs"], 50),
            percentile(latency["bare"], 50),
            "FastAPI, one query",
            ratio_of(percentile(latency["hubjobs"], 50), percentile(latency["bare"], 50)),
            None,
        ),
    ]
    notes = [f"api: {total} GETs each over {args.rounds} rounds, one keep-alive connection"]
    return Outcome(figures, {"cpu_ms": {"hubjobs": ours, "bare": bare}}, notes)


if __name__ == "__main__":
    main_for(sys.modules[__name__])
