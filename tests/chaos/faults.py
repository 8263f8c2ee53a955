"""The faults, each thrown at its planned time and undone at its end: a process killed
is started again (or left to the stack's supervisor, which brings back PostgreSQL and
the Temporal dev server by itself: the fault is then the kill alone, and how long the
server took to come back is noted), a stopped one continued, a link healed, the disk
freed, the clock stepped back. Each is logged (time, target, duration, notes) in the
ledger and on stdout as it ends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from hubjobs.devstack import embedded
from tests.chaos.ledger import Ledger
from tests.chaos.load import JobBook
from tests.chaos.plan import WORKERS, Fault, resources
from tests.chaos.stack import ChaosStack, send
from tests.support.cgroups import memory_cgroup
from tests.support.faketime import step
from tests.support.proxy import Mode
from tests.support.stacks import accepts, kill_postgres, kill_temporal
from tests.system.test_database_disk import fill, free

REPO = Path(__file__).resolve().parents[2]
# A server the supervisor brings back: how long the campaign waits to see it back.
BACK_WITHIN = 90.0
# A flood's job must be known (its start answered) within this.
FLOOD_JOB_WITHIN = 60.0
FLOOD_TIMEOUT = 600.0


def sleep_until(t0: float, at: float) -> Awaitable[None]:
    return asyncio.sleep(max(0.0, t0 + at - time.monotonic()))


async def back_within(alive: Callable[[], bool], seconds: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if alive():
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    return None


class Thrower:
    """Throws the plan's faults at the stack, each at its time; ``thrown`` holds each
    one's record once it ended."""

    def __init__(self, chaos: ChaosStack, ledger: Ledger, jobs: JobBook) -> None:
        self.chaos = chaos
        self.ledger = ledger
        self.jobs = jobs  # the load's started jobs: a flood's target among them
        self.thrown: list[dict[str, Any]] = []
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.t0 = 0.0
        self.epoch0 = 0.0

    async def run(self, faults: list[Fault], t0: float, epoch0: float) -> None:
        self.t0, self.epoch0 = t0, epoch0
        await asyncio.gather(*(self.throw(fault) for fault in faults))

    async def throw(self, fault: Fault) -> None:
        await sleep_until(self.t0, fault.at)
        notes: list[str] = []
        planned = time.monotonic()
        # A fault before it on the same target may outlast its plan (a worker slow to
        # start again): this one waits for it, so that two never hold one target.
        async with AsyncExitStack() as holding:
            for resource in sorted(resources(fault.kind, fault.target)):
                await holding.enter_async_context(self.locks[resource])
            waited = time.monotonic() - planned
            if waited > 1:
                notes.append(f"waited {waited:.1f} s for its target")
            started = time.time()
            handler = getattr(self, fault.kind)
            try:
                await handler(fault, notes)
            except Exception as err:  # a fault that went wrong is noted, the campaign goes on
                notes.append(f"error: {type(err).__name__}: {err}")
            ended = time.time()
        record = {
            "type": "fault",
            "number": fault.number,
            "kind": fault.kind,
            "target": fault.target,
            "at": round(started - self.epoch0, 1),
            "started_at": started,
            "ended_at": ended,
            "seconds": round(ended - started, 1),
            "planned_seconds": fault.seconds,
            "params": fault.params,
            "notes": notes,
        }
        self.ledger.write(record)
        self.thrown.append(record)
        print(
            f"fault {fault.number:>2} +{record['at']:>6.1f} s {fault.kind:<20} "
            f"{fault.target:<15} {record['seconds']:>5.1f} s  {'; '.join(notes)}",
            flush=True,
        )

    # --- workers ---------------------------------------------------------------------

    async def worker_kill(self, fault: Fault, notes: list[str]) -> None:
        worker = self.chaos.workers[fault.target]
        worker.process.kill()
        notes.append(f"SIGKILL pid {worker.pid}")
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            restarted = await self.chaos.start_worker(fault.target)
            notes.append(f"started again as pid {restarted.pid}")

    async def worker_stop(self, fault: Fault, notes: list[str]) -> None:
        pid = self.chaos.workers[fault.target].pid
        send([pid], signal.SIGSTOP)
        notes.append(f"SIGSTOP pid {pid}")
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            send([pid], signal.SIGCONT)

    async def rolling_restart(self, fault: Fault, notes: list[str]) -> None:
        for name in WORKERS:
            notes.append(await self.chaos.restart_worker(name))

    async def memory_cgroup(self, fault: Fault, notes: list[str]) -> None:
        """The worker restarted in a memory cgroup (the kernel OOM-kills it past the
        limit) for the fault's length, then restarted out of it; both stops graceful."""
        limit = int(fault.params["limit_mb"]) << 20
        name = f"hubjobs-chaos-{os.getpid()}-{fault.number}"
        with memory_cgroup(name, limit) as group:
            notes.append(await self.chaos.restart_worker(fault.target, group.prefix()))
            worker = self.chaos.workers[fault.target]
            try:
                await back_within(lambda: not worker.process.alive(), fault.seconds)
            finally:
                notes.append(
                    f"{fault.params['limit_mb']} MB, peak {group.max_usage_bytes() >> 20} MB, "
                    f"{group.oom_kills()} OOM kills"
                )
                if worker.process.alive():
                    notes.append(await self.chaos.restart_worker(fault.target))
                else:
                    worker.process.kill()
                    notes.append(f"died ({worker.process.process.returncode})")
        if not self.chaos.workers[fault.target].process.alive():
            restarted = await self.chaos.start_worker(fault.target)
            notes.append(f"started again as pid {restarted.pid}")

    async def clock_step(self, fault: Fault, notes: list[str]) -> None:
        offset = str(fault.params["offset"])
        step(self.chaos.clock_file, offset)
        notes.append(f"wall clock {offset}")
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            step(self.chaos.clock_file, "+0")

    async def partition_blackhole(self, fault: Fault, notes: list[str]) -> None:
        await self._partition(fault, Mode.BLACKHOLE)

    async def partition_reset(self, fault: Fault, notes: list[str]) -> None:
        await self._partition(fault, Mode.RESET)

    async def _partition(self, fault: Fault, mode: Mode) -> None:
        self.chaos.proxy.switch(mode)
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            self.chaos.proxy.switch(Mode.PASS)

    # --- the API ---------------------------------------------------------------------

    async def api_kill(self, fault: Fault, notes: list[str]) -> None:
        pid = self.chaos.api_pid()
        if pid is None:
            notes.append("the API was not running")
        else:
            send([pid], signal.SIGKILL)
            notes.append(f"SIGKILL pid {pid}")
        await asyncio.sleep(fault.seconds)
        now = self.chaos.api_pid()
        if now is not None and now != pid:
            notes.append(f"brought back by the stack (pid {now})")
        else:
            notes.append(f"not brought back by the stack: {await self.chaos.up()}")

    async def api_stop(self, fault: Fault, notes: list[str]) -> None:
        pid = self.chaos.api_pid()
        if pid is None:
            notes.append("the API was not running")
            return
        await self._stopped([pid], fault.seconds, notes)

    async def _stopped(self, pids: list[int], seconds: float, notes: list[str]) -> None:
        stopped = send(pids, signal.SIGSTOP)
        notes.append(f"SIGSTOP {len(stopped)} processes")
        try:
            await asyncio.sleep(seconds)
        finally:
            send(stopped, signal.SIGCONT)

    # --- Temporal ------------------------------------------------------------------------

    def _temporal(self) -> embedded.EmbeddedTemporal:
        return embedded.EmbeddedTemporal(self.chaos.home)

    async def temporal_kill(self, fault: Fault, notes: list[str]) -> None:
        killed = await asyncio.to_thread(kill_temporal, self.chaos.home)
        port = int(self.chaos.record()["temporal_port"])
        notes.append(f"SIGKILL pid {killed}")

        def back() -> bool:
            return self._temporal().running_pid() not in (None, killed) and accepts(port)

        await self._left_to_supervisor(back, notes)

    async def temporal_stop(self, fault: Fault, notes: list[str]) -> None:
        pid = self._temporal().running_pid()
        if pid is None:
            notes.append("the dev server was not running")
            return
        await self._stopped([pid], fault.seconds, notes)

    async def _left_to_supervisor(self, back: Callable[[], bool], notes: list[str]) -> None:
        took = await back_within(back, BACK_WITHIN)
        if took is not None:
            notes.append(f"brought back by the supervisor in {took:.1f} s")
        else:
            notes.append(f"not back within {BACK_WITHIN:.0f} s: {await self.chaos.up()}")

    # --- PostgreSQL ----------------------------------------------------------------------

    async def postgres_kill(self, fault: Fault, notes: list[str]) -> None:
        killed = await asyncio.to_thread(kill_postgres, self.chaos.home)
        notes.append(f"SIGKILL postmaster {killed}")
        port = self.chaos.postgres_port
        took = await back_within(lambda: accepts(port), BACK_WITHIN)
        # A full disk keeps it down (its crash recovery needs space): the supervisor
        # tries again until the disk fault frees it.
        notes.append(
            f"brought back by the supervisor in {took:.1f} s"
            if took is not None
            else f"not back within {BACK_WITHIN:.0f} s"
        )

    async def postgres_stop(self, fault: Fault, notes: list[str]) -> None:
        """Every process of the cluster stopped (the postmaster first, so that it forks
        no new backend meanwhile): a hung database, connections open and silent."""
        postgres = embedded.EmbeddedPostgres(self.chaos.home)
        try:
            postmaster = int((postgres.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            notes.append("PostgreSQL was not running (a kill or a full disk before)")
            return
        others = [p for p in embedded.processes_in(self.chaos.pgdata) if p != postmaster]
        await self._stopped([postmaster, *others], fault.seconds, notes)

    async def disk_full(self, fault: Fault, notes: list[str]) -> None:
        """PostgreSQL's tmpfs filled, and filled again every 2 s (what the server frees
        is taken), then freed."""
        filled = await asyncio.to_thread(fill, self.chaos.disk)
        notes.append(f"filled {filled >> 20} MB")
        try:
            deadline = time.monotonic() + fault.seconds
            while time.monotonic() < deadline:
                await asyncio.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
                await asyncio.to_thread(fill, self.chaos.disk)
        finally:
            await asyncio.to_thread(free, self.chaos.disk)

    # --- the flood -----------------------------------------------------------------------

    async def signal_flood(self, fault: Fault, notes: list[str]) -> None:
        job = await self.jobs.wait_for(int(fault.params["job"]), FLOOD_JOB_WITHIN)
        if job is None:
            notes.append("its long job never started: no flood")
            return
        notes.append(f"at job {job.job_id}")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.chaos.flood",
            "--address",
            self.chaos.temporal_address,
            "--workflow-id",
            job.workflow_id,
            "--signals",
            str(fault.params["signals"]),
            "--senders",
            str(fault.params["senders"]),
            "--queries-per-second",
            str(fault.params["queries_per_second"]),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), FLOOD_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            notes.append(f"flood cut at {FLOOD_TIMEOUT:.0f} s")
            return
        said = err.decode(errors="replace")
        if said:
            (self.chaos.run_dir / "logs" / f"flood-{fault.number}.log").write_text(said)
        lines = out.decode().strip().splitlines()
        if lines:
            notes.append(json.dumps(json.loads(lines[-1]), sort_keys=True))
        if process.returncode != 0:
            first = next((line for line in said.splitlines() if "rror" in line), said[-200:])
            notes.append(
                f"flood exited {process.returncode} (logs/flood-{fault.number}.log): {first}"
            )
