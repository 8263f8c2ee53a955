"""Capacity: a steady stream of one-page jobs offered at increasing rates (open loop: a
job is started every 1/rate s whether or not the earlier ones are done), each rate for
``--seconds``; per rate the latency of each job (start call → final row committed,
bench/pg.py) p50/p99, the jobs/s achieved, and the CPU each process used (the hubjobs
worker, the Temporal dev server, PostgreSQL's processes, this client) as a share of
one core, with the machine's busy share of all its cores. The knee is the highest
offered rate still achieved (≥95 %) with p50 at most twice the lowest rate's; what
limits it is the process nearest a full core there (or the machine, when its cores
are busy).

Contenders: hubjobs (its worker with the settings given) and, with ``--floor``, the
Temporal floor (``BareDbJob``), each its own stream.

    python bench/bench_capacity.py [--rates 2,5,10,15,20,30,40] [--seconds 10] [--floor]
        [--settings max_concurrent_activities=16,max_concurrent_workflow_tasks=16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import onepage
import psutil
from common import Hub, Stack, seed_courses, seed_onepage
from harness import CLOCK_TICKS, Figure, Outcome, cpu_seconds, percentile, say
from pg import FinalWatcher
from standalone import main_for

NAME = "capacity"
TITLE = "Capacity: latency against offered jobs/s"
CORES = os.cpu_count() or 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rates",
        type=lambda text: [float(n) for n in text.split(",")],
        default=[2, 5, 10, 15, 20, 30, 40],
        help="offered jobs/s, comma-separated, increasing (default 2,5,10,15,20,30,40)",
    )
    parser.add_argument("--seconds", type=float, default=10, help="seconds per rate (default 10)")
    parser.add_argument("--floor", action="store_true", help="the floor's stream too")
    parser.add_argument(
        "--settings",
        default="",
        help="HUBJOBS_* settings of the worker, name=value comma-separated (lower case)",
    )
    parser.add_argument(
        "--stop-after",
        type=float,
        default=10,
        help="stop raising the rate once p50 is this many times the first rate's",
    )


def postgres_cpu(stack: Stack) -> float:
    """CPU seconds of PostgreSQL: its live processes, and the children it has reaped."""
    pidfile = stack.home / "pg" / "pgdata" / "postmaster.pid"
    postmaster = psutil.Process(int(Path(pidfile).read_text().split()[0]))
    total = sum(postmaster.cpu_times()[:4])  # user, system, children user, children system
    for child in postmaster.children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return float(total)


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [float(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


class Cpu:
    """CPU shares (of one core) of the processes that serve a job, over a window."""

    def __init__(self, stack: Stack, pids: dict[str, int]) -> None:
        self.stack = stack
        self.pids = pids

    def read(self) -> dict[str, float]:
        found = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        found["PostgreSQL"] = postgres_cpu(self.stack)
        found["client (this process)"] = cpu_seconds(os.getpid())
        busy, total = machine_busy()
        found["machine busy"], found["machine total"] = busy / CLOCK_TICKS, total / CLOCK_TICKS
        found["wall"] = time.perf_counter()
        return found

    @staticmethod
    def shares(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        wall = after["wall"] - before["wall"]
        found = {
            k: (after[k] - before[k]) / wall
            for k in after
            if k not in ("wall", "machine busy", "machine total")
        }
        spent = after["machine total"] - before["machine total"]
        found["machine (share of all cores)"] = (
            (after["machine busy"] - before["machine busy"]) / spent if spent else 0.0
        )
        return found


Starter = Callable[[int], Awaitable[str]]


async def stream(
    start: Starter, watcher: FinalWatcher, rate: float, seconds: float, first: int
) -> tuple[list[float], float]:
    """Jobs ``first``… offered every 1/rate s for ``seconds``; their latencies (ms)
    and the jobs/s achieved (jobs over the time from the first start to the last
    final)."""
    count = max(1, round(rate * seconds))
    began = time.perf_counter()
    latencies: list[float] = []

    async def one(n: int) -> float:
        await asyncio.sleep(max(0.0, began + n / rate - time.perf_counter()))
        t0 = time.perf_counter()
        job_id = await start(first + n)
        seen = (await watcher.wait([job_id], timeout=600))[job_id]
        latencies.append((seen - t0) * 1000)
        return seen

    ends = await asyncio.gather(*(one(n) for n in range(count)))
    return latencies, count / (max(ends) - began)


async def hubjobs_starter(hub: Hub, total: int) -> tuple[Starter, Any]:
    async with hub.engine() as engine:
        courses = await seed_courses(engine, total, 1)
    client_cm = hub.client()
    client = await client_cm.__aenter__()
    jobs = client.scope(courses[0].workspace_id, courses[0].actor_id)

    async def start(n: int) -> str:
        job = await jobs.start(
            "course_tagging", {"root_page_id": courses[n].root_page_id, "tag": "cap"}
        )
        return str(job.id)

    return start, client_cm


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    settings: dict[str, str] = dict(
        item.split("=", 1) for item in args.settings.split(",") if item.strip()
    )
    name = "capacity" + "".join(f"_{k[:12]}{v}" for k, v in settings.items())
    hub = await stack.hub(name, worker=True, **settings)
    assert hub.worker is not None
    temporal = await stack.temporal_client()
    total = int(sum(round(r * args.seconds) for r in args.rates))
    contenders: dict[str, tuple[Starter, str, dict[str, int]]] = {}
    start, client_cm = await hubjobs_starter(hub, total)
    contenders["hubjobs"] = (start, hub.url, {"hubjobs worker": hub.worker.pid})
    if args.floor:
        floor = await stack.floor()
        pages = [
            onepage.Page(str(c.workspace_id), str(c.actor_id), str(c.root_page_id))
            for c in await seed_onepage(floor.url, total)
        ]
        pool = onepage.open_pool(floor.url, 10)
        await pool.open(wait=True)

        async def floor_start(n: int) -> str:
            async with pool.connection() as conn:
                job_id = await onepage.start_row(conn, pages[n], "floor")
            await temporal.start_workflow(
                "BareDbJob", job_id, id=f"floor-{job_id}", task_queue=floor.task_queue
            )
            return job_id

        contenders["floor"] = (floor_start, floor.url, {"floor worker": floor.process.pid})
    steps: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
    try:
        for who, (starter, url, pids) in contenders.items():
            cpu = Cpu(stack, {**pids, "Temporal server": stack.temporal_pid()})
            first = 0
            async with FinalWatcher(url) as watcher:
                for rate in args.rates:
                    before = cpu.read()
                    ms, achieved = await stream(starter, watcher, rate, args.seconds, first)
                    shares = Cpu.shares(before, cpu.read())
                    first += len(ms)
                    step = {
                        "offered": rate,
                        "achieved": achieved,
                        "p50_ms": percentile(ms, 50),
                        "p99_ms": percentile(ms, 99),
                        "cpu": shares,
                    }
                    steps[who].append(step)
                    say(
                        f"capacity {who}: offered {rate:g}/s achieved {achieved:.1f}/s, "
                        f"p50 {step['p50_ms']:.0f} ms p99 {step['p99_ms']:.0f} ms; CPU "
                        + ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
                    )
                    if step["p50_ms"] > args.stop_after * steps[who][0]["p50_ms"]:
                        say(f"capacity {who}: past the knee, stopping")
                        break
                    await asyncio.sleep(2)
    finally:
        await client_cm.__aexit__(None, None, None)
    figures: list[Figure] = []
    notes: list[str] = []
    knees: dict[str, dict[str, Any]] = {}
    for who, found in steps.items():
        knee = knee_of(found)
        knees[who] = knee
        # What limits it shows where it stops holding: the step after the knee.
        after = found[found.index(knee) + 1] if found.index(knee) + 1 < len(found) else knee
        limit = f"at {after['offered']:g}/s offered, " + limiter(after)
        figures.append(
            Figure(
                NAME,
                f"capacity knee ({who}): offered jobs/s still met",
                "jobs/s",
                knee["offered"],
                None,
                "",
                None,
                None,
                note=f"p50 {knee['p50_ms']:.0f} ms, p99 {knee['p99_ms']:.0f} ms; {limit}",
            )
        )
        notes.append(
            f"capacity {who}: knee at {knee['offered']:g} jobs/s offered "
            f"({knee['achieved']:.1f} achieved, p50 {knee['p50_ms']:.0f} ms, p99 "
            f"{knee['p99_ms']:.0f} ms); there {limit}"
        )
        for step in found:
            notes.append(
                f"capacity {who}: {step['offered']:g}/s → {step['achieved']:.1f}/s, p50 "
                f"{step['p50_ms']:.0f} ms, p99 {step['p99_ms']:.0f} ms; CPU "
                + ", ".join(f"{k} {v:.0%}" for k, v in step["cpu"].items())
            )
    notes.append(
        f"capacity: {args.seconds:g} s per rate, open loop; CPU as a share of one core "
        f"(the machine's of all {CORES}); worker settings: {settings or 'defaults'}"
    )
    return Outcome(figures, {"steps": steps, "knees": knees, "settings": settings}, notes)


def knee_of(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The highest offered rate achieved (≥95 %) with p50 within twice the first's."""
    base = steps[0]["p50_ms"]
    good = [s for s in steps if s["achieved"] >= 0.95 * s["offered"] and s["p50_ms"] <= 2 * base]
    return good[-1] if good else steps[0]


def limiter(step: dict[str, Any]) -> str:
    """What is nearest its limit at a step: the busiest process, or the machine."""
    cpu = {k: v for k, v in step["cpu"].items() if not k.startswith("machine")}
    busiest = max(cpu, key=lambda k: cpu[k])
    machine = step["cpu"]["machine (share of all cores)"]
    if machine >= 0.85:
        return f"the machine's cores are {machine:.0%} busy (busiest: {busiest} {cpu[busiest]:.0%})"
    return f"busiest process: {busiest} at {cpu[busiest]:.0%} of a core (machine {machine:.0%})"


if __name__ == "__main__":
    import sys

    main_for(sys.modules[__name__])
