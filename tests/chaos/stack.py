"""The campaign's stack: a fresh state folder brought up by ``hubjobs up`` (its PostgreSQL's
data directory on a small tmpfs, so that the disk can be filled), the HTTP API `up`
starts, three worker processes (worker-a reaching PostgreSQL through the black-hole
proxy, worker-c under libfaketime with a steppable wall clock), and a completion-webhook
receiver. Every address is read from what the stack recorded (``stack.json``,
``api.json``): whatever credentials its URLs carry, the campaign uses."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from hubjobs.devstack import embedded
from hubjobs.settings import Settings
from tests.chaos.ledger import Ledger
from tests.chaos.plan import CLOCK_WORKER, PROXIED_WORKER, WORKERS
from tests.support.faketime import steppable
from tests.support.processes import WorkerProcess, hubjobs_env
from tests.support.proxy import Proxy
from tests.support.sse import serving
from tests.support.stacks import OwnStack, hubjobs, own_stack
from tests.support.webhooks import Receiver
from tests.system.test_faults import wait_started
from tests.system.test_full_disk import small_disk

# PostgreSQL's disk: a fresh cluster takes ~41 MB, the campaign's hub and its jobs a few
# hundred more; the fill fault writes the rest.
DISK = "1g"
# What the starters (the API, the campaign's Python client) and the workers share: the
# job options a start carries (a 10 s lease, a handover 1 s after the last, a lifecycle
# step handed to any worker after 10 s) and completion webhooks tried again at most 5 s
# apart, so that a job settles within the bound once the faults stop.
STARTER: dict[str, Any] = {
    "heartbeat_timeout_seconds": 10,
    "handover_pause_seconds": 1,
    "lifecycle_local_seconds": 10,
    "webhook_retry_initial_seconds": 1,
    "webhook_retry_max_seconds": 5,
}
# The workers: small paced batches (a long course takes minutes, the flood meets it
# running), short deadlines on the database and a handover 8 s into an outage, the
# reconciler every 15 s; maintenance on, as a deployment's workers run it.
WORKER: dict[str, Any] = {
    **STARTER,
    "tagging_batch_size": 25,
    "tagging_batch_pause_seconds": 0.05,
    "db_batch_timeout_seconds": 5,
    "db_connect_timeout_seconds": 3,
    "db_lifecycle_timeout_seconds": 8,
    "outage_handover_seconds": 8,
    "outage_retry_max_seconds": 2,
    "reconcile_seconds": 15,
    "reconcile_grace_seconds": 20,
    "maintenance": True,
}
WORKER_START_SECONDS = 120.0
WORKER_STOP_SECONDS = 60.0
WORKER_RESTART_PAUSE = 2.0
UP_TIMEOUT = 120.0


def env_name(setting: str) -> str:
    return f"HUBJOBS_{setting.upper()}"


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class Worker:
    name: str
    env: dict[str, str]
    process: WorkerProcess
    generation: int = 1

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def identity(self) -> str:
        """The Temporal identity the SDK gives a worker process."""
        return f"{self.pid}@{os.uname().nodename}"


@dataclass
class ChaosStack:
    stack: OwnStack
    run_dir: Path
    disk: Path
    proxy: Proxy
    receiver: Receiver
    receiver_url: str
    api_secret: str
    webhook_secret: str
    ledger: Ledger
    clock_file: Path
    workers: dict[str, Worker] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.stack.home

    @property
    def pgdata(self) -> Path:
        return (self.home / "pgdata").resolve()

    def record(self) -> dict[str, Any]:
        return dict(json.loads((self.home / "stack.json").read_text()))

    @property
    def database_url(self) -> str:
        return str(self.record()["database_url"])

    @property
    def temporal_address(self) -> str:
        return str(self.record()["temporal_address"])

    @property
    def postgres_port(self) -> int:
        return int(self.record()["postgres_port"])

    def api_url(self) -> str:
        return str(json.loads((self.home / "api.json").read_text())["url"])

    def api_pid(self) -> int | None:
        path = self.home / "api.pid"
        try:
            pid = int(path.read_text().strip() or 0)
        except (OSError, ValueError):
            return None
        return pid if pid and embedded.pid_alive(pid) else None

    def client_settings(self) -> Settings:
        """The campaign's Python client: the stack's record, the API's secrets, the
        starters' options."""
        return Settings(
            home=self.home,
            api_jwt_secret=SecretStr(self.api_secret),
            webhook_secret=SecretStr(self.webhook_secret),
            worker_versioning=False,
            **STARTER,
        )

    def worker_env(self, name: str) -> dict[str, str]:
        settings = Settings(home=self.home)
        overrides: dict[str, Any] = {**WORKER, "webhook_secret": self.webhook_secret}
        if name == PROXIED_WORKER:
            overrides["database_url"] = through(self.database_url, self.proxy.port)
        env = hubjobs_env(settings, self.home, **overrides)
        if name == CLOCK_WORKER:
            env = steppable(env, self.clock_file)
        return env

    async def start_worker(self, name: str, prefix: Sequence[str] = ()) -> Worker:
        """A worker process (again, behind ``prefix``: in a cgroup), its log a new file;
        waits until it polls. One that exits first (a worker refuses to start while
        Temporal does not answer) is started again 2 s later, for as long as
        WORKER_START_SECONDS, as a deployment's restart policy would."""
        deadline = time.monotonic() + WORKER_START_SECONDS
        while True:
            previous = self.workers.get(name)
            generation = previous.generation + 1 if previous else 1
            env = previous.env if previous else self.worker_env(name)
            process = WorkerProcess(f"{name}.{generation}", env, self.run_dir / "logs", prefix)
            worker = Worker(name, env, process, generation)
            self.workers[name] = worker
            try:
                await wait_started(process, timeout=max(1.0, deadline - time.monotonic()))
                return worker
            except AssertionError:
                code = process.process.poll()
                if code is None or time.monotonic() > deadline:
                    print(f"{process.name} did not start (exit {code}): {process.tail(3)}")
                    return worker
                process.kill()
                await asyncio.sleep(WORKER_RESTART_PAUSE)

    async def restart_worker(self, name: str, prefix: Sequence[str] = ()) -> str:
        """SIGTERM (a graceful stop, which costs a job nothing), then started again;
        what happened."""
        worker = self.workers[name]
        try:
            code, took = await asyncio.to_thread(worker.process.terminate, WORKER_STOP_SECONDS)
            said = f"{name} stopped in {took:.1f} s (exit {code})"
        except subprocess.TimeoutExpired:
            said = f"{name} did not stop within {WORKER_STOP_SECONDS:.0f} s of SIGTERM: killed"
        worker.process.kill()
        started = await self.start_worker(name, prefix)
        return f"{said}, started again as pid {started.pid}"

    async def up(self) -> str:
        """``hubjobs up`` again (it starts what is not running: the API after a kill),
        tried until it succeeds or its bound passes; what it said."""
        deadline = time.monotonic() + UP_TIMEOUT
        while True:
            try:
                done = await asyncio.to_thread(hubjobs, self.stack.env, "up", "--json", timeout=90)
                said = done.stderr.strip()[-300:]
                if done.returncode == 0:
                    return "hubjobs up: ok"
            except subprocess.TimeoutExpired:  # a server it waits on hangs (another fault)
                said = "did not answer within 90 s"
            if time.monotonic() > deadline:
                return f"hubjobs up failed: {said}"
            await asyncio.sleep(2)


def through(url: str, port: int) -> str:
    """``url`` (user, password and database kept) with its port replaced: the proxy's."""
    parts = urlsplit(url)
    credentials, _, _ = parts.netloc.rpartition("@")
    host = parts.hostname or "127.0.0.1"
    netloc = f"{credentials}@{host}:{port}" if credentials else f"{host}:{port}"
    return parts._replace(netloc=netloc).geturl()


def stack_env(api_secret: str, webhook_secret: str) -> dict[str, str]:
    """What ``hubjobs up`` (and so the API it starts) runs with: secrets of the
    campaign's own, the starters' options, a dead server tried again within 2 s."""
    env = {env_name(k): _text(v) for k, v in STARTER.items()}
    return env | {
        "HUBJOBS_API_JWT_SECRET": api_secret,
        "HUBJOBS_WEBHOOK_SECRET": webhook_secret,
        "HUBJOBS_STACK_RESTART_MAX_SECONDS": "2",
        "HUBJOBS_METRICS_PORT": "0",
        "HUBJOBS_API_PORT": "0",
        "HUBJOBS_MAINTENANCE": "false",
        "HUBJOBS_WORKER_VERSIONING": "false",
    }


@asynccontextmanager
async def chaos_stack(
    run_dir: Path, ledger: Ledger, answers: list[int | str]
) -> AsyncIterator[ChaosStack]:
    """The stack, its workers and the receiver (answering deliveries as ``answers``
    says, in order) for the block; every log copied into ``run_dir`` afterwards."""
    api_secret = secrets.token_urlsafe(32)
    webhook_secret = secrets.token_urlsafe(32)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    with small_disk(DISK) as disk:
        pgdata = disk / "pgdata"
        pgdata.mkdir()
        with own_stack(extra_env=stack_env(api_secret, webhook_secret), pgdata=pgdata) as stack:
            async with AsyncExitStack() as closing:
                port = int(json.loads((stack.home / "stack.json").read_text())["postgres_port"])
                proxy = await Proxy(port).start()
                closing.push_async_callback(proxy.close)
                receiver = Receiver(plan=answers)
                url = await closing.enter_async_context(serving(receiver.app()))
                chaos = ChaosStack(
                    stack,
                    run_dir,
                    disk,
                    proxy,
                    receiver,
                    f"{url}/hook",
                    api_secret,
                    webhook_secret,
                    ledger,
                    run_dir / "worker-c.clock",
                )
                try:
                    for name in WORKERS:
                        await chaos.start_worker(name)
                    yield chaos
                finally:
                    for worker in chaos.workers.values():
                        worker.process.kill()
                    _keep_logs(stack.home, run_dir / "logs")


def _keep_logs(home: Path, logs: Path) -> None:
    for name in ("postgres.log", "temporal.log", "supervisor.log", "api.log"):
        if (home / name).exists():
            shutil.copy(home / name, logs / name)


def send(pids: list[int], signum: signal.Signals) -> list[int]:
    """``signum`` to each process still there; those it reached."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, signum)
            reached.append(pid)
        except ProcessLookupError:
            pass
    return reached
