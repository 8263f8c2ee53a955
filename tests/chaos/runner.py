"""One campaign, start to end: the plan drawn from the seed; the stack up and the hub
seeded; the load, the hub writer and the faults run together for the window; then the
system left to settle (at most the settle bound after the last fault), the checker run
in a process of its own, and the report written (``report.json`` and ``report.txt`` in
the run's folder, beside the plan, the ledger and every log)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from starter.client import HubJobsClient
from tests.chaos import report
from tests.chaos.checker.settle import settle
from tests.chaos.faults import Thrower
from tests.chaos.hub import HubWriter, seed_hub
from tests.chaos.ledger import Ledger
from tests.chaos.load import Load
from tests.chaos.plan import Plan
from tests.chaos.stack import ChaosStack, chaos_stack

REPO = Path(__file__).resolve().parents[2]
# Once the faults stop, every job must be final, every webhook delivered or given up and
# every run closed within this (docs/operations/failures.md says why 3 minutes).
SETTLE_SECONDS = 180.0
# The receiver answers this share of deliveries 500 (the sender tries again).
WEBHOOK_REFUSALS = 0.25
WATCHERS_CLOSE_SECONDS = 30.0
CHECKER_TIMEOUT = 1800.0
THREADS = 64


def webhook_answers(seed: int) -> list[int | str]:
    rng = random.Random(f"{seed}:webhooks")
    return [500 if rng.random() < WEBHOOK_REFUSALS else 204 for _ in range(10_000)]


async def campaign(plan: Plan, run_dir: Path, settle_seconds: float) -> dict[str, Any]:
    """``run_dir`` exists; the plan goes into it first."""
    (run_dir / "plan.json").write_text(json.dumps(plan.as_json(), indent=1))
    ledger = Ledger(run_dir / "ledger.jsonl")
    # Faults, the load's CLI calls and `hubjobs up` all wait in threads: with the default
    # pool (six threads here) a fault's undo (the disk freed) waited behind them.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(THREADS))
    async with chaos_stack(run_dir, ledger, webhook_answers(plan.seed)) as chaos:
        print(f"stack up in {chaos.home}; seeding the hub", flush=True)
        hub = await seed_hub(chaos, plan)
        async with (
            await HubJobsClient.connect(chaos.client_settings()) as client,
            httpx.AsyncClient() as http,
        ):
            load = Load(chaos, plan, hub, client, http, ledger)
            writer = HubWriter(chaos, hub)
            thrower = Thrower(chaos, ledger, load.book)
            t0, epoch0 = time.monotonic(), time.time()
            print(f"campaign window: {plan.minutes:g} min, {len(plan.faults)} faults", flush=True)
            await asyncio.gather(
                thrower.run(plan.faults, t0, epoch0),
                load.run(t0),
                writer.run(plan.edits, t0),
            )
            faults_ended = max((r["ended_at"] for r in thrower.thrown), default=epoch0)
            print(f"load and faults done; settling (bound {settle_seconds:.0f} s)", flush=True)
            settled_at, left = await settle(chaos.home, faults_ended + settle_seconds)
            await load.close_watchers(WATCHERS_CLOSE_SECONDS)
        _record_end(chaos, ledger)
        ledger.close()
        verdicts = _check(chaos, run_dir, faults_ended)
    loaded = dict(load.counts) | {f"hub writer {k}": v for k, v in writer.counts.items()}
    settled = {
        "bound_seconds": settle_seconds,
        "seconds_after_last_fault": None
        if settled_at is None
        else round(settled_at - faults_ended, 1),
        "left": left,
    }
    return report.build(plan, thrower.thrown, verdicts, settled, loaded)


def _record_end(chaos: ChaosStack, ledger: Ledger) -> None:
    """What the checker needs beside the databases: every delivery the receiver got, and
    the worker processes as the campaign left them."""
    for delivery in chaos.receiver.received:
        ledger.write(
            {
                "type": "webhook",
                "headers": delivery.headers,
                "body": delivery.body.decode(errors="replace"),
                "answered": delivery.answered,
                "received_at": delivery.received_at,
            }
        )
    for worker in chaos.workers.values():
        ledger.write(
            {"type": "worker", "name": worker.name, "pid": worker.pid, "identity": worker.identity}
        )


def _check(chaos: ChaosStack, run_dir: Path, faults_ended: float) -> dict[str, Any]:
    """The checker, in a process of its own (it loads none of the product's modules)."""
    out = run_dir / "verdicts.json"
    print("checking the invariants", flush=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.chaos.checker",
            "--home",
            str(chaos.home),
            "--ledger",
            str(run_dir / "ledger.jsonl"),
            "--faults-ended-at",
            repr(faults_ended),
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=os.environ | {"CHAOS_WEBHOOK_SECRET": chaos.webhook_secret},
        capture_output=True,
        text=True,
        timeout=CHECKER_TIMEOUT,
        check=False,
    )
    (run_dir / "logs" / "checker.log").write_text(done.stdout + done.stderr)
    if not out.exists():
        return {
            "checker": f"failed (exit {done.returncode}): {done.stderr[-2000:]}",
            "violations": 1,
        }
    verdicts: dict[str, Any] = json.loads(out.read_text())
    return verdicts
