"""The peers side by side: procrastinate, pgqueuer, oban (the Python port) and dbos,
each from PyPI in a venv of their own (bench/.peers-venv, `make peers-venv`), each on
a database of its own on the same PostgreSQL server, each running the same one-page
job in one transaction (bench/onepage.py), beside hubjobs and the Temporal floor
(``BareDbJob``): p50 latency of one job on an idle system (start → final row
committed), and jobs/s for bursts started at once (200 and 2,000 by default), worker
concurrency 10 where they have one (hubjobs' worker: 8 activities, its default). How
each peer is configured, and why: bench/peers/peers.py.

    python bench/bench_peers.py [--peers oban,procrastinate,pgqueuer,dbos] [--bursts 200,2000]
                                [--runs 20] [--pause 0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from typing import Any

import bench_burst
import bench_job_latency
from common import REPO, Stack, seed_onepage
from harness import BENCH, Figure, Outcome, percentile, ratio_of, rotate, say, timed_run
from pg import install_final_trigger
from standalone import main_for

NAME = "peers"
TITLE = "The peers side by side (one-page job)"
PEERS = ("oban", "procrastinate", "pgqueuer", "dbos")
PEERS_PYTHON = BENCH / ".peers-venv" / "bin" / "python"
SCRIPT = str(BENCH / "peers" / "peers.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--peers", default=",".join(PEERS), help=f"comma-separated (default {','.join(PEERS)})"
    )
    parser.add_argument(
        "--bursts",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[200, 2000],
        help="jobs started at once, comma-separated (default 200,2000)",
    )
    parser.add_argument("--runs", type=int, default=20, help="latency runs of each (default 20)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between latency runs")
    parser.add_argument("--concurrency", type=int, default=10, help="peers' worker concurrency")


def peer_command(command: str, peer: str, url: str, *extra: str) -> list[str]:
    return [str(PEERS_PYTHON), SCRIPT, command, "--peer", peer, "--url", url, *extra]


async def peer_json(args: list[str]) -> dict[str, Any]:
    _, out = await asyncio.to_thread(timed_run, args)
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


async def run_peer(stack: Stack, peer: str, args: argparse.Namespace) -> dict[str, Any]:
    """One peer: its database, its schema, its worker process, then the measurements."""
    url = stack.database(f"peer_{peer}")
    install_final_trigger(url)
    await seed_onepage(url, args.runs + args.warmup + sum(args.bursts))
    await asyncio.to_thread(timed_run, peer_command("install", peer, url))
    worker = stack.spawn(
        f"peer-{peer}",
        peer_command("worker", peer, url, "--concurrency", str(args.concurrency)),
        {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
        | {"PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 60
    while "serving" not in worker.log_path.read_text(errors="replace"):
        worker.require_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{peer}'s worker did not start:\n{worker.tail()}")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)  # its listeners and pollers up
    try:
        found: dict[str, Any] = {}
        lat = await peer_json(
            peer_command(
                "latency",
                peer,
                url,
                *("--runs", str(args.runs), "--warmup", str(args.warmup)),
                *("--pause", str(args.pause)),
            )
        )
        found["ms"] = lat["ms"]
        for jobs in args.bursts:
            out = await peer_json(peer_command("burst", peer, url, "--jobs", str(jobs)))
            found[f"burst_{jobs}"] = jobs / out["seconds"]
            say(f"peers: {peer} {jobs} at once {jobs / out['seconds']:.1f} jobs/s")
        say(f"peers: {peer} p50 {percentile(found['ms'], 50):.0f} ms")
        return found
    except Exception as err:
        raise RuntimeError(f"{err}\n{peer}'s worker log:\n{worker.tail(15)}") from err
    finally:
        worker.stop()
        stack.drop_database(f"peer_{peer}")


async def temporal_side(stack: Stack, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """hubjobs and the floor on the same measures (job_latency's and burst's code)."""
    latency = await bench_job_latency.run(
        stack, argparse.Namespace(runs=args.runs, warmup=args.warmup, pause=args.pause)
    )
    found: dict[str, dict[str, Any]] = {
        "hubjobs": {"ms": latency.series["ms"]["hubjobs"]},
        "floor": {"ms": latency.series["ms"]["floor"]},
    }
    hub = await stack.hub("jobs")
    floor = await stack.floor()
    temporal = await stack.temporal_client()
    for jobs in args.bursts:
        for who in rotate(("hubjobs", "floor"), jobs):
            try:
                if who == "hubjobs":
                    _, seconds = await bench_burst.hubjobs_burst(hub, jobs)
                else:
                    _, seconds = await bench_burst.floor_burst(temporal, floor, jobs)
            except Exception as err:  # recorded; the peers are still measured
                say(f"peers: {who} {jobs} at once FAILED: {err}")
                found[who][f"burst_{jobs}"] = math.nan
                found[who].setdefault("failures", []).append(f"{jobs} at once: {err}")
                continue
            found[who][f"burst_{jobs}"] = jobs / seconds
            say(f"peers: {who} {jobs} at once {jobs / seconds:.1f} jobs/s")
            await asyncio.sleep(1)
    return found


async def run(stack: Stack, args: argparse.Namespace) -> Outcome:
    if not PEERS_PYTHON.exists():
        raise RuntimeError(f"no {PEERS_PYTHON}: run `make peers-venv` in {REPO}")
    peers = [p for p in args.peers.split(",") if p]
    results = await temporal_side(stack, args)
    for peer in peers:
        say(f"peers: {peer}")
        try:
            results[peer] = await run_peer(stack, peer, args)
        except Exception as err:  # one peer failing leaves the others' figures
            say(f"peers: {peer} FAILED: {err}")
            results[peer] = {"error": str(err).strip().splitlines()[-1][-200:]}
    figures: list[Figure] = []
    floor_p50 = percentile(results["floor"]["ms"], 50)
    for who in ["hubjobs", *peers]:
        got = results[who]
        if "error" in got:
            figures.append(Figure(NAME, f"{who}: FAILED", "", None, None, "", None, None))
            continue
        p50 = percentile(got["ms"], 50)
        figures.append(
            Figure(
                NAME,
                f"peers: {who}, one job p50",
                "ms",
                p50,
                floor_p50,
                "Temporal floor",
                ratio_of(p50, floor_p50),
                None,
                note="ratio: its time over the floor's",
            )
        )
        for jobs in args.bursts:
            figures.append(
                Figure(
                    NAME,
                    f"peers: {who}, {jobs:,} at once",
                    "jobs/s",
                    got[f"burst_{jobs}"],
                    results["floor"][f"burst_{jobs}"],
                    "Temporal floor",
                    ratio_of(got[f"burst_{jobs}"], results["floor"][f"burst_{jobs}"]),
                    None,
                )
            )
    notes = [
        "peers: ratios against the Temporal floor (BareDbJob); latency = start call to the "
        "final row's commit; peers' worker concurrency "
        f"{args.concurrency}, hubjobs' worker its defaults (8 activities, 8 workflow tasks)",
        *peer_table(results, ["floor", "hubjobs", *peers], args.bursts),
        *(
            f"peers: {who} FAILED {failure}"
            for who in ("hubjobs", "floor")
            for failure in results[who].get("failures", [])
        ),
    ]
    return Outcome(figures, {"results": results, "bursts": args.bursts}, notes)


def peer_table(
    results: dict[str, dict[str, Any]], order: list[str], bursts: list[int]
) -> list[str]:
    """The side-by-side table (markdown), hubjobs and each peer beside the floor."""
    floor = results["floor"]
    head = "| | one job p50 | × floor | " + " | ".join(f"{b:,} at once | × floor" for b in bursts)
    lines = [head + " |", "|" + " --- |" * (3 + 2 * len(bursts))]
    for who in order:
        got = results[who]
        if "error" in got:
            lines.append(f"| {who} | failed: {got['error'][:80]} |")
            continue
        p50 = percentile(got["ms"], 50)
        cells = [who, f"{p50:.0f} ms", f"{p50 / percentile(floor['ms'], 50):.2f}"]
        for b in bursts:
            rate = got[f"burst_{b}"]
            cells += [f"{rate:.1f} jobs/s", f"{rate / floor[f'burst_{b}']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    main_for(sys.modules[__name__])
