"""The embedded stack's worker (``hubjobs up --worker``, ``hubjobs demo``): ``hubjobs
worker`` in a process of its own, so that a job does not sit queued. It reads the
command's settings but for its metrics port, taken as ``up`` takes the servers' and
recorded in ``<home>/worker.json``; whether it serves there is told from who holds the
port, never assumed."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from hubjobs.devstack.embedded import (
    Daemon,
    choose_port,
    describe_holder,
    port_holder,
    port_is_free,
    venv_binary,
)
from hubjobs.home import recorded

PID_FILE = "worker.pid"
LOG_FILE = "worker.log"
WORKER_FILE = "worker.json"
WORKER = Daemon(PID_FILE, LOG_FILE, marker="worker")
# A worker's start: imports, then its runtime binds the metrics port.
METRICS_START_SECONDS = 30.0


def running_worker(home: Path) -> int | None:
    """The background worker's pid, if it runs."""
    return WORKER.running(home)


def metrics_port(home: Path, preferred: int) -> int:
    """The port a background worker about to start serves its metrics on: the one
    recorded while it is free, else ``preferred`` when free, else any free one."""
    port = recorded(home, WORKER_FILE).get("metrics_port")
    if isinstance(port, int) and port and port_is_free(port):
        return port
    return choose_port(preferred)


def start_worker(home: Path, preferred_metrics_port: int) -> int:
    """Starts the background worker unless one runs, on a free metrics port (none when
    ``preferred_metrics_port`` is 0: metrics off); returns its pid."""
    pid = WORKER.running(home)
    if pid is not None:
        return pid
    port = metrics_port(home, preferred_metrics_port) if preferred_metrics_port else 0
    home.mkdir(parents=True, exist_ok=True)
    (home / WORKER_FILE).write_text(json.dumps({"metrics_port": port}) + "\n")
    return WORKER.start(
        home, [venv_binary("hubjobs"), "worker"], env={"HUBJOBS_METRICS_PORT": str(port)}
    )


def stop_worker(home: Path, timeout: float = 30) -> None:
    """SIGTERM (the worker hands its jobs over), then SIGKILL after ``timeout``."""
    WORKER.stop(home, timeout)


@dataclass(frozen=True)
class WorkerMetrics:
    """Where the background worker serves its metrics, when it does (``url``), and what
    is true of them for people (``note``)."""

    url: str | None
    note: str


def worker_metrics(home: Path, host: str, *, wait: float = 0.0) -> WorkerMetrics:
    """The background worker's metrics endpoint, when its process holds the recorded
    port (a holder that cannot be told is the worker); waits ``wait`` s for it to bind."""
    port = recorded(home, WORKER_FILE).get("metrics_port")
    client_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{client_host}:{port}/metrics"
    deadline = time.monotonic() + wait
    while True:
        pid = WORKER.running(home)
        if pid is None:
            return WorkerMetrics(
                None, "not served: no background worker runs (`hubjobs up --worker`)"
            )
        if not isinstance(port, int):
            return WorkerMetrics(None, "unknown: `hubjobs down`, then `hubjobs up --worker`")
        if not port:
            return WorkerMetrics(None, "off (HUBJOBS_METRICS_PORT=0)")
        holder = port_holder(port)
        if holder is not None and holder.pid == pid:
            return WorkerMetrics(url, f"{url}  (served by the background worker)")
        if holder is not None or time.monotonic() >= deadline:
            break
        if not port_is_free(port):
            return WorkerMetrics(url, f"{url}  (served by the background worker)")
        time.sleep(0.2)
    why = (
        f"port {port} is held by {describe_holder(port)}"
        if not port_is_free(port)
        else f"the worker does not listen on port {port}"
    )
    return WorkerMetrics(None, f"not served: {why}; see {home / LOG_FILE}")
